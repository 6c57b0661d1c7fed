#include "kernels/cpu/matmul.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/cpu/activation.h"
#include "kernels/cpu/bgemm.h"
#include "kernels/gemm.h"
#include "kernels/math/elementwise.h"
#include "kernels/parallel.h"

namespace ortmodule {

namespace {

// Per batch dim of `shape` (aligned to the right of a batch of rank `batch_rank`), the stride in
// matrices of an operand with batch dims `operand` (0 where it broadcasts); returns the
// operand's number of matrices.
int64_t batch_strides(const std::vector<int64_t>& shape, const std::vector<int64_t>& operand,
                      std::vector<int64_t>& strides) {
  const size_t batch_rank = shape.size(), rank = operand.size() - 2;
  strides.assign(batch_rank, 0);
  int64_t count = 1;
  for (size_t k = 0; k < batch_rank; ++k) {
    const size_t i = batch_rank - 1 - k;
    const int64_t d = k < rank ? operand[rank - 1 - k] : 1;
    strides[i] = d == 1 ? 0 : count;
    count *= d;
  }
  return count;
}

// Offsets (in matrices) of batch index `bi` of `shape` into operands with strides sa, sb.
void batch_offsets(const std::vector<int64_t>& shape, int64_t bi, const std::vector<int64_t>& sa,
                   const std::vector<int64_t>& sb, int64_t& oa, int64_t& ob) {
  oa = ob = 0;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    const int64_t idx = bi % shape[d];
    bi /= shape[d];
    oa += idx * sa[d];
    ob += idx * sb[d];
  }
}

// The GEMMs of one operand type: kernels/gemm.h's for float32 and float64 operands, the packed
// bfloat16 GEMM's (kernels/cpu/bgemm.h) for bfloat16 bits into float32.
template <typename T>
void gemm_of(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
             const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  gemm<T>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
void gemm_of(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A,
             int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  packed_bgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
template <typename T>
void gemm_batched_of(bool ta, bool tb, int64_t batch, int64_t M, int64_t N, int64_t K, T alpha,
                     const T* A, int64_t lda, int64_t sa, const T* B, int64_t ldb, int64_t sb,
                     T beta, T* C, int64_t ldc, int64_t sc) {
  gemm_batched<T>(ta, tb, batch, M, N, K, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc);
}
void gemm_batched_of(bool ta, bool tb, int64_t batch, int64_t M, int64_t N, int64_t K, float alpha,
                     const uint16_t* A, int64_t lda, int64_t sa, const uint16_t* B, int64_t ldb,
                     int64_t sb, float beta, float* C, int64_t ldc, int64_t sc) {
  packed_bgemm_batched(ta, tb, batch, M, N, K, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc);
}

int64_t product(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

}  // namespace

std::vector<int64_t> matmul_batch_shape(const std::vector<int64_t>& a_shape,
                                        const std::vector<int64_t>& b_shape) {
  const size_t ra = a_shape.size() - 2, rb = b_shape.size() - 2, r = std::max(ra, rb);
  std::vector<int64_t> batch(r, 1);
  for (size_t k = 0; k < r; ++k) {
    const int64_t da = k < ra ? a_shape[ra - 1 - k] : 1, db = k < rb ? b_shape[rb - 1 - k] : 1;
    batch[r - 1 - k] = da == 1 ? db : da;
  }
  return batch;
}

namespace {

// How batched_matmul runs a product: one GEMM over all rows (`collapse`: a contiguous a against
// a broadcast b), or `outer` batched GEMMs of `inner` matrices each, the operands `stride_a`
// and `stride_b` elements apart within one (0: broadcast) and the outer batches at the offsets
// batch_offsets gives for `outer_shape`.
struct BatchPlan {
  int64_t M, N, K, lda, ldb, a_mat, b_mat, batches;
  bool collapse = false;
  int64_t inner = 1, outer = 1, stride_a = 0, stride_b = 0;
  std::vector<int64_t> outer_shape, sa, sb;
};

BatchPlan plan_batches(const std::vector<int64_t>& a_shape, bool trans_a,
                       const std::vector<int64_t>& b_shape, const std::vector<int64_t>& y_shape) {
  BatchPlan p;
  const size_t ra = a_shape.size(), rb = b_shape.size(), ry = y_shape.size();
  p.M = y_shape[ry - 2];
  p.N = y_shape[ry - 1];
  p.K = trans_a ? a_shape[ra - 2] : a_shape[ra - 1];
  p.lda = a_shape[ra - 1];
  p.ldb = b_shape[rb - 1];
  p.a_mat = a_shape[ra - 2] * a_shape[ra - 1];
  p.b_mat = b_shape[rb - 2] * b_shape[rb - 1];
  const std::vector<int64_t> batch(y_shape.begin(), y_shape.end() - 2);
  p.batches = product(batch);
  const int64_t ka = batch_strides(batch, a_shape, p.sa);
  const int64_t kb = batch_strides(batch, b_shape, p.sb);
  // Batches with a broadcast b and contiguous a collapse into one big product.
  if (!trans_a && kb == 1 && ka == p.batches) {
    p.collapse = true;
    return p;
  }
  // The trailing batch dims over which each operand is either contiguous or broadcast run as
  // one batched GEMM (all of them for attention's [B, H, S, S] products); the leading rest, if
  // any, loops.
  size_t inner_dims = 0;
  int a_mode = 0, b_mode = 0;  // 0: not yet known, 1: broadcast (stride 0), 2: contiguous
  for (size_t k = 0; k < batch.size(); ++k) {
    const size_t d = batch.size() - 1 - k;
    if (batch[d] != 1) {
      const int am = p.sa[d] == 0 ? 1 : 2, bm = p.sb[d] == 0 ? 1 : 2;
      if ((a_mode && a_mode != am) || (b_mode && b_mode != bm)) break;
      if ((am == 2 && p.sa[d] != p.inner) || (bm == 2 && p.sb[d] != p.inner)) break;
      a_mode = am;
      b_mode = bm;
      p.inner *= batch[d];
    }
    ++inner_dims;
  }
  p.outer_shape.assign(batch.begin(), batch.end() - inner_dims);
  p.outer = product(p.outer_shape);
  p.stride_a = a_mode == 2 ? p.a_mat : 0;
  p.stride_b = b_mode == 2 ? p.b_mat : 0;
  return p;
}

// The outer batch bi's offsets (in matrices) into a and b.
void outer_offsets(const BatchPlan& p, int64_t bi, int64_t& oa, int64_t& ob) {
  oa = ob = 0;
  if (!p.outer_shape.empty()) batch_offsets(p.outer_shape, bi, p.sa, p.sb, oa, ob);
}

}  // namespace

template <typename T, typename In>
void batched_matmul(const std::vector<int64_t>& a_shape, const In* a, bool trans_a,
                    const std::vector<int64_t>& b_shape, const In* b, bool trans_b, T alpha,
                    const std::vector<int64_t>& y_shape, T* y) {
  const BatchPlan p = plan_batches(a_shape, trans_a, b_shape, y_shape);
  if (p.collapse) {
    gemm_of(false, trans_b, p.batches * p.M, p.N, p.K, alpha, a, p.lda, b, p.ldb, T(0), y, p.N);
    return;
  }
  for (int64_t bi = 0; bi < p.outer; ++bi) {
    int64_t oa, ob;
    outer_offsets(p, bi, oa, ob);
    gemm_batched_of(trans_a, trans_b, p.inner, p.M, p.N, p.K, alpha, a + oa * p.a_mat, p.lda,
                    p.stride_a, b + ob * p.b_mat, p.ldb, p.stride_b, T(0),
                    y + bi * p.inner * p.M * p.N, p.N, p.M * p.N);
  }
}

bool batched_matmul_round_bf16(const std::vector<int64_t>& a_shape, const uint16_t* a, bool trans_a,
                               const std::vector<int64_t>& b_shape, const uint16_t* b, bool trans_b,
                               float alpha, const std::vector<int64_t>& y_shape, uint16_t* y) {
  const BatchPlan p = plan_batches(a_shape, trans_a, b_shape, y_shape);
  if (p.collapse || p.inner < parallel_threads() || p.M * p.N > kRoundedProductMaxElements)
    return false;
  for (int64_t bi = 0; bi < p.outer; ++bi) {
    int64_t oa, ob;
    outer_offsets(p, bi, oa, ob);
    packed_bgemm_batched_round(trans_a, trans_b, p.inner, p.M, p.N, p.K, alpha, a + oa * p.a_mat,
                               p.lda, p.stride_a, b + ob * p.b_mat, p.ldb, p.stride_b,
                               y + bi * p.inner * p.M * p.N, p.N, p.M * p.N);
  }
  return true;
}

template <typename T, typename In>
void batched_matmul_sum(const std::vector<int64_t>& a_shape, const In* a, bool trans_a,
                        const std::vector<int64_t>& b_shape, const In* b, bool trans_b, T alpha,
                        const std::vector<int64_t>& y_shape, T* y) {
  const size_t ra = a_shape.size(), rb = b_shape.size(), ry = y_shape.size();
  const int64_t M = y_shape[ry - 2], N = y_shape[ry - 1];
  const int64_t K = trans_a ? a_shape[ra - 2] : a_shape[ra - 1];
  std::vector<int64_t> full = matmul_batch_shape(a_shape, b_shape);
  const int64_t batches = product(full);
  const int64_t kept = product(std::vector<int64_t>(y_shape.begin(), y_shape.end() - 2));
  full.push_back(M);
  full.push_back(N);
  if (kept == batches) {  // nothing to sum: y has the product's layout
    batched_matmul<T, In>(a_shape, a, trans_a, b_shape, b, trans_b, alpha, full, y);
    return;
  }
  const std::vector<int64_t> batch(full.begin(), full.end() - 2);
  // Summed over every batch of operands with the same batch dims, sum_i a_i^T b_i is one GEMM
  // of the stacked [batches * K, M]^T and [batches * K, N] matrices.
  if (kept == 1 && trans_a && !trans_b && ra == rb &&
      std::equal(a_shape.begin(), a_shape.end() - 2, b_shape.begin())) {
    gemm_of(true, false, M, N, batches * K, alpha, a, M, b, N, T(0), y, N);
    return;
  }
  // Otherwise accumulate each product into the y matrix it sums to.
  std::vector<int64_t> sa, sb, sy;
  batch_strides(batch, a_shape, sa);
  batch_strides(batch, b_shape, sb);
  batch_strides(batch, y_shape, sy);
  std::fill(y, y + kept * M * N, T(0));
  const int64_t a_mat = a_shape[ra - 2] * a_shape[ra - 1];
  const int64_t b_mat = b_shape[rb - 2] * b_shape[rb - 1];
  for (int64_t bi = 0; bi < batches; ++bi) {
    int64_t oa = 0, ob = 0, oy = 0, unused = 0;
    batch_offsets(batch, bi, sa, sb, oa, ob);
    batch_offsets(batch, bi, sy, sy, oy, unused);
    gemm_of(trans_a, trans_b, M, N, K, alpha, a + oa * a_mat, a_shape[ra - 1], b + ob * b_mat,
            b_shape[rb - 1], T(1), y + oy * M * N, N);
  }
}

namespace {

// y = act(x) over n contiguous elements; y may alias x.
template <typename T>
void activate(MatMulActivation act, int64_t n, const T* x, T* y) {
  if (act == MatMulActivation::kNone) {
    if (x != y) std::copy(x, x + n, y);
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    if (act != MatMulActivation::kRelu) {
      gelu_forward_f32(n, x, y, act == MatMulActivation::kGeluTanh);
      return;
    }
  }
  for (int64_t i = 0; i < n; ++i) y[i] = math::matmul_activate(act, x[i]);
}

}  // namespace

template <typename T, typename In>
void matmul_bias_activation(int64_t rows, int64_t N, int64_t K, const In* a, const In* b,
                            bool trans_b, T alpha, const T* bias, MatMulActivation act, T* pre,
                            T* y) {
  // One GEMM over all rows: splitting it into blocks of rows (to activate each block while it
  // is in cache) repacks the weight per block and costs more than it saves.
  T* acc = pre ? pre : y;
  gemm_of(false, trans_b, rows, N, K, alpha, a, K, b, trans_b ? K : N, T(0), acc, N);
  bias_activation(rows, N, acc, bias, act, pre, y);
}

template <typename T>
void bias_activation(int64_t rows, int64_t N, const T* x, const T* bias, MatMulActivation act,
                     T* pre, T* y) {
  T* acc = pre ? pre : y;
  // Chunks of whole rows (about 64 KiB each): the bias add and the activation of a chunk run
  // back to back while it is in cache, and the activation's call costs are paid per chunk.
  const int64_t grain =
      std::max<int64_t>(1, (int64_t{64} << 10) / sizeof(T) / std::max<int64_t>(N, 1));
  parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const T* xr = x + i * N;
      T* ar = acc + i * N;
      for (int64_t j = 0; j < N; ++j) ar[j] = xr[j] + bias[j];
    }
    if (act != MatMulActivation::kNone || acc != y)
      activate(act, (end - begin) * N, acc + begin * N, y + begin * N);
  });
}

