// Index ops: GatherElements/ScatterElements (per-element index along an axis) and
// GatherND/ScatterND (index tuples into leading dims), with their gradients: a
// gather's gradient scatter-adds, a scatter's gradient gathers; NonZero (the coordinates
// of the non-zero elements, no gradient).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "grad/grad_context.h"
#include "kernels/math/index.h"
#include "ops/data_movement.h"
#include "ops/op_utils.h"
#include "ops/ops.h"

namespace ortmodule {

std::string index_error(const std::string& what, int64_t idx, int64_t dim) {
  return what + " index " + std::to_string(idx) + " is out of range for size " +
         std::to_string(dim);
}

void check_element_indices(const OpContext& ctx, const Shape& data, const Shape& ishape,
                           int64_t axis) {
  if (ishape.size() != data.size())
    ctx.fail("indices have rank " + std::to_string(ishape.size()) + " but data has rank " +
             std::to_string(data.size()));
  for (size_t d = 0; d < data.size(); ++d)
    if (static_cast<int64_t>(d) != axis && ishape[d] > data[d])
      ctx.fail("indices of shape " + shape_str(ishape) + " exceed data of shape " +
               shape_str(data) + " at dim " + std::to_string(d));
}

namespace {

Shape strides_of(const Shape& s) {
  Shape st(s.size(), 1);
  for (size_t i = s.size(); i-- > 1;) st[i - 1] = st[i] * s[i];
  return st;
}

int64_t checked_index(const OpContext& ctx, int64_t idx, int64_t dim, const char* what) {
  if (!math::index_in_range(idx, dim)) ctx.fail(index_error(what, idx, dim));
  return math::wrap_index(idx, dim);
}

// For every element of `indices` (shape `ishape`): f(element i, offset into a tensor
// of shape `data` whose `axis` coordinate is indices[i], other coordinates = i's).
void for_each_element_index(const OpContext& ctx, const Shape& data, const Tensor& indices,
                            int64_t axis, const std::function<void(int64_t, int64_t)>& f) {
  const Shape& ishape = indices.shape();
  check_element_indices(ctx, data, ishape, axis);
  const Shape dst = strides_of(data);
  const int64_t n = indices.numel();
  for (int64_t i = 0; i < n; ++i) {
    int64_t rem = i, off = 0;
    for (size_t d = ishape.size(); d-- > 0;) {
      int64_t c = rem % ishape[d];
      rem /= ishape[d];
      if (static_cast<int64_t>(d) == axis) c = checked_index(ctx, indices.int_at(i), data[d], "");
      off += c * dst[d];
    }
    f(i, off);
  }
}

}  // namespace

NdIndex nd_index(const OpContext& ctx, const Shape& data, const Shape& ishape) {
  const int64_t b = ctx.node.attr_int("batch_dims", 0);
  NdIndex g;
  if (ishape.empty()) ctx.fail("indices must have rank >= 1");
  g.k = ishape.back();
  const int64_t r = static_cast<int64_t>(data.size()), q = static_cast<int64_t>(ishape.size());
  if (b < 0 || b >= q || b >= r || g.k < 1 || b + g.k > r)
    ctx.fail("indices of shape " + shape_str(ishape) + " with batch_dims=" + std::to_string(b) +
             " do not fit data of shape " + shape_str(data));
  for (int64_t d = 0; d < b; ++d) {
    if (ishape[d] != data[d])
      ctx.fail("batch dim " + std::to_string(d) + " differs between data and indices");
    g.batch *= data[d];
    g.out.push_back(data[d]);
  }
  for (int64_t d = b; d < q - 1; ++d) {
    g.tuples *= ishape[d];
    g.out.push_back(ishape[d]);
  }
  for (int64_t d = b + g.k; d < r; ++d) {
    g.slice *= data[d];
    g.out.push_back(data[d]);
  }
  g.data_batch = dims_product(data, b, data.size());
  return g;
}

namespace {

// Calls f(output slice number, data element offset of the slice).
void for_each_nd_slice(const OpContext& ctx, const Shape& data, const Tensor& indices,
                       const NdIndex& g, const std::function<void(int64_t, int64_t)>& f) {
  const int64_t b = ctx.node.attr_int("batch_dims", 0);
  const Shape st = strides_of(data);
  for (int64_t bi = 0; bi < g.batch; ++bi)
    for (int64_t t = 0; t < g.tuples; ++t) {
      const int64_t row = bi * g.tuples + t;
      int64_t off = bi * g.data_batch;
      for (int64_t j = 0; j < g.k; ++j)
        off +=
            checked_index(ctx, indices.int_at(row * g.k + j), data[b + j], "GatherND") * st[b + j];
      f(row, off);
    }
}

}  // namespace

// ---- GatherElements(data, indices; axis) ----

std::vector<OutputInfo> shape_gather_elements(const OpContext& ctx) {
  return one_output(ctx.in(0).dtype(), ctx.in(1).shape());
}

void cpu_gather_elements(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  const int64_t axis = check_axis(ctx, ctx.node.attr_int("axis", 0), x.rank(), "attribute 'axis'");
  ORTM_DISPATCH_BITS(x.dtype(), ctx, {
    const scalar_t* src = x.data<scalar_t>();
    scalar_t* dst = ctx.out(0).data<scalar_t>();
    for_each_element_index(ctx, x.shape(), ctx.in(1), axis,
                           [&](int64_t i, int64_t off) { dst[i] = src[off]; });
  });
}

// GatherElementsGrad(dY, data_shape, indices; axis): scatter-add into zeros.
std::vector<OutputInfo> shape_gather_elements_grad(const OpContext& ctx) {
  const Shape shape = ctx.in(1).to_int_vector();
  check_shape(ctx, shape, "shape input (input 1)");
  if (ctx.in(0).shape() != ctx.in(2).shape())
    ctx.fail("input 0 (dY) has shape " + shape_str(ctx.in(0).shape()) + ", indices have " +
             shape_str(ctx.in(2).shape()));
  return one_output(ctx.in(0).dtype(), shape);
}

void cpu_gather_elements_grad(OpContext& ctx) {
  const Tensor& dy = ctx.in(0);
  Tensor& dx = ctx.out(0);
  const int64_t axis = check_axis(ctx, ctx.node.attr_int("axis", 0), dx.rank(), "attribute 'axis'");
  std::memset(dx.raw(), 0, dx.nbytes());
  ORTM_DISPATCH_NUMERIC(dy.dtype(), ctx, {
    const scalar_t* src = dy.data<scalar_t>();
    scalar_t* dst = dx.data<scalar_t>();
    for_each_element_index(ctx, dx.shape(), ctx.in(2), axis,
                           [&](int64_t i, int64_t off) { dst[off] += src[i]; });
  });
}

void grad_gather_elements(GradContext& g) {
  g.set_input_grad(
      0, g.emit("GatherElementsGrad", {g.output_grad(0), g.shape_of(g.input(0)), g.input(1)},
                {{"axis", Attribute::make_int(g.node().attr_int("axis", 0))}}, "com.microsoft"));
}

// ---- ScatterElements(data, indices, updates; axis, reduction) ----

std::vector<OutputInfo> shape_scatter(const OpContext& ctx) {
  expect_same_dtype(ctx, 2);
  return one_output(ctx.in(0).dtype(), ctx.in(0).shape());
}

using math::ScatterReduction;

ScatterReduction scatter_reduction(const OpContext& ctx) {
  const std::string r = ctx.node.attr_string("reduction", "none");
  if (r == "none") return ScatterReduction::None;
  if (r == "add") return ScatterReduction::Add;
  if (r == "mul") return ScatterReduction::Mul;
  if (r == "max") return ScatterReduction::Max;
  if (r == "min") return ScatterReduction::Min;
  ctx.fail("reduction \"" + r + "\" is not one of none, add, mul, max, min");
}

void cpu_scatter_elements(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  const int64_t axis = check_axis(ctx, ctx.node.attr_int("axis", 0), x.rank(), "attribute 'axis'");
  if (ctx.in(1).shape() != ctx.in(2).shape())
    ctx.fail("indices " + shape_str(ctx.in(1).shape()) + " and updates " +
             shape_str(ctx.in(2).shape()) + " must have one shape");
  const ScatterReduction r = scatter_reduction(ctx);
  if (y.raw() != x.raw()) std::memcpy(y.raw(), x.raw(), x.nbytes());
  ORTM_DISPATCH_ALL(x.dtype(), ctx, {
    const scalar_t* upd = ctx.in(2).data<scalar_t>();
    scalar_t* dst = y.data<scalar_t>();
    for_each_element_index(ctx, x.shape(), ctx.in(1), axis, [&](int64_t i, int64_t off) {
      dst[off] = math::scatter_reduce(r, dst[off], upd[i]);
    });
  });
}

namespace {
// max / min, as eager's scatter_reduce amax/amin: each output element's gradient is shared
// evenly among the inputs equal to it, the data element and the updates alike.
void grad_scatter_extremum(GradContext& g, const char* gather_op, AttrList gather_attrs,
                           AttrList add_attrs) {
  Value* dy = g.output_grad(0);
  Value* y = g.output(0);
  Value* data_hit = g.emit("Equal", {g.input(0), y});
  Value* update_hit =
      g.emit("Equal", {g.input(2), g.emit(gather_op, {y, g.input(1)}, gather_attrs)});
  Value* count =
      g.emit(g.node().op_type,
             {g.emit("CastLike", {data_hit, dy}), g.input(1), g.emit("CastLike", {update_hit, dy})},
             add_attrs);
  Value* share = g.emit("Div", {dy, count});
  Value* zero = g.scalar_constant(0.0, dy);
  if (g.needs_grad(0)) g.set_input_grad(0, g.emit("Where", {data_hit, share, zero}));
  if (g.needs_grad(2))
    g.set_input_grad(
        2,
        g.emit("Where", {update_hit, g.emit(gather_op, {share, g.input(1)}, gather_attrs), zero}));
}

// Shared by both scatters: none -> the data gradient is dY with the scattered
// positions zeroed; add -> dY. Updates get dY gathered at their positions.
void grad_scatter(GradContext& g, const char* gather_op, AttrList attrs, AttrList add_attrs) {
  const std::string r = g.node().attr_string("reduction", "none");
  if (r == "max" || r == "min") return grad_scatter_extremum(g, gather_op, attrs, add_attrs);
  if (r != "none" && r != "add")
    g.fail("gradients through reduction=\"" + r + "\" are not supported (none, add, max, min)");
  Value* dy = g.output_grad(0);
  if (g.needs_grad(0)) {
    if (r == "add") {
      g.set_input_grad(0, dy);
    } else {
      Value* zeros = g.emit("ZerosLike", {g.input(2)}, {}, "ai.ortmodule");
      std::vector<Value*> in = {dy, g.input(1), zeros};
      Node& n = g.node();
      Value* d = g.emit(n.op_type, in, {});
      // Same attributes as the forward scatter (axis), reduction none.
      Node* emitted = d->producer;
      for (const auto& [k, v] : n.attrs) emitted->attrs[k] = v;
      g.set_input_grad(0, d);
    }
  }
  if (g.needs_grad(2)) g.set_input_grad(2, g.emit(gather_op, {dy, g.input(1)}, attrs));
}
}  // namespace

void grad_scatter_elements(GradContext& g) {
  const Attribute axis = Attribute::make_int(g.node().attr_int("axis", 0));
  grad_scatter(g, "GatherElements", {{"axis", axis}},
               {{"axis", axis}, {"reduction", Attribute::make_string("add")}});
}

// ---- GatherND(data, indices; batch_dims) ----

std::vector<OutputInfo> shape_gather_nd(const OpContext& ctx) {
  return one_output(ctx.in(0).dtype(), nd_index(ctx, ctx.in(0).shape(), ctx.in(1).shape()).out);
}

void cpu_gather_nd(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  const NdIndex g = nd_index(ctx, x.shape(), ctx.in(1).shape());
  const size_t bytes = static_cast<size_t>(g.slice) * dtype_size(x.dtype());
  const char* src = static_cast<const char*>(x.raw());
  char* dst = static_cast<char*>(ctx.out(0).raw());
  const size_t elem = dtype_size(x.dtype());
  for_each_nd_slice(ctx, x.shape(), ctx.in(1), g, [&](int64_t row, int64_t off) {
    std::memcpy(dst + row * bytes, src + off * elem, bytes);
  });
}

// GatherNDGrad(data_shape, indices, dY; batch_dims)
std::vector<OutputInfo> shape_gather_nd_grad(const OpContext& ctx) {
  const Shape shape = ctx.in(0).to_int_vector();
  check_shape(ctx, shape, "shape input (input 0)");
  const NdIndex g = nd_index(ctx, shape, ctx.in(1).shape());
  if (g.out != ctx.in(2).shape())
    ctx.fail("input 2 (dY) has shape " + shape_str(ctx.in(2).shape()) + ", expected " +
             shape_str(g.out));
  return one_output(ctx.in(2).dtype(), shape);
}

void cpu_gather_nd_grad(OpContext& ctx) {
  const Tensor& dy = ctx.in(2);
  Tensor& dx = ctx.out(0);
  const NdIndex g = nd_index(ctx, dx.shape(), ctx.in(1).shape());
  std::memset(dx.raw(), 0, dx.nbytes());
  ORTM_DISPATCH_NUMERIC(dy.dtype(), ctx, {
    const scalar_t* src = dy.data<scalar_t>();
    scalar_t* dst = dx.data<scalar_t>();
    for_each_nd_slice(ctx, dx.shape(), ctx.in(1), g, [&](int64_t row, int64_t off) {
      for (int64_t j = 0; j < g.slice; ++j) dst[off + j] += src[row * g.slice + j];
    });
  });
}

void grad_gather_nd(GradContext& g) {
  g.set_input_grad(0,
                   g.emit("GatherNDGrad", {g.shape_of(g.input(0)), g.input(1), g.output_grad(0)},
                          {{"batch_dims", Attribute::make_int(g.node().attr_int("batch_dims", 0))}},
                          "com.microsoft"));
}

// ---- ScatterND(data, indices, updates; reduction) ----

void cpu_scatter_nd(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  if (ctx.node.attr_int("batch_dims", 0) != 0) ctx.fail("ScatterND has no batch_dims");
  const NdIndex g = nd_index(ctx, x.shape(), ctx.in(1).shape());
  if (shape_numel(g.out) != ctx.in(2).numel())
    ctx.fail("updates have shape " + shape_str(ctx.in(2).shape()) + "; expected " +
             shape_str(g.out));
  const ScatterReduction r = scatter_reduction(ctx);
  if (y.raw() != x.raw()) std::memcpy(y.raw(), x.raw(), x.nbytes());
  ORTM_DISPATCH_ALL(x.dtype(), ctx, {
    const scalar_t* upd = ctx.in(2).data<scalar_t>();
    scalar_t* dst = y.data<scalar_t>();
    for_each_nd_slice(ctx, x.shape(), ctx.in(1), g, [&](int64_t row, int64_t off) {
      for (int64_t j = 0; j < g.slice; ++j)
        dst[off + j] = math::scatter_reduce(r, dst[off + j], upd[row * g.slice + j]);
    });
  });
}

void grad_scatter_nd(GradContext& g) {
  grad_scatter(g, "GatherND", {}, {{"reduction", Attribute::make_string("add")}});
}

// ---- NonZero(x) ----

// The output's width is the number of non-zero elements, known only once they are counted:
// the kernel provides the output.
std::vector<OutputInfo> shape_nonzero(const OpContext&) {
  OutputInfo from_kernel;
  from_kernel.alias_of = -2;
  return {from_kernel};
}

Tensor nonzero_indices(const OpContext& ctx, const Tensor& x) {
  const Shape& shape = x.shape();
  const int64_t rank = static_cast<int64_t>(shape.size()), n = x.numel();
  Tensor y;
  // x != 0 as numpy's truth value (onnx.reference's np.nonzero): NaN counts, -0.0 does not.
  ORTM_DISPATCH_ALL(x.dtype(), ctx, {
    const scalar_t* p = x.data<scalar_t>();
    int64_t count = 0;
    for (int64_t i = 0; i < n; ++i) count += p[i] != scalar_t(0) ? 1 : 0;
    y = Tensor::empty(DType::Int64, {rank, count});
    int64_t* out = y.data<int64_t>();
    std::vector<int64_t> coord(shape.size(), 0);  // element i's, row-major
    for (int64_t i = 0, j = 0; i < n; ++i) {
      if (p[i] != scalar_t(0)) {
        for (int64_t d = 0; d < rank; ++d) out[d * count + j] = coord[d];
        ++j;
      }
      for (int64_t d = rank - 1; d >= 0; --d) {  // on to element i + 1
        if (++coord[d] < shape[d]) break;
        coord[d] = 0;
      }
    }
  });
  return y;
}

void cpu_nonzero(OpContext& ctx) { ctx.out(0) = nonzero_indices(ctx, ctx.in(0)); }

}  // namespace ortmodule
