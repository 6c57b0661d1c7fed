// Region and layout ops: Slice, Split, Tile, Pad, Trilu, CumSum, Range, and the
// internal ops their gradients use (SliceGrad, TileGrad, PadGrad, ZerosLike).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "grad/grad_context.h"
#include "kernels/math/index.h"
#include "kernels/parallel.h"
#include "ops/data_movement.h"
#include "ops/op_utils.h"
#include "ops/ops.h"

namespace ortmodule {

Shape row_major_strides(const Shape& s) {
  Shape st(s.size(), 1);
  for (size_t i = s.size(); i-- > 1;) st[i - 1] = st[i] * s[i];
  return st;
}

namespace {

// Calls f(box_index, tensor_offset) for every element of the box, rows in parallel.
template <typename F>
void for_each_in_box(const Shape& full, const Box& box, F f) {
  const int64_t rank = static_cast<int64_t>(full.size());
  const Shape st = row_major_strides(full);
  const int64_t n = shape_numel(box.shape);
  if (n == 0) return;
  if (rank == 0) {
    f(0, 0);
    return;
  }
  const int64_t inner = box.shape[rank - 1];
  const int64_t rows = n / inner;
  parallel_for(0, rows, std::max<int64_t>(1, 16384 / inner), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      // The row's offset over the leading dims, then the last dim's start.
      int64_t off = math::box_offset(r, static_cast<int>(rank - 1), box.shape.data(),
                                     box.start.data(), box.step.data(), st.data());
      off += box.start[rank - 1] * st[rank - 1];
      const int64_t inner_step = box.step[rank - 1] * st[rank - 1];
      for (int64_t c = 0; c < inner; ++c) f(r * inner + c, off + c * inner_step);
    }
  });
}

}  // namespace

