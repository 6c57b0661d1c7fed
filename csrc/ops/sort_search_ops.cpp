// SearchSorted(sorted_sequence, values; right) -> int64 indices: ai.ortmodule's
// torch.searchsorted and torch.bucketize. sorted_sequence [..., M] is ascending along its last
// axis; one row (rank 1) serves every value, otherwise values [..., K] shares its leading dims
// and each row searches its own. No gradient: the output is an index.
#include <cstdint>
#include <string>

#include "kernels/math/search.h"
#include "kernels/parallel.h"
#include "ops/op_utils.h"
#include "ops/ops.h"

namespace ortmodule {

std::vector<OutputInfo> shape_search_sorted(const OpContext& ctx) {
  const Tensor& seq = ctx.in(0);
  const Tensor& values = ctx.in(1);
  expect_same_dtype(ctx, 1);
  if (seq.rank() == 0) ctx.fail("input 0 (sorted_sequence) must have at least one dim");
  if (seq.rank() > 1) {
    const Shape& s = seq.shape();
    const Shape& v = values.shape();
    bool leading_match = v.size() == s.size();
    for (size_t d = 0; leading_match && d + 1 < s.size(); ++d) leading_match = s[d] == v[d];
    if (!leading_match)
      ctx.fail("input 1 (values) has shape " + shape_str(v) + "; a sorted_sequence of shape " +
               shape_str(s) + " needs values of the same leading dims");
  }
  return one_output(DType::Int64, values.shape());
}

void cpu_search_sorted(OpContext& ctx) {
  const Tensor& seq = ctx.in(0);
  const Tensor& values = ctx.in(1);
  const bool right = ctx.node.attr_int("right", 0) != 0;
  const int64_t m = seq.dim(seq.rank() - 1);
  const int64_t n = values.numel();
  // Values per row: all of them for one shared row, else the last dim of values.
  const int64_t per_row =
      seq.rank() == 1 ? n : (values.rank() > 0 ? values.dim(values.rank() - 1) : 1);
  int64_t* out = ctx.out(0).data<int64_t>();
  ORTM_DISPATCH_NUMERIC(seq.dtype(), ctx, {
    const scalar_t* s = seq.data<scalar_t>();
    const scalar_t* v = values.data<scalar_t>();
    parallel_for(0, n, 1024, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const int64_t row = per_row > 0 ? i / per_row : 0;
        out[i] = math::search_sorted(s + row * m, m, v[i], right);
      }
    });
  });
}

}  // namespace ortmodule
