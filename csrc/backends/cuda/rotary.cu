// CUDA twin of FusedRotary (ops/rotary_ops.cpp; the arithmetic of kernels/cpu/rotary.h): one
// thread per element of Y, its operands' offsets from the broadcast strides as on the CPU.
// Products and sums round separately (no fused multiply-add), as the unfused Mul and Add do.
#include <cstdint>

#include "backends/cuda/movement.cuh"
#include "ops/rotary_args.h"

namespace ortmodule {
namespace {

using cuda::DimArray;
using cuda::grid_stride;
using cuda::thread_index;

struct RotaryIndex {
  int rank = 0, axis = 0, mode = 0;
  int64_t D = 0, split = 0;
  DimArray dims, xs, cs, ss;
};

__device__ inline float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ inline double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ inline float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ inline double add_rn(double a, double b) { return __dadd_rn(a, b); }

template <typename T>
__global__ void rotary_kernel(int64_t n, RotaryIndex r, const T* x, const T* c, const T* s, T* y) {
  const int64_t h = r.split < r.D ? r.split : r.D, tail = r.D - h;
  for (int64_t i = thread_index(); i < n; i += grid_stride()) {
    int64_t xo = 0, co = 0, so = 0, d = 0, rem = i;
    for (int k = r.rank - 1; k >= 0; --k) {
      const int64_t idx = rem % r.dims.v[k];
      rem /= r.dims.v[k];
      if (k == r.axis) {
        d = idx;
        continue;
      }
      xo += idx * r.xs.v[k];
      co += idx * r.cs.v[k];
      so += idx * r.ss.v[k];
    }
    const int64_t xa = r.xs.v[r.axis], ca = r.cs.v[r.axis], sa = r.ss.v[r.axis];
    if (r.mode == 0) {
      const T rot = d < tail ? -x[xo + (d + h) * xa] : x[xo + (d - tail) * xa];
      y[i] = add_rn(mul_rn(x[xo + d * xa], c[co + d * ca]), mul_rn(rot, s[so + d * sa]));
    } else if (r.mode == 1) {
      const int64_t j = d < h ? d + tail : d - h;
      const T z = mul_rn(x[xo + j * xa], s[so + j * sa]);
      y[i] = add_rn(mul_rn(x[xo + d * xa], c[co + d * ca]), d < h ? z : -z);
    } else {
      y[i] = d < tail ? -x[xo + (d + h) * xa] : x[xo + (d - tail) * xa];
    }
  }
}

template <typename T>
void launch_rotary(OpContext& ctx, const RotaryArgs& a) {
  Tensor& y = ctx.out(0);
  const int64_t n = y.numel();
  if (n == 0) return;
  cuda::check_rank(ctx, a.out_shape.size(), "FusedRotary");
  RotaryIndex r;
  r.rank = static_cast<int>(a.out_shape.size());
  r.axis = static_cast<int>(a.axis);
  r.mode = static_cast<int>(a.mode);
  r.D = a.out_shape[a.axis];
  r.split = a.split;
  r.dims = cuda::dim_array(a.out_shape);
  r.xs = cuda::dim_array(a.x_strides);
  r.cs = cuda::dim_array(a.cos_strides);
  r.ss = cuda::dim_array(a.sin_strides);
  const bool products = a.mode != RotaryMode::kRotate;
  rotary_kernel<T><<<cuda::blocks_for(n), cuda::kThreads, 0, cuda::stream(y.device())>>>(
      n, r, ctx.in(0).data<T>(), products ? ctx.in(1).data<T>() : nullptr,
      products ? ctx.in(2).data<T>() : nullptr, y.data<T>());
  cuda::check_launch("FusedRotary");
}

}  // namespace

void cuda_fused_rotary(OpContext& ctx) {
  const RotaryArgs a = rotary_args(ctx);
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, (launch_rotary<scalar_t>(ctx, a)));
}

}  // namespace ortmodule