template <typename T>
void apply_activation(MatMulActivation act, int64_t n, const T* x, T* y) {
  parallel_for(0, n, (int64_t{64} << 10) / sizeof(T), [&](int64_t begin, int64_t end) {
    activate(act, end - begin, x + begin, y + begin);
  });
}

#define ORTM_INSTANTIATE_PRODUCTS(T, In)                                                       \
  template void batched_matmul<T, In>(const std::vector<int64_t>&, const In*, bool,            \
                                      const std::vector<int64_t>&, const In*, bool, T,         \
                                      const std::vector<int64_t>&, T*);                        \
  template void batched_matmul_sum<T, In>(const std::vector<int64_t>&, const In*, bool,        \
                                          const std::vector<int64_t>&, const In*, bool, T,     \
                                          const std::vector<int64_t>&, T*);                    \
  template void matmul_bias_activation<T, In>(int64_t, int64_t, int64_t, const In*, const In*, \
                                              bool, T, const T*, MatMulActivation, T*, T*);
#define ORTM_INSTANTIATE_MATMUL(T)                                                             \
  ORTM_INSTANTIATE_PRODUCTS(T, T)                                                              \
  template void bias_activation<T>(int64_t, int64_t, const T*, const T*, MatMulActivation, T*, \
                                   T*);                                                        \
  template void apply_activation<T>(MatMulActivation, int64_t, const T*, T*);
ORTM_INSTANTIATE_MATMUL(float)
ORTM_INSTANTIATE_MATMUL(double)
ORTM_INSTANTIATE_PRODUCTS(float, uint16_t)
#undef ORTM_INSTANTIATE_PRODUCTS
#undef ORTM_INSTANTIATE_MATMUL

}  // namespace ortmodule
