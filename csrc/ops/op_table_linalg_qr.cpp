// The op table's rows for the Cholesky and Householder QR family (linalg_cholesky_ops.cpp,
// linalg_qr_ops.cpp; per-matrix math in kernels/math/linalg_cholesky.h and linalg_qr.h, CUDA
// twins in backends/cuda/linalg_qr.cu); op_table.cpp appends them.
#include "ops/cuda_ops.h"
#include "ops/op_table_row.h"
#include "ops/ops.h"

namespace ortmodule {
namespace op_rows {

std::vector<OpDef> linalg_qr_rows() {
  return {
      // torch.linalg.cholesky(_ex) and torch.cholesky: L (or U with upper=1) and LAPACK's info;
      // check_errors=1 fails as torch does where a matrix is not positive definite.
      Row(kOwn, "Cholesky", 1, shape_cholesky, cpu_cholesky, grad_cholesky)
          .cuda(cuda_cholesky)
          .grad_outputs(1),
      // torch.cholesky_solve(B, F, upper), batch dims broadcast; torch.cholesky_inverse(F, upper).
      Row(kOwn, "CholeskySolve", 1, shape_cholesky_solve, cpu_cholesky_solve, grad_cholesky_solve)
          .cuda(cuda_cholesky_solve),
      Row(kOwn, "CholeskyInverse", 1, shape_cholesky_inverse, cpu_cholesky_inverse,
          grad_cholesky_inverse)
          .cuda(cuda_cholesky_inverse),
      // torch.geqrf: LAPACK's compact QR (reflectors below R, tau). Not differentiable in torch;
      // no gradient rule here either.
      Row(kOwn, "Geqrf", 1, shape_geqrf, cpu_geqrf, nullptr).cuda(cuda_geqrf),
      // torch.linalg.qr(A, mode) (and torch.qr): mode "reduced", "complete" or "r".
      Row(kOwn, "LinalgQr", 1, shape_linalg_qr, cpu_linalg_qr, grad_linalg_qr).cuda(cuda_linalg_qr),
      // torch.linalg.householder_product (orgqr) and torch.ormqr(A, tau, C, left, transpose).
      Row(kOwn, "HouseholderProduct", 1, shape_same_as_input0, cpu_householder_product,
          grad_householder_product)
          .cuda(cuda_householder_product),
      Row(kOwn, "Ormqr", 1, shape_ormqr, cpu_ormqr, grad_ormqr).cuda(cuda_ormqr),
      // Their gradients, emitted by the rules above.
      Row(kOwn, "CholeskyGrad", 1, shape_same_as_input0, cpu_cholesky_grad, nullptr)
          .cuda(cuda_cholesky_grad)
          .internal(),
      Row(kOwn, "CholeskySolveGrad", 1, shape_cholesky_solve_grad, cpu_cholesky_solve_grad, nullptr)
          .cuda(cuda_cholesky_solve_grad)
          .internal(),
      Row(kOwn, "CholeskyInverseGrad", 1, shape_cholesky_inverse_grad, cpu_cholesky_inverse_grad,
          nullptr)
          .cuda(cuda_cholesky_inverse_grad)
          .internal(),
      Row(kOwn, "QrGrad", 1, shape_qr_grad, cpu_qr_grad, nullptr).cuda(cuda_qr_grad).internal(),
      Row(kOwn, "HouseholderProductGrad", 1, shape_householder_product_grad,
          cpu_householder_product_grad, nullptr)
          .cuda(cuda_householder_product_grad)
          .internal(),
      Row(kOwn, "OrmqrGrad", 1, shape_ormqr_grad, cpu_ormqr_grad, nullptr)
          .cuda(cuda_ormqr_grad)
          .internal(),
  };
}

}  // namespace op_rows
}  // namespace ortmodule
