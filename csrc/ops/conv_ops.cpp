// Conv, MaxPool, AveragePool, GlobalAveragePool and BatchNormalization, with their
// gradients (com.microsoft ConvGrad / BatchNormalizationGrad, ai.ortmodule pool grads).
#include <algorithm>
#include <cmath>

#include "grad/gradient_builder.h"
#include "kernels/cpu/batchnorm.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/pool.h"
#include "ops/op_utils.h"
#include "ops/ops.h"

namespace ortmodule {

namespace {

// Spatial geometry shared by Conv and pooling: 1-D inputs become H = 1.
struct Window {
  int64_t N, C, H, W, kH, kW, outH, outW;
  int64_t stride_h, stride_w, pad_top, pad_left, dil_h, dil_w;
  bool one_d;
};

int64_t out_extent(int64_t in, int64_t k, int64_t stride, int64_t pad_begin, int64_t pad_end,
                   int64_t dil, bool ceil_mode) {
  int64_t span = in + pad_begin + pad_end - dil * (k - 1) - 1;
  int64_t out = (ceil_mode ? (span + stride - 1) / stride : span / stride) + 1;
  // The last window must start inside the input or the leading padding.
  if (ceil_mode && (out - 1) * stride >= in + pad_begin) --out;
  return out;
}

Window make_window(const OpContext& ctx, const Shape& x, std::vector<int64_t> kernel) {
  if (x.size() != 3 && x.size() != 4) {
    ctx.fail("only 1-D and 2-D spatial inputs ([N, C, L] or [N, C, H, W]) are supported, got " +
             shape_str(x));
  }
  bool one_d = x.size() == 3;
  size_t sd = x.size() - 2;
  if (kernel.size() != sd)
    ctx.fail("attribute 'kernel_shape' " + shape_str(kernel) + " has " +
             std::to_string(kernel.size()) + " entries for " + std::to_string(sd) +
             " spatial dims");
  std::vector<int64_t> strides = ctx.node.attr_ints("strides", std::vector<int64_t>(sd, 1));
  std::vector<int64_t> dil = ctx.node.attr_ints("dilations", std::vector<int64_t>(sd, 1));
  std::vector<int64_t> pads = ctx.node.attr_ints("pads", std::vector<int64_t>(2 * sd, 0));
  auto check_length = [&](const std::vector<int64_t>& v, size_t n, const char* name) {
    if (v.size() != n)
      ctx.fail(std::string("attribute '") + name + "' " + shape_str(v) + " has " +
               std::to_string(v.size()) + " entries; expected " + std::to_string(n) + " for " +
               std::to_string(sd) + " spatial dims");
  };
  check_length(strides, sd, "strides");
  check_length(dil, sd, "dilations");
  check_length(pads, 2 * sd, "pads");
  check_positive(ctx, kernel, "attribute 'kernel_shape'");
  check_positive(ctx, strides, "attribute 'strides'");
  check_positive(ctx, dil, "attribute 'dilations'");
  check_non_negative(ctx, pads, "attribute 'pads'");
  // Bounds that keep the window arithmetic within int64 (no real model comes close).
  const int64_t kMaxWindow = int64_t(1) << 31;
  for (const auto* v : {&kernel, &strides, &dil, &pads})
    for (int64_t e : *v)
      if (e > kMaxWindow)
        ctx.fail("window attribute value " + std::to_string(e) + " is too large (at most " +
                 std::to_string(kMaxWindow) + ")");
  std::string auto_pad = ctx.node.attr_string("auto_pad", "NOTSET");
  bool ceil_mode = ctx.node.attr_int("ceil_mode", 0) != 0;
  Shape in(x.begin() + 2, x.end());
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    for (size_t i = 0; i < sd; ++i) {
      int64_t out = (in[i] + strides[i] - 1) / strides[i];
      int64_t total =
          std::max<int64_t>(0, (out - 1) * strides[i] + dil[i] * (kernel[i] - 1) + 1 - in[i]);
      int64_t small = total / 2, big = total - small;
      pads[i] = auto_pad == "SAME_UPPER" ? small : big;
      pads[i + sd] = auto_pad == "SAME_UPPER" ? big : small;
    }
  } else if (auto_pad == "VALID") {
    std::fill(pads.begin(), pads.end(), 0);
  } else if (auto_pad != "NOTSET") {
    ctx.fail("unknown auto_pad '" + auto_pad + "'");
  }
  Window w{};
  w.one_d = one_d;
  w.N = x[0];
  w.C = x[1];
  w.H = one_d ? 1 : in[0];
  w.W = in[sd - 1];
  w.kH = one_d ? 1 : kernel[0];
  w.kW = kernel[sd - 1];
  w.stride_h = one_d ? 1 : strides[0];
  w.stride_w = strides[sd - 1];
  w.dil_h = one_d ? 1 : dil[0];
  w.dil_w = dil[sd - 1];
  w.pad_top = one_d ? 0 : pads[0];
  w.pad_left = pads[sd - 1];
  int64_t pad_bottom = one_d ? 0 : pads[sd], pad_right = pads[2 * sd - 1];
  w.outH = out_extent(w.H, w.kH, w.stride_h, w.pad_top, pad_bottom, w.dil_h, ceil_mode);
  w.outW = out_extent(w.W, w.kW, w.stride_w, w.pad_left, pad_right, w.dil_w, ceil_mode);
  if (w.outH <= 0 || w.outW <= 0) ctx.fail("input " + shape_str(x) + " is smaller than the kernel");
  return w;
}

Shape window_out_shape(const Window& w, int64_t channels) {
  if (w.one_d) return {w.N, channels, w.outW};
  return {w.N, channels, w.outH, w.outW};
}

// Pooling windows must overlap the input: each pad smaller than the (dilated) kernel.
Window make_pool_window(const OpContext& ctx, const Shape& x) {
  const std::vector<int64_t> kernel = ctx.node.attr_ints("kernel_shape");
  Window w = make_window(ctx, x, kernel);
  const size_t sd = kernel.size();
  const std::vector<int64_t> pads = ctx.node.attr_ints("pads", std::vector<int64_t>(2 * sd, 0));
  const std::vector<int64_t> dil = ctx.node.attr_ints("dilations", std::vector<int64_t>(sd, 1));
  for (size_t i = 0; i < pads.size(); ++i) {
    const int64_t k = dil[i % sd] * (kernel[i % sd] - 1) + 1;
    if (pads[i] >= k)
      ctx.fail("attribute 'pads' " + shape_str(pads) + " has pad " + std::to_string(pads[i]) +
               " not smaller than the kernel extent " + std::to_string(k));
  }
  return w;
}

Pool2dParams pool_params(const Window& w, bool count_include_pad) {
  return Pool2dParams{w.N,       w.C,        w.H,     w.W,        w.kH,
                      w.kW,      w.outH,     w.outW,  w.stride_h, w.stride_w,
                      w.pad_top, w.pad_left, w.dil_h, w.dil_w,    count_include_pad};
}

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

// Copies the attributes that define the window geometry onto a gradient node.
AttrList::value_type attr_entry(const Node& n, const char* key) { return {key, n.attrs.at(key)}; }
void copy_window_attrs(const Node& from, Node* to) {
  for (const char* key : {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides",
                          "ceil_mode", "count_include_pad", "storage_order"}) {
    if (from.has_attr(key)) to->attrs[key] = attr_entry(from, key).second;
  }
}

}  // namespace

