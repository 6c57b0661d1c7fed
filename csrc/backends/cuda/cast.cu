// CUDA twin of Cast and CastLike, for every dtype pair the CPU kernel converts: the
// arithmetic types, bool, float16 and bfloat16 (a load into an arithmetic value, then a store
// in the destination type, as ops/cast_ops.cpp), and the low-bit types (float8, float4/6,
// e8m0, 4- and 2-bit integers) through one exact intermediate, a double or an int64, as
// ops/cast_low_bit.cpp. The conversions are the shared ones of kernels/math/cast.h and
// kernels/math/float8.h.
#include <cstdint>
#include <string>

#include "backends/cuda/map.cuh"
#include "kernels/math/bfloat16.h"
#include "kernels/math/cast.h"
#include "kernels/math/float16.h"
#include "kernels/math/float8.h"
#include "ops/cast_low_bit.h"
#include "ops/op_utils.h"

namespace ortmodule {

namespace {

// ---- arithmetic types, bool, float16, bfloat16 ----

struct LoadValue {
  template <typename V>
  __device__ V operator()(V v) const {
    return v;
  }
};
struct LoadFloat16 {
  __device__ float operator()(uint16_t v) const { return math::half_to_float(v); }
};
struct LoadBFloat16 {
  __device__ float operator()(uint16_t v) const { return math::bf16_to_float(v); }
};

template <typename Load, typename Store>
struct CastOp {
  Load load;
  Store store;
  template <typename Src>
  __device__ auto operator()(Src v) const {
    return store(load(v));
  }
};

template <typename Src, typename Load>
void cast_from(OpContext& ctx, const Tensor& x, Tensor& y, Load load) {
  auto run = [&](auto dst_tag, auto store) {
    using D = decltype(dst_tag);
    cuda::launch_map<D, Src>(ctx, y, CastOp<Load, decltype(store)>{load, store}, "Cast", x);
  };
  switch (y.dtype()) {
    case DType::Float32:
      return run(float{}, math::StoreAs<float>());
    case DType::Float64:
      return run(double{}, math::StoreAs<double>());
    case DType::Float16:
      return run(uint16_t{}, math::StoreFloat16());
    case DType::BFloat16:
      return run(uint16_t{}, math::StoreBFloat16());
    case DType::Int64:
      return run(int64_t{}, math::StoreAs<int64_t>());
    case DType::Int32:
      return run(int32_t{}, math::StoreAs<int32_t>());
    case DType::Int16:
      return run(int16_t{}, math::StoreAs<int16_t>());
    case DType::Int8:
      return run(int8_t{}, math::StoreAs<int8_t>());
    case DType::UInt64:
      return run(uint64_t{}, math::StoreAs<uint64_t>());
    case DType::UInt32:
      return run(uint32_t{}, math::StoreAs<uint32_t>());
    case DType::UInt16:
      return run(uint16_t{}, math::StoreAs<uint16_t>());
    case DType::UInt8:
      return run(uint8_t{}, math::StoreAs<uint8_t>());
    case DType::Bool:
      return run(uint8_t{}, math::StoreBool());
    default:
      ctx.fail("cast to " + dtype_name(y.dtype()) + " is not supported");
  }
}

// ---- low-bit types: one kernel, the formats decided per launch ----

// Where a low-bit cast reads from or writes to: a low-bit format or one of the types
// cast_low_bit converts to and from.
enum class Slot { LowBit, F32, F64, F16, BF16, I64, I32, I8, U8, Bool, Unsupported };

Slot slot_of(DType t) {
  if (dtype_is_low_bit(t)) return Slot::LowBit;
  switch (t) {
    case DType::Float32:
      return Slot::F32;
    case DType::Float64:
      return Slot::F64;
    case DType::Float16:
      return Slot::F16;
    case DType::BFloat16:
      return Slot::BF16;
    case DType::Int64:
      return Slot::I64;
    case DType::Int32:
      return Slot::I32;
    case DType::Int8:
      return Slot::I8;
    case DType::UInt8:
      return Slot::U8;
    case DType::Bool:
      return Slot::Bool;
    default:
      return Slot::Unsupported;
  }
}

struct LowBitCast {
  Slot from_slot, to_slot;
  LowBitFormat from, to;  // kind NotLowBit unless the slot is LowBit
  CastOptions options;
};

// One element's exact intermediate: an int64 for integer sources, else a double.
struct Loaded {
  bool is_int;
  int64_t i;
  double d;
};

__device__ Loaded load_element(const LowBitCast& c, const void* x, int64_t k) {
  switch (c.from_slot) {
    case Slot::LowBit: {
      const uint8_t code = static_cast<const uint8_t*>(x)[k];
      switch (c.from.kind) {
        case LowBitKind::MiniFloat: {
          const uint8_t mask = static_cast<uint8_t>((1u << c.from.mini.width()) - 1);
          return {false, 0,
                  static_cast<double>(math::minifloat_to_float(code & mask, c.from.mini))};
        }
        case LowBitKind::E8M0:
          return {false, 0, static_cast<double>(math::e8m0_to_float(code))};
        default:
          return {true, math::small_int_value(code, c.from.bits, c.from.is_signed), 0.0};
      }
    }
    case Slot::F32:
      return {false, 0, static_cast<double>(static_cast<const float*>(x)[k])};
    case Slot::F64:
      return {false, 0, static_cast<const double*>(x)[k]};
    case Slot::F16:
      return {false, 0,
              static_cast<double>(math::half_bits_to_float(static_cast<const uint16_t*>(x)[k]))};
    case Slot::BF16:
      return {false, 0,
              static_cast<double>(math::bf16_to_float(static_cast<const uint16_t*>(x)[k]))};
    case Slot::I64:
      return {true, static_cast<const int64_t*>(x)[k], 0.0};
    case Slot::I32:
      return {true, static_cast<const int32_t*>(x)[k], 0.0};
    case Slot::I8:
      return {true, static_cast<const int8_t*>(x)[k], 0.0};
    default:  // U8, Bool
      return {true, static_cast<const uint8_t*>(x)[k], 0.0};
  }
}

template <typename I>
__device__ I to_int(const Loaded& v) {
  return v.is_int ? static_cast<I>(v.i) : math::float_to_int<I>(v.d);
}

__device__ void store_element(const LowBitCast& c, const Loaded& v, void* y, int64_t k) {
  const double as_double = v.is_int ? static_cast<double>(v.i) : v.d;
  switch (c.to_slot) {
    case Slot::LowBit: {
      uint8_t code;
      if (c.to.kind == LowBitKind::MiniFloat) {
        code = static_cast<uint8_t>(
            math::double_to_minifloat(as_double, c.to.mini, c.options.saturate));
      } else if (c.to.kind == LowBitKind::E8M0) {
        const float f = v.is_int ? static_cast<float>(v.i) : static_cast<float>(v.d);
        code = math::float_to_e8m0(f, c.options.saturate, c.options.rounding);
      } else if (v.is_int) {
        code = math::int_to_small_int(v.i, c.to.bits);
      } else {
        code = static_cast<uint8_t>(math::float_to_int_bits(v.d, c.to.bits, c.to.is_signed));
      }
      static_cast<uint8_t*>(y)[k] = code;
      return;
    }
    case Slot::F32:
      static_cast<float*>(y)[k] = v.is_int ? static_cast<float>(v.i) : static_cast<float>(v.d);
      return;
    case Slot::F64:
      static_cast<double*>(y)[k] = as_double;
      return;
    case Slot::F16:
      static_cast<uint16_t*>(y)[k] = static_cast<uint16_t>(math::double_to_minifloat(
          as_double, math::MiniFloat{5, 10, 15, math::MiniSpecials::Ieee}, false));  // kFloat16
      return;
    case Slot::BF16:
      static_cast<uint16_t*>(y)[k] =
          math::float_to_bf16(v.is_int ? static_cast<float>(v.i) : static_cast<float>(v.d));
      return;
    case Slot::I64:
      static_cast<int64_t*>(y)[k] = to_int<int64_t>(v);
      return;
    case Slot::I32:
      static_cast<int32_t*>(y)[k] = to_int<int32_t>(v);
      return;
    case Slot::I8:
      static_cast<int8_t*>(y)[k] = to_int<int8_t>(v);
      return;
    case Slot::U8:
      static_cast<uint8_t*>(y)[k] = to_int<uint8_t>(v);
      return;
    default:  // Bool
      static_cast<uint8_t*>(y)[k] = v.is_int ? v.i != 0 : v.d != 0;
      return;
  }
}

__global__ void low_bit_cast_kernel(int64_t n, LowBitCast c, const void* x, void* y) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    store_element(c, load_element(c, x, i), y, i);
}

void cast_low_bit_cuda(OpContext& ctx, const Tensor& x, Tensor& y) {
  LowBitCast c;
  c.options = cast_options(ctx);
  c.from_slot = slot_of(x.dtype());
  c.to_slot = slot_of(y.dtype());
  c.from = low_bit_format(x.dtype());
  c.to = low_bit_format(y.dtype());
  if (c.from_slot == Slot::Unsupported || c.to_slot == Slot::Unsupported)
    ctx.fail("cast from " + dtype_name(x.dtype()) + " to " + dtype_name(y.dtype()) +
             " is not supported");
  const int64_t n = y.numel();
  if (n == 0) return;
  low_bit_cast_kernel<<<cuda::blocks_for(n), cuda::kThreads, 0, cuda::stream(y.device())>>>(
      n, c, x.raw(), y.raw());
  cuda::check_launch("Cast");
}

}  // namespace

