// Resize (ONNX, opsets 11+), ai.ortmodule ResizeTorch (PyTorch's upsample_* and
// _upsample_nearest_exact* rules, bit for bit in their float arithmetic) and their gradient
// ai.ortmodule ResizeGrad. Both forward ops become per-axis tap tables (ResizePlan), which one
// pair of kernels runs: a weighted gather forward, its adjoint scatter backward.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "grad/grad_context.h"
#include "kernels/cpu/resize.h"
#include "ops/op_utils.h"
#include "ops/ops.h"
#include "ops/resize_plan.h"

namespace ortmodule {

namespace {

// ---- ONNX Resize: source coordinates and taps as onnx.reference computes them ----

struct OnnxResizeAttrs {
  std::string mode, coordinate_mode, nearest_mode;
  double cubic_a;
  bool exclude_outside;
};

// x_original of output coordinate x (onnx.reference's _compute_x_ori): `length` is
// scale * in, the unrounded output length the coordinate rules use.
double onnx_source(const OpContext& ctx, const std::string& rule, double x, double scale,
                   int64_t in, int64_t out) {
  const double length = scale * static_cast<double>(in);
  if (rule == "half_pixel") return (x + 0.5) / scale - 0.5;
  if (rule == "pytorch_half_pixel") return length == 1 ? -0.5 : (x + 0.5) / scale - 0.5;
  if (rule == "align_corners")
    return length == 1 ? 0.0 : x * static_cast<double>(in - 1) / (length - 1);
  if (rule == "asymmetric") return x / scale;
  if (rule == "half_pixel_symmetric") {
    const double adjustment = static_cast<double>(out) / length;
    const double offset = static_cast<double>(in) / 2 * (1 - adjustment);
    return offset + (x + 0.5) / scale - 0.5;
  }
  ctx.fail("coordinate_transformation_mode '" + rule +
           "' is not supported (half_pixel, pytorch_half_pixel, align_corners, asymmetric, "
           "half_pixel_symmetric)");
}

ResizeAxisTable onnx_axis_table(const OpContext& ctx, const OnnxResizeAttrs& a, int64_t in,
                                int64_t out, double scale) {
  ResizeAxisTable t;
  t.in = in;
  t.out = out;
  t.taps = a.mode == "nearest" ? 1 : a.mode == "linear" ? 2 : 4;
  t.index.assign(static_cast<size_t>(out * t.taps), 0);
  t.weight.assign(static_cast<size_t>(out * t.taps), 0.0);
  for (int64_t o = 0; o < out; ++o) {
    const double x = onnx_source(ctx, a.coordinate_mode, static_cast<double>(o), scale, in, out);
    const double fl = std::floor(x);
    const bool integer = x == fl;
    const auto base = static_cast<int64_t>(fl);
    int64_t* idx = &t.index[static_cast<size_t>(o * t.taps)];
    double* w = &t.weight[static_cast<size_t>(o * t.taps)];
    if (a.mode == "nearest") {
      const double ratio = x - fl;
      bool up = false;  // take floor(x) + 1 rather than floor(x)
      if (!integer) {
        if (a.nearest_mode == "round_prefer_floor") {
          up = ratio > 0.5;
        } else if (a.nearest_mode == "round_prefer_ceil") {
          up = ratio >= 0.5;
        } else if (a.nearest_mode == "ceil") {
          up = true;
        } else if (a.nearest_mode != "floor") {
          ctx.fail("nearest_mode '" + a.nearest_mode +
                   "' is not supported (round_prefer_floor, round_prefer_ceil, floor, ceil)");
        }
      }
      idx[0] = base + (up ? 1 : 0);
      w[0] = 1.0;
    } else {
      // An integer x takes the window that ends at x with ratio 1 (onnx.reference prefers
      // the left neighbours), which puts all the weight on x.
      const double ratio = integer ? 1.0 : x - fl;
      const int64_t start = integer ? base - t.taps / 2 : base - t.taps / 2 + 1;
      for (int64_t k = 0; k < t.taps; ++k) idx[k] = start + k;
      if (a.mode == "linear") {
        w[0] = 1 - ratio;
        w[1] = ratio;
      } else {
        resize_cubic_weights(ratio, a.cubic_a, w);
      }
    }
    if (a.exclude_outside) {
      double sum = 0;
      for (int64_t k = 0; k < t.taps; ++k) {
        if (idx[k] < 0 || idx[k] >= in) w[k] = 0;
        sum += w[k];
      }
      if (sum != 0)
        for (int64_t k = 0; k < t.taps; ++k) w[k] /= sum;
    }
    for (int64_t k = 0; k < t.taps; ++k) idx[k] = std::clamp<int64_t>(idx[k], 0, in - 1);
  }
  return t;
}

// Reads a 1-D float input (scales) as doubles; empty when absent or empty.
std::vector<double> read_floats(const OpContext& ctx, size_t i) {
  std::vector<double> v;
  if (!ctx.has_input(i)) return v;
  const Tensor& t = ctx.in(i);
  if (t.dtype() == DType::Float32) {
    v.assign(t.data<float>(), t.data<float>() + t.numel());
  } else if (t.dtype() == DType::Float64) {
    v.assign(t.data<double>(), t.data<double>() + t.numel());
  } else {
    ctx.fail("scales (input " + std::to_string(i) + ") must be float32 or float64, got " +
             dtype_name(t.dtype()));
  }
  return v;
}

std::vector<int64_t> read_sizes(const OpContext& ctx, size_t i) {
  if (!ctx.has_input(i)) return {};
  if (ctx.in(i).dtype() != DType::Int64)
    ctx.fail("sizes (input " + std::to_string(i) + ") must be int64, got " +
             dtype_name(ctx.in(i).dtype()));
  return ctx.in(i).to_int_vector();
}

// ONNX Resize: output sizes and the per-axis scale the coordinate rules divide by, over every
// axis of x (axes the node does not name keep size and scale 1).
std::vector<ResizeAxisTable> onnx_tables(const OpContext& ctx, const Shape& x, size_t first) {
  const size_t r = x.size();
  OnnxResizeAttrs a{ctx.node.attr_string("mode", "nearest"),
                    ctx.node.attr_string("coordinate_transformation_mode", "half_pixel"),
                    ctx.node.attr_string("nearest_mode", "round_prefer_floor"),
                    ctx.node.attr_float("cubic_coeff_a", -0.75),
                    ctx.node.attr_int("exclude_outside", 0) != 0};
  if (a.mode != "nearest" && a.mode != "linear" && a.mode != "cubic")
    ctx.fail("mode '" + a.mode + "' is not supported (nearest, linear, cubic)");
  if (ctx.node.attr_int("antialias", 0) != 0)
    ctx.fail("antialias=1 is not supported; expected antialias=0");
  if (a.coordinate_mode == "tf_crop_and_resize")
    ctx.fail("coordinate_transformation_mode 'tf_crop_and_resize' (roi) is not supported");
  std::vector<int64_t> axes = ctx.node.attr_ints("axes", {});
  if (axes.empty())
    for (size_t i = 0; i < r; ++i) axes.push_back(static_cast<int64_t>(i));
  for (int64_t& ax : axes) {
    if (ax < -static_cast<int64_t>(r) || ax >= static_cast<int64_t>(r))
      ctx.fail("attribute axes entry " + std::to_string(ax) + " is out of range for rank " +
               std::to_string(r));
    if (ax < 0) ax += static_cast<int64_t>(r);
  }
  const std::vector<double> scales_in = read_floats(ctx, first + 1);
  const std::vector<int64_t> sizes_in = read_sizes(ctx, first + 2);
  std::vector<double> scale(r, 1.0);
  std::vector<int64_t> out(x.begin(), x.end());
  if (!sizes_in.empty()) {
    if (!scales_in.empty()) ctx.fail("scales and sizes are both given; give only one");
    if (sizes_in.size() != axes.size())
      ctx.fail("sizes has " + std::to_string(sizes_in.size()) + " entries, expected " +
               std::to_string(axes.size()));
    for (size_t i = 0; i < axes.size(); ++i) {
      const auto ax = static_cast<size_t>(axes[i]);
      if (sizes_in[i] < 0) ctx.fail("sizes " + shape_str(sizes_in) + " has a negative entry");
      if (x[ax] == 0 && sizes_in[i] != 0)
        ctx.fail("axis " + std::to_string(ax) + " of the input is empty; it can only resize to 0");
      out[ax] = sizes_in[i];
      scale[ax] = x[ax] == 0 ? 1.0 : static_cast<double>(sizes_in[i]) / static_cast<double>(x[ax]);
    }
    const std::string policy = ctx.node.attr_string("keep_aspect_ratio_policy", "stretch");
    if (policy == "not_larger" || policy == "not_smaller") {
      double s = scale[static_cast<size_t>(axes[0])];
      for (int64_t ax : axes)
        s = policy == "not_larger" ? std::min(s, scale[static_cast<size_t>(ax)])
                                   : std::max(s, scale[static_cast<size_t>(ax)]);
      for (int64_t ax : axes) {
        scale[static_cast<size_t>(ax)] = s;
        out[static_cast<size_t>(ax)] =
            static_cast<int64_t>(s * static_cast<double>(x[static_cast<size_t>(ax)]) + 0.5);
      }
    } else if (policy != "stretch") {
      ctx.fail("keep_aspect_ratio_policy '" + policy +
               "' is not supported (stretch, not_larger, not_smaller)");
    }
  } else if (!scales_in.empty()) {
    if (scales_in.size() != axes.size())
      ctx.fail("scales has " + std::to_string(scales_in.size()) + " entries, expected " +
               std::to_string(axes.size()));
    for (size_t i = 0; i < axes.size(); ++i) {
      const auto ax = static_cast<size_t>(axes[i]);
      if (!(scales_in[i] > 0))
        ctx.fail("scales entry " + std::to_string(scales_in[i]) + " must be positive");
      scale[ax] = scales_in[i];
      out[ax] = static_cast<int64_t>(std::floor(static_cast<double>(x[ax]) * scales_in[i]));
    }
  } else {
    ctx.fail("neither scales nor sizes is given (one of inputs " + std::to_string(first + 1) +
             " and " + std::to_string(first + 2) + " must be non-empty)");
  }
  std::vector<ResizeAxisTable> tables(r);
  for (size_t d = 0; d < r; ++d) {
    if (x[d] == 0 || out[d] == 0) {
      tables[d].in = x[d];
      tables[d].out = out[d];
      continue;
    }
    tables[d] = onnx_axis_table(ctx, a, x[d], out[d], scale[d]);
  }
  return tables;
}

// ---- ResizeTorch: PyTorch's upsample index and weight rules (ATen/native/UpSample.h) ----

// compute_scales_value: 1 / scale_factor when one was given, else in / out.
template <typename A>
A torch_scale(double scale_factor, int64_t in, int64_t out) {
  return scale_factor > 0 ? static_cast<A>(1.0 / scale_factor)
                          : static_cast<A>(in) / static_cast<A>(out);
}

// area_pixel_compute_scale and area_pixel_compute_source_index, then guard_index_and_lambda:
// the tap floor(src) (at most in - 1) and the fraction past it in [0, 1].
template <typename A>
void torch_linear_source(int64_t o, int64_t in, int64_t out, double scale_factor,
                         bool align_corners, bool cubic, int64_t* index, A* lambda) {
  A scale;
  if (align_corners) {
    scale = out > 1 ? static_cast<A>(in - 1) / static_cast<A>(out - 1) : A(0);
  } else {
    scale = torch_scale<A>(scale_factor, in, out);
  }
  A src;
  if (align_corners) {
    src = scale * static_cast<A>(o);
  } else {
    src = scale * (static_cast<A>(o) + A(0.5)) - A(0.5);
    if (!cubic && src < A(0)) src = A(0);
  }
  *index = std::min(static_cast<int64_t>(std::floor(static_cast<float>(src))), in - 1);
  *lambda = std::min(std::max(src - static_cast<A>(*index), A(0)), A(1));
}

// nearest_shortcuts: upsample_nearest2d's nearest_idx (and every nearest backward) copies an
// axis whose size is kept and halves the index of one whose size doubles, whatever scale
// factor was given; upsample_nearest1d and 3d compute every forward index from the scale.
template <typename A>
ResizeAxisTable torch_axis_table(const OpContext& ctx, const std::string& mode, bool align_corners,
                                 bool nearest_shortcuts, int64_t in, int64_t out,
                                 double scale_factor) {
  ResizeAxisTable t;
  t.in = in;
  t.out = out;
  t.taps = mode == "linear" ? 2 : mode == "cubic" ? 4 : 1;
  t.index.assign(static_cast<size_t>(out * t.taps), 0);
  t.weight.assign(static_cast<size_t>(out * t.taps), 0.0);
  for (int64_t o = 0; o < out; ++o) {
    int64_t* idx = &t.index[static_cast<size_t>(o * t.taps)];
    double* w = &t.weight[static_cast<size_t>(o * t.taps)];
    if (mode == "nearest") {
      // nearest_idx: the copy and the doubling are special cases, then floor(o * scale).
      if (nearest_shortcuts && out == in) {
        idx[0] = o;
      } else if (nearest_shortcuts && out == 2 * in) {
        idx[0] = o >> 1;
      } else {
        const float s = torch_scale<float>(scale_factor, in, out);
        idx[0] = std::min(static_cast<int64_t>(std::floor(static_cast<float>(o) * s)), in - 1);
      }
      w[0] = 1.0;
    } else if (mode == "nearest_exact") {
      const float s = torch_scale<float>(scale_factor, in, out);
      const auto src = static_cast<float>((static_cast<double>(o) + 0.5) * static_cast<double>(s));
      idx[0] = std::min(static_cast<int64_t>(std::floor(src)), in - 1);
      w[0] = 1.0;
    } else if (mode == "linear" && out == in) {
      // The linear kernels copy an axis whose size is kept, whatever the scale factor.
      idx[0] = idx[1] = o;
      w[0] = 1.0;
      w[1] = 0.0;
    } else if (mode == "linear") {
      int64_t i0;
      A lambda;
      torch_linear_source<A>(o, in, out, scale_factor, align_corners, false, &i0, &lambda);
      idx[0] = i0;
      idx[1] = i0 + (i0 < in - 1 ? 1 : 0);
      w[0] = static_cast<double>(A(1) - lambda);
      w[1] = static_cast<double>(lambda);
    } else if (mode == "cubic") {
      int64_t i0;
      A lambda;
      torch_linear_source<A>(o, in, out, scale_factor, align_corners, true, &i0, &lambda);
      A cw[4];
      resize_cubic_weights(lambda, A(-0.75), cw);
      for (int64_t k = 0; k < 4; ++k) {
        idx[k] = std::clamp<int64_t>(i0 - 1 + k, 0, in - 1);
        w[k] = static_cast<double>(cw[k]);
      }
    } else {
      ctx.fail("mode '" + mode + "' is not supported (nearest, nearest_exact, linear, cubic)");
    }
  }
  return t;
}

// ResizeTorch(X, sizes, scales?): sizes are the output sizes of the trailing len(sizes) axes;
// scales, float64, the scale factors torch was given for them (entries <= 0: none given).
std::vector<ResizeAxisTable> torch_tables(const OpContext& ctx, const Shape& x, size_t first) {
  const std::string mode = ctx.node.attr_string("mode", "nearest");
  const bool align_corners = ctx.node.attr_int("align_corners", 0) != 0;
  const std::vector<int64_t> sizes = read_sizes(ctx, first);
  const std::vector<double> factors = read_floats(ctx, first + 1);
  const size_t r = x.size(), s = sizes.size();
  if (s == 0 || s > r)
    ctx.fail("sizes " + shape_str(sizes) + " must name between 1 and " + std::to_string(r) +
             " trailing axes of the input " + shape_str(x));
  if (!factors.empty() && factors.size() != s)
    ctx.fail("scales has " + std::to_string(factors.size()) + " entries, expected " +
             std::to_string(s));
  if ((mode == "nearest" || mode == "nearest_exact") && align_corners)
    ctx.fail("align_corners=1 is only defined for the linear and cubic modes");
  const bool dbl = ctx.in(0).dtype() == DType::Float64;
  const bool grad = ctx.node.op_type == "ResizeGrad";
  bool same_size = true;
  for (size_t i = 0; i < s; ++i) same_size = same_size && sizes[i] == x[r - s + i];
  std::vector<ResizeAxisTable> tables(r);
  for (size_t d = 0; d < r; ++d) {
    tables[d].in = tables[d].out = x[d];
    tables[d].identity = d < r - s;
    if (tables[d].identity) continue;
    const int64_t out = sizes[d - (r - s)];
    if (out < 0) ctx.fail("sizes " + shape_str(sizes) + " has a negative entry");
    if (x[d] == 0 && out != 0)
      ctx.fail("axis " + std::to_string(d) + " of the input is empty; it can only resize to 0");
    tables[d].out = out;
    if (x[d] == 0 || out == 0) continue;
    const double factor = factors.empty() ? 0.0 : factors[d - (r - s)];
    // PyTorch's backward kernels are not all the adjoints of its forward ones, and
    // ResizeGrad follows the backward: every upsample_nearest*_backward takes nearest_idx's
    // shortcuts, and upsample_bicubic2d_backward copies when no spatial size changes.
    const bool shortcuts = s == 2 || grad;
    if (grad && mode == "cubic" && same_size) {
      tables[d].identity = true;
      continue;
    }
    tables[d] =
        dbl ? torch_axis_table<double>(ctx, mode, align_corners, shortcuts, x[d], out, factor)
            : torch_axis_table<float>(ctx, mode, align_corners, shortcuts, x[d], out, factor);
  }
  return tables;
}

// A table that copies its axis: each output reads its own position with all the weight.
bool is_identity(const ResizeAxisTable& t) {
  if (t.identity) return true;
  if (t.in != t.out) return false;
  for (int64_t o = 0; o < t.out; ++o) {
    double at_o = 0;
    for (int64_t k = 0; k < t.taps; ++k) {
      const auto i = static_cast<size_t>(o * t.taps + k);
      if (t.index[i] == o) {
        at_o += t.weight[i];
      } else if (t.weight[i] != 0) {
        return false;
      }
    }
    if (at_o != 1.0) return false;
  }
  return true;
}

}  // namespace

ResizeGeometry ResizePlan::geometry() const {
  ResizeGeometry g{};
  g.planes = planes;
  for (int d = 0; d < 3; ++d) {
    g.in[d] = axes[d].in;
    g.out[d] = axes[d].out;
    g.taps[d] = axes[d].taps;
    g.index[d] = axes[d].index.data();
    g.weight[d] = axes[d].weight.data();
  }
  return g;
}

void ResizePlan::build_adjoint() {
  for (int d = 0; d < 3; ++d) {
    const ResizeAxisTable& t = axes[d];
    ResizeAxisAdjoint& a = adjoint[d];
    a.offset.assign(static_cast<size_t>(t.in + 1), 0);
    const int64_t entries = t.out * t.taps;
    for (int64_t e = 0; e < entries; ++e) ++a.offset[static_cast<size_t>(t.index[e] + 1)];
    for (int64_t i = 0; i < t.in; ++i) a.offset[i + 1] += a.offset[i];
    std::vector<int64_t> next(a.offset.begin(), a.offset.end() - 1);
    a.output.resize(static_cast<size_t>(entries));
    a.weight.resize(static_cast<size_t>(entries));
    for (int64_t e = 0; e < entries; ++e) {
      const auto at = static_cast<size_t>(next[static_cast<size_t>(t.index[e])]++);
      a.output[at] = e / t.taps;
      a.weight[at] = t.weight[e];
    }
  }
}

ResizeAdjointGeometry ResizePlan::adjoint_geometry() const {
  ResizeAdjointGeometry g{};
  g.planes = planes;
  for (int d = 0; d < 3; ++d) {
    g.in[d] = axes[d].in;
    g.out[d] = axes[d].out;
    g.offset[d] = adjoint[d].offset.data();
    g.output[d] = adjoint[d].output.data();
    g.weight[d] = adjoint[d].weight.data();
  }
  return g;
}

ResizePlan resize_plan(const OpContext& ctx, const Shape& x) {
  const bool grad = ctx.node.op_type == "ResizeGrad";
  const std::string forward = grad ? ctx.node.attr_string("forward", "") : ctx.node.op_type;
  // The forward node's input 1 sits at input 1, or at input 2 of ResizeGrad (after x_shape).
  const size_t first = grad ? 2 : 1;
  if (x.empty()) ctx.fail("input must have at least one axis, got a scalar");
  std::vector<ResizeAxisTable> tables;
  if (forward == "Resize") {
    tables = onnx_tables(ctx, x, first);
  } else if (forward == "ResizeTorch") {
    tables = torch_tables(ctx, x, first);
  } else {
    ctx.fail("attribute forward='" + forward + "', expected Resize or ResizeTorch");
  }
  ResizePlan plan;
  plan.in_shape = x;
  for (const ResizeAxisTable& t : tables) plan.out_shape.push_back(t.out);
  const size_t r = x.size();
  size_t lead = 0;  // leading axes left alone
  while (lead + 1 < r && is_identity(tables[lead])) ++lead;
  if (r - lead > 3)
    ctx.fail("resizes axes " + std::to_string(lead) + " to " + std::to_string(r - 1) +
             " of the input " + shape_str(x) + "; at most the last three axes may be resized");
  plan.planes = dims_product(x, 0, lead);
  for (size_t d = lead; d < r; ++d) {
    ResizeAxisTable& t = tables[d];
    if (t.identity) {  // a copy inside the resampled block: spell out its table
      t.taps = 1;
      t.index.resize(static_cast<size_t>(t.in));
      for (int64_t i = 0; i < t.in; ++i) t.index[static_cast<size_t>(i)] = i;
      t.weight.assign(static_cast<size_t>(t.in), 1.0);
      t.identity = false;
    }
    plan.axes[3 - (r - d)] = std::move(t);
  }
  return plan;
}

// ---- Resize(X, roi?, scales?, sizes?), ResizeTorch(X, sizes, scales?) ----

std::vector<OutputInfo> shape_resize(const OpContext& ctx) {
  const DType t = ctx.in(0).dtype();
  if (t != DType::Float32 && t != DType::Float64)
    ctx.fail("dtype " + dtype_name(t) + " is not supported (float32, float64)");
  return one_output(t, resize_plan(ctx, ctx.in(0).shape()).out_shape);
}

void cpu_resize(OpContext& ctx) {
  const ResizePlan plan = resize_plan(ctx, ctx.in(0).shape());
  if (ctx.out(0).numel() == 0) return;
  const ResizeGeometry g = plan.geometry();
  ORTM_DISPATCH_FLOAT(
      ctx.in(0).dtype(), ctx,
      resize_forward<scalar_t>(g, ctx.in(0).data<scalar_t>(), ctx.out(0).data<scalar_t>()));
}

// dX = ResizeGrad(dY, x_shape, the forward's inputs 1...) with the forward's attributes.
void grad_resize(GradContext& g) {
  std::vector<Value*> inputs = {g.output_grad(0), g.shape_of(g.input(0))};
  for (size_t i = 1; i < g.node().inputs.size(); ++i) inputs.push_back(g.input(i));
  Value* dx = g.emit("ResizeGrad", inputs, {{"forward", Attribute::make_string(g.node().op_type)}},
                     "ai.ortmodule");
  for (const auto& kv : g.node().attrs) dx->producer->attrs[kv.first] = kv.second;
  g.set_input_grad(0, dx);
}

// ---- ResizeGrad(dY, x_shape, forward inputs...) -> dX ----

std::vector<OutputInfo> shape_resize_grad(const OpContext& ctx) {
  const Shape x = ctx.in(1).to_int_vector();
  check_shape(ctx, x, "x_shape (input 1)");
  const ResizePlan plan = resize_plan(ctx, x);
  if (ctx.in(0).shape() != plan.out_shape)
    ctx.fail("input 0 (dY) has shape " + shape_str(ctx.in(0).shape()) + ", expected " +
             shape_str(plan.out_shape));
  return one_output(ctx.in(0).dtype(), x);
}

void cpu_resize_grad(OpContext& ctx) {
  ResizePlan plan = resize_plan(ctx, ctx.in(1).to_int_vector());
  if (ctx.out(0).numel() == 0) return;
  if (ctx.in(0).numel() == 0) {
    ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, {
      scalar_t* dx = ctx.out(0).data<scalar_t>();
      std::fill(dx, dx + ctx.out(0).numel(), scalar_t(0));
    });
    return;
  }
  plan.build_adjoint();
  const ResizeAdjointGeometry g = plan.adjoint_geometry();
  ORTM_DISPATCH_FLOAT(
      ctx.in(0).dtype(), ctx,
      resize_backward<scalar_t>(g, ctx.in(0).data<scalar_t>(), ctx.out(0).data<scalar_t>()));
}

}  // namespace ortmodule
