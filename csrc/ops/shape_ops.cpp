// Ops that move or reinterpret data without arithmetic: Reshape, Flatten, Squeeze,
// Unsqueeze, Transpose, Concat, Constant, Shape, Gather, and their gradients.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "grad/grad_context.h"
#include "kernels/cpu/transpose.h"
#include "kernels/math/index.h"
#include "kernels/parallel.h"
#include "ops/data_movement.h"
#include "ops/op_utils.h"
#include "ops/ops.h"

namespace ortmodule {

namespace {

// Axes from the attribute (older opsets) or from input `index` (newer opsets).
std::vector<int64_t> axes_of(const OpContext& ctx, size_t index) {
  if (ctx.has_input(index)) return ctx.in(index).to_int_vector();
  return ctx.node.attr_ints("axes");
}

std::vector<OutputInfo> view_output(const OpContext& ctx, Shape shape) {
  auto out = one_output(ctx.in(0).dtype(), std::move(shape));
  out[0].alias_of = 0;
  return out;
}

}  // namespace

// ---- Reshape / Flatten / Squeeze / Unsqueeze: views ----

std::vector<OutputInfo> shape_reshape(const OpContext& ctx) {
  const Shape& in = ctx.in(0).shape();
  std::vector<int64_t> target = ctx.in(1).to_int_vector();
  bool allowzero = ctx.node.attr_int("allowzero", 0) != 0;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] < -1) {
      ctx.fail("shape input (input 1) " + shape_str(target) + " has entry " +
               std::to_string(target[i]) + " at position " + std::to_string(i) +
               "; entries must be >= -1");
    }
    if (target[i] == 0 && !allowzero) {
      if (i >= in.size())
        ctx.fail("shape entry 0 at position " + std::to_string(i) + " has no input dim to copy");
      target[i] = in[i];
    }
    if (target[i] == -1) {
      if (infer >= 0) ctx.fail("more than one -1 in target shape");
      infer = static_cast<int64_t>(i);
    } else {
      known = checked_mul(ctx, known, target[i], "shape input (input 1) " + shape_str(target));
    }
  }
  if (infer >= 0 && allowzero && known == 0) ctx.fail("-1 next to a 0 in target shape");
  if (infer >= 0) {
    if (known == 0 || ctx.in(0).numel() % known != 0) {
      ctx.fail("cannot reshape " + shape_str(in) + " to " + shape_str(ctx.in(1).to_int_vector()));
    }
    target[infer] = ctx.in(0).numel() / known;
  }
  if (shape_numel(target) != ctx.in(0).numel()) {
    ctx.fail("cannot reshape " + shape_str(in) + " (" + std::to_string(ctx.in(0).numel()) +
             " elements) to " + shape_str(target));
  }
  return view_output(ctx, target);
}

std::vector<OutputInfo> shape_flatten(const OpContext& ctx) {
  const Shape& in = ctx.in(0).shape();
  int64_t rank = static_cast<int64_t>(in.size());
  int64_t axis = ctx.node.attr_int("axis", 1);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis > rank)
    ctx.fail("attribute 'axis': axis " + std::to_string(ctx.node.attr_int("axis", 1)) +
             " is out of range for rank " + std::to_string(rank));
  return view_output(ctx, {dims_product(in, 0, axis), dims_product(in, axis, in.size())});
}

std::vector<OutputInfo> shape_squeeze(const OpContext& ctx) {
  const Shape& in = ctx.in(0).shape();
  std::vector<int64_t> axes = axes_of(ctx, 1);
  int64_t rank = static_cast<int64_t>(in.size());
  std::vector<bool> drop(in.size(), false);
  if (axes.empty()) {
    for (size_t i = 0; i < in.size(); ++i) drop[i] = in[i] == 1;
  }
  for (int64_t a : check_axes(ctx, axes, rank, "axes")) {
    if (in[a] != 1)
      ctx.fail("cannot squeeze axis " + std::to_string(a) + " of shape " + shape_str(in));
    drop[a] = true;
  }
  Shape out;
  for (size_t i = 0; i < in.size(); ++i)
    if (!drop[i]) out.push_back(in[i]);
  return view_output(ctx, out);
}

std::vector<OutputInfo> shape_unsqueeze(const OpContext& ctx) {
  const Shape& in = ctx.in(0).shape();
  std::vector<int64_t> axes = axes_of(ctx, 1);
  int64_t out_rank = static_cast<int64_t>(in.size() + axes.size());
  std::vector<bool> inserted(out_rank, false);
  for (int64_t a : check_axes(ctx, axes, out_rank, "axes")) inserted[a] = true;
  Shape out;
  size_t j = 0;
  for (int64_t i = 0; i < out_rank; ++i) out.push_back(inserted[i] ? 1 : in[j++]);
  return view_output(ctx, out);
}

