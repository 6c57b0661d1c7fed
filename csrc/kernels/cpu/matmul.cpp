#include "kernels/cpu/matmul.h"

#include <cstddef>

#include "kernels/gemm.h"

namespace ortmodule {

template <typename T>
void batched_matmul(const std::vector<int64_t>& a_shape, const T* a, bool trans_a,
                    const std::vector<int64_t>& b_shape, const T* b, bool trans_b, T alpha,
                    const std::vector<int64_t>& y_shape, T* y) {
  const size_t ra = a_shape.size(), rb = b_shape.size(), ry = y_shape.size();
  const int64_t M = y_shape[ry - 2], N = y_shape[ry - 1];
  const int64_t K = trans_a ? a_shape[ra - 2] : a_shape[ra - 1];
  const int64_t lda = a_shape[ra - 1], ldb = b_shape[rb - 1];
  const int64_t a_mat = a_shape[ra - 2] * a_shape[ra - 1];
  const int64_t b_mat = b_shape[rb - 2] * b_shape[rb - 1];
  const size_t batch_rank = ry - 2;
  int64_t batches = 1;
  for (size_t i = 0; i < batch_rank; ++i) batches *= y_shape[i];
  // A batch index of y maps to a/b batch offsets through broadcast strides.
  std::vector<int64_t> sa(batch_rank, 0), sb(batch_rank, 0);
  int64_t ka = 1, kb = 1;
  for (int64_t i = static_cast<int64_t>(batch_rank) - 1; i >= 0; --i) {
    int64_t ia = i - static_cast<int64_t>(batch_rank - (ra - 2));
    int64_t ib = i - static_cast<int64_t>(batch_rank - (rb - 2));
    int64_t da = ia >= 0 ? a_shape[ia] : 1, db = ib >= 0 ? b_shape[ib] : 1;
    sa[i] = da == 1 ? 0 : ka;
    sb[i] = db == 1 ? 0 : kb;
    ka *= da;
    kb *= db;
  }
  // Batches with a broadcast b and contiguous a collapse into one big product.
  if (!trans_a && kb == 1 && ka == batches) {
    gemm<T>(false, trans_b, batches * M, N, K, alpha, a, lda, b, ldb, T(0), y, N);
    return;
  }
  for (int64_t bi = 0; bi < batches; ++bi) {
    int64_t rem = bi, oa = 0, ob = 0;
    for (int64_t d = static_cast<int64_t>(batch_rank) - 1; d >= 0; --d) {
      int64_t idx = rem % y_shape[d];
      rem /= y_shape[d];
      oa += idx * sa[d];
      ob += idx * sb[d];
    }
    gemm<T>(trans_a, trans_b, M, N, K, alpha, a + oa * a_mat, lda, b + ob * b_mat, ldb, T(0),
            y + bi * M * N, N);
  }
}

template void batched_matmul<float>(const std::vector<int64_t>&, const float*, bool,
                                    const std::vector<int64_t>&, const float*, bool, float,
                                    const std::vector<int64_t>&, float*);
template void batched_matmul<double>(const std::vector<int64_t>&, const double*, bool,
                                     const std::vector<int64_t>&, const double*, bool, double,
                                     const std::vector<int64_t>&, double*);

}  // namespace ortmodule
