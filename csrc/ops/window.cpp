// Window geometry shared by Conv and the pooling ops: attribute checks, auto_pad, output
// extents, and the 1-D/2-D (Window) and 3-D (Pool3dParams) parameter blocks.
#include "ops/window.h"

#include <algorithm>
#include <cstdint>

#include "kernels/math/pool.h"
#include "ops/op_utils.h"

namespace ortmodule {

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

WindowAttrs read_window_attrs(const OpContext& ctx, const Shape& x, std::vector<int64_t> kernel) {
  const size_t sd = x.size() - 2;
  WindowAttrs a;
  a.kernel = std::move(kernel);
  a.strides = ctx.node.attr_ints("strides", std::vector<int64_t>(sd, 1));
  a.dilations = ctx.node.attr_ints("dilations", std::vector<int64_t>(sd, 1));
  a.pads = ctx.node.attr_ints("pads", std::vector<int64_t>(2 * sd, 0));
  check_window_attrs(ctx, sd, a.kernel, a.strides, a.dilations, a.pads);
  apply_auto_pad(ctx, Shape(x.begin() + 2, x.end()), a.kernel, a.strides, a.dilations, &a.pads);
  return a;
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
  const WindowAttrs a = read_window_attrs(ctx, x, kernel);
  const std::vector<int64_t>&strides = a.strides, &dil = a.dilations, &pads = a.pads;
  bool ceil_mode = ctx.node.attr_int("ceil_mode", 0) != 0;
  Shape in(x.begin() + 2, x.end());
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
  w.pad_bottom = one_d ? 0 : pads[sd];
  w.pad_right = pads[2 * sd - 1];
  w.outH = out_extent(w.H, w.kH, w.stride_h, w.pad_top, w.pad_bottom, w.dil_h, ceil_mode);
  w.outW = out_extent(w.W, w.kW, w.stride_w, w.pad_left, w.pad_right, w.dil_w, ceil_mode);
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

Pool2dParams pool_params(const Window& w, bool count_include_pad, int64_t divisor_override) {
  Pool2dParams p{w.N,       w.C,        w.H,     w.W,        w.kH,
                 w.kW,      w.outH,     w.outW,  w.stride_h, w.stride_w,
                 w.pad_top, w.pad_left, w.dil_h, w.dil_w,    count_include_pad};
  p.pad_bottom = w.pad_bottom;
  p.pad_right = w.pad_right;
  p.divisor_override = divisor_override;
  return p;
}

int64_t pool_divisor_override(const OpContext& ctx) {
  if (!ctx.node.has_attr("divisor_override")) return 0;
  const int64_t d = ctx.node.attr_int("divisor_override", 0);
  if (d <= 0)
    ctx.fail("attribute divisor_override=" + std::to_string(d) +
             " must be positive (torch's avg_pool refuses zero as well)");
  return d;
}

// Pooling over [N, C, D, H, W] (the 3-D kernels; 1-D and 2-D take the Window path).
bool is_pool3d(const Shape& x) { return x.size() == 5; }

Pool3dParams make_pool3d(const OpContext& ctx, const Shape& x, bool count_include_pad,
                         int64_t divisor_override) {
  const WindowAttrs a = read_window_attrs(ctx, x, ctx.node.attr_ints("kernel_shape"));
  const std::vector<int64_t>&kernel = a.kernel, &strides = a.strides, &dil = a.dilations,
        &pads = a.pads;
  const bool ceil_mode = ctx.node.attr_int("ceil_mode", 0) != 0;
  Shape in(x.begin() + 2, x.end());
  Pool3dParams p{};
  p.N = x[0];
  p.C = x[1];
  p.count_include_pad = count_include_pad;
  p.divisor_override = divisor_override;
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
    const int64_t base = indices[i] / plane * plane;
    indices[i] = base + pool_storage_order_position(indices[i] % plane, spatial.data(),
                                                    static_cast<int>(spatial.size()), to_column);
  }
}

// Copies the attributes that define the window geometry onto a gradient node.
void copy_window_attrs(const Node& from, Node* to) {
  for (const char* key : {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides",
                          "ceil_mode", "count_include_pad", "storage_order", "divisor_override"}) {
    if (from.has_attr(key)) to->attrs[key] = from.attrs.at(key);
  }
}

}  // namespace ortmodule
