// The op table's rows for the scatters and distances whose gradient follows eager's own
// formula rather than that of the ops computing them (scatter_torch_ops.cpp); op_table.cpp appends
// them.
#include "ops/cuda_ops.h"
#include "ops/op_table_row.h"
#include "ops/ops.h"

namespace ortmodule {
namespace op_rows {

std::vector<OpDef> scatter_extra_rows() {
  return {
      // Y = input 0; the gradient of scatter_reduce(data=input 1, indices=input 2,
      // updates=input 3) with reduction prod, amax or amin, as eager's.
      Row(kOwn, "ScatterReduceTorch", 1, shape_view_of_input0, cpu_view, grad_scatter_reduce_torch)
          .cuda(cpu_view)
          .no_grad_inputs({0, 2}),
      // Y = input 0; the gradient of as_strided_scatter at flat positions (input 2), as eager's.
      Row(kOwn, "AsStridedScatterTorch", 1, shape_view_of_input0, cpu_view,
          grad_as_strided_scatter_torch)
          .cuda(cpu_view)
          .no_grad_inputs({0, 2}),
      // Y = input 0 (the max |input 1| over its last axis, kept); the gradient of cdist / pdist's
      // p = inf distance, as eager's.
      Row(kOwn, "InfNormTorch", 1, shape_view_of_input0, cpu_view, grad_inf_norm_torch)
          .cuda(cpu_view)
          .no_grad_inputs({0}),
  };
}

}  // namespace op_rows
}  // namespace ortmodule