// The box Slice(data, starts, ends, axes?, steps?) selects (ONNX clamping rules).
// Inputs start at `first` (1 for Slice, 2 for SliceGrad). Before opset 10 starts, ends and
// axes are attributes (and there are no steps).
Box slice_box(const OpContext& ctx, const Shape& data, size_t first) {
  const int64_t rank = static_cast<int64_t>(data.size());
  const bool from_attrs = !ctx.has_input(first) && ctx.node.has_attr("starts");
  if (!from_attrs && !ctx.has_input(first)) ctx.fail("input 'starts' is missing");
  std::vector<int64_t> starts =
      from_attrs ? ctx.node.attr_ints("starts") : ctx.in(first).to_int_vector();
  if (from_attrs && !ctx.node.has_attr("ends")) ctx.fail("attribute 'ends' is missing");
  std::vector<int64_t> ends =
      from_attrs ? ctx.node.attr_ints("ends") : ctx.in(first + 1).to_int_vector();
  std::vector<int64_t> axes, steps;
  if (from_attrs && ctx.node.has_attr("axes")) {
    axes = ctx.node.attr_ints("axes");
  } else if (!from_attrs && ctx.has_input(first + 2)) {
    axes = ctx.in(first + 2).to_int_vector();
  } else {
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  }
  steps = !from_attrs && ctx.has_input(first + 3) ? ctx.in(first + 3).to_int_vector()
                                                  : std::vector<int64_t>(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() ||
      steps.size() != starts.size()) {
    ctx.fail("starts, ends, axes and steps must have one entry per sliced axis (got " +
             std::to_string(starts.size()) + ", " + std::to_string(ends.size()) + ", " +
             std::to_string(axes.size()) + ", " + std::to_string(steps.size()) + ")");
  }
  Box box{data, std::vector<int64_t>(rank, 0), std::vector<int64_t>(rank, 1)};
  std::vector<bool> seen(rank, false);
  for (size_t i = 0; i < axes.size(); ++i) {
    const int64_t a = check_axis(ctx, axes[i], rank, "axes input");
    if (seen[a]) ctx.fail("axis " + std::to_string(a) + " is sliced twice");
    seen[a] = true;
    const int64_t dim = data[a];
    if (steps[i] == 0) ctx.fail("step 0 on axis " + std::to_string(a));
    // |step| beyond the dim selects one element either way; keeps -step representable.
    const int64_t step = std::clamp<int64_t>(steps[i], -INT64_MAX, INT64_MAX);
    int64_t s = starts[i], e = ends[i];
    if (s < 0) s += dim;
    if (e < 0) e += dim;
    if (step > 0) {
      s = std::clamp<int64_t>(s, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
    } else {
      s = std::clamp<int64_t>(s, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
    }
    int64_t count =
        step > 0 ? (e > s ? (e - s - 1) / step + 1 : 0) : (s > e ? (s - e - 1) / (-step) + 1 : 0);
    box.shape[a] = count;
    box.start[a] = s;
    box.step[a] = step;
  }
  return box;
}

// ---- ZerosLike(x): internal, zeros of x's dtype and shape ----

std::vector<OutputInfo> shape_zeros_like(const OpContext& ctx) {
  return one_output(ctx.in(0).dtype(), ctx.in(0).shape());
}
void cpu_zeros_like(OpContext& ctx) { std::memset(ctx.out(0).raw(), 0, ctx.out(0).nbytes()); }

// ---- Slice(data, starts, ends, axes?, steps?) and SliceGrad(dY, shape, starts, ...) ----

std::vector<OutputInfo> shape_slice(const OpContext& ctx) {
  return one_output(ctx.in(0).dtype(), slice_box(ctx, ctx.in(0).shape(), 1).shape);
}

void cpu_slice(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  const Box box = slice_box(ctx, x.shape(), 1);
  ORTM_DISPATCH_BITS(x.dtype(), ctx, {
    const scalar_t* src = x.data<scalar_t>();
    scalar_t* dst = y.data<scalar_t>();
    for_each_in_box(x.shape(), box, [&](int64_t i, int64_t off) { dst[i] = src[off]; });
  });
}

std::vector<OutputInfo> shape_slice_grad(const OpContext& ctx) {
  const Shape shape = ctx.in(1).to_int_vector();
  check_shape(ctx, shape, "shape input (input 1)");
  if (slice_box(ctx, shape, 2).shape != ctx.in(0).shape())
    ctx.fail("input 0 (dY) has shape " + shape_str(ctx.in(0).shape()) +
             ", not the shape of the slice of " + shape_str(shape));
  return one_output(ctx.in(0).dtype(), shape);
}

void cpu_slice_grad(OpContext& ctx) {
  const Tensor& dy = ctx.in(0);
  Tensor& dx = ctx.out(0);
  const Box box = slice_box(ctx, dx.shape(), 2);
  std::memset(dx.raw(), 0, dx.nbytes());
  // Slices never select an element twice, so the scatter writes each target once.
  ORTM_DISPATCH_NUMERIC(dy.dtype(), ctx, {
    const scalar_t* src = dy.data<scalar_t>();
    scalar_t* dst = dx.data<scalar_t>();
    for_each_in_box(dx.shape(), box, [&](int64_t i, int64_t off) { dst[off] = src[i]; });
  });
}

void grad_slice(GradContext& g) {
  std::vector<Value*> in = {g.output_grad(0), g.shape_of(g.input(0))};
  for (size_t i = 1; i < g.node().inputs.size(); ++i) in.push_back(g.input(i));
  Value* dx = g.emit("SliceGrad", in, {}, "ai.ortmodule");
  // Before opset 10 the slice is given by attributes; SliceGrad reads them the same way.
  for (const char* key : {"starts", "ends", "axes"})
    if (g.node().has_attr(key)) dx->producer->attrs[key] = *g.node().attr(key);
  g.set_input_grad(0, dx);
}

// ---- Split(input, split?; axis, num_outputs) ----

std::vector<int64_t> split_sizes(const OpContext& ctx) {
  const Shape& s = ctx.in(0).shape();
  const int64_t axis = check_axis(ctx, ctx.node.attr_int("axis", 0), s.size(), "attribute 'axis'");
  const int64_t n = static_cast<int64_t>(ctx.node.outputs.size());
  if (n < 1) ctx.fail("has no outputs");
  std::vector<int64_t> sizes;
  if (ctx.has_input(1)) {
    sizes = ctx.in(1).to_int_vector();
  } else if (ctx.node.has_attr("split")) {
    sizes = ctx.node.attr_ints("split");
  } else {
    // Equal parts; with opset 18 the last may be smaller.
    const int64_t part = (s[axis] + n - 1) / n;
    for (int64_t i = 0; i < n; ++i)
      sizes.push_back(std::max<int64_t>(0, std::min(part, s[axis] - i * part)));
  }
  int64_t total = 0;
  for (int64_t v : sizes) {
    if (v < 0 || v > s[axis])
      ctx.fail("split size " + std::to_string(v) + " in " + shape_str(sizes) +
               " is negative or larger than axis " + std::to_string(axis) + " of shape " +
               shape_str(s));
    total += v;
  }
  if (static_cast<int64_t>(sizes.size()) != n || total != s[axis]) {
    ctx.fail("split sizes " + shape_str(sizes) + " do not divide axis " + std::to_string(axis) +
             " of shape " + shape_str(s) + " into " + std::to_string(n) + " outputs");
  }
  return sizes;
}

std::vector<OutputInfo> shape_split(const OpContext& ctx) {
  const Shape& s = ctx.in(0).shape();
  const int64_t axis = check_axis(ctx, ctx.node.attr_int("axis", 0), s.size(), "attribute 'axis'");
  std::vector<OutputInfo> out;
  for (int64_t size : split_sizes(ctx)) {
    OutputInfo o;
    o.dtype = ctx.in(0).dtype();
    o.shape = s;
    o.shape[axis] = size;
    out.push_back(o);
  }
  return out;
}

void cpu_split(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  const int64_t axis = normalize_axis(ctx, ctx.node.attr_int("axis", 0), x.rank());
  std::vector<char*> parts;
  for (size_t i = 0; i < ctx.outputs.size(); ++i)
    parts.push_back(ctx.has_output(i) ? static_cast<char*>(ctx.out(i).raw()) : nullptr);
  concat_copy(x.shape(), axis, split_sizes(ctx), parts, static_cast<char*>(x.raw()),
              dtype_size(x.dtype()), false);
}

void grad_split(GradContext& g) {
  std::vector<Value*> parts;
  for (size_t i = 0; i < g.node().outputs.size(); ++i) {
    Value* d = g.output_grad(i);
    parts.push_back(d ? d
                      : g.emit("ZerosLike", {g.forward_output(i, "split")}, {}, "ai.ortmodule"));
  }
  g.set_input_grad(
      0, g.emit("Concat", parts, {{"axis", Attribute::make_int(g.node().attr_int("axis", 0))}}));
}

// ---- Range(start, limit, delta) ----

std::vector<OutputInfo> shape_range(const OpContext& ctx) {
  expect_same_dtype(ctx, 1);
  expect_same_dtype(ctx, 2);
  for (size_t i = 0; i < 3; ++i)
    if (ctx.in(i).numel() != 1)
      ctx.fail("input " + std::to_string(i) + " must be a scalar, got shape " +
               shape_str(ctx.in(i).shape()));
  const double start = ctx.in(0).float_at(0), limit = ctx.in(1).float_at(0);
  const double delta = ctx.in(2).float_at(0);
  if (delta == 0) ctx.fail("delta is 0");
  const double count = std::ceil((limit - start) / delta);
  if (std::isnan(count))
    ctx.fail("start " + std::to_string(start) + ", limit " + std::to_string(limit) + " and delta " +
             std::to_string(delta) + " give no element count (NaN)");
  if (count > static_cast<double>(INT64_MAX / 16))
    ctx.fail("start " + std::to_string(start) + ", limit " + std::to_string(limit) + " and delta " +
             std::to_string(delta) + " give " + std::to_string(count) + " elements: too large");
  // A negative count (limit behind start) is an empty range; convert only what fits.
  const int64_t n = count <= 0 ? 0 : static_cast<int64_t>(count);
  return one_output(ctx.in(0).dtype(), {n});
}

void cpu_range(OpContext& ctx) {
  Tensor& y = ctx.out(0);
  ORTM_DISPATCH_NUMERIC(y.dtype(), ctx, {
    const scalar_t start = ctx.in(0).data<scalar_t>()[0];
    const scalar_t delta = ctx.in(2).data<scalar_t>()[0];
    scalar_t* p = y.data<scalar_t>();
    for (int64_t i = 0; i < y.numel(); ++i) {
      if constexpr (std::is_integral_v<scalar_t>) {
        // Wraps like the hardware instead of overflowing (undefined for signed types).
        p[i] = static_cast<scalar_t>(static_cast<uint64_t>(start) +
                                     static_cast<uint64_t>(i) * static_cast<uint64_t>(delta));
      } else {
        p[i] = static_cast<scalar_t>(start + static_cast<scalar_t>(i) * delta);
      }
    }
  });
}

// ---- Tile(input, repeats) and TileGrad(dY, input_shape) ----

std::vector<OutputInfo> shape_tile(const OpContext& ctx) {
  const Shape& s = ctx.in(0).shape();
  std::vector<int64_t> reps = ctx.in(1).to_int_vector();
  if (reps.size() != s.size())
    ctx.fail("repeats has " + std::to_string(reps.size()) + " entries for rank " +
             std::to_string(s.size()));
  Shape out = s;
  for (size_t i = 0; i < s.size(); ++i) {
    if (reps[i] < 0)
      ctx.fail("repeats input (input 1) " + shape_str(reps) + " has negative repeat " +
               std::to_string(reps[i]));
    out[i] = checked_mul(ctx, out[i], reps[i], "repeats input (input 1)");
  }
  return one_output(ctx.in(0).dtype(), out);
}

namespace {
// Offset in the tiled-from tensor of every element of the tiled tensor.
template <typename F>
void for_each_tiled(const Shape& small, const Shape& big, F f) {
  const Shape st = row_major_strides(small);
  const int64_t n = shape_numel(big);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t off =
        math::tiled_offset(i, static_cast<int>(big.size()), big.data(), small.data(), st.data());
    f(i, off);
  }
}
}  // namespace

void cpu_tile(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  ORTM_DISPATCH_BITS(x.dtype(), ctx, {
    const scalar_t* src = x.data<scalar_t>();
    scalar_t* dst = y.data<scalar_t>();
    for_each_tiled(x.shape(), y.shape(), [&](int64_t i, int64_t off) { dst[i] = src[off]; });
  });
}

std::vector<OutputInfo> shape_tile_grad(const OpContext& ctx) {
  const Shape shape = ctx.in(1).to_int_vector();
  check_shape(ctx, shape, "shape input (input 1)");
  const Shape& dy = ctx.in(0).shape();
  bool ok = dy.size() == shape.size();
  for (size_t d = 0; ok && d < dy.size(); ++d)
    ok = shape[d] > 0 ? dy[d] % shape[d] == 0 : dy[d] == 0;
  if (!ok)
    ctx.fail("input 0 (dY) of shape " + shape_str(dy) + " is not a tiling of " + shape_str(shape));
  return one_output(ctx.in(0).dtype(), shape);
}

void cpu_tile_grad(OpContext& ctx) {
  const Tensor& dy = ctx.in(0);
  Tensor& dx = ctx.out(0);
  std::memset(dx.raw(), 0, dx.nbytes());
  ORTM_DISPATCH_NUMERIC(dy.dtype(), ctx, {
    const scalar_t* src = dy.data<scalar_t>();
    scalar_t* dst = dx.data<scalar_t>();
    for_each_tiled(dx.shape(), dy.shape(), [&](int64_t i, int64_t off) { dst[off] += src[i]; });
  });
}

void grad_tile(GradContext& g) {
  g.set_input_grad(
      0, g.emit("TileGrad", {g.output_grad(0), g.shape_of(g.input(0))}, {}, "ai.ortmodule"));
}

// ---- Trilu(input, k?; upper) ----

int64_t trilu_offset(const OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  if (x.rank() < 2) ctx.fail("input has rank " + std::to_string(x.rank()) + "; expected >= 2");
  if (ctx.has_input(1) && ctx.in(1).numel() != 1)
    ctx.fail("k (input 1) must hold one value, got shape " + shape_str(ctx.in(1).shape()));
  return ctx.has_input(1) ? ctx.in(1).int_at(0) : 0;
}

void cpu_trilu(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  const int64_t k = trilu_offset(ctx);
  const bool upper = ctx.node.attr_int("upper", 1) != 0;
  const int64_t rows = x.dim(x.rank() - 2), cols = x.dim(x.rank() - 1);
  const int64_t mats = (rows != 0 && cols != 0) ? x.numel() / (rows * cols) : 0;
  ORTM_DISPATCH_BITS(x.dtype(), ctx, {
    const scalar_t* src = x.data<scalar_t>();
    scalar_t* dst = y.data<scalar_t>();
    for (int64_t m = 0; m < mats; ++m)
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) {
          const int64_t o = (m * rows + i) * cols + j;
          dst[o] = math::trilu_keeps(i, j, k, upper) ? src[o] : scalar_t(0);
        }
  });
}

