// The op table's rows for the symmetric eigendecomposition, the SVD and the ops built on them
// (linalg_spectral_ops.cpp), and their internal gradients; op_table.cpp appends them.
#include "ops/cuda_ops.h"
#include "ops/op_table_row.h"
#include "ops/ops.h"

namespace ortmodule {
namespace op_rows {

std::vector<OpDef> linalg_spectral_rows() {
  return {
      // torch.linalg.eigh (UPLO as `lower`), the reduced SVD, pinv and matrix_rank, batched;
      // the optional tolerance tensors of the last two are read on the host.
      Row(kOwn, "Eigh", 1, shape_eigh, cpu_eigh, grad_eigh).cuda(cuda_eigh),
      Row(kOwn, "Svd", 1, shape_svd, cpu_svd, grad_svd).cuda(cuda_svd),
      Row(kOwn, "Pinv", 1, shape_pinv, cpu_pinv, grad_pinv)
          .cuda(cuda_pinv, {1, 2})
          .no_grad_inputs({1, 2}),
      Row(kOwn, "MatrixRank", 1, shape_matrix_rank, cpu_matrix_rank, nullptr)
          .cuda(cuda_matrix_rank, {1, 2})
          .not_differentiable(),
      Row(kOwn, "EighGrad", 1, shape_eigh_grad, cpu_eigh_grad, nullptr)
          .cuda(cuda_eigh_grad)
          .internal(),
      Row(kOwn, "SvdGrad", 1, shape_svd_grad, cpu_svd_grad, nullptr).cuda(cuda_svd_grad).internal(),
      Row(kOwn, "PinvGrad", 1, shape_pinv_grad, cpu_pinv_grad, nullptr)
          .cuda(cuda_pinv_grad)
          .internal(),
  };
}

}  // namespace op_rows
}  // namespace ortmodule