// ---- Conv(X, W, B?) and ConvGrad(dY, X, W) -> dX, dW, dB ----

std::vector<OutputInfo> shape_conv(const OpContext& ctx) {
  expect_same_dtype(ctx, 1);
  const Shape& x = ctx.in(0).shape();
  const Shape& w = ctx.in(1).shape();
  if (w.size() != x.size())
    ctx.fail("weight (input 1) " + shape_str(w) + " and input " + shape_str(x) + " ranks differ");
  if (ctx.has_input(2)) expect_same_dtype(ctx, 2);
  Window win = make_window(ctx, x, conv_kernel_shape(ctx, w));
  conv_params(ctx, x, w);
  if (ctx.has_input(2) && ctx.in(2).numel() != w[0])
    ctx.fail("bias (input 2) has shape " + shape_str(ctx.in(2).shape()) + ", expected [" +
             std::to_string(w[0]) + "]");
  return one_output(ctx.in(0).dtype(), window_out_shape(win, w[0]));
}

void cpu_conv(OpContext& ctx) {
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
  Window win = make_window(ctx, x, conv_kernel_shape(ctx, w));
  conv_params(ctx, x, w);
  if (ctx.in(0).shape() != window_out_shape(win, w[0]))
    ctx.fail("input 0 (dY) has shape " + shape_str(ctx.in(0).shape()) + ", expected " +
             shape_str(window_out_shape(win, w[0])));
  OutputInfo dx{t, x}, dw{t, w}, db{t, {w[0]}};
  return {dx, dw, db};
}