void grad_reshape_like(GradContext& g) {
  g.set_input_grad(0, g.emit("Reshape", {g.output_grad(0), g.shape_of(g.input(0))}));
}

// ---- Transpose ----

std::vector<int64_t> transpose_perm(const OpContext& ctx) {
  size_t rank = ctx.in(0).rank();
  std::vector<int64_t> perm = ctx.node.attr_ints("perm");
  if (perm.empty()) {
    for (size_t i = 0; i < rank; ++i) perm.push_back(static_cast<int64_t>(rank - 1 - i));
  }
  check_perm(ctx, perm, rank, "attribute 'perm'");
  return perm;
}

std::vector<OutputInfo> shape_transpose(const OpContext& ctx) {
  std::vector<int64_t> perm = transpose_perm(ctx);
  Shape out;
  for (int64_t p : perm) out.push_back(ctx.in(0).shape()[p]);
  return one_output(ctx.in(0).dtype(), out);
}

void cpu_transpose(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  transpose(x.shape(), transpose_perm(ctx), x.raw(), ctx.out(0).raw(), dtype_size(x.dtype()));
}

void grad_transpose(GradContext& g) {
  std::vector<int64_t> perm = g.node().attr_ints("perm");
  std::vector<int64_t> inverse(perm.size(), -1);
  for (size_t i = 0; i < perm.size(); ++i) {
    if (perm[i] < 0 || perm[i] >= static_cast<int64_t>(perm.size()) || inverse[perm[i]] >= 0)
      g.fail("attribute 'perm' " + shape_str(perm) + " is not a permutation");
    inverse[perm[i]] = static_cast<int64_t>(i);
  }
  // An absent perm reverses the axes, which is its own inverse.
  if (perm.empty()) {
    g.set_input_grad(0, g.emit("Transpose", {g.output_grad(0)}));
  } else {
    g.set_input_grad(
        0, g.emit("Transpose", {g.output_grad(0)}, {{"perm", Attribute::make_ints(inverse)}}));
  }
}

// ---- Concat and its gradient ConcatGrad(dY, shape_0, ..., shape_n; axis) ----

std::vector<OutputInfo> shape_concat(const OpContext& ctx) {
  const Shape& first = ctx.in(0).shape();
  int64_t axis = check_axis(ctx, ctx.node.attr_int("axis", 0), first.size(), "attribute 'axis'");
  Shape out = first;
  out[axis] = 0;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    expect_same_dtype(ctx, i);
    const Shape& s = ctx.in(i).shape();
    if (s.size() != first.size())
      ctx.fail("input " + std::to_string(i) + " has rank " + std::to_string(s.size()) +
               ", input 0 has " + std::to_string(first.size()));
    for (size_t d = 0; d < s.size(); ++d) {
      if (static_cast<int64_t>(d) != axis && s[d] != first[d]) {
        ctx.fail("input " + std::to_string(i) + " has shape " + shape_str(s) +
                 ", incompatible with " + shape_str(first) + " outside axis " +
                 std::to_string(axis));
      }
    }
    out[axis] += s[axis];
  }
  return one_output(ctx.in(0).dtype(), out);
}

// Copies [outer, rows_i * inner] blocks between the concatenated tensor and its parts.
void concat_copy(const Shape& full, int64_t axis, const std::vector<int64_t>& sizes,
                 std::vector<char*> parts, char* whole, size_t elem, bool to_whole) {
  int64_t outer = dims_product(full, 0, axis), inner = dims_product(full, axis + 1, full.size());
  int64_t whole_row = full[axis] * inner * elem;
  int64_t offset = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    int64_t part_row = sizes[i] * inner * elem;
    if (parts[i]) {
      parallel_for(0, outer, 64, [&](int64_t o0, int64_t o1) {
        for (int64_t o = o0; o < o1; ++o) {
          char* w = whole + o * whole_row + offset;
          char* p = parts[i] + o * part_row;
          if (to_whole)
            std::memcpy(w, p, part_row);
          else
            std::memcpy(p, w, part_row);
        }
      });
    }
    offset += part_row;
  }
}

