// CUDA twins of the comparison, boolean and selection ops (Equal, Less, Greater,
// LessOrEqual, GreaterOrEqual, Not, And, Or, Xor, IsNaN, IsInf, Where), variadic Min/Max,
// Mod and Pow, all with numpy broadcasting. Bool tensors are bytes holding 0 or 1.
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "backends/cuda/map.cuh"
#include "kernels/math/elementwise.h"
#include "ops/op_utils.h"

namespace ortmodule {

namespace {

struct EqualOp {
  template <typename T>
  __device__ uint8_t operator()(T p, T q) const {
    return p == q;
  }
};
struct LessOp {
  template <typename T>
  __device__ uint8_t operator()(T p, T q) const {
    return p < q;
  }
};
struct GreaterOp {
  template <typename T>
  __device__ uint8_t operator()(T p, T q) const {
    return p > q;
  }
};
struct LessOrEqualOp {
  template <typename T>
  __device__ uint8_t operator()(T p, T q) const {
    return p <= q;
  }
};
struct GreaterOrEqualOp {
  template <typename T>
  __device__ uint8_t operator()(T p, T q) const {
    return p >= q;
  }
};
struct AndOp {
  __device__ uint8_t operator()(uint8_t p, uint8_t q) const { return p && q; }
};
struct OrOp {
  __device__ uint8_t operator()(uint8_t p, uint8_t q) const { return p || q; }
};
struct XorOp {
  __device__ uint8_t operator()(uint8_t p, uint8_t q) const { return (p != 0) != (q != 0); }
};
struct NotOp {
  __device__ uint8_t operator()(uint8_t v) const { return v == 0; }
};
struct IsNaNOp {
  template <typename T>
  __device__ uint8_t operator()(T v) const {
    return std::isnan(v);
  }
};
struct IsInfOp {
  bool positive, negative;
  template <typename T>
  __device__ uint8_t operator()(T v) const {
    return math::is_inf(v, positive, negative);
  }
};
struct WhereOp {
  template <typename T>
  __device__ T operator()(uint8_t c, T x, T y) const {
    return c ? x : y;
  }
};
struct CopyOp {
  template <typename T>
  __device__ T operator()(T v) const {
    return v;
  }
};
struct MaxOp {
  template <typename T>
  __device__ T operator()(T p, T q) const {
    return math::maximum(p, q);
  }
};
struct MinOp {
  template <typename T>
  __device__ T operator()(T p, T q) const {
    return math::minimum(p, q);
  }
};
struct DivOp {
  template <typename T>
  __device__ T operator()(T p, T q) const {
    return math::div_trunc(p, q);
  }
};
struct ModOp {
  bool fmod;
  template <typename T>
  __device__ T operator()(T p, T q) const {
    return math::mod(p, q, fmod);
  }
};
struct PowFastOp {
  template <typename T>
  __device__ T operator()(T p, T q) const {
    return math::pow_fast(p, q);
  }
};
struct PowOp {
  template <typename T>
  __device__ T operator()(T p, T q) const {
    return std::pow(p, q);
  }
};
struct IntPowOp {
  template <typename T, typename E>
  __device__ T operator()(T p, E q) const {
    // The exponent is exact, as the CPU kernel reads it (negative ones were refused).
    return math::int_pow(p, static_cast<uint64_t>(q));
  }
};
struct IsZeroOp {
  template <typename T>
  __device__ bool operator()(T v) const {
    return v == T(0);
  }
};
struct IsNegativeOp {
  template <typename T>
  __device__ bool operator()(T v) const {
    if constexpr (std::is_signed_v<T>) {
      return v < T(0);
    } else {
      return false;
    }
  }
};
struct PowPromotedOp {
  template <typename T, typename E>
  __device__ T operator()(T p, E q) const {
    return math::pow_promoted(p, static_cast<double>(q));
  }
};

template <typename F>
void run_compare(OpContext& ctx, F f, const char* name) {
  expect_same_dtype(ctx, 1);
  ORTM_CUDA_DISPATCH_ALL(ctx.in(0).dtype(), ctx,
                         cuda::launch_map<uint8_t, scalar_t, scalar_t>(ctx, ctx.out(0), f, name,
                                                                       ctx.in(0), ctx.in(1)));
}

template <typename F>
void run_logical(OpContext& ctx, F f, const char* name) {
  for (size_t k = 0; k < 2; ++k)
    if (ctx.in(k).dtype() != DType::Bool)
      ctx.fail("input " + std::to_string(k) + " has dtype " + dtype_name(ctx.in(k).dtype()) +
               "; expected bool");
  cuda::launch_map<uint8_t, uint8_t, uint8_t>(ctx, ctx.out(0), f, name, ctx.in(0), ctx.in(1));
}

// Max/Min(x0, x1, ...): x0 broadcast into y, then y = f(y, xk) in place for each further
// input, as the CPU kernel folds them (y has the broadcast shape, so each element of y is
// read and written by one thread).
template <typename F>
void run_variadic(OpContext& ctx, F f, const char* name) {
  Tensor& y = ctx.out(0);
  for (size_t k = 1; k < ctx.num_inputs(); ++k) expect_same_dtype(ctx, k);
  ORTM_CUDA_DISPATCH_NUMERIC(y.dtype(), ctx, {
    cuda::launch_map<scalar_t, scalar_t>(ctx, y, CopyOp{}, name, ctx.in(0));
    for (size_t k = 1; k < ctx.num_inputs(); ++k)
      cuda::launch_map<scalar_t, scalar_t, scalar_t>(ctx, y, f, name, y, ctx.in(k));
  });
}

template <typename T, typename P>
__global__ void any_kernel(int64_t n, const T* x, P pred, int* flag) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    if (pred(x[i])) *flag = 1;  // every writer stores 1: the race is benign
}

// Whether any element of t (dtype T) satisfies pred. The flag is read back on the host, which
// waits for the stream: only the integer forms of Mod and Pow call it, to refuse a zero
// divisor or a negative exponent as the CPU kernel does (a GPU thread cannot raise an error).
template <typename T, typename P>
bool any_element(const Tensor& t, P pred, const char* name) {
  const int64_t n = t.numel();
  if (n == 0) return false;
  cudaStream_t stream = cuda::stream(t.device());
  Tensor flag = Tensor::empty(DType::Int32, {1}, t.device());
  cuda::check(cudaMemsetAsync(flag.raw(), 0, sizeof(int), stream), name);
  any_kernel<T>
      <<<cuda::blocks_for(n), cuda::kThreads, 0, stream>>>(n, t.data<T>(), pred, flag.data<int>());
  cuda::check_launch(name);
  int found = 0;
  cuda::check(cudaMemcpyAsync(&found, flag.raw(), sizeof(int), cudaMemcpyDeviceToHost, stream),
              name);
  cuda::check(cudaStreamSynchronize(stream), name);
  return found != 0;
}

// Pow with an exponent of another dtype than the base, or an integer base: computed in
// double (numpy's promotion, saturating into an integer base's dtype) unless both are
// integers, then by integer squaring (a negative exponent refused).
template <typename T>
void pow_mixed(OpContext& ctx) {
  const Tensor& a = ctx.in(0);
  const Tensor& b = ctx.in(1);
  Tensor& y = ctx.out(0);
  if constexpr (std::is_integral_v<T>) {
    if (!dtype_is_floating(b.dtype())) {
      ORTM_CUDA_DISPATCH_NUMERIC(b.dtype(), ctx, {
        if constexpr (std::is_integral_v<scalar_t>) {
          if (any_element<scalar_t>(b, IsNegativeOp{}, "Pow"))
            ctx.fail(
                "integer base raised to a negative integer exponent (numpy and onnx.reference "
                "refuse it too)");
          cuda::launch_map<T, T, scalar_t>(ctx, y, IntPowOp{}, "Pow", a, b);
        }
      });
      return;
    }
  }
  switch (b.dtype()) {
    case DType::Float32:
      return cuda::launch_map<T, T, float>(ctx, y, PowPromotedOp{}, "Pow", a, b);
    case DType::Float64:
      return cuda::launch_map<T, T, double>(ctx, y, PowPromotedOp{}, "Pow", a, b);
    case DType::Int64:
      return cuda::launch_map<T, T, int64_t>(ctx, y, PowPromotedOp{}, "Pow", a, b);
    case DType::Int32:
      return cuda::launch_map<T, T, int32_t>(ctx, y, PowPromotedOp{}, "Pow", a, b);
    default:
      ctx.fail("exponent dtype " + dtype_name(b.dtype()) + " with base dtype " +
               dtype_name(a.dtype()) +
               " is not supported by the CUDA kernel (exponents of float32, float64, int64 or "
               "int32; any integer exponent of an integer base)");
  }
}

}  // namespace