void cpu_conv_grad(OpContext& ctx) {
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

// ---- MaxPool(X) -> Y, Indices?; MaxPoolGrad(dY, Indices, x_shape) ----

std::vector<OutputInfo> shape_maxpool(const OpContext& ctx) {
  if (ctx.node.attr_int("storage_order", 0) != 0) ctx.fail("storage_order=1 is not supported");
  Window w = make_pool_window(ctx, ctx.in(0).shape());
  OutputInfo y{ctx.in(0).dtype(), window_out_shape(w, w.C)};
  OutputInfo idx{DType::Int64, y.shape};
  return {y, idx};
}

void cpu_maxpool(OpContext& ctx) {
  Window w = make_window(ctx, ctx.in(0).shape(), ctx.node.attr_ints("kernel_shape"));
  int64_t* idx = ctx.has_output(1) ? ctx.out(1).data<int64_t>() : nullptr;
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx,
                      maxpool2d_forward<scalar_t>(pool_params(w, false), ctx.in(0).data<scalar_t>(),
                                                  ctx.out(0).data<scalar_t>(), idx));
}

// Pool gradients take dY first and the input's shape last.
std::vector<OutputInfo> shape_pool_grad(const OpContext& ctx) {
  const Shape x = ctx.in(ctx.num_inputs() - 1).to_int_vector();
  check_shape(ctx, x, "shape input (input " + std::to_string(ctx.num_inputs() - 1) + ")");
  Shape dy;
  if (ctx.node.op_type == "GlobalAveragePoolGrad") {
    if (x.size() < 3) ctx.fail("input shape must be [N, C, spatial...], got " + shape_str(x));
    dy = x;
    for (size_t i = 2; i < dy.size(); ++i) dy[i] = 1;
  } else {
    Window w = make_pool_window(ctx, x);
    dy = window_out_shape(w, w.C);
  }
  if (ctx.in(0).shape() != dy)
    ctx.fail("input 0 (dY) has shape " + shape_str(ctx.in(0).shape()) + ", expected " +
             shape_str(dy));
  if (ctx.node.op_type == "MaxPoolGrad" &&
      (ctx.in(1).dtype() != DType::Int64 || ctx.in(1).shape() != dy))
    ctx.fail("indices (input 1) must be int64 of shape " + shape_str(dy) + ", got " +
             dtype_name(ctx.in(1).dtype()) + " " + shape_str(ctx.in(1).shape()));
  return one_output(ctx.in(0).dtype(), x);
}

