// CUDA twins of ScaledMaskedSoftmax(x, mask?, fill?; scale) = Softmax(scale * x + mask,
// axis=-1) (x and mask broadcasting to the output; a boolean mask selects scale * x or fill)
// and ScaledMaskedSoftmaxGrad(dY, Y, mask?; scale) = scale * Y * (dY - sum(dY * Y, axis=-1))
// (0 where a boolean mask drops the element), as csrc/ops/attention_ops.cpp defines them.
//
// The row kernels (a warp or a block per row of the output) are masked_softmax_rows.cuh's;
// FusedAttention, which uses them too, is fused_attention.cu.
#include <cmath>
#include <cstdint>

#include "backends/cuda/cuda_ops_internal.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/masked_softmax_rows.cuh"
#include "kernels/math/softmax.h"
#include "ops/op_utils.h"

namespace ortmodule {

namespace {

using cuda::Dims;
using cuda::row_dims;

template <typename T>
void launch_scaled_masked_softmax(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  const Tensor* mask = ctx.has_input(1) ? &ctx.in(1) : nullptr;
  Tensor& y = ctx.out(0);
  const Shape& out = y.shape();
  if (out.size() - 1 > static_cast<size_t>(cuda::kMaxRank))
    ctx.fail(cuda::rank_limit_message(out.size(), "ScaledMaskedSoftmax"));
  const int64_t dim = out.back();
  const int64_t rows = dim ? y.numel() / dim : 0;
  if (rows == 0) return;
  int64_t x_step = 0, mask_step = 0;
  const Dims x_rows = row_dims(x.shape(), out, &x_step);
  const Dims mask_rows = mask ? row_dims(mask->shape(), out, &mask_step) : Dims();
  const T scale = static_cast<T>(ctx.node.attr_float("scale", 1.0));
  const bool boolean = mask && mask->dtype() == DType::Bool;
  // The fill (input 2) is read on the host (the row's cuda_host_inputs).
  const T fill = boolean ? static_cast<T>(ctx.in(2).float_at(0)) : T(0);
  cuda::launch_scaled_masked_softmax_rows<T>(
      cuda::stream(y.device()), rows, dim, x_rows, x_step, mask_rows, mask_step, scale, x.data<T>(),
      mask && !boolean ? mask->data<T>() : nullptr, boolean ? mask->data<uint8_t>() : nullptr, fill,
      y.data<T>());
  cuda::check_launch("ScaledMaskedSoftmax");
}

template <typename T>
void launch_scaled_masked_softmax_grad(OpContext& ctx) {
  const Tensor& dy = ctx.in(0);
  const Tensor& y = ctx.in(1);
  const int64_t dim = y.shape().back();
  const int64_t rows = dim ? y.numel() / dim : 0;
  if (rows == 0) return;
  const T scale = static_cast<T>(ctx.node.attr_float("scale", 1.0));
  Tensor& dx = ctx.out(0);
  const Tensor* keep = ctx.has_input(2) ? &ctx.in(2) : nullptr;
  int64_t keep_step = 0;
  const Dims keep_rows = keep ? row_dims(keep->shape(), y.shape(), &keep_step) : Dims();
  cuda::launch_scaled_masked_softmax_grad_rows<T>(
      cuda::stream(dx.device()), rows, dim, scale, dy.data<T>(), y.data<T>(), keep_rows, keep_step,
      keep ? keep->data<uint8_t>() : nullptr, dx.data<T>());
  cuda::check_launch("ScaledMaskedSoftmaxGrad");
}

}  // namespace

void cuda_scaled_masked_softmax(OpContext& ctx) {
  if (ctx.has_input(1) && ctx.in(1).dtype() != DType::Bool) expect_same_dtype(ctx, 1);
  if (ctx.has_input(1) && ctx.in(1).dtype() == DType::Bool && !ctx.has_input(2))
    ctx.fail("input 1 (mask) is boolean, so input 2 (fill) is required");
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, launch_scaled_masked_softmax<scalar_t>(ctx));
}

void cuda_scaled_masked_softmax_grad(OpContext& ctx) {
  expect_same_dtype(ctx, 1);
  if (ctx.in(0).shape() != ctx.in(1).shape() || ctx.in(1).rank() == 0)
    ctx.fail("input 0 (dY) has shape " + shape_str(ctx.in(0).shape()) + ", input 1 (Y) has " +
             shape_str(ctx.in(1).shape()) + "; they must match and have rank >= 1");
  if (ctx.has_input(2) && ctx.in(2).dtype() != DType::Bool)
    ctx.fail("input 2 (mask) is " + dtype_name(ctx.in(2).dtype()) + "; expected bool");
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, launch_scaled_masked_softmax_grad<scalar_t>(ctx));
}

}  // namespace ortmodule