void cuda_equal(OpContext& ctx) { run_compare(ctx, EqualOp{}, "Equal"); }
void cuda_less(OpContext& ctx) { run_compare(ctx, LessOp{}, "Less"); }
void cuda_greater(OpContext& ctx) { run_compare(ctx, GreaterOp{}, "Greater"); }
void cuda_less_or_equal(OpContext& ctx) { run_compare(ctx, LessOrEqualOp{}, "LessOrEqual"); }
void cuda_greater_or_equal(OpContext& ctx) {
  run_compare(ctx, GreaterOrEqualOp{}, "GreaterOrEqual");
}
void cuda_and(OpContext& ctx) { run_logical(ctx, AndOp{}, "And"); }
void cuda_or(OpContext& ctx) { run_logical(ctx, OrOp{}, "Or"); }
void cuda_xor(OpContext& ctx) { run_logical(ctx, XorOp{}, "Xor"); }
void cuda_not(OpContext& ctx) {
  if (ctx.in(0).dtype() != DType::Bool)
    ctx.fail("input 0 has dtype " + dtype_name(ctx.in(0).dtype()) + "; expected bool");
  cuda::launch_map<uint8_t, uint8_t>(ctx, ctx.out(0), NotOp{}, "Not", ctx.in(0));
}
void cuda_isnan(OpContext& ctx) {
  ORTM_CUDA_DISPATCH_FLOAT(
      ctx.in(0).dtype(), ctx,
      cuda::launch_map<uint8_t, scalar_t>(ctx, ctx.out(0), IsNaNOp{}, "IsNaN", ctx.in(0)));
}
void cuda_isinf(OpContext& ctx) {
  const bool pos = ctx.node.attr_int("detect_positive", 1) != 0;
  const bool neg = ctx.node.attr_int("detect_negative", 1) != 0;
  ORTM_CUDA_DISPATCH_FLOAT(
      ctx.in(0).dtype(), ctx,
      cuda::launch_map<uint8_t, scalar_t>(ctx, ctx.out(0), IsInfOp{pos, neg}, "IsInf", ctx.in(0)));
}