void cpu_maxpool_grad(OpContext& ctx) {
  Window w = make_pool_window(ctx, ctx.in(2).to_int_vector());
  // Every index points into its own plane (or is -1 for an empty window).
  const int64_t* indices = ctx.in(1).data<int64_t>();
  const int64_t HW = w.H * w.W, P = w.outH * w.outW;
  for (int64_t o = 0; o < ctx.in(1).numel(); ++o) {
    const int64_t plane = o / std::max<int64_t>(P, 1);
    if (indices[o] != -1 && (indices[o] < plane * HW || indices[o] >= (plane + 1) * HW))
      ctx.fail("indices (input 1) entry " + std::to_string(indices[o]) + " at position " +
               std::to_string(o) + " is out of range for its plane");
  }
  ORTM_DISPATCH_FLOAT(
      ctx.in(0).dtype(), ctx,
      maxpool2d_backward<scalar_t>(pool_params(w, false), ctx.in(0).data<scalar_t>(),
                                   ctx.in(1).data<int64_t>(), ctx.out(0).data<scalar_t>()));
}

void grad_maxpool(GradContext& g) {
  Value* indices = g.forward_output(1, "indices");
  Value* dx = g.emit("MaxPoolGrad", {g.output_grad(0), indices, g.shape_of(g.input(0))}, {},
                     "ai.ortmodule");
  copy_window_attrs(g.node(), dx->producer);
  g.set_input_grad(0, dx);
}

// ---- AveragePool(X); AveragePoolGrad(dY, x_shape) ----

std::vector<OutputInfo> shape_avgpool(const OpContext& ctx) {
  Window w = make_pool_window(ctx, ctx.in(0).shape());
  return one_output(ctx.in(0).dtype(), window_out_shape(w, w.C));
}

void cpu_avgpool(OpContext& ctx) {
  Window w = make_window(ctx, ctx.in(0).shape(), ctx.node.attr_ints("kernel_shape"));
  bool include = ctx.node.attr_int("count_include_pad", 0) != 0;
  ORTM_DISPATCH_FLOAT(
      ctx.in(0).dtype(), ctx,
      avgpool2d_forward<scalar_t>(pool_params(w, include), ctx.in(0).data<scalar_t>(),
                                  ctx.out(0).data<scalar_t>()));
}

void cpu_avgpool_grad(OpContext& ctx) {
  Window w = make_window(ctx, ctx.in(1).to_int_vector(), ctx.node.attr_ints("kernel_shape"));
  bool include = ctx.node.attr_int("count_include_pad", 0) != 0;
  ORTM_DISPATCH_FLOAT(
      ctx.in(0).dtype(), ctx,
      avgpool2d_backward<scalar_t>(pool_params(w, include), ctx.in(0).data<scalar_t>(),
                                   ctx.out(0).data<scalar_t>()));
}

void grad_avgpool(GradContext& g) {
  Value* dx =
      g.emit("AveragePoolGrad", {g.output_grad(0), g.shape_of(g.input(0))}, {}, "ai.ortmodule");
  copy_window_attrs(g.node(), dx->producer);
  g.set_input_grad(0, dx);
}

// ---- GlobalAveragePool(X); GlobalAveragePoolGrad(dY, x_shape) ----

std::vector<OutputInfo> shape_global_avgpool(const OpContext& ctx) {
  Shape s = ctx.in(0).shape();
  if (s.size() < 3) ctx.fail("input must be [N, C, spatial...], got " + shape_str(s));
  for (size_t i = 2; i < s.size(); ++i) s[i] = 1;
  return one_output(ctx.in(0).dtype(), s);
}

void cpu_global_avgpool(OpContext& ctx) {
  const Shape& s = ctx.in(0).shape();
  ORTM_DISPATCH_FLOAT(
      ctx.in(0).dtype(), ctx,
      global_avgpool_forward<scalar_t>(s[0], s[1], dims_product(s, 2, s.size()),
                                       ctx.in(0).data<scalar_t>(), ctx.out(0).data<scalar_t>()));
}

