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

// Window attributes: lengths match the spatial rank, kernel/strides/dilations positive,
// pads non-negative, and every value small enough to keep the window arithmetic in int64.
void check_window_attrs(const OpContext& ctx, size_t sd, const std::vector<int64_t>& kernel,
                        const std::vector<int64_t>& strides, const std::vector<int64_t>& dil,
                        const std::vector<int64_t>& pads) {
  auto check_length = [&](const std::vector<int64_t>& v, size_t n, const char* name) {
    if (v.size() != n)
      ctx.fail(std::string("attribute '") + name + "' " + shape_str(v) + " has " +
               std::to_string(v.size()) + " entries; expected " + std::to_string(n) + " for " +
               std::to_string(sd) + " spatial dims");
  };
  check_length(kernel, sd, "kernel_shape");
  check_length(strides, sd, "strides");
  check_length(dil, sd, "dilations");
  check_length(pads, 2 * sd, "pads");
  check_positive(ctx, kernel, "attribute 'kernel_shape'");
  check_positive(ctx, strides, "attribute 'strides'");
  check_positive(ctx, dil, "attribute 'dilations'");
  check_non_negative(ctx, pads, "attribute 'pads'");
  const int64_t kMaxWindow = int64_t(1) << 31;
  for (const auto* v : {&kernel, &strides, &dil, &pads})
    for (int64_t e : *v)
      if (e > kMaxWindow)
        ctx.fail("window attribute value " + std::to_string(e) + " is too large (at most " +
                 std::to_string(kMaxWindow) + ")");
}

// Resolves auto_pad (SAME_UPPER, SAME_LOWER, VALID) into explicit pads.
void apply_auto_pad(const OpContext& ctx, const Shape& in, const std::vector<int64_t>& kernel,
                    const std::vector<int64_t>& strides, const std::vector<int64_t>& dil,
                    std::vector<int64_t>* pads_out) {
  std::vector<int64_t>& pads = *pads_out;
  const size_t sd = in.size();
  std::string auto_pad = ctx.node.attr_string("auto_pad", "NOTSET");
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
}