void cpu_concat(OpContext& ctx) {
  Tensor& y = ctx.out(0);
  int64_t axis = normalize_axis(ctx, ctx.node.attr_int("axis", 0), y.rank());
  std::vector<int64_t> sizes;
  std::vector<char*> parts;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    sizes.push_back(ctx.in(i).shape()[axis]);
    parts.push_back(static_cast<char*>(ctx.in(i).raw()));
  }
  concat_copy(y.shape(), axis, sizes, parts, static_cast<char*>(y.raw()), dtype_size(y.dtype()),
              true);
}

std::vector<OutputInfo> shape_concat_grad(const OpContext& ctx) {
  std::vector<OutputInfo> out;
  for (size_t i = 1; i < ctx.num_inputs(); ++i) {
    OutputInfo o;
    o.dtype = ctx.in(0).dtype();
    o.shape = ctx.in(i).to_int_vector();
    check_shape(ctx, o.shape, "shape input " + std::to_string(i));
    if (o.shape.size() != ctx.in(0).rank())
      ctx.fail("shape input " + std::to_string(i) + " " + shape_str(o.shape) +
               " does not have the rank of input 0 " + shape_str(ctx.in(0).shape()));
    out.push_back(o);
  }
  int64_t axis =
      check_axis(ctx, ctx.node.attr_int("axis", 0), ctx.in(0).rank(), "attribute 'axis'");
  int64_t total = 0;
  for (const OutputInfo& o : out) {
    for (size_t d = 0; d < o.shape.size(); ++d)
      if (static_cast<int64_t>(d) != axis && o.shape[d] != ctx.in(0).dim(d))
        ctx.fail("shape " + shape_str(o.shape) + " does not match input 0 " +
                 shape_str(ctx.in(0).shape()) + " outside axis " + std::to_string(axis));
    total += o.shape[axis];
  }
  if (total != ctx.in(0).dim(axis))
    ctx.fail("part sizes along axis " + std::to_string(axis) + " sum to " + std::to_string(total) +
             ", input 0 has " + std::to_string(ctx.in(0).dim(axis)));
  return out;
}

void cpu_concat_grad(OpContext& ctx) {
  const Tensor& dy = ctx.in(0);
  int64_t axis = normalize_axis(ctx, ctx.node.attr_int("axis", 0), dy.rank());
  std::vector<int64_t> sizes;
  std::vector<char*> parts;
  for (size_t i = 1; i < ctx.num_inputs(); ++i) {
    sizes.push_back(ctx.in(i).int_at(axis));
    parts.push_back(ctx.has_output(i - 1) ? static_cast<char*>(ctx.out(i - 1).raw()) : nullptr);
  }
  concat_copy(dy.shape(), axis, sizes, parts, static_cast<char*>(dy.raw()), dtype_size(dy.dtype()),
              false);
}

void grad_concat(GradContext& g) {
  std::vector<Value*> inputs{g.output_grad(0)};
  std::vector<bool> wanted;
  for (size_t i = 0; i < g.node().inputs.size(); ++i) {
    inputs.push_back(g.shape_of(g.input(i)));
    wanted.push_back(g.needs_grad(i));
  }
  std::vector<Value*> grads =
      g.emit_multi("ConcatGrad", inputs, wanted,
                   {{"axis", Attribute::make_int(g.node().attr_int("axis", 0))}}, "ai.ortmodule");
  for (size_t i = 0; i < grads.size(); ++i) g.set_input_grad(i, grads[i]);
}

// ---- Constant and Shape ----

std::vector<OutputInfo> shape_constant(const OpContext& ctx) {
  const Attribute* value = ctx.node.attr("value");
  OutputInfo o;
  o.alias_of = -2;
  if (value) {
    if (value->kind != Attribute::Kind::Tensor || !value->t.defined())
      ctx.fail("attribute 'value' must be a tensor");
    return {o};
  }
  if (ctx.node.attr("value_float") || ctx.node.attr("value_int") || ctx.node.attr("value_ints") ||
      ctx.node.attr("value_floats")) {
    return {o};
  }
  ctx.fail("only value, value_float(s) and value_int(s) attributes are supported");
}

void cpu_constant(OpContext& ctx) {
  const Node& n = ctx.node;
  if (const Attribute* v = n.attr("value")) {
    ctx.out(0) = v->t;
  } else if (const Attribute* f = n.attr("value_float")) {
    ctx.out(0) = Tensor::empty(DType::Float32, {});
    ctx.out(0).data<float>()[0] = static_cast<float>(f->f);
  } else if (const Attribute* i = n.attr("value_int")) {
    ctx.out(0) = Tensor::empty(DType::Int64, {});
    ctx.out(0).data<int64_t>()[0] = i->i;
  } else if (const Attribute* is = n.attr("value_ints")) {
    ctx.out(0) = Tensor::empty(DType::Int64, {static_cast<int64_t>(is->ints.size())});
    std::copy(is->ints.begin(), is->ints.end(), ctx.out(0).data<int64_t>());
  } else if (const Attribute* fs = n.attr("value_floats")) {
    ctx.out(0) = Tensor::empty(DType::Float32, {static_cast<int64_t>(fs->floats.size())});
    for (size_t k = 0; k < fs->floats.size(); ++k)
      ctx.out(0).data<float>()[k] = static_cast<float>(fs->floats[k]);
  }
}

