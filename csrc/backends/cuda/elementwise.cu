// CUDA twins of the element-wise ops: binary arithmetic with numpy broadcasting, unary
// math and activations, and the activation gradients. The per-element formulas are the
// ones the CPU kernels call (kernels/math/elementwise.h), so CPU tests cover the arithmetic.
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "kernels/cpu/broadcast.h"
#include "kernels/cuda/cuda_common.h"
#include "kernels/math/elementwise.h"
#include "ops/op_utils.h"

namespace ortmodule {

namespace {

// Broadcast indexing for up to kMaxRank output dims, passed to the kernel by value.
using cuda::kMaxRank;
struct BroadcastIndex {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t a_strides[kMaxRank] = {};
  int64_t b_strides[kMaxRank] = {};
};

// Integer arithmetic wraps around as on the CPU (numpy's semantics): it runs in the
// unsigned type of the same width, where overflow is defined.
template <typename T, bool = std::is_integral_v<T>>
struct Wrap {
  using type = T;
};
template <typename T>
struct Wrap<T, true> {
  using type = std::make_unsigned_t<T>;
};
template <typename T>
using wrap_t = typename Wrap<T>::type;

struct AddOp {
  template <typename T>
  __device__ T operator()(T p, T q) const {
    return static_cast<T>(static_cast<wrap_t<T>>(p) + static_cast<wrap_t<T>>(q));
  }
};
struct SubOp {
  template <typename T>
  __device__ T operator()(T p, T q) const {
    return static_cast<T>(static_cast<wrap_t<T>>(p) - static_cast<wrap_t<T>>(q));
  }
};
struct MulOp {
  template <typename T>
  __device__ T operator()(T p, T q) const {
    return static_cast<T>(static_cast<wrap_t<T>>(p) * static_cast<wrap_t<T>>(q));
  }
};
struct FirstOp {
  template <typename T>
  __device__ T operator()(T p, T) const {
    return p;
  }
};

template <typename T, typename F>
__global__ void binary_same_shape(int64_t n, const T* a, const T* b, T* y, F f) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    y[i] = f(a[i], b[i]);
}

template <typename T, typename F>
__global__ void binary_broadcast(int64_t n, BroadcastIndex ix, const T* a, const T* b, T* y, F f) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t rem = i, oa = 0, ob = 0;
    for (int d = ix.rank - 1; d >= 0; --d) {
      const int64_t idx = rem % ix.dims[d];
      rem /= ix.dims[d];
      oa += idx * ix.a_strides[d];
      ob += idx * ix.b_strides[d];
    }
    y[i] = f(a[oa], b[ob]);
  }
}

template <typename T, typename F>
__global__ void unary_kernel(int64_t n, const T* x, T* y, F f) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    y[i] = f(x[i]);
}

// y = f(a, b) with a and b broadcast to y's shape. y may alias a (in-place reuse): each
// element of y is written by the thread that read its operands, and an operand that y
// aliases has y's shape (it is not broadcast).
template <typename T, typename F>
void launch_binary(OpContext& ctx, const Tensor& a, const Tensor& b, Tensor& y, F f,
                   const char* name) {
  const int64_t n = y.numel();
  if (n == 0) return;
  cudaStream_t stream = cuda::stream(y.device());
  const unsigned blocks = cuda::blocks_for(n);
  if (a.shape() == y.shape() && b.shape() == y.shape()) {
    binary_same_shape<T>
        <<<blocks, cuda::kThreads, 0, stream>>>(n, a.data<T>(), b.data<T>(), y.data<T>(), f);
  } else {
    const Shape& out = y.shape();
    if (out.size() > static_cast<size_t>(kMaxRank)) {
      ctx.fail("broadcasting to rank " + std::to_string(out.size()) +
               " is above the CUDA kernels' limit of " + std::to_string(kMaxRank) +
               "; reshape the operands to fewer dims");
    }
    BroadcastIndex ix;
    ix.rank = static_cast<int>(out.size());
    const std::vector<int64_t> sa = broadcast_strides(a.shape(), out);
    const std::vector<int64_t> sb = broadcast_strides(b.shape(), out);
    for (size_t d = 0; d < out.size(); ++d) {
      ix.dims[d] = out[d];
      ix.a_strides[d] = sa[d];
      ix.b_strides[d] = sb[d];
    }
    binary_broadcast<T>
        <<<blocks, cuda::kThreads, 0, stream>>>(n, ix, a.data<T>(), b.data<T>(), y.data<T>(), f);
  }
  cuda::check_launch(name);
}

