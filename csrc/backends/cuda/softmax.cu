// CUDA twins of Softmax, LogSoftmax and their gradients (SoftmaxGrad(_13),
// LogSoftmaxGrad(_13)), over the [outer, dim, inner] layout the CPU kernels use; the kernels
// are softmax.cuh's.
#include <cstdint>

#include "kernels/cuda/softmax.cuh"
#include "ops/op_utils.h"

namespace ortmodule {

namespace {

template <typename T>
void launch_softmax(OpContext& ctx, bool log) {
  const Tensor& x = ctx.in(0);
  int64_t outer, dim, inner;
  softmax_layout(ctx, x.shape(), &outer, &dim, &inner);
  if (outer == 0 || dim == 0 || inner == 0) return;
  cuda::launch_softmax_layout<T>(cuda::stream(x.device()), outer, dim, inner, x.data<T>(),
                                 ctx.out(0).data<T>(), log);
}

template <typename T>
void launch_softmax_grad(OpContext& ctx, bool log) {
  const Tensor& dy = ctx.in(0);
  const Tensor& y = ctx.in(1);
  int64_t outer, dim, inner;
  softmax_layout(ctx, y.shape(), &outer, &dim, &inner);
  if (outer == 0 || dim == 0 || inner == 0) return;
  cuda::launch_softmax_grad_layout<T>(cuda::stream(y.device()), outer, dim, inner, dy.data<T>(),
                                      y.data<T>(), ctx.out(0).data<T>(), log);
}

void run_softmax(OpContext& ctx, bool log) {
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, launch_softmax<scalar_t>(ctx, log));
}

void run_softmax_grad(OpContext& ctx, bool log) {
  expect_same_dtype(ctx, 1);
  if (ctx.in(0).shape() != ctx.in(1).shape()) {
    ctx.fail("input 0 (dY) has shape " + shape_str(ctx.in(0).shape()) + ", input 1 (Y) has " +
             shape_str(ctx.in(1).shape()));
  }
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, launch_softmax_grad<scalar_t>(ctx, log));
}

}  // namespace

void cuda_softmax(OpContext& ctx) { run_softmax(ctx, false); }
void cuda_log_softmax(OpContext& ctx) { run_softmax(ctx, true); }
void cuda_softmax_grad(OpContext& ctx) { run_softmax_grad(ctx, false); }
void cuda_log_softmax_grad(OpContext& ctx) { run_softmax_grad(ctx, true); }

}  // namespace ortmodule