Window make_window(const OpContext& ctx, const Shape& x, std::vector<int64_t> kernel) {
  if (x.size() != 3 && x.size() != 4) {
    ctx.fail(
        "only 1-D, 2-D and 3-D spatial inputs ([N, C, L], [N, C, H, W] or [N, C, D, H, W]) "
        "are supported, got " +
        shape_str(x));
  }
  bool one_d = x.size() == 3;
  size_t sd = x.size() - 2;
  std::vector<int64_t> strides = ctx.node.attr_ints("strides", std::vector<int64_t>(sd, 1));
  std::vector<int64_t> dil = ctx.node.attr_ints("dilations", std::vector<int64_t>(sd, 1));
  std::vector<int64_t> pads = ctx.node.attr_ints("pads", std::vector<int64_t>(2 * sd, 0));
  check_window_attrs(ctx, sd, kernel, strides, dil, pads);
  bool ceil_mode = ctx.node.attr_int("ceil_mode", 0) != 0;
  Shape in(x.begin() + 2, x.end());
  apply_auto_pad(ctx, in, kernel, strides, dil, &pads);
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

// Pooling over [N, C, D, H, W] (the 3-D kernels; 1-D and 2-D take the Window path).
bool is_pool3d(const Shape& x) { return x.size() == 5; }

Pool3dParams make_pool3d(const OpContext& ctx, const Shape& x, bool count_include_pad) {
  const std::vector<int64_t> kernel = ctx.node.attr_ints("kernel_shape");
  std::vector<int64_t> strides = ctx.node.attr_ints("strides", std::vector<int64_t>(3, 1));
  std::vector<int64_t> dil = ctx.node.attr_ints("dilations", std::vector<int64_t>(3, 1));
  std::vector<int64_t> pads = ctx.node.attr_ints("pads", std::vector<int64_t>(6, 0));
  check_window_attrs(ctx, 3, kernel, strides, dil, pads);
  if (strides.size() != 3 || dil.size() != 3 || pads.size() != 6) {
    ctx.fail("strides, dilations and pads need 3, 3 and 6 entries for 3 spatial dims, got " +
             std::to_string(strides.size()) + ", " + std::to_string(dil.size()) + " and " +
             std::to_string(pads.size()));
  }
  const bool ceil_mode = ctx.node.attr_int("ceil_mode", 0) != 0;
  Shape in(x.begin() + 2, x.end());
  apply_auto_pad(ctx, in, kernel, strides, dil, &pads);
  Pool3dParams p{};
  p.N = x[0];
  p.C = x[1];
  p.count_include_pad = count_include_pad;
  for (int i = 0; i < 3; ++i) {
    p.in[i] = in[i];
    p.kernel[i] = kernel[i];
    p.stride[i] = strides[i];
    p.dilation[i] = dil[i];
    p.pad_begin[i] = pads[i];
    p.pad_end[i] = pads[i + 3];
    p.out[i] = out_extent(in[i], kernel[i], strides[i], pads[i], pads[i + 3], dil[i], ceil_mode);
    if (p.out[i] <= 0) ctx.fail("input " + shape_str(x) + " is smaller than the kernel");
  }
  return p;
}

Shape pool3d_out_shape(const Pool3dParams& p) { return {p.N, p.C, p.out[0], p.out[1], p.out[2]}; }

// MaxPool storage_order=1: indices count the spatial dims column-major (the first spatial
// axis fastest). Converts row-major positions in [N, C, spatial...] to that order, or back.
void convert_storage_order(const Shape& x, int64_t* indices, int64_t count, bool to_column) {
  Shape spatial(x.begin() + 2, x.end());
  const int64_t plane = shape_numel(spatial);
  for (int64_t i = 0; i < count; ++i) {
    if (indices[i] < 0) continue;
    int64_t base = indices[i] / plane * plane, rem = indices[i] % plane, out = 0;
    if (to_column) {
      // row-major: rem = ((i0 * S1) + i1) * S2 + i2 ...; column-major: i0 + S0 * (i1 + S1 * i2)
      int64_t scale = plane;
      for (size_t d = spatial.size(); d-- > 0;) {
        scale /= spatial[d];
        out += (rem % spatial[d]) * scale;
        rem /= spatial[d];
      }
    } else {
      int64_t scale = plane;
      for (size_t d = 0; d < spatial.size(); ++d) {
        scale /= spatial[d];
        out += (rem % spatial[d]) * scale;
        rem /= spatial[d];
      }
    }
    indices[i] = base + out;
  }
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

// Conv over [N, C, D, H, W] (the 3-D kernels; 1-D and 2-D take the Window path).
Conv3dParams conv3d_params(const OpContext& ctx, const Shape& x, const Shape& weight) {
  const std::vector<int64_t> kernel = conv_kernel_shape(ctx, weight);
  std::vector<int64_t> strides = ctx.node.attr_ints("strides", std::vector<int64_t>(3, 1));
  std::vector<int64_t> dil = ctx.node.attr_ints("dilations", std::vector<int64_t>(3, 1));
  std::vector<int64_t> pads = ctx.node.attr_ints("pads", std::vector<int64_t>(6, 0));
  check_window_attrs(ctx, 3, kernel, strides, dil, pads);
  if (strides.size() != 3 || dil.size() != 3 || pads.size() != 6) {
    ctx.fail("strides, dilations and pads need 3, 3 and 6 entries for 3 spatial dims, got " +
             std::to_string(strides.size()) + ", " + std::to_string(dil.size()) + " and " +
             std::to_string(pads.size()));
  }
  Shape in(x.begin() + 2, x.end());
  apply_auto_pad(ctx, in, kernel, strides, dil, &pads);
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

void cpu_conv(OpContext& ctx) {
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

// ---- MaxPool(X) -> Y, Indices?; MaxPoolGrad(dY, Indices, x_shape) ----

// storage_order=1 (Indices counted column-major over the spatial dims) is converted after
// the kernels, which count row-major; MaxPoolGrad converts back before scattering.
bool column_major_indices(const OpContext& ctx) {
  const int64_t order = ctx.node.attr_int("storage_order", 0);
  if (order != 0 && order != 1)
    ctx.fail("attribute storage_order=" + std::to_string(order) + ", expected 0 or 1");
  return order == 1;
}

std::vector<OutputInfo> shape_maxpool(const OpContext& ctx) {
  column_major_indices(ctx);
  const Shape& x = ctx.in(0).shape();
  Shape out;
  if (is_pool3d(x)) {
    out = pool3d_out_shape(make_pool3d(ctx, x, false));
  } else {
    Window w = make_pool_window(ctx, x);
    out = window_out_shape(w, w.C);
  }
  OutputInfo y{ctx.in(0).dtype(), out};
  OutputInfo idx{DType::Int64, y.shape};
  return {y, idx};
}

// MaxPool's forward types: the floating types, int8 and uint8.
#define ORTM_DISPATCH_MAXPOOL(DTYPE, CTX, ...)                         \
  switch (DTYPE) {                                                     \
    ORTM_DTYPE_CASE(Float32, float, __VA_ARGS__)                       \
    ORTM_DTYPE_CASE(Float64, double, __VA_ARGS__)                      \
    ORTM_DTYPE_CASE(Int8, int8_t, __VA_ARGS__)                         \
    ORTM_DTYPE_CASE(UInt8, uint8_t, __VA_ARGS__)                       \
    default:                                                           \
      (CTX).fail("dtype " + dtype_name(DTYPE) +                        \
                 " is not supported (float32, float64, int8, uint8)"); \
  }

void cpu_maxpool(OpContext& ctx) {
  const Shape& x = ctx.in(0).shape();
  int64_t* idx = ctx.has_output(1) ? ctx.out(1).data<int64_t>() : nullptr;
  if (is_pool3d(x)) {
    const Pool3dParams p = make_pool3d(ctx, x, false);
    ORTM_DISPATCH_MAXPOOL(ctx.in(0).dtype(), ctx,
                          maxpool3d_forward<scalar_t>(p, ctx.in(0).data<scalar_t>(),
                                                      ctx.out(0).data<scalar_t>(), idx));
  } else {
    Window w = make_window(ctx, x, ctx.node.attr_ints("kernel_shape"));
    ORTM_DISPATCH_MAXPOOL(
        ctx.in(0).dtype(), ctx,
        maxpool2d_forward<scalar_t>(pool_params(w, false), ctx.in(0).data<scalar_t>(),
                                    ctx.out(0).data<scalar_t>(), idx));
  }
  if (idx && column_major_indices(ctx)) convert_storage_order(x, idx, ctx.out(1).numel(), true);
}
#undef ORTM_DISPATCH_MAXPOOL

// Pool gradients take dY first and the input's shape last.
std::vector<OutputInfo> shape_pool_grad(const OpContext& ctx) {
  const Shape x = ctx.in(ctx.num_inputs() - 1).to_int_vector();
  check_shape(ctx, x, "shape input (input " + std::to_string(ctx.num_inputs() - 1) + ")");
  Shape dy;
  if (ctx.node.op_type == "GlobalAveragePoolGrad") {
    if (x.size() < 3) ctx.fail("input shape must be [N, C, spatial...], got " + shape_str(x));
    dy = x;
    for (size_t i = 2; i < dy.size(); ++i) dy[i] = 1;
  } else if (is_pool3d(x)) {
    dy = pool3d_out_shape(make_pool3d(ctx, x, false));
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
  const Shape x = ctx.in(2).to_int_vector();
  const int64_t* indices = ctx.in(1).data<int64_t>();
  std::vector<int64_t> row_major;
  if (column_major_indices(ctx)) {
    row_major.assign(indices, indices + ctx.in(1).numel());
    convert_storage_order(x, row_major.data(), static_cast<int64_t>(row_major.size()), false);
    indices = row_major.data();
  }
  // Every index points into its own plane (or is -1 for an empty window).
  if (x.size() < 3) ctx.fail("input_shape (input 2) " + shape_str(x) + " has no spatial dims");
  const int64_t planes = x[0] * x[1], spatial = shape_numel(Shape(x.begin() + 2, x.end()));
  const int64_t per_plane = planes > 0 ? ctx.in(1).numel() / planes : 1;
  for (int64_t o = 0; o < ctx.in(1).numel(); ++o) {
    const int64_t plane = o / std::max<int64_t>(per_plane, 1);
    if (indices[o] != -1 && (indices[o] < plane * spatial || indices[o] >= (plane + 1) * spatial))
      ctx.fail("indices (input 1) entry " + std::to_string(indices[o]) + " at position " +
               std::to_string(o) + " is out of range for its plane");
  }
  if (is_pool3d(x)) {
    const Pool3dParams p = make_pool3d(ctx, x, false);
    ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx,
                        maxpool3d_backward<scalar_t>(p, ctx.in(0).data<scalar_t>(), indices,
                                                     ctx.out(0).data<scalar_t>()));
    return;
  }
  Window w = make_pool_window(ctx, x);
  ORTM_DISPATCH_FLOAT(
      ctx.in(0).dtype(), ctx,
      maxpool2d_backward<scalar_t>(pool_params(w, false), ctx.in(0).data<scalar_t>(), indices,
                                   ctx.out(0).data<scalar_t>()));
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
  const Shape& x = ctx.in(0).shape();
  if (is_pool3d(x))
    return one_output(ctx.in(0).dtype(), pool3d_out_shape(make_pool3d(ctx, x, false)));
  Window w = make_pool_window(ctx, x);
  return one_output(ctx.in(0).dtype(), window_out_shape(w, w.C));
}

void cpu_avgpool(OpContext& ctx) {
  bool include = ctx.node.attr_int("count_include_pad", 0) != 0;
  if (is_pool3d(ctx.in(0).shape())) {
    const Pool3dParams p = make_pool3d(ctx, ctx.in(0).shape(), include);
    ORTM_DISPATCH_FLOAT(
        ctx.in(0).dtype(), ctx,
        avgpool3d_forward<scalar_t>(p, ctx.in(0).data<scalar_t>(), ctx.out(0).data<scalar_t>()));
    return;
  }
  Window w = make_window(ctx, ctx.in(0).shape(), ctx.node.attr_ints("kernel_shape"));
  ORTM_DISPATCH_FLOAT(
      ctx.in(0).dtype(), ctx,
      avgpool2d_forward<scalar_t>(pool_params(w, include), ctx.in(0).data<scalar_t>(),
                                  ctx.out(0).data<scalar_t>()));
}

void cpu_avgpool_grad(OpContext& ctx) {
  bool include = ctx.node.attr_int("count_include_pad", 0) != 0;
  const Shape x = ctx.in(1).to_int_vector();
  if (is_pool3d(x)) {
    const Pool3dParams p = make_pool3d(ctx, x, include);
    ORTM_DISPATCH_FLOAT(
        ctx.in(0).dtype(), ctx,
        avgpool3d_backward<scalar_t>(p, ctx.in(0).data<scalar_t>(), ctx.out(0).data<scalar_t>()));
    return;
  }
  Window w = make_window(ctx, x, ctx.node.attr_ints("kernel_shape"));
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

// ---- BatchNormalization / ai.ortmodule BatchNormTorch / com.microsoft BatchNormInternal /
// BatchNormalizationGrad ----
// BatchNormTorch is BatchNormalization with PyTorch's running variance (unbiased batch
// variance); the captured PyTorch models use it, ONNX models keep the ONNX definition.
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

// BatchNormalization before opset 14 (spatial, is_test, five outputs in training mode): the
// engine runs the inference form, Y from the given mean and variance, with statistics per
// channel (spatial=1). The training-mode outputs (mean, var, saved_mean, saved_var) and
// spatial=0 (statistics per channel and position) are refused.
std::vector<OutputInfo> shape_batchnorm_legacy(const OpContext& ctx) {
  if (ctx.node.attr_int("spatial", 1) != 1) {
    ctx.fail("attribute spatial=" + std::to_string(ctx.node.attr_int("spatial", 1)) +
             " (statistics per position) is not supported; expected spatial=1");
  }
  for (size_t i = 1; i < ctx.node.outputs.size(); ++i) {
    if (ctx.node.outputs[i]) {
      ctx.fail("output " + std::to_string(i) +
               " (a training-mode statistic) is not supported before opset 14; expected only "
               "output 0 (inference)");
    }
  }
  return shape_batchnorm(ctx);
}

void cpu_batchnorm(OpContext& ctx) {
  int64_t N, C, S;
  bn_dims(ctx, &N, &C, &S);
  // Defaults are float32 values, as ONNX attributes are.
  double eps = ctx.node.attr_float("epsilon", 1e-5f),
         momentum = ctx.node.attr_float("momentum", 0.9f);
  bool training = ctx.node.attr_int("training_mode", 0) != 0;
  // ai.ortmodule BatchNormTorch (PyTorch's batch norm, and the BatchNormInternal that its
  // gradient rule switches it to) tracks the unbiased batch variance; ONNX's the biased one.
  const bool unbiased =
      ctx.node.op_type == "BatchNormTorch" || ctx.node.attr_int("unbiased_running_var", 0) != 0;
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
    batchnorm_train_forward<scalar_t>(N, C, S, eps, momentum, unbiased, in(0), in(1), in(2), in(3),
                                      in(4), y, rm, rv, sm, sis);
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
  double eps = ctx.node.attr_float("epsilon", 1e-5f);
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
        {{"epsilon", Attribute::make_float(n.attr_float("epsilon", 1e-5f))}}, "ai.ortmodule");
    for (size_t i = 0; i < 3; ++i) g.set_input_grad(i, grads[i]);
    return;
  }
  // In training mode Y does not depend on input_mean/input_var (batch statistics are
  // used), so they get no gradient even when computed from differentiable values.
  const bool torch_semantics = n.op_type == "BatchNormTorch";
  g.replace_forward_op("BatchNormInternal", "com.microsoft");
  if (torch_semantics) n.attrs["unbiased_running_var"] = Attribute::make_int(1);
  Value* saved_mean = g.forward_output(3, "saved_mean");
  Value* saved_inv_std = g.forward_output(4, "saved_inv_std");
  std::vector<Value*> grads = g.emit_multi(
      "BatchNormalizationGrad",
      {g.output_grad(0), g.input(0), g.input(1), saved_mean, saved_inv_std},
      {g.needs_grad(0), g.needs_grad(1), g.needs_grad(2)},
      {{"epsilon", Attribute::make_float(n.attr_float("epsilon", 1e-5f))}}, "com.microsoft");
  for (size_t i = 0; i < 3; ++i) g.set_input_grad(i, grads[i]);
}

}  // namespace ortmodule