std::vector<OutputInfo> shape_shape(const OpContext& ctx) {
  int64_t rank = static_cast<int64_t>(ctx.in(0).rank());
  int64_t start = ctx.node.attr_int("start", 0), end = ctx.node.attr_int("end", rank);
  start = std::clamp<int64_t>(start < 0 ? start + rank : start, 0, rank);
  end = std::clamp<int64_t>(end < 0 ? end + rank : end, 0, rank);
  return one_output(DType::Int64, {std::max<int64_t>(0, end - start)});
}

void cpu_shape(OpContext& ctx) {
  int64_t rank = static_cast<int64_t>(ctx.in(0).rank());
  int64_t start = ctx.node.attr_int("start", 0);
  start = std::clamp<int64_t>(start < 0 ? start + rank : start, 0, rank);
  for (int64_t i = 0; i < ctx.out(0).numel(); ++i)
    ctx.out(0).data<int64_t>()[i] = ctx.in(0).dim(start + i);
}

// ---- ConstantOfShape(shape; value): a tensor of that shape filled with value ----

std::vector<OutputInfo> shape_constant_of_shape(const OpContext& ctx) {
  const Attribute* value = ctx.node.attr("value");
  DType t = value ? value->t.dtype() : DType::Float32;
  if (value && (value->kind != Attribute::Kind::Tensor || !value->t.defined()))
    ctx.fail("attribute 'value' must be a tensor");
  if (value && value->t.numel() != 1) ctx.fail("value must hold exactly one element");
  if (ctx.in(0).rank() > 1)
    ctx.fail("shape input (input 0) must be 1-D, got " + shape_str(ctx.in(0).shape()));
  Shape shape = ctx.in(0).to_int_vector();
  check_shape(ctx, shape, "shape input (input 0)");
  return one_output(t, shape);
}

void cpu_constant_of_shape(OpContext& ctx) {
  Tensor& y = ctx.out(0);
  const Attribute* value = ctx.node.attr("value");
  const size_t elem = dtype_size(y.dtype());
  const char* fill = value ? static_cast<const char*>(value->t.raw()) : nullptr;
  char* out = static_cast<char*>(y.raw());
  if (!fill) {
    std::memset(out, 0, y.nbytes());
    return;
  }
  for (int64_t i = 0; i < y.numel(); ++i) std::memcpy(out + i * elem, fill, elem);
}

// ---- Gather (and com.microsoft GatherGrad(shape, indices, dY; axis)) ----

std::vector<OutputInfo> shape_gather(const OpContext& ctx) {
  const Shape& data = ctx.in(0).shape();
  int64_t axis = check_axis(ctx, ctx.node.attr_int("axis", 0), data.size(), "attribute 'axis'");
  Shape out(data.begin(), data.begin() + axis);
  for (int64_t d : ctx.in(1).shape()) out.push_back(d);
  out.insert(out.end(), data.begin() + axis + 1, data.end());
  return one_output(ctx.in(0).dtype(), out);
}

std::string gather_index_error(int64_t k, int64_t pos, int64_t extent) {
  return "index " + std::to_string(k) + " at position " + std::to_string(pos) +
         " is out of range for an axis of size " + std::to_string(extent);
}

namespace {
int64_t checked_index(const OpContext& ctx, const Tensor& indices, int64_t i, int64_t extent) {
  int64_t k = indices.int_at(i);
  if (!math::index_in_range(k, extent)) ctx.fail(gather_index_error(k, i, extent));
  return math::wrap_index(k, extent);
}
}  // namespace

void cpu_gather(OpContext& ctx) {
  const Tensor& data = ctx.in(0);
  const Tensor& indices = ctx.in(1);
  int64_t axis = normalize_axis(ctx, ctx.node.attr_int("axis", 0), data.rank());
  int64_t outer = dims_product(data.shape(), 0, axis), extent = data.dim(axis);
  int64_t inner = dims_product(data.shape(), axis + 1, data.rank()) * dtype_size(data.dtype());
  int64_t n_idx = indices.numel();
  std::vector<int64_t> idx(n_idx);
  for (int64_t i = 0; i < n_idx; ++i) idx[i] = checked_index(ctx, indices, i, extent);
  const char* src = static_cast<const char*>(data.raw());
  char* dst = static_cast<char*>(ctx.out(0).raw());
  parallel_for(0, outer * n_idx, 256, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      int64_t o = r / n_idx, i = r % n_idx;
      std::memcpy(dst + r * inner, src + (o * extent + idx[i]) * inner, inner);
    }
  });
}

