// One element-wise kernel for the CUDA twins of the element-wise, logic, cast and creation
// ops: y[i] = f(x0[o0], x1[o1], ...) over y's elements, each operand numpy-broadcast to y's
// shape (offset o_k from its broadcast strides). Operands and output may differ in element
// type (comparisons write bool, Where reads a bool condition). y may alias an operand of
// y's shape (in-place reuse): each element of y is written by the thread that read it.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/broadcast.h"
#include "kernels/cuda/cuda_common.h"
#include "ops/op_utils.h"

namespace ortmodule {
namespace cuda {

// Output dims and each operand's element strides over them, passed to the kernel by value.
template <int N>
struct Operands {
  bool same_shape = true;  // every operand has y's shape: offset i for all
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t strides[N > 0 ? N : 1][kMaxRank] = {};
};

template <typename Out, typename F, typename... In, size_t... K>
__device__ void map_element(int64_t i, const int64_t* off, Out* y, const F& f,
                            std::index_sequence<K...>, const In*... x) {
  y[i] = f(x[off[K]]...);
}

template <typename Out, typename F, typename... In>
__global__ void map_kernel(int64_t n, Operands<sizeof...(In)> ix, Out* y, F f, const In*... x) {
  constexpr int N = sizeof...(In);
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t off[N > 0 ? N : 1];
    if (ix.same_shape) {
      for (int k = 0; k < N; ++k) off[k] = i;
    } else {
      for (int k = 0; k < N; ++k) off[k] = 0;
      int64_t rem = i;
      for (int d = ix.rank - 1; d >= 0; --d) {
        const int64_t idx = rem % ix.dims[d];
        rem /= ix.dims[d];
        for (int k = 0; k < N; ++k) off[k] += idx * ix.strides[k][d];
      }
    }
    map_element(i, off, y, f, std::index_sequence_for<In...>{}, x...);
  }
}

// Runs map_kernel over y with operands `x` read as element types In... (given explicitly:
// launch_map<Out, In...>(ctx, y, f, name, x...)). Empty outputs launch nothing.
template <typename Out, typename... In, typename F, typename... Tensors>
void launch_map(OpContext& ctx, Tensor& y, F f, const char* name, const Tensors&... x) {
  static_assert(sizeof...(In) == sizeof...(Tensors), "one element type per operand");
  constexpr int N = sizeof...(In);
  const int64_t n = y.numel();
  if (n == 0) return;
  const Shape& out = y.shape();
  Operands<N> ix;
  const Shape* shapes[N > 0 ? N : 1] = {&x.shape()...};
  for (int k = 0; k < N; ++k) ix.same_shape = ix.same_shape && *shapes[k] == out;
  if (!ix.same_shape) {
    if (out.size() > static_cast<size_t>(kMaxRank)) {
      ctx.fail("broadcasting to rank " + std::to_string(out.size()) +
               " is above the CUDA kernels' limit of " + std::to_string(kMaxRank) +
               "; reshape the operands to fewer dims");
    }
    ix.rank = static_cast<int>(out.size());
    for (int k = 0; k < N; ++k) {
      const std::vector<int64_t> s = broadcast_strides(*shapes[k], out);
      for (size_t d = 0; d < out.size(); ++d) ix.strides[k][d] = s[d];
    }
    for (size_t d = 0; d < out.size(); ++d) ix.dims[d] = out[d];
  }
  map_kernel<Out, F, In...><<<blocks_for(n), kThreads, 0, stream(y.device())>>>(
      n, ix, y.data<Out>(), f, x.template data<In>()...);
  check_launch(name);
}

}  // namespace cuda
}  // namespace ortmodule

// Dtype switches of the CUDA twins. Each names the dtypes it runs in its error.
#define ORTM_CUDA_FAIL_DTYPE(DTYPE, CTX, LIST)                                         \
  (CTX).fail("dtype " + dtype_name(DTYPE) + " is not supported by the CUDA kernel (" + \
             std::string(LIST) + ")")