template <typename T, typename F>
void launch_unary(const Tensor& x, Tensor& y, F f, const char* name) {
  const int64_t n = y.numel();
  if (n == 0) return;
  unary_kernel<T><<<cuda::blocks_for(n), cuda::kThreads, 0, cuda::stream(y.device())>>>(
      n, x.data<T>(), y.data<T>(), f);
  cuda::check_launch(name);
}

// Floating types and the integer types models compute with on the GPU.
#define ORTM_CUDA_DISPATCH_ARITH(DTYPE, CTX, ...)                                          \
  switch (DTYPE) {                                                                         \
    ORTM_DTYPE_CASE(Float32, float, __VA_ARGS__)                                           \
    ORTM_DTYPE_CASE(Float64, double, __VA_ARGS__)                                          \
    ORTM_DTYPE_CASE(Int64, int64_t, __VA_ARGS__)                                           \
    ORTM_DTYPE_CASE(Int32, int32_t, __VA_ARGS__)                                           \
    default:                                                                               \
      (CTX).fail("dtype " + dtype_name(DTYPE) +                                            \
                 " is not supported by the CUDA kernel (float32, float64, int64, int32)"); \
  }

template <typename F>
void run_binary(OpContext& ctx, F f, const char* name) {
  expect_same_dtype(ctx, 1);
  ORTM_CUDA_DISPATCH_ARITH(ctx.in(0).dtype(), ctx,
                           launch_binary<scalar_t>(ctx, ctx.in(0), ctx.in(1), ctx.out(0), f, name));
}

template <typename F>
void run_unary_float(OpContext& ctx, F f, const char* name) {
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx,
                      launch_unary<scalar_t>(ctx.in(0), ctx.out(0), f, name));
}

// Gradient ops (dY, X or Y): operands of one shape, float types.
template <typename F>
void run_grad_binary(OpContext& ctx, F f, const char* name) {
  expect_same_dtype(ctx, 1);
  if (ctx.in(0).shape() != ctx.in(1).shape()) {
    ctx.fail("gradient shape " + shape_str(ctx.in(0).shape()) + " differs from " +
             shape_str(ctx.in(1).shape()));
  }
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx,
                      launch_binary<scalar_t>(ctx, ctx.in(0), ctx.in(1), ctx.out(0), f, name));
}

struct NegOp {
  template <typename T>
  __device__ T operator()(T v) const {
    return static_cast<T>(-static_cast<wrap_t<T>>(v));
  }
};
struct AbsOp {
  template <typename T>
  __device__ T operator()(T v) const {
    return v < T(0) ? static_cast<T>(-static_cast<wrap_t<T>>(v)) : v;
  }
};
struct ReluOp {
  template <typename T>
  __device__ T operator()(T v) const {
    return math::relu(v);
  }
};
struct SigmoidOp {
  template <typename T>
  __device__ T operator()(T v) const {
    return math::sigmoid(v);
  }
};
struct TanhOp {
  template <typename T>
  __device__ T operator()(T v) const {
    return math::tanh_fwd(v);
  }
};
struct ExpOp {
  template <typename T>
  __device__ T operator()(T v) const {
    return std::exp(v);
  }
};
struct LogOp {
  template <typename T>
  __device__ T operator()(T v) const {
    return std::log(v);
  }
};
struct SqrtOp {
  template <typename T>
  __device__ T operator()(T v) const {
    return std::sqrt(v);
  }
};
struct ErfOp {
  template <typename T>
  __device__ T operator()(T v) const {
    return std::erf(v);
  }
};
struct GeluOp {
  bool tanh_mode;
  template <typename T>
  __device__ T operator()(T v) const {
    return tanh_mode ? math::gelu_tanh(v) : math::gelu(v);
  }
};
struct ReluGradOp {
  template <typename T>
  __device__ T operator()(T g, T y) const {
    return math::relu_grad(g, y);
  }
};
struct SigmoidGradOp {
  template <typename T>
  __device__ T operator()(T g, T y) const {
    return math::sigmoid_grad(g, y);
  }
};
struct TanhGradOp {
  template <typename T>
  __device__ T operator()(T g, T y) const {
    return math::tanh_grad(g, y);
  }
};
struct ErfGradOp {
  template <typename T>
  __device__ T operator()(T g, T x) const {
    return math::erf_grad(g, x);
  }
};
struct GeluGradOp {
  bool tanh_mode;
  template <typename T>
  __device__ T operator()(T g, T x) const {
    return tanh_mode ? math::gelu_tanh_grad(g, x) : math::gelu_grad(g, x);
  }
};

}  // namespace