std::vector<OutputInfo> shape_gather_grad(const OpContext& ctx) {
  Shape shape = ctx.in(0).to_int_vector();
  check_shape(ctx, shape, "shape input (input 0)");
  int64_t axis = check_axis(ctx, ctx.node.attr_int("axis", 0), shape.size(), "attribute 'axis'");
  Shape dy(shape.begin(), shape.begin() + axis);
  for (int64_t d : ctx.in(1).shape()) dy.push_back(d);
  dy.insert(dy.end(), shape.begin() + axis + 1, shape.end());
  if (ctx.in(2).shape() != dy)
    ctx.fail("input 2 (dY) has shape " + shape_str(ctx.in(2).shape()) + ", expected " +
             shape_str(dy));
  return one_output(ctx.in(2).dtype(), shape);
}

namespace {
// dX = zeros(shape); dX[.., indices[i], ..] += dY[.., i, ..]; rows equal to `skip`
// (an embedding's padding index) get no gradient.
void gather_grad(OpContext& ctx, int64_t axis_attr, int64_t skip) {
  const Tensor& indices = ctx.in(1);
  const Tensor& dy = ctx.in(2);
  Tensor& dx = ctx.out(0);
  int64_t axis = normalize_axis(ctx, axis_attr, dx.rank());
  int64_t outer = dims_product(dx.shape(), 0, axis), extent = dx.dim(axis);
  int64_t inner = dims_product(dx.shape(), axis + 1, dx.rank());
  int64_t n_idx = indices.numel();
  ORTM_DISPATCH_FLOAT(dy.dtype(), ctx, {
    scalar_t* out = dx.data<scalar_t>();
    const scalar_t* g = dy.data<scalar_t>();
    // An embedding table is large and mostly untouched: clear it on every thread.
    parallel_for(0, dx.numel(), 1 << 16,
                 [&](int64_t b, int64_t e) { std::fill(out + b, out + e, scalar_t(0)); });
    // Repeated indices accumulate. Work is split over (outer slice, block of inner
    // columns): each output element is owned by one thread and summed in index order,
    // so the result does not depend on the thread count.
    constexpr int64_t kColumnBlock = 64;
    const int64_t col_blocks = std::max<int64_t>(1, (inner + kColumnBlock - 1) / kColumnBlock);
    parallel_for(0, outer * col_blocks, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t o = t / col_blocks;
        const int64_t j0 = (t % col_blocks) * kColumnBlock;
        const int64_t j1 = std::min(inner, j0 + kColumnBlock);
        for (int64_t i = 0; i < n_idx; ++i) {
          int64_t k = checked_index(ctx, indices, i, extent);
          if (k == skip) continue;
          scalar_t* d = out + (o * extent + k) * inner;
          const scalar_t* s = g + (o * n_idx + i) * inner;
          for (int64_t j = j0; j < j1; ++j) d[j] += s[j];
        }
      }
    });
  });
}
}  // namespace

void cpu_gather_grad(OpContext& ctx) { gather_grad(ctx, ctx.node.attr_int("axis", 0), -1); }

// EmbeddingGrad(shape, indices, dY; padding_idx): GatherGrad along axis 0 that leaves
// the padding row without gradient, as torch.nn.Embedding does.
void cpu_embedding_grad(OpContext& ctx) {
  gather_grad(ctx, 0, ctx.node.attr_int("padding_idx", -1));
}

void grad_embedding(GradContext& g) {
  if (g.needs_grad(0))
    g.set_input_grad(
        0, g.emit("EmbeddingGrad", {g.shape_of(g.input(0)), g.input(1), g.output_grad(0)},
                  {{"padding_idx", Attribute::make_int(g.node().attr_int("padding_idx", -1))}},
                  "ai.ortmodule"));
}

void grad_gather(GradContext& g) {
  g.set_input_grad(
      0, g.emit("GatherGrad", {g.shape_of(g.input(0)), g.input(1), g.output_grad(0)},
                {{"axis", Attribute::make_int(g.node().attr_int("axis", 0))}}, "com.microsoft"));
}

}  // namespace ortmodule
