// Pad(data, pads, constant_value?, axes?; mode) in constant, edge, reflect and wrap
// modes, and PadGrad: every output element reads one input element (or the
// constant), so the gradient adds each output gradient into the element it read.
#include <cstdint>
#include <cstring>

#include "grad/grad_context.h"
#include "kernels/math/index.h"
#include "ops/data_movement.h"
#include "ops/op_utils.h"
#include "ops/ops.h"

namespace ortmodule {

using math::PadMode;

namespace {

// Larger pads never give a tensor that fits in memory; the bound keeps sums of a dim and
// its two pads within int64.
constexpr int64_t kMaxPad = int64_t(1) << 60;

}  // namespace

// Inputs: data (its shape given as `shape`), pads at `pads_at`, axes at pads_at + 2.
PadSpec pad_spec(const OpContext& ctx, const Shape& shape, size_t pads_at) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  PadSpec p;
  const std::string mode = ctx.node.attr_string("mode", "constant");
  if (mode == "constant") {
    p.mode = PadMode::Constant;
  } else if (mode == "edge") {
    p.mode = PadMode::Edge;
  } else if (mode == "reflect") {
    p.mode = PadMode::Reflect;
  } else if (mode == "wrap") {
    p.mode = PadMode::Wrap;
  } else {
    ctx.fail("mode \"" + mode + "\" is not a Pad mode (constant, edge, reflect, wrap)");
  }
  // Before opset 11 the pads are an attribute ("paddings" at opset 1).
  std::vector<int64_t> pads;
  if (ctx.has_input(pads_at)) {
    pads = ctx.in(pads_at).to_int_vector();
  } else if (ctx.node.has_attr("pads") || ctx.node.has_attr("paddings")) {
    pads = ctx.node.attr_ints(ctx.node.has_attr("pads") ? "pads" : "paddings");
  } else {
    ctx.fail("input 'pads' is missing");
  }
  std::vector<int64_t> axes;
  if (ctx.has_input(pads_at + 2)) {
    axes = check_axes(ctx, ctx.in(pads_at + 2).to_int_vector(), rank, "axes input");
  } else {
    for (int64_t a = 0; a < rank; ++a) axes.push_back(a);
  }
  if (pads.size() != 2 * axes.size())
    ctx.fail("pads has " + std::to_string(pads.size()) + " entries; expected 2 x " +
             std::to_string(axes.size()) + " padded axes");
  for (int64_t v : pads)
    if (v > kMaxPad || v < -kMaxPad)
      ctx.fail("pads " + shape_str(pads) + " has entry " + std::to_string(v) + ": too large");
  p.begin.assign(rank, 0);
  p.end.assign(rank, 0);
  for (size_t i = 0; i < axes.size(); ++i) {
    p.begin[axes[i]] = pads[i];
    p.end[axes[i]] = pads[i + axes.size()];
  }
  for (int64_t a = 0; a < rank; ++a) {
    if (shape[a] + p.begin[a] + p.end[a] < 0)
      ctx.fail("pads " + shape_str(pads) + " crop more than axis " + std::to_string(a) +
               " of shape " + shape_str(shape) + " holds");
    if (p.mode != PadMode::Constant && shape[a] == 0 && p.begin[a] + p.end[a] > 0)
      ctx.fail("cannot pad an empty axis in mode \"" + mode + "\"");
    if (p.mode == PadMode::Reflect && (p.begin[a] >= shape[a] || p.end[a] >= shape[a]) &&
        (p.begin[a] > 0 || p.end[a] > 0))
      ctx.fail("reflect padding of axis " + std::to_string(a) + " must be smaller than its size " +
               std::to_string(shape[a]));
  }
  return p;
}

namespace {

// Calls f(output_offset, input_offset or -1) for every output element.
template <typename F>
void for_each_padded(const Shape& in, const Shape& out, const PadSpec& p, F f) {
  const size_t rank = in.size();
  Shape in_st(rank, 1);
  for (size_t d = rank; d-- > 1;) in_st[d - 1] = in_st[d] * in[d];
  const int64_t n = shape_numel(out);
  for (int64_t o = 0; o < n; ++o)
    f(o, math::padded_source_offset(o, static_cast<int>(rank), p.mode, in.data(), out.data(),
                                    p.begin.data(), in_st.data()));
}

}  // namespace