void grad_trilu(GradContext& g) {
  std::vector<Value*> in = {g.output_grad(0)};
  if (g.node().inputs.size() > 1) in.push_back(g.input(1));
  g.set_input_grad(
      0, g.emit("Trilu", in, {{"upper", Attribute::make_int(g.node().attr_int("upper", 1))}}));
}

// ---- CumSum(x, axis; exclusive, reverse) ----

int64_t cumsum_axis(const OpContext& ctx) {
  if (ctx.in(1).numel() != 1)
    ctx.fail("axis input (input 1) must hold one value, got shape " + shape_str(ctx.in(1).shape()));
  return check_axis(ctx, ctx.in(1).int_at(0), ctx.in(0).rank(), "axis input (input 1)");
}

void cpu_cumsum(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  const int64_t axis = cumsum_axis(ctx);
  const bool exclusive = ctx.node.attr_int("exclusive", 0) != 0;
  const bool reverse = ctx.node.attr_int("reverse", 0) != 0;
  const int64_t outer = dims_product(x.shape(), 0, axis), len = x.dim(axis);
  const int64_t inner = dims_product(x.shape(), axis + 1, x.rank());
  ORTM_DISPATCH_NUMERIC(x.dtype(), ctx, {
    const scalar_t* src = x.data<scalar_t>();
    scalar_t* dst = y.data<scalar_t>();
    parallel_for(0, outer * inner, 256, [&](int64_t b, int64_t e) {
      for (int64_t oi = b; oi < e; ++oi) {
        const int64_t base = (oi / inner) * len * inner + oi % inner;
        math::cumsum_line(src + base, dst + base, len, inner, exclusive, reverse);
      }
    });
  });
}

void grad_cumsum(GradContext& g) {
  const int64_t reverse = g.node().attr_int("reverse", 0);
  g.set_input_grad(0, g.emit("CumSum", {g.output_grad(0), g.input(1)},
                             {{"exclusive", Attribute::make_int(g.node().attr_int("exclusive", 0))},
                              {"reverse", Attribute::make_int(1 - reverse)}}));
}

}  // namespace ortmodule
