// The Cholesky and Householder QR ops' per-matrix functors (kernels/math/linalg_cholesky.h,
// linalg_qr.h) filled from a node's tensors and attributes: shared by the CPU kernels
// (linalg_cholesky_ops.cpp, linalg_qr_ops.cpp) and their CUDA twins (backends/cuda/linalg_qr.cu),
// which differ only in how they run a functor over the batch. Internal to csrc/ops and the
// CUDA backend.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/math/linalg_cholesky.h"
#include "kernels/math/linalg_qr.h"
#include "kernels/parallel.h"
#include "ops/op_utils.h"

namespace ortmodule {
namespace linalg {

// The number of matrices in x ([..., rows, cols]); x must have rank >= 2.
inline int64_t batch_of(const OpContext& ctx, const Tensor& x, const char* what) {
  if (x.rank() < 2)
    ctx.fail(std::string(what) + " must have at least 2 dims, not " + shape_str(x.shape()));
  return dims_product(x.shape(), 0, x.rank() - 2);
}
inline int64_t rows(const Tensor& x) { return x.dim(x.rank() - 2); }
inline int64_t cols(const Tensor& x) { return x.dim(x.rank() - 1); }
inline int64_t square(const OpContext& ctx, const Tensor& x, const char* what) {
  batch_of(ctx, x, what);
  if (rows(x) != cols(x))
    ctx.fail(std::string(what) + " must be batches of square matrices, not " +
             shape_str(x.shape()));
  return cols(x);
}
inline bool upper(const OpContext& ctx) { return ctx.node.attr_int("upper", 0) != 0; }

// Maps the output's batch (out, of `out_rank` dims) to the batches of two inputs (leading
// dims of a and b, aligned at the right).
inline math::BatchBroadcast batch_broadcast(const OpContext& ctx, const Shape& out, const Shape& a,
                                            const Shape& b) {
  math::BatchBroadcast bc;
  const Shape* ins[2] = {&a, &b};
  const size_t rank = out.size() - 2;
  if (rank > static_cast<size_t>(math::BatchBroadcast::kMaxRank))
    ctx.fail("at most 8 batch dims are supported, not " + std::to_string(rank));
  bc.rank = static_cast<int>(rank);
  for (size_t d = 0; d < rank; ++d) bc.dims[d] = out[d];
  for (int w = 0; w < 2; ++w) {
    const Shape& s = *ins[w];
    const size_t r = s.size() - 2;
    int64_t stride = 1;
    for (size_t d = rank; d-- > 0;) {
      const size_t back = rank - d;  // 1 for the innermost batch dim
      if (back > r) {
        bc.stride[w][d] = 0;
        continue;
      }
      const int64_t dim = s[r - back];
      bc.stride[w][d] = dim == 1 ? 0 : stride;
      stride *= dim;
    }
  }
  return bc;
}

// Runs f(b, workspace) for every matrix b < batch on the CPU threads.
template <typename F>
void run_cpu(int64_t batch, const F& f) {
  parallel_for(0, batch, 1, [&](int64_t begin, int64_t end) {
    std::vector<double> work(static_cast<size_t>(f.work > 0 ? f.work : 1));
    for (int64_t b = begin; b < end; ++b) f(b, work.data());
  });
}

// Cholesky with check_errors: fails as torch.linalg.cholesky does for the first matrix whose
// info (host memory) is not 0.
inline void check_cholesky_info(const OpContext& ctx, const int32_t* info, int64_t batch) {
  for (int64_t b = 0; b < batch; ++b)
    if (info[b] > 0)
      ctx.fail((batch > 1 ? "(Batch element " + std::to_string(b) + "): " : std::string()) +
               "The factorization could not be completed because the input is not "
               "positive-definite (the leading minor of order " +
               std::to_string(info[b]) + " is not positive-definite).");
}

template <typename T>
T* optional_out(OpContext& ctx, size_t i) {
  return ctx.has_output(i) ? ctx.out(i).data<T>() : nullptr;
}
template <typename T>
const T* optional_in(const OpContext& ctx, size_t i) {
  return ctx.has_input(i) ? ctx.in(i).data<T>() : nullptr;
}

template <typename T>
math::CholeskyFn<T> cholesky_fn(OpContext& ctx) {
  const Tensor& a = ctx.in(0);
  const int64_t n = square(ctx, a, "input 0 (A)");
  return {a.data<T>(), ctx.out(0).data<T>(), ctx.out(1).data<int32_t>(), n, upper(ctx), n * n};
}
template <typename T>
math::CholeskyGradFn<T> cholesky_grad_fn(OpContext& ctx) {
  const int64_t n = square(ctx, ctx.in(0), "input 0 (L)");
  return {ctx.in(0).data<T>(), ctx.in(1).data<T>(), ctx.out(0).data<T>(), n, upper(ctx), 3 * n * n};
}
template <typename T>
math::CholeskySolveFn<T> cholesky_solve_fn(OpContext& ctx) {
  const Tensor& b = ctx.in(0);
  const Tensor& f = ctx.in(1);
  const int64_t n = square(ctx, f, "input 1 (the factor)");
  const int64_t r = cols(b);
  return {b.data<T>(),
          f.data<T>(),
          ctx.out(0).data<T>(),
          n,
          r,
          upper(ctx),
          batch_broadcast(ctx, ctx.out(0).shape(), b.shape(), f.shape()),
          n * n + n * r};
}
template <typename T>
math::CholeskySolveGradFn<T> cholesky_solve_grad_fn(OpContext& ctx) {
  const Tensor& gx = ctx.in(0);
  const Tensor& f = ctx.in(1);
  const int64_t n = square(ctx, f, "input 1 (the factor)");
  const int64_t r = cols(gx);
  return {gx.data<T>(),
          f.data<T>(),
          ctx.in(2).data<T>(),
          optional_out<T>(ctx, 0),
          optional_out<T>(ctx, 1),
          n,
          r,
          upper(ctx),
          batch_broadcast(ctx, gx.shape(), gx.shape(), f.shape()),
          2 * n * n + n * r};
}
template <typename T>
math::CholeskyInverseFn<T> cholesky_inverse_fn(OpContext& ctx) {
  const int64_t n = square(ctx, ctx.in(0), "input 0 (the factor)");
  return {ctx.in(0).data<T>(), ctx.out(0).data<T>(), n, upper(ctx), 2 * n * n};
}
template <typename T>
math::CholeskyInverseGradFn<T> cholesky_inverse_grad_fn(OpContext& ctx) {
  const int64_t n = square(ctx, ctx.in(1), "input 1 (the factor)");
  return {ctx.in(0).data<T>(),
          ctx.in(1).data<T>(),
          ctx.in(2).data<T>(),
          ctx.out(0).data<T>(),
          n,
          upper(ctx),
          2 * n * n};
}

template <typename T>
math::GeqrfFn<T> geqrf_fn(OpContext& ctx) {
  const Tensor& a = ctx.in(0);
  batch_of(ctx, a, "input 0 (A)");
  const int64_t m = rows(a), n = cols(a), k = m < n ? m : n;
  return {a.data<T>(), ctx.out(0).data<T>(), ctx.out(1).data<T>(), m, n, k, m * n + k};
}
// LinalgQr's attribute mode: "reduced" (default), "complete" or "r".
inline std::string qr_mode(const OpContext& ctx) {
  const std::string mode = ctx.node.attr_string("mode", "reduced");
  if (mode != "reduced" && mode != "complete" && mode != "r")
    ctx.fail("attribute 'mode' must be 'reduced', 'complete' or 'r', not '" + mode + "'");
  return mode;
}
template <typename T>
math::QrFn<T> qr_fn(OpContext& ctx) {
  const Tensor& a = ctx.in(0);
  batch_of(ctx, a, "input 0 (A)");
  const std::string mode = qr_mode(ctx);
  const int64_t m = rows(a), n = cols(a), k = m < n ? m : n;
  const int64_t qc = mode == "complete" ? m : k, rr = mode == "complete" ? m : k;
  T* q = mode == "r" ? nullptr : ctx.out(0).data<T>();
  return {a.data<T>(), q, ctx.out(1).data<T>(), m, n, k, qc, rr, m * n + k + m * qc};
}
template <typename T>
math::QrGradFn<T> qr_grad_fn(OpContext& ctx) {
  const Tensor& q = ctx.in(0);
  const Tensor& r = ctx.in(1);
  const int64_t m = rows(q), k = cols(q), n = cols(r);
  if (ctx.node.attr_string("mode", "reduced") == "complete" && m > n)
    ctx.fail("The QR decomposition is not differentiable when mode='complete' and nrows > ncols");
  if (rows(r) != k || k != (m < n ? m : n))
    ctx.fail("Q " + shape_str(q.shape()) + " and R " + shape_str(r.shape()) +
             " are not the factors of a reduced QR decomposition");
  return {q.data<T>(),
          r.data<T>(),
          optional_in<T>(ctx, 2),
          optional_in<T>(ctx, 3),
          ctx.out(0).data<T>(),
          m,
          n,
          k,
          2 * m * k + 2 * k * k + m * (n - k)};
}
// HouseholderProduct(V [m, n], tau [k]): k <= n <= m, as torch checks.
inline void check_householder(const OpContext& ctx, const Tensor& v, const Tensor& tau) {
  batch_of(ctx, v, "input 0 (V)");
  const int64_t m = rows(v), n = cols(v), k = tau.rank() ? tau.dim(tau.rank() - 1) : 0;
  expect_same_dtype(ctx, 1);
  if (tau.rank() + 1 != v.rank() || n > m || k > n ||
      tau.numel() != batch_of(ctx, v, "input 0 (V)") * k)
    ctx.fail("V " + shape_str(v.shape()) + " and tau " + shape_str(tau.shape()) +
             " must be [..., m, n] and [..., k] with k <= n <= m");
}
template <typename T>
math::HouseholderProductFn<T> householder_product_fn(OpContext& ctx) {
  const Tensor& v = ctx.in(0);
  const Tensor& tau = ctx.in(1);
  check_householder(ctx, v, tau);
  const int64_t m = rows(v), n = cols(v), k = tau.dim(tau.rank() - 1);
  return {v.data<T>(), tau.data<T>(), ctx.out(0).data<T>(), m, n, k, m * n};
}
template <typename T>
math::HouseholderProductGradFn<T> householder_product_grad_fn(OpContext& ctx) {
  const Tensor& v = ctx.in(0);
  const Tensor& tau = ctx.in(1);
  check_householder(ctx, v, tau);
  const int64_t m = rows(v), n = cols(v), k = tau.dim(tau.rank() - 1);
  return {v.data<T>(),
          tau.data<T>(),
          ctx.in(2).data<T>(),
          optional_out<T>(ctx, 0),
          optional_out<T>(ctx, 1),
          m,
          n,
          k,
          (k + 1) * m * n + m + 2 * n};
}
inline bool ormqr_left(const OpContext& ctx) { return ctx.node.attr_int("left", 1) != 0; }
inline bool ormqr_transpose(const OpContext& ctx) { return ctx.node.attr_int("transpose", 0) != 0; }
// Ormqr(A [mq, ka], tau [k], C [m, c]): mq = m (left) or c (right), k <= ka, k <= mq.
inline void check_ormqr(const OpContext& ctx, const Tensor& a, const Tensor& tau, const Tensor& c) {
  batch_of(ctx, a, "input 0 (A)");
  batch_of(ctx, c, "input 2 (C)");
  expect_same_dtype(ctx, 1);
  expect_same_dtype(ctx, 2);
  const int64_t mq = ormqr_left(ctx) ? rows(c) : cols(c);
  const int64_t k = tau.rank() ? tau.dim(tau.rank() - 1) : -1;
  if (rows(a) != mq || tau.rank() + 1 != a.rank() || k > cols(a) || k > mq || k < 0 ||
      a.numel() / (rows(a) * cols(a) > 0 ? rows(a) * cols(a) : 1) !=
          c.numel() / (rows(c) * cols(c) > 0 ? rows(c) * cols(c) : 1))
    ctx.fail("A " + shape_str(a.shape()) + ", tau " + shape_str(tau.shape()) + " and C " +
             shape_str(c.shape()) + " do not fit ormqr (A [..., mq, k'], tau [..., k], k <= k')");
}
template <typename T>
math::OrmqrFn<T> ormqr_fn(OpContext& ctx) {
  const Tensor& a = ctx.in(0);
  const Tensor& tau = ctx.in(1);
  const Tensor& c = ctx.in(2);
  check_ormqr(ctx, a, tau, c);
  const int64_t k = tau.dim(tau.rank() - 1);
  return {a.data<T>(),
          tau.data<T>(),
          c.data<T>(),
          ctx.out(0).data<T>(),
          rows(a),
          cols(a),
          k,
          rows(c),
          cols(c),
          ormqr_left(ctx),
          ormqr_transpose(ctx),
          rows(c) * cols(c)};
}
template <typename T>
math::OrmqrGradFn<T> ormqr_grad_fn(OpContext& ctx) {
  const Tensor& a = ctx.in(0);
  const Tensor& tau = ctx.in(1);
  const Tensor& c = ctx.in(2);
  check_ormqr(ctx, a, tau, c);
  const int64_t mq = rows(a), k = tau.dim(tau.rank() - 1);
  const int64_t work = rows(c) * cols(c) > (k + 1) * mq * mq + 3 * mq ? rows(c) * cols(c)
                                                                      : (k + 1) * mq * mq + 3 * mq;
  return {a.data<T>(),
          tau.data<T>(),
          c.data<T>(),
          ctx.in(3).data<T>(),
          optional_out<T>(ctx, 0),
          optional_out<T>(ctx, 1),
          optional_out<T>(ctx, 2),
          mq,
          cols(a),
          k,
          rows(c),
          cols(c),
          ormqr_left(ctx),
          ormqr_transpose(ctx),
          work};
}

}  // namespace linalg
}  // namespace ortmodule