void cuda_add(OpContext& ctx) { run_binary(ctx, AddOp{}, "Add"); }
void cuda_sub(OpContext& ctx) { run_binary(ctx, SubOp{}, "Sub"); }
void cuda_mul(OpContext& ctx) { run_binary(ctx, MulOp{}, "Mul"); }
// Sum(x0, x1, ...) with broadcasting: x0 + x1 into y, then y += xk. y has the broadcast
// shape, so adding into it in place reads each of its elements before writing it.
void cuda_sum(OpContext& ctx) {
  Tensor& y = ctx.out(0);
  for (size_t k = 1; k < ctx.num_inputs(); ++k) expect_same_dtype(ctx, k);
  ORTM_CUDA_DISPATCH_ARITH(y.dtype(), ctx, {
    if (ctx.num_inputs() == 1) {
      launch_binary<scalar_t>(ctx, ctx.in(0), ctx.in(0), y, FirstOp{}, "Sum");
      break;
    }
    launch_binary<scalar_t>(ctx, ctx.in(0), ctx.in(1), y, AddOp{}, "Sum");
    for (size_t k = 2; k < ctx.num_inputs(); ++k)
      launch_binary<scalar_t>(ctx, y, ctx.in(k), y, AddOp{}, "Sum");
  });
}
void cuda_neg(OpContext& ctx) {
  ORTM_CUDA_DISPATCH_ARITH(ctx.in(0).dtype(), ctx,
                           launch_unary<scalar_t>(ctx.in(0), ctx.out(0), NegOp{}, "Neg"));
}
void cuda_abs(OpContext& ctx) {
  ORTM_CUDA_DISPATCH_ARITH(ctx.in(0).dtype(), ctx,
                           launch_unary<scalar_t>(ctx.in(0), ctx.out(0), AbsOp{}, "Abs"));
}
void cuda_relu(OpContext& ctx) { run_unary_float(ctx, ReluOp{}, "Relu"); }
void cuda_sigmoid(OpContext& ctx) { run_unary_float(ctx, SigmoidOp{}, "Sigmoid"); }
void cuda_tanh(OpContext& ctx) { run_unary_float(ctx, TanhOp{}, "Tanh"); }
void cuda_exp(OpContext& ctx) { run_unary_float(ctx, ExpOp{}, "Exp"); }
void cuda_log(OpContext& ctx) { run_unary_float(ctx, LogOp{}, "Log"); }
void cuda_sqrt(OpContext& ctx) { run_unary_float(ctx, SqrtOp{}, "Sqrt"); }
void cuda_erf(OpContext& ctx) { run_unary_float(ctx, ErfOp{}, "Erf"); }
void cuda_gelu(OpContext& ctx) { run_unary_float(ctx, GeluOp{gelu_is_tanh(ctx)}, "Gelu"); }
void cuda_relu_grad(OpContext& ctx) { run_grad_binary(ctx, ReluGradOp{}, "ReluGrad"); }
void cuda_sigmoid_grad(OpContext& ctx) { run_grad_binary(ctx, SigmoidGradOp{}, "SigmoidGrad"); }
void cuda_tanh_grad(OpContext& ctx) { run_grad_binary(ctx, TanhGradOp{}, "TanhGrad"); }
void cuda_erf_grad(OpContext& ctx) { run_grad_binary(ctx, ErfGradOp{}, "ErfGrad"); }
// The engine's GeluGrad may also write Gelu(X), output 1 (ops/activation_ops.cpp).
void cuda_gelu_grad(OpContext& ctx) {
  run_grad_binary(ctx, GeluGradOp{gelu_is_tanh(ctx)}, "GeluGrad");
  if (ctx.has_output(1)) {
    ORTM_DISPATCH_FLOAT(
        ctx.in(1).dtype(), ctx,
        launch_unary<scalar_t>(ctx.in(1), ctx.out(1), GeluOp{gelu_is_tanh(ctx)}, "GeluGrad"));
  }
}

}  // namespace ortmodule