void cpu_global_avgpool_grad(OpContext& ctx) {
  Shape s = ctx.in(1).to_int_vector();
  ORTM_DISPATCH_FLOAT(
      ctx.in(0).dtype(), ctx,
      global_avgpool_backward<scalar_t>(s[0], s[1], dims_product(s, 2, s.size()),
                                        ctx.in(0).data<scalar_t>(), ctx.out(0).data<scalar_t>()));
}

void grad_global_avgpool(GradContext& g) {
  g.set_input_grad(0, g.emit("GlobalAveragePoolGrad", {g.output_grad(0), g.shape_of(g.input(0))},
                             {}, "ai.ortmodule"));
}

// ---- BatchNormalization / com.microsoft BatchNormInternal / BatchNormalizationGrad ----
// BatchNormInternal is BatchNormalization with two more outputs (saved_mean,
// saved_inv_std) that its gradient reads; the gradient rule switches to it.

namespace {
void bn_dims(const OpContext& ctx, int64_t* N, int64_t* C, int64_t* S) {
  const Shape& x = ctx.in(0).shape();
  if (x.size() < 2) ctx.fail("input must be [N, C, ...], got " + shape_str(x));
  *N = x[0];
  *C = x[1];
  *S = dims_product(x, 2, x.size());
  for (size_t i = 1; i < 5; ++i) {
    if (!ctx.has_input(i)) continue;
    expect_same_dtype(ctx, i);
    if (ctx.in(i).numel() != *C) {
      ctx.fail("input " + std::to_string(i) + " has shape " + shape_str(ctx.in(i).shape()) +
               ", expected [" + std::to_string(*C) + "]");
    }
  }
}
}  // namespace

std::vector<OutputInfo> shape_batchnorm(const OpContext& ctx) {
  int64_t N, C, S;
  bn_dims(ctx, &N, &C, &S);
  DType t = ctx.in(0).dtype();
  OutputInfo y{t, ctx.in(0).shape()}, stat{t, {C}};
  return {y, stat, stat, stat, stat};
}

void cpu_batchnorm(OpContext& ctx) {
  int64_t N, C, S;
  bn_dims(ctx, &N, &C, &S);
  double eps = ctx.node.attr_float("epsilon", 1e-5),
         momentum = ctx.node.attr_float("momentum", 0.9);
  bool training = ctx.node.attr_int("training_mode", 0) != 0;
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, {
    auto in = [&](size_t i) { return ctx.in(i).data<scalar_t>(); };
    if (!training) {
      batchnorm_infer_forward<scalar_t>(N, C, S, eps, in(0), in(1), in(2), in(3), in(4),
                                        ctx.out(0).data<scalar_t>());
      break;
    }
    // Outputs the graph does not consume still need somewhere to go.
    std::vector<Tensor> scratch;
    auto out = [&](size_t i) {
      if (ctx.has_output(i)) return ctx.out(i).data<scalar_t>();
      scratch.push_back(Tensor::empty(ctx.in(0).dtype(), {C}));
      return scratch.back().data<scalar_t>();
    };
    scalar_t* y = ctx.out(0).data<scalar_t>();
    scalar_t *rm = out(1), *rv = out(2), *sm = out(3), *sis = out(4);
    batchnorm_train_forward<scalar_t>(N, C, S, eps, momentum, in(0), in(1), in(2), in(3), in(4), y,
                                      rm, rv, sm, sis);
  });
}

