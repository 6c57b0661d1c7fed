#include "ops/op_utils.h"

#include <stdexcept>

namespace ortmodule {

const Tensor& OpContext::in(size_t i) const {
  if (!has_input(i)) fail("input " + std::to_string(i) + " is required but missing");
  return *inputs[i];
}

void OpContext::fail(const std::string& message) const {
  throw std::runtime_error(node.describe() + ": " + message);
}

Shape broadcast_shapes(const OpContext& ctx, const Shape& a, const Shape& b) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1) {
      ctx.fail("shapes " + shape_str(a) + " and " + shape_str(b) + " cannot be broadcast together");
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

int64_t normalize_axis(const OpContext& ctx, int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= std::max<int64_t>(rank, 1)) {
    ctx.fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  }
  return axis < 0 ? axis + rank : axis;
}

void expect_same_dtype(const OpContext& ctx, size_t k) {
  if (ctx.in(k).dtype() != ctx.in(0).dtype()) {
    ctx.fail("input " + std::to_string(k) + " has dtype " + dtype_name(ctx.in(k).dtype()) +
             " but input 0 has " + dtype_name(ctx.in(0).dtype()) + "; both must match");
  }
}

std::vector<OutputInfo> one_output(DType dtype, Shape shape) {
  OutputInfo o;
  o.dtype = dtype;
  o.shape = std::move(shape);
  return {o};
}

int64_t dims_product(const Shape& s, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t i = begin; i < end && i < s.size(); ++i) n *= s[i];
  return n;
}

}  // namespace ortmodule