// The CPU kernels' ORTM_DISPATCH_NUMERIC: float32, float64 and every integer type.
#define ORTM_CUDA_DISPATCH_NUMERIC(DTYPE, CTX, ...)                                            \
  switch (DTYPE) {                                                                             \
    ORTM_DTYPE_CASE(Float32, float, __VA_ARGS__)                                               \
    ORTM_DTYPE_CASE(Float64, double, __VA_ARGS__)                                              \
    ORTM_DTYPE_CASE(Int64, int64_t, __VA_ARGS__)                                               \
    ORTM_DTYPE_CASE(Int32, int32_t, __VA_ARGS__)                                               \
    ORTM_DTYPE_CASE(Int16, int16_t, __VA_ARGS__)                                               \
    ORTM_DTYPE_CASE(Int8, int8_t, __VA_ARGS__)                                                 \
    ORTM_DTYPE_CASE(UInt64, uint64_t, __VA_ARGS__)                                             \
    ORTM_DTYPE_CASE(UInt32, uint32_t, __VA_ARGS__)                                             \
    ORTM_DTYPE_CASE(UInt16, uint16_t, __VA_ARGS__)                                             \
    ORTM_DTYPE_CASE(UInt8, uint8_t, __VA_ARGS__)                                               \
    default:                                                                                   \
      ORTM_CUDA_FAIL_DTYPE(DTYPE, CTX, "float32, float64 and the 8- to 64-bit integer types"); \
  }

// The CPU kernels' ORTM_DISPATCH_ALL: the numeric types and bool (uint8_t).
#define ORTM_CUDA_DISPATCH_ALL(DTYPE, CTX, ...)                                                   \
  switch (DTYPE) {                                                                                \
    ORTM_DTYPE_CASE(Float32, float, __VA_ARGS__)                                                  \
    ORTM_DTYPE_CASE(Float64, double, __VA_ARGS__)                                                 \
    ORTM_DTYPE_CASE(Int64, int64_t, __VA_ARGS__)                                                  \
    ORTM_DTYPE_CASE(Int32, int32_t, __VA_ARGS__)                                                  \
    ORTM_DTYPE_CASE(Int16, int16_t, __VA_ARGS__)                                                  \
    ORTM_DTYPE_CASE(Int8, int8_t, __VA_ARGS__)                                                    \
    ORTM_DTYPE_CASE(UInt64, uint64_t, __VA_ARGS__)                                                \
    ORTM_DTYPE_CASE(UInt32, uint32_t, __VA_ARGS__)                                                \
    ORTM_DTYPE_CASE(UInt16, uint16_t, __VA_ARGS__)                                                \
    ORTM_DTYPE_CASE(UInt8, uint8_t, __VA_ARGS__)                                                  \
    ORTM_DTYPE_CASE(Bool, uint8_t, __VA_ARGS__)                                                   \
    default:                                                                                      \
      ORTM_CUDA_FAIL_DTYPE(DTYPE, CTX, "float32, float64, the 8- to 64-bit integer types, bool"); \
  }

// The CPU kernels' ORTM_DISPATCH_FLOAT.
#define ORTM_CUDA_DISPATCH_FLOAT(DTYPE, CTX, ...)           \
  switch (DTYPE) {                                          \
    ORTM_DTYPE_CASE(Float32, float, __VA_ARGS__)            \
    ORTM_DTYPE_CASE(Float64, double, __VA_ARGS__)           \
    default:                                                \
      ORTM_CUDA_FAIL_DTYPE(DTYPE, CTX, "float32, float64"); \
  }

namespace ortmodule {
namespace cuda {

// y = f(x) over a float32 or float64 input of any shape: the unary math ops' CUDA twins
// (ops/unary_float.h is the CPU side).
template <typename F>
void unary_float(OpContext& ctx, F f, const char* name) {
  ORTM_CUDA_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx,
                           launch_map<scalar_t, scalar_t>(ctx, ctx.out(0), f, name, ctx.in(0)));
}

}  // namespace cuda
}  // namespace ortmodule