// BatchNormalizationGrad(dY, X, scale, saved_mean, saved_inv_std) -> dX, dScale, dBias
std::vector<OutputInfo> shape_batchnorm_grad(const OpContext& ctx) {
  DType t = ctx.in(0).dtype();
  const Shape& x = ctx.in(1).shape();
  if (x.size() < 2) ctx.fail("input 1 must be [N, C, ...], got " + shape_str(x));
  if (ctx.in(0).shape() != x)
    ctx.fail("input 0 (dY) has shape " + shape_str(ctx.in(0).shape()) + ", input 1 has " +
             shape_str(x));
  for (size_t i = 1; i < 5; ++i) {
    expect_same_dtype(ctx, i);
    if (i >= 2 && ctx.in(i).numel() != x[1])
      ctx.fail("input " + std::to_string(i) + " has shape " + shape_str(ctx.in(i).shape()) +
               ", expected [" + std::to_string(x[1]) + "]");
  }
  OutputInfo dx{t, ctx.in(1).shape()}, dscale{t, ctx.in(2).shape()};
  return {dx, dscale, dscale};
}

void cpu_batchnorm_grad(OpContext& ctx) {
  const Shape& x = ctx.in(1).shape();
  int64_t N = x[0], C = x[1], S = dims_product(x, 2, x.size());
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, {
    auto ptr = [&](size_t i) { return ctx.has_output(i) ? ctx.out(i).data<scalar_t>() : nullptr; };
    batchnorm_train_backward<scalar_t>(
        N, C, S, ctx.in(1).data<scalar_t>(), ctx.in(0).data<scalar_t>(), ctx.in(2).data<scalar_t>(),
        ctx.in(3).data<scalar_t>(), ctx.in(4).data<scalar_t>(), ptr(0), ptr(1), ptr(2));
  });
}

// BatchNormInferenceGrad(dY, X, scale, mean, var; epsilon) -> dX, dScale, dBias
void cpu_batchnorm_inference_grad(OpContext& ctx) {
  const Shape& x = ctx.in(1).shape();
  int64_t N = x[0], C = x[1], S = dims_product(x, 2, x.size());
  double eps = ctx.node.attr_float("epsilon", 1e-5);
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, {
    auto in = [&](size_t i) { return ctx.in(i).data<scalar_t>(); };
    auto out = [&](size_t i) { return ctx.has_output(i) ? ctx.out(i).data<scalar_t>() : nullptr; };
    batchnorm_infer_backward<scalar_t>(N, C, S, eps, in(1), in(0), in(2), in(3), in(4), out(0),
                                       out(1), out(2));
  });
}

void grad_batchnorm(GradContext& g) {
  Node& n = g.node();
  if (n.attr_int("training_mode", 0) == 0) {
    // Statistics are constants here (a BatchNorm in eval() inside a model being trained).
    if (g.needs_grad(3) || g.needs_grad(4)) {
      g.fail("inference-mode BatchNormalization cannot pass gradients to its mean and variance");
    }
    std::vector<Value*> grads = g.emit_multi(
        "BatchNormInferenceGrad",
        {g.output_grad(0), g.input(0), g.input(1), g.input(3), g.input(4)},
        {g.needs_grad(0), g.needs_grad(1), g.needs_grad(2)},
        {{"epsilon", Attribute::make_float(n.attr_float("epsilon", 1e-5))}}, "ai.ortmodule");
    for (size_t i = 0; i < 3; ++i) g.set_input_grad(i, grads[i]);
    return;
  }
  // In training mode Y does not depend on input_mean/input_var (batch statistics are
  // used), so they get no gradient even when computed from differentiable values.
  g.replace_forward_op("BatchNormInternal", "com.microsoft");
  Value* saved_mean = g.forward_output(3, "saved_mean");
  Value* saved_inv_std = g.forward_output(4, "saved_inv_std");
  std::vector<Value*> grads = g.emit_multi(
      "BatchNormalizationGrad",
      {g.output_grad(0), g.input(0), g.input(1), saved_mean, saved_inv_std},
      {g.needs_grad(0), g.needs_grad(1), g.needs_grad(2)},
      {{"epsilon", Attribute::make_float(n.attr_float("epsilon", 1e-5))}}, "com.microsoft");
  for (size_t i = 0; i < 3; ++i) g.set_input_grad(i, grads[i]);
}

}  // namespace ortmodule
