// The op table's rows for the sort- and search-based ops (sort_search_ops.cpp);
// op_table.cpp appends them.
#include "ops/cuda_ops.h"
#include "ops/op_table_row.h"
#include "ops/ops.h"

namespace ortmodule {
namespace op_rows {

std::vector<OpDef> sort_search_rows() {
  return {
      // torch.searchsorted / bucketize: insertion points in ascending rows (right: after equal
      // elements), NaN after every number; an index, so no gradient.
      Row(kOwn, "SearchSorted", 1, shape_search_sorted, cpu_search_sorted, nullptr)
          .cuda(cuda_search_sorted)
          .not_differentiable(),
  };
}

}  // namespace op_rows
}  // namespace ortmodule
