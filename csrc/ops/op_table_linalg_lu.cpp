// The op table's rows for dense linear algebra by LU (linalg_lu_ops.cpp) and the matrix
// exponential, whose Pade quotient is an LU solve (linalg_matrix_exp_ops.cpp); gradients in
// linalg_lu_grad_ops.cpp. op_table.cpp appends them.
#include "ops/cuda_ops.h"
#include "ops/op_table_row.h"
#include "ops/ops.h"

namespace ortmodule {
namespace op_rows {

std::vector<OpDef> linalg_lu_rows() {
  return {
      // torch.linalg.lu_factor_ex: LU, pivots, info (only LU carries a gradient).
      Row(kOwn, "LUFactor", 1, shape_lu_factor, cpu_lu_factor, grad_lu_factor)
          .cuda(cuda_lu_factor)
          .grad_outputs(1),
      // torch.lu_unpack as L, U, P (P carries no gradient, nor do the pivots).
      Row(kOwn, "LUUnpack", 1, shape_lu_unpack, cpu_lu_unpack, grad_lu_unpack)
          .cuda(cuda_lu_unpack)
          .grad_outputs(2)
          .no_grad_inputs({1}),
      Row(kOwn, "LUUnpackGrad", 1, shape_lu_unpack_grad, cpu_lu_unpack_grad, nullptr)
          .cuda(cuda_lu_unpack_grad)
          .internal(),
      // torch.linalg.solve_triangular / triangular_solve, batch dims broadcast.
      Row(kOwn, "TriangularSolve", 1, shape_triangular_solve, cpu_triangular_solve,
          grad_triangular_solve)
          .cuda(cuda_triangular_solve),
      Row("", "Det", 11, shape_det, cpu_det, grad_det).cuda(cuda_det),
      Row(kOwn, "SlogDet", 1, shape_slog_det, cpu_slog_det, grad_slog_det).cuda(cuda_slog_det),
      // torch.linalg.matrix_exp, its gradient an exponential of a 2n x 2n block matrix.
      Row(kOwn, "MatrixExp", 1, shape_matrix_exp, cpu_matrix_exp, grad_matrix_exp)
          .cuda(cuda_matrix_exp),
  };
}

}  // namespace op_rows
}  // namespace ortmodule