Shape padded_shape(const Shape& in, const PadSpec& p) {
  Shape out = in;
  for (size_t d = 0; d < in.size(); ++d) out[d] += p.begin[d] + p.end[d];
  return out;
}

std::vector<uint8_t> pad_fill_bytes(const OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  if (ctx.has_input(2) && ctx.in(2).dtype() != x.dtype())
    ctx.fail("constant_value has dtype " + dtype_name(ctx.in(2).dtype()) + " but data has " +
             dtype_name(x.dtype()));
  if (ctx.has_input(2) && ctx.in(2).numel() != 1)
    ctx.fail("constant_value (input 2) must hold one value, got shape " +
             shape_str(ctx.in(2).shape()));
  // Before opset 11 the constant is the float attribute "value" (float inputs only).
  std::vector<uint8_t> fill(dtype_size(x.dtype()), 0);
  if (!ctx.has_input(2) && ctx.node.has_attr("value")) {
    ORTM_DISPATCH_FLOAT(x.dtype(), ctx, {
      const scalar_t v = static_cast<scalar_t>(ctx.node.attr_float("value", 0));
      std::memcpy(fill.data(), &v, sizeof(v));
    });
  }
  return fill;
}

std::vector<OutputInfo> shape_pad(const OpContext& ctx) {
  const Shape& in = ctx.in(0).shape();
  return one_output(ctx.in(0).dtype(), padded_shape(in, pad_spec(ctx, in, 1)));
}

void cpu_pad(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  const PadSpec p = pad_spec(ctx, x.shape(), 1);
  const std::vector<uint8_t> fill = pad_fill_bytes(ctx);
  ORTM_DISPATCH_BITS(x.dtype(), ctx, {
    scalar_t value;
    if (ctx.has_input(2))
      value = ctx.in(2).data<scalar_t>()[0];
    else
      std::memcpy(&value, fill.data(), sizeof(value));
    const scalar_t* src = x.data<scalar_t>();
    scalar_t* dst = y.data<scalar_t>();
    for_each_padded(x.shape(), y.shape(), p,
                    [&](int64_t o, int64_t i) { dst[o] = i < 0 ? value : src[i]; });
  });
}

// PadGrad(dY, input_shape, pads, axes?; mode)
std::vector<OutputInfo> shape_pad_grad(const OpContext& ctx) {
  const Shape shape = ctx.in(1).to_int_vector();
  check_shape(ctx, shape, "shape input (input 1)");
  if (padded_shape(shape, pad_spec(ctx, shape, 2)) != ctx.in(0).shape())
    ctx.fail("input 0 (dY) has shape " + shape_str(ctx.in(0).shape()) +
             ", not the padded shape of " + shape_str(shape));
  return one_output(ctx.in(0).dtype(), shape);
}

void cpu_pad_grad(OpContext& ctx) {
  const Tensor& dy = ctx.in(0);
  Tensor& dx = ctx.out(0);
  const PadSpec p = pad_spec(ctx, dx.shape(), 2);
  std::memset(dx.raw(), 0, dx.nbytes());
  ORTM_DISPATCH_FLOAT(dy.dtype(), ctx, {
    const scalar_t* src = dy.data<scalar_t>();
    scalar_t* dst = dx.data<scalar_t>();
    for_each_padded(dx.shape(), dy.shape(), p, [&](int64_t o, int64_t i) {
      if (i >= 0) dst[i] += src[o];
    });
  });
}

void grad_pad(GradContext& g) {
  if (g.needs_grad(2)) g.fail("the gradient with respect to constant_value is not supported");
  std::vector<Value*> in = {g.output_grad(0), g.shape_of(g.input(0)), g.input(1)};
  if (g.node().inputs.size() > 3) {
    in.push_back(nullptr);
    in.push_back(g.input(3));
  }
  Value* dx = g.emit("PadGrad", in,
                     {{"mode", Attribute::make_string(g.node().attr_string("mode", "constant"))}},
                     "ai.ortmodule");
  for (const char* key : {"pads", "paddings"})
    if (g.node().has_attr(key)) dx->producer->attrs[key] = *g.node().attr(key);
  g.set_input_grad(0, dx);
}

}  // namespace ortmodule