// Where(condition, x, y): moves elements of any dtype bit for bit (as the CPU kernel).
void cuda_where(OpContext& ctx) {
  const Tensor& c = ctx.in(0);
  const Tensor& x = ctx.in(1);
  const Tensor& y = ctx.in(2);
  ORTM_DISPATCH_BITS(x.dtype(), ctx,
                     cuda::launch_map<scalar_t, uint8_t, scalar_t, scalar_t>(
                         ctx, ctx.out(0), WhereOp{}, "Where", c, x, y));
}

void cuda_max(OpContext& ctx) { run_variadic(ctx, MaxOp{}, "Max"); }
void cuda_min(OpContext& ctx) { run_variadic(ctx, MinOp{}, "Min"); }

// Div(a, b). An integer divisor of zero is refused, as the CPU kernel refuses it.
void cuda_div(OpContext& ctx) {
  expect_same_dtype(ctx, 1);
  ORTM_CUDA_DISPATCH_NUMERIC(ctx.in(0).dtype(), ctx, {
    if constexpr (std::is_integral_v<scalar_t>) {
      if (any_element<scalar_t>(ctx.in(1), IsZeroOp{}, "Div")) ctx.fail("integer division by zero");
    }
    cuda::launch_map<scalar_t, scalar_t, scalar_t>(ctx, ctx.out(0), DivOp{}, "Div", ctx.in(0),
                                                   ctx.in(1));
  });
}

// Mod(a, b; fmod). An integer divisor of zero is refused, as the CPU kernel refuses it.
void cuda_mod(OpContext& ctx) {
  const bool fmod = ctx.node.attr_int("fmod", 0) != 0;
  expect_same_dtype(ctx, 1);
  ORTM_CUDA_DISPATCH_NUMERIC(ctx.in(0).dtype(), ctx, {
    if constexpr (std::is_integral_v<scalar_t>) {
      if (any_element<scalar_t>(ctx.in(1), IsZeroOp{}, "Mod")) ctx.fail("integer modulo by zero");
    }
    cuda::launch_map<scalar_t, scalar_t, scalar_t>(ctx, ctx.out(0), ModOp{fmod}, "Mod", ctx.in(0),
                                                   ctx.in(1));
  });
}

// Pow(X, Y), the CPU kernel's cases: an exponent of X's float dtype holding one value (and no
// more dims than X) takes the fast paths; other dtype pairs go through pow_mixed.
void cuda_pow(OpContext& ctx) {
  const Tensor& a = ctx.in(0);
  const Tensor& b = ctx.in(1);
  ORTM_CUDA_DISPATCH_NUMERIC(a.dtype(), ctx, {
    if constexpr (std::is_integral_v<scalar_t>) {
      pow_mixed<scalar_t>(ctx);
    } else if (b.dtype() != a.dtype()) {
      pow_mixed<scalar_t>(ctx);
    } else if (b.numel() == 1 && b.rank() <= a.rank()) {
      cuda::launch_map<scalar_t, scalar_t, scalar_t>(ctx, ctx.out(0), PowFastOp{}, "Pow", a, b);
    } else {
      cuda::launch_map<scalar_t, scalar_t, scalar_t>(ctx, ctx.out(0), PowOp{}, "Pow", a, b);
    }
  });
}

}  // namespace ortmodule
