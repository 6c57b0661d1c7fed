// The matrix exponential (torch.linalg.matrix_exp), over batches of row-major square matrices
// (leading dims are the batch), computed in double by scaling and squaring with Pade
// approximants (kernels/math/linalg_matrix_exp.h):
//   ai.ortmodule MatrixExp(A [..., n, n]) -> exp(A) [..., n, n].
// Its gradient rule (grad_matrix_exp) is in linalg_lu_grad_ops.cpp.
#include <algorithm>
#include <string>
#include <vector>

#include "kernels/math/linalg_matrix_exp.h"
#include "kernels/parallel.h"
#include "ops/linalg_lu_dims.h"
#include "ops/op_utils.h"
#include "ops/ops.h"

namespace ortmodule {

std::vector<OutputInfo> shape_matrix_exp(const OpContext& ctx) {
  if (!dtype_is_floating(ctx.in(0).dtype()))
    ctx.fail("input 0 must be float32 or float64, not " + dtype_name(ctx.in(0).dtype()));
  matrix_batch(ctx, 0, true);
  return {OutputInfo{ctx.in(0).dtype(), ctx.in(0).shape()}};
}

void cpu_matrix_exp(OpContext& ctx) {
  const MatrixBatch mb = matrix_batch(ctx, 0, true);
  const int64_t n = mb.n, nn = n * n;
  if (mb.batch == 0 || nn == 0) return;
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, {
    const scalar_t* a = ctx.in(0).data<scalar_t>();
    scalar_t* y = ctx.out(0).data<scalar_t>();
    parallel_for(0, mb.batch, 1, [&](int64_t b0, int64_t b1) {
      std::vector<double> x(static_cast<size_t>(nn));
      std::vector<double> work(static_cast<size_t>(math::kMatrixExpWorkMatrices * nn));
      std::vector<int32_t> piv(static_cast<size_t>(n));
      for (int64_t b = b0; b < b1; ++b) {
        std::transform(a + b * nn, a + (b + 1) * nn, x.begin(),
                       [](scalar_t v) { return static_cast<double>(v); });
        math::matrix_exp_inplace(x.data(), n, work.data(), piv.data());
        std::transform(x.begin(), x.end(), y + b * nn,
                       [](double v) { return static_cast<scalar_t>(v); });
      }
    });
  });
}

}  // namespace ortmodule
