// ConvTranspose (1-D, 2-D and 3-D) and its gradient rule.
//
// ConvTranspose(X, W, B?) is the input gradient of a Conv: the Conv whose input has Y's shape
// [N, C_out, y...], whose weight is W [C_in, C_out/group, k...] (M = C_in output channels)
// and whose output has X's shape [N, C_in, x...], with the same strides, dilations, group
// and leading pads. Y = ConvGrad's dX for dY := X; the bias is added per channel. Per axis
//   y = stride * (x - 1) + output_padding + dilation * (k - 1) + 1 - pad_begin - pad_end.
// The kernels take the output extent x explicitly (the pad after an axis is implied by it),
// so output_padding needs no special case.
//
// Gradients (with the same strides, dilations and group):
//   dX = Conv(dY, W)                                       (the forward Conv of the pair)
//   dW = ConvGrad(dY := X, x := dY, W) output 1            (the Conv's weight gradient)
//   dB = ReduceSum(dY) over every axis but 1
// The Conv's trailing pad is chosen so that its output extent is x (see grad_pads).
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "grad/grad_context.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/conv_common.h"
#include "ops/op_utils.h"
#include "ops/ops.h"
#include "ops/widened_kernel.h"
#include "ops/window.h"

namespace ortmodule {

namespace {

std::vector<int64_t> transpose_kernel_shape(const Node& node, const Shape& weight) {
  std::vector<int64_t> k = node.attr_ints("kernel_shape");
  if (k.empty()) k.assign(weight.begin() + 2, weight.end());
  return k;
}

// The geometry of ConvTranspose(X, W) as the Conv it transposes (see the file comment), in
// the 3-D form of kernels/cpu/conv.h: 1-D and 2-D have leading spatial dims of 1.
struct TransposeGeometry {
  Conv3dParams conv;  // input: Y's shape, output: X's shape
  Shape y;
};

TransposeGeometry transpose_geometry(const OpContext& ctx) {
  const Shape& x = ctx.in(0).shape();
  const Shape& w = ctx.in(1).shape();
  if (x.size() < 3 || x.size() > 5)
    ctx.fail("ConvTranspose takes [N, C, L], [N, C, H, W] or [N, C, D, H, W] inputs, got " +
             shape_str(x));
  if (w.size() != x.size())
    ctx.fail("weight (input 1) " + shape_str(w) + " and input " + shape_str(x) + " ranks differ");
  const size_t sd = x.size() - 2;
  const std::vector<int64_t> kernel = transpose_kernel_shape(ctx.node, w);
  const std::vector<int64_t> strides = ctx.node.attr_ints("strides", std::vector<int64_t>(sd, 1));
  const std::vector<int64_t> dil = ctx.node.attr_ints("dilations", std::vector<int64_t>(sd, 1));
  std::vector<int64_t> pads = ctx.node.attr_ints("pads", std::vector<int64_t>(2 * sd, 0));
  const std::vector<int64_t> out_pad =
      ctx.node.attr_ints("output_padding", std::vector<int64_t>(sd, 0));
  check_window_attrs(ctx, sd, kernel, strides, dil, pads);
  if (out_pad.size() != sd)
    ctx.fail("attribute 'output_padding' " + shape_str(out_pad) + " has " +
             std::to_string(out_pad.size()) + " entries; expected " + std::to_string(sd));
  check_non_negative(ctx, out_pad, "attribute 'output_padding'");
  const std::vector<int64_t> output_shape = ctx.node.attr_ints("output_shape");
  if (!output_shape.empty() && output_shape.size() != sd)
    ctx.fail("attribute 'output_shape' " + shape_str(output_shape) + " has " +
             std::to_string(output_shape.size()) + " entries; expected the " + std::to_string(sd) +
             " spatial extents");
  const std::string auto_pad = ctx.node.attr_string("auto_pad", "NOTSET");
  const bool same = auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER";
  if (!same && auto_pad != "NOTSET" && auto_pad != "VALID")
    ctx.fail("unknown auto_pad '" + auto_pad + "'");
  if (auto_pad == "VALID") std::fill(pads.begin(), pads.end(), 0);
  std::vector<int64_t> extents(sd, 0);  // 0: from the pads
  if (same || !output_shape.empty()) {
    // The output extent given (output_shape; stride * x under auto_pad SAME_*), the pads
    // derived from it as the ONNX spec does: the total padding split evenly, the odd cell at
    // the end under SAME_UPPER and at the beginning otherwise (floor division, as
    // onnx.reference: a total of -1, an output one cell longer, pads nothing in front).
    for (size_t i = 0; i < sd; ++i) {
      extents[i] = output_shape.empty() ? strides[i] * x[i + 2] : output_shape[i];
      const int64_t total =
          strides[i] * (x[i + 2] - 1) + out_pad[i] + dil[i] * (kernel[i] - 1) + 1 - extents[i];
      const int64_t half = total >= 0 ? total / 2 : -((1 - total) / 2);
      pads[i] = auto_pad == "SAME_UPPER" ? half : total - half;
      pads[i + sd] = total - pads[i];
      if (pads[i] < 0)
        ctx.fail("the output extent " + std::to_string(extents[i]) + " on spatial axis " +
                 std::to_string(i) + " needs a negative leading pad; give 'pads' instead");
    }
  }
  const int64_t group = ctx.node.attr_int("group", 1);
  if (group <= 0 || x[1] != w[0] || w[0] % group != 0)
    ctx.fail("input " + shape_str(x) + " and weight " + shape_str(w) +
             " do not match group=" + std::to_string(group) +
             " (ConvTranspose's weight is [C_in, C_out / group, kernel...])");
  for (size_t i = 0; i < sd; ++i) {
    if (kernel[i] != w[i + 2])
      ctx.fail("attribute 'kernel_shape' " + shape_str(kernel) +
               " does not match weight (input 1) " + shape_str(w));
  }
  TransposeGeometry t{};
  Conv3dParams& p = t.conv;
  p.N = x[0];
  p.C = w[1] * group;
  p.M = w[0];
  p.group = group;
  t.y = {x[0], p.C};
  const size_t lead = 3 - sd;
  for (size_t i = 0; i < 3; ++i) {
    p.in[i] = p.out[i] = p.kernel[i] = p.stride[i] = p.dilation[i] = 1;
    p.pad_begin[i] = 0;
  }
  for (size_t i = 0; i < sd; ++i) {
    const int64_t extent = extents[i] > 0
                               ? extents[i]
                               : strides[i] * (x[i + 2] - 1) + out_pad[i] +
                                     dil[i] * (kernel[i] - 1) + 1 - pads[i] - pads[i + sd];
    if (extent <= 0)
      ctx.fail("ConvTranspose's output extent on spatial axis " + std::to_string(i) + " is " +
               std::to_string(extent) + " (input " + shape_str(x) + ", pads " + shape_str(pads) +
               "): the pads remove every output cell");
    t.y.push_back(extent);
    p.in[lead + i] = extent;
    p.out[lead + i] = x[i + 2];
    p.kernel[lead + i] = kernel[i];
    p.stride[lead + i] = strides[i];
    p.dilation[lead + i] = dil[i];
    p.pad_begin[lead + i] = pads[i];
  }
  return t;
}

// The 2-D form of a 1-D or 2-D geometry (index 1 and 2 of the 3-D one).
Conv2dParams as_conv2d(const Conv3dParams& p) {
  return Conv2dParams{p.N,          p.C,         p.in[1],        p.in[2],        p.M,
                      p.kernel[1],  p.kernel[2], p.out[1],       p.out[2],       p.group,
                      p.stride[1],  p.stride[2], p.pad_begin[1], p.pad_begin[2], p.dilation[1],
                      p.dilation[2]};
}

template <typename T>
void conv_transpose_cpu(const Conv3dParams& p, int rank, const T* x, const T* w, const T* bias,
                        T* y) {
  if (rank == 5) {
    conv3d_backward<T>(p, nullptr, w, x, y, nullptr, nullptr);
  } else {
    conv2d_backward<T>(as_conv2d(p), nullptr, w, x, y, nullptr, nullptr);
  }
  if (bias == nullptr) return;
  const int64_t P = p.in[0] * p.in[1] * p.in[2];
  for (int64_t n = 0; n < p.N; ++n) conv_detail::add_bias(bias, p.C, P, y + n * p.C * P);
}

// An int64 Constant node.
Value* ints_constant(GradContext& g, const std::vector<int64_t>& values) {
  Tensor t = Tensor::empty(DType::Int64, {static_cast<int64_t>(values.size())});
  for (size_t i = 0; i < values.size(); ++i) t.data<int64_t>()[i] = values[i];
  return g.emit("Constant", {}, {{"value", Attribute::make_tensor(t)}});
}

// The Conv pair of a ConvTranspose in its gradient: its pads, and per spatial axis how many
// trailing cells of dY it leaves out (crop). The leading pad is the transpose's; the trailing
// one makes the Conv's output extent floor((y + begin + end - dil * (k - 1) - 1) / stride) + 1
// equal to x, which holds for end in [end0 - output_padding, end0 - output_padding + stride
// - 1] (end0: the transpose's trailing pad). The leading pad is taken where it lies in that
// range (symmetric pads: torch's convolution, cuDNN on CUDA, computes them), else the
// smallest non-negative one. An output_padding beyond stride - 1 + end0 (torch allows one
// below the dilation) leaves no such pad: the Conv then reads dY without its last
// output_padding - end0 cells, which no input cell reaches.
struct GradPads {
  std::vector<int64_t> pads, crop;
};

GradPads grad_pads(const GradContext& g, size_t sd) {
  const Node& node = g.node();
  const std::string auto_pad = node.attr_string("auto_pad", "NOTSET");
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER" || node.has_attr("output_shape"))
    g.fail("the gradient of ConvTranspose with " +
           (node.has_attr("output_shape") ? std::string("attribute 'output_shape'")
                                          : "auto_pad " + auto_pad) +
           " is not supported; give explicit 'pads' and 'output_padding'");
  GradPads r{node.attr_ints("pads", std::vector<int64_t>(2 * sd, 0)), std::vector<int64_t>(sd, 0)};
  std::vector<int64_t>& pads = r.pads;
  if (auto_pad == "VALID") std::fill(pads.begin(), pads.end(), 0);
  const std::vector<int64_t> strides = node.attr_ints("strides", std::vector<int64_t>(sd, 1));
  const std::vector<int64_t> out_pad =
      node.attr_ints("output_padding", std::vector<int64_t>(sd, 0));
  if (pads.size() != 2 * sd || strides.size() != sd || out_pad.size() != sd)
    g.fail("ConvTranspose's pads, strides or output_padding do not match its rank");
  for (size_t i = 0; i < sd; ++i) {
    const int64_t low = pads[i + sd] - out_pad[i], high = low + strides[i] - 1;
    if (high < 0) r.crop[i] = -low;
    pads[i + sd] = pads[i] >= low && pads[i] <= high ? pads[i] : std::max<int64_t>(0, low);
  }
  return r;
}

// dY without its last crop[i] cells on spatial axis i (dY itself where nothing is cropped).
Value* cropped(GradContext& g, Value* dy, const std::vector<int64_t>& crop) {
  std::vector<int64_t> starts, ends, axes;
  for (size_t i = 0; i < crop.size(); ++i) {
    if (crop[i] == 0) continue;
    starts.push_back(0);
    ends.push_back(-crop[i]);
    axes.push_back(static_cast<int64_t>(i + 2));
  }
  if (axes.empty()) return dy;
  return g.emit("Slice",
                {dy, ints_constant(g, starts), ints_constant(g, ends), ints_constant(g, axes)});
}

}  // namespace

Conv3dParams conv_transpose_geometry(const OpContext& ctx) { return transpose_geometry(ctx).conv; }

// ---- ConvTranspose(X, W, B?) ----

std::vector<OutputInfo> shape_conv_transpose(const OpContext& ctx) {
  expect_same_dtype(ctx, 1);
  const TransposeGeometry t = transpose_geometry(ctx);
  if (ctx.has_input(2)) {
    expect_same_dtype(ctx, 2);
    if (ctx.in(2).numel() != t.conv.C || ctx.in(2).shape().size() != 1)
      ctx.fail("bias (input 2) has shape " + shape_str(ctx.in(2).shape()) + ", expected [" +
               std::to_string(t.conv.C) + "] (C_out = weight dim 1 * group)");
  }
  return one_output(ctx.in(0).dtype(), t.y);
}

// float16/bfloat16 as Conv: the float32 kernel between an exact widening and one rounding.
void cpu_conv_transpose(OpContext& ctx) {
  if (has_low_precision(ctx)) return run_widened(ctx, cpu_conv_transpose);
  const TransposeGeometry t = transpose_geometry(ctx);
  const int rank = static_cast<int>(ctx.in(0).shape().size());
  ORTM_DISPATCH_FLOAT(
      ctx.in(0).dtype(), ctx,
      conv_transpose_cpu<scalar_t>(
          t.conv, rank, ctx.in(0).data<scalar_t>(), ctx.in(1).data<scalar_t>(),
          ctx.has_input(2) ? ctx.in(2).data<scalar_t>() : nullptr, ctx.out(0).data<scalar_t>()));
}

void grad_conv_transpose(GradContext& g) {
  if (!g.input(0) || !g.input(1)) g.fail("ConvTranspose needs an input X and a weight W");
  Value* w = g.input(1);
  const size_t rank =
      w->has_shape ? w->shape.size() : g.node().attr_ints("kernel_shape").size() + 2;
  if (rank < 3 || rank > 5) g.fail("ConvTranspose's weight rank is unknown or not 3, 4 or 5");
  const size_t sd = rank - 2;
  const GradPads gp = grad_pads(g, sd);
  const std::vector<int64_t>& pads = gp.pads;
  Value* dy_full = g.output_grad(0);
  Value* dy = g.needs_grad(0) || g.needs_grad(1) ? cropped(g, dy_full, gp.crop) : dy_full;
  auto set_attrs = [&](Value* v) {
    Node* n = v->producer;
    copy_window_attrs(g.node(), n);
    n->attrs.erase("auto_pad");
    n->attrs.erase("output_padding");
    n->attrs["pads"] = Attribute::make_ints(pads);
    return v;
  };
  if (g.needs_grad(0)) g.set_input_grad(0, set_attrs(g.emit("Conv", {dy, w})));
  if (g.needs_grad(1)) {
    std::vector<Value*> grads =
        g.emit_multi("ConvGrad", {g.input(0), dy, w}, {false, true, false}, {}, "com.microsoft");
    g.set_input_grad(1, set_attrs(grads[1]));
  }
  if (g.needs_grad(2)) {
    std::vector<int64_t> axes{0};
    for (size_t i = 2; i < rank; ++i) axes.push_back(static_cast<int64_t>(i));
    g.set_input_grad(2, g.emit("ReduceSum", {dy_full, ints_constant(g, axes)},
                               {{"keepdims", Attribute::make_int(0)}}));
  }
}

}  // namespace ortmodule
