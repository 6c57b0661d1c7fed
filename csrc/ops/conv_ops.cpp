// Conv with its gradient (com.microsoft ConvGrad), 1-D, 2-D and 3-D.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "grad/grad_context.h"
#include "kernels/cpu/conv.h"
#include "ops/op_utils.h"
#include "ops/ops.h"
#include "ops/widened_kernel.h"
#include "ops/window.h"

namespace ortmodule {

namespace {

std::vector<int64_t> conv_kernel_shape(const OpContext& ctx, const Shape& weight) {
  std::vector<int64_t> k = ctx.node.attr_ints("kernel_shape");
  if (k.empty()) k.assign(weight.begin() + 2, weight.end());
  return k;
}

Conv2dParams conv_params(const OpContext& ctx, const Shape& x, const Shape& weight) {
  Window w = make_window(ctx, x, conv_kernel_shape(ctx, weight));
  int64_t group = ctx.node.attr_int("group", 1);
  if (group <= 0) ctx.fail("attribute 'group' must be positive, got " + std::to_string(group));
  if (weight.size() != x.size())
    ctx.fail("weight (input 1) " + shape_str(weight) + " and input " + shape_str(x) +
             " ranks differ");
  if (w.C % group != 0 || weight[0] % group != 0 || weight[1] * group != w.C) {
    ctx.fail("input " + shape_str(x) + " and weight " + shape_str(weight) +
             " do not match group=" + std::to_string(group));
  }
  if (w.kH != (w.one_d ? 1 : weight[2]) || w.kW != weight.back())
    ctx.fail("attribute 'kernel_shape' " + shape_str(conv_kernel_shape(ctx, weight)) +
             " does not match weight (input 1) " + shape_str(weight));
  return Conv2dParams{w.N,       w.C,        w.H,     w.W,    weight[0],  w.kH,
                      w.kW,      w.outH,     w.outW,  group,  w.stride_h, w.stride_w,
                      w.pad_top, w.pad_left, w.dil_h, w.dil_w};
}

// Conv over [N, C, D, H, W] (the 3-D kernels; 1-D and 2-D take the Window path).
Conv3dParams conv3d_params(const OpContext& ctx, const Shape& x, const Shape& weight) {
  const WindowAttrs a = read_window_attrs(ctx, x, conv_kernel_shape(ctx, weight));
  const std::vector<int64_t>&kernel = a.kernel, &strides = a.strides, &dil = a.dilations,
        &pads = a.pads;
  Shape in(x.begin() + 2, x.end());
  const int64_t group = ctx.node.attr_int("group", 1);
  if (group <= 0 || x[1] % group != 0 || weight[0] % group != 0 || weight[1] * group != x[1]) {
    ctx.fail("input " + shape_str(x) + " and weight " + shape_str(weight) +
             " do not match group=" + std::to_string(group));
  }
  Conv3dParams p{};
  p.N = x[0];
  p.C = x[1];
  p.M = weight[0];
  p.group = group;
  for (int i = 0; i < 3; ++i) {
    p.in[i] = in[i];
    p.kernel[i] = kernel[i];
    p.stride[i] = strides[i];
    p.dilation[i] = dil[i];
    p.pad_begin[i] = pads[i];
    p.out[i] = out_extent(in[i], kernel[i], strides[i], pads[i], pads[i + 3], dil[i], false);
    if (p.out[i] <= 0) ctx.fail("input " + shape_str(x) + " is smaller than the kernel");
  }
  return p;
}

}  // namespace

Conv3dParams conv_geometry(const OpContext& ctx, const Shape& x, const Shape& weight) {
  if (x.size() == 5) return conv3d_params(ctx, x, weight);
  const Conv2dParams p = conv_params(ctx, x, weight);
  Conv3dParams g{};
  g.N = p.N;
  g.C = p.C;
  g.M = p.M;
  g.group = p.group;
  const int64_t in[3] = {1, p.H, p.W}, kernel[3] = {1, p.kH, p.kW}, out[3] = {1, p.outH, p.outW};
  const int64_t stride[3] = {1, p.stride_h, p.stride_w}, pad[3] = {0, p.pad_top, p.pad_left};
  const int64_t dil[3] = {1, p.dil_h, p.dil_w};
  for (int i = 0; i < 3; ++i) {
    g.in[i] = in[i];
    g.kernel[i] = kernel[i];
    g.out[i] = out[i];
    g.stride[i] = stride[i];
    g.pad_begin[i] = pad[i];
    g.dilation[i] = dil[i];
  }
  return g;
}

// ---- Conv(X, W, B?) and ConvGrad(dY, X, W) -> dX, dW, dB ----

std::vector<OutputInfo> shape_conv(const OpContext& ctx) {
  expect_same_dtype(ctx, 1);
  const Shape& x = ctx.in(0).shape();
  const Shape& w = ctx.in(1).shape();
  if (w.size() != x.size())
    ctx.fail("weight (input 1) " + shape_str(w) + " and input " + shape_str(x) + " ranks differ");
  if (ctx.has_input(2)) expect_same_dtype(ctx, 2);
  if (x.size() == 5) {
    const Conv3dParams p = conv3d_params(ctx, x, w);
    return one_output(ctx.in(0).dtype(), {p.N, p.M, p.out[0], p.out[1], p.out[2]});
  }
  Window win = make_window(ctx, x, conv_kernel_shape(ctx, w));
  conv_params(ctx, x, w);
  if (ctx.has_input(2) && ctx.in(2).numel() != w[0])
    ctx.fail("bias (input 2) has shape " + shape_str(ctx.in(2).shape()) + ", expected [" +
             std::to_string(w[0]) + "]");
  return one_output(ctx.in(0).dtype(), window_out_shape(win, w[0]));
}

// float16/bfloat16 (autocast keeps Conv in 16 bits, passes/low_precision.h): the float32
// kernel between an exact widening and one rounding of each result, as eager's 16-bit
// convolutions accumulate in float32 and round once.
void cpu_conv(OpContext& ctx) {
  if (has_low_precision(ctx)) return run_widened(ctx, cpu_conv);
  if (ctx.in(0).shape().size() == 5) {
    const Conv3dParams p = conv3d_params(ctx, ctx.in(0).shape(), ctx.in(1).shape());
    ORTM_DISPATCH_FLOAT(
        ctx.in(0).dtype(), ctx,
        conv3d_forward<scalar_t>(p, ctx.in(0).data<scalar_t>(), ctx.in(1).data<scalar_t>(),
                                 ctx.has_input(2) ? ctx.in(2).data<scalar_t>() : nullptr,
                                 ctx.out(0).data<scalar_t>()));
    return;
  }
  Conv2dParams p = conv_params(ctx, ctx.in(0).shape(), ctx.in(1).shape());
  ORTM_DISPATCH_FLOAT(
      ctx.in(0).dtype(), ctx,
      conv2d_forward<scalar_t>(p, ctx.in(0).data<scalar_t>(), ctx.in(1).data<scalar_t>(),
                               ctx.has_input(2) ? ctx.in(2).data<scalar_t>() : nullptr,
                               ctx.out(0).data<scalar_t>()));
}

std::vector<OutputInfo> shape_conv_grad(const OpContext& ctx) {
  DType t = ctx.in(0).dtype();
  expect_same_dtype(ctx, 1);
  expect_same_dtype(ctx, 2);
  const Shape& x = ctx.in(1).shape();
  const Shape& w = ctx.in(2).shape();
  if (w.size() != x.size())
    ctx.fail("weight (input 2) " + shape_str(w) + " and input " + shape_str(x) + " ranks differ");
  Shape dy;
  if (x.size() == 5) {
    const Conv3dParams p = conv3d_params(ctx, x, w);
    dy = {p.N, p.M, p.out[0], p.out[1], p.out[2]};
  } else {
    Window win = make_window(ctx, x, conv_kernel_shape(ctx, w));
    conv_params(ctx, x, w);
    dy = window_out_shape(win, w[0]);
  }
  if (ctx.in(0).shape() != dy)
    ctx.fail("input 0 (dY) has shape " + shape_str(ctx.in(0).shape()) + ", expected " +
             shape_str(dy));
  OutputInfo dx{t, x}, dw{t, w}, db{t, {w[0]}};
  return {dx, dw, db};
}

void cpu_conv_grad(OpContext& ctx) {
  if (has_low_precision(ctx)) return run_widened(ctx, cpu_conv_grad);
  if (ctx.in(1).shape().size() == 5) {
    const Conv3dParams p = conv3d_params(ctx, ctx.in(1).shape(), ctx.in(2).shape());
    ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, {
      auto ptr = [&](size_t i) {
        return ctx.has_output(i) ? ctx.out(i).data<scalar_t>() : nullptr;
      };
      conv3d_backward<scalar_t>(p, ctx.in(1).data<scalar_t>(), ctx.in(2).data<scalar_t>(),
                                ctx.in(0).data<scalar_t>(), ptr(0), ptr(1), ptr(2));
    });
    return;
  }
  Conv2dParams p = conv_params(ctx, ctx.in(1).shape(), ctx.in(2).shape());
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, {
    auto ptr = [&](size_t i) { return ctx.has_output(i) ? ctx.out(i).data<scalar_t>() : nullptr; };
    conv2d_backward<scalar_t>(p, ctx.in(1).data<scalar_t>(), ctx.in(2).data<scalar_t>(),
                              ctx.in(0).data<scalar_t>(), ptr(0), ptr(1), ptr(2));
  });
}

void grad_conv(GradContext& g) {
  std::vector<Value*> grads =
      g.emit_multi("ConvGrad", {g.output_grad(0), g.input(0), g.input(1)},
                   {g.needs_grad(0), g.needs_grad(1), g.needs_grad(2)}, {}, "com.microsoft");
  copy_window_attrs(g.node(), grads[0]   ? grads[0]->producer
                              : grads[1] ? grads[1]->producer
                                         : grads[2]->producer);
  for (size_t i = 0; i < 3; ++i) g.set_input_grad(i, grads[i]);
}

}  // namespace ortmodule