void cuda_cast(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  if (dtype_is_low_bit(x.dtype()) || dtype_is_low_bit(y.dtype()))
    return cast_low_bit_cuda(ctx, x, y);
  if (x.dtype() == y.dtype()) {
    if (y.raw() != x.raw() && x.nbytes()) {
      cuda::check(cudaMemcpyAsync(y.raw(), x.raw(), x.nbytes(), cudaMemcpyDeviceToDevice,
                                  cuda::stream(y.device())),
                  "Cast (copy)");
    }
    return;
  }
  switch (x.dtype()) {
    case DType::Float32:
      return cast_from<float>(ctx, x, y, LoadValue());
    case DType::Float64:
      return cast_from<double>(ctx, x, y, LoadValue());
    case DType::Float16:
      return cast_from<uint16_t>(ctx, x, y, LoadFloat16());
    case DType::BFloat16:
      return cast_from<uint16_t>(ctx, x, y, LoadBFloat16());
    case DType::Int64:
      return cast_from<int64_t>(ctx, x, y, LoadValue());
    case DType::Int32:
      return cast_from<int32_t>(ctx, x, y, LoadValue());
    case DType::Int16:
      return cast_from<int16_t>(ctx, x, y, LoadValue());
    case DType::Int8:
      return cast_from<int8_t>(ctx, x, y, LoadValue());
    case DType::UInt64:
      return cast_from<uint64_t>(ctx, x, y, LoadValue());
    case DType::UInt32:
      return cast_from<uint32_t>(ctx, x, y, LoadValue());
    case DType::UInt16:
      return cast_from<uint16_t>(ctx, x, y, LoadValue());
    case DType::Bool:
    case DType::UInt8:
      return cast_from<uint8_t>(ctx, x, y, LoadValue());
    default:
      ctx.fail("cast from " + dtype_name(x.dtype()) + " is not supported");
  }
}

}  // namespace ortmodule
