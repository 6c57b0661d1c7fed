#include "ops/op_utils.h"

#include <algorithm>
#include <cstdint>
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

int64_t check_axis(const OpContext& ctx, int64_t axis, int64_t rank, const std::string& what) {
  if (rank < 1 || axis < -rank || axis >= rank) {
    ctx.fail(what + ": axis " + std::to_string(axis) + " is out of range for rank " +
             std::to_string(rank) + " (expected " +
             (rank < 1 ? std::string("an input of rank >= 1")
                       : "[" + std::to_string(-rank) + ", " + std::to_string(rank - 1) + "]") +
             ")");
  }
  return axis < 0 ? axis + rank : axis;
}

std::vector<int64_t> check_axes(const OpContext& ctx, const std::vector<int64_t>& axes,
                                int64_t rank, const std::string& what) {
  std::vector<int64_t> out;
  std::vector<bool> seen(static_cast<size_t>(std::max<int64_t>(rank, 0)), false);
  for (int64_t a : axes) {
    int64_t n = check_axis(ctx, a, rank, what);
    if (seen[n]) {
      ctx.fail(what + ": axis " + std::to_string(a) + " appears more than once in " +
               shape_str(axes));
    }
    seen[n] = true;
    out.push_back(n);
  }
  return out;
}

void check_perm(const OpContext& ctx, const std::vector<int64_t>& perm, size_t rank,
                const std::string& what) {
  bool ok = perm.size() == rank;
  std::vector<bool> seen(rank, false);
  for (size_t i = 0; ok && i < perm.size(); ++i) {
    ok = perm[i] >= 0 && perm[i] < static_cast<int64_t>(rank) && !seen[perm[i]];
    if (ok) seen[perm[i]] = true;
  }
  if (!ok) {
    ctx.fail(what + " " + shape_str(perm) + " is not a permutation of the " + std::to_string(rank) +
             " axes of input 0 (expected each of 0.." +
             std::to_string(static_cast<int64_t>(rank) - 1) + " exactly once)");
  }
}

void check_positive(const OpContext& ctx, const std::vector<int64_t>& values,
                    const std::string& what) {
  for (int64_t v : values)
    if (v <= 0)
      ctx.fail(what + " " + shape_str(values) + " must be positive, got " + std::to_string(v));
}

void check_non_negative(const OpContext& ctx, const std::vector<int64_t>& values,
                        const std::string& what) {
  for (int64_t v : values)
    if (v < 0)
      ctx.fail(what + " " + shape_str(values) + " must be non-negative, got " + std::to_string(v));
}

int64_t check_shape(const OpContext& ctx, const Shape& shape, const std::string& what) {
  for (int64_t d : shape)
    if (d < 0) {
      ctx.fail(what + " " + shape_str(shape) + " has negative dimension " + std::to_string(d));
    }
  int64_t n = shape_numel_checked(shape);
  if (n < 0) ctx.fail(what + " " + shape_str(shape) + " has too many elements (int64 overflow)");
  return n;
}

int64_t checked_mul(const OpContext& ctx, int64_t a, int64_t b, const std::string& what) {
  if (a < 0 || b < 0 || (a != 0 && b > INT64_MAX / a)) {
    ctx.fail(what + ": " + std::to_string(a) + " * " + std::to_string(b) +
             " is negative or too large (int64 overflow)");
  }
  return a * b;
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
