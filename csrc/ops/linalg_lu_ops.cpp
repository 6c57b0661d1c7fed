// Dense linear algebra by LU (kernels/math/linalg_lu.h), over batches of row-major matrices
// (leading dims are the batch), computed in double:
//   ai.ortmodule LUFactor(A [..., m, n]; check_errors) -> LU [..., m, n], pivots int32
//     [..., min(m, n)] (1-based, LAPACK's getrf), info int32 [...] (torch.linalg.lu_factor_ex);
//   ai.ortmodule LUUnpack(LU, pivots) -> L [..., m, k], U [..., k, n], P [..., m, m] with
//     A = P L U (torch.lu_unpack);
//   ai.ortmodule TriangularSolve(A [..., n, n], B; upper, left, unitriangular, transpose) -> X
//     with op(A) X = B or X op(A) = B, batch dims broadcast (linalg.solve_triangular);
//   Det(A [..., n, n]) -> det [...] (ONNX) and ai.ortmodule SlogDet(A) -> sign, logabsdet.
// Their gradient rules are in linalg_lu_grad_ops.cpp.
#include <algorithm>
#include <string>
#include <vector>

#include "kernels/math/linalg_lu.h"
#include "kernels/parallel.h"
#include "ops/linalg_lu_dims.h"
#include "ops/op_utils.h"
#include "ops/ops.h"

namespace ortmodule {

MatrixBatch matrix_batch(const OpContext& ctx, size_t input, bool square) {
  const Shape& s = ctx.in(input).shape();
  if (s.size() < 2)
    ctx.fail("input " + std::to_string(input) + " must be a batch of matrices (rank >= 2), not " +
             shape_str(s));
  MatrixBatch mb;
  mb.m = s[s.size() - 2];
  mb.n = s[s.size() - 1];
  mb.batch = dims_product(s, 0, s.size() - 2);
  if (square && mb.m != mb.n)
    ctx.fail("input " + std::to_string(input) + " must be a batch of square matrices, not " +
             shape_str(s));
  return mb;
}

TriangularSolveDims triangular_solve_dims(const OpContext& ctx) {
  expect_same_dtype(ctx, 1);
  const MatrixBatch a = matrix_batch(ctx, 0, true);
  const MatrixBatch b = matrix_batch(ctx, 1, false);
  TriangularSolveDims d;
  math::TriangularSystem& s = d.system;
  s.upper = ctx.node.attr_int("upper", 1) != 0;
  s.left = ctx.node.attr_int("left", 1) != 0;
  s.unit = ctx.node.attr_int("unitriangular", 0) != 0;
  s.transpose = ctx.node.attr_int("transpose", 0) != 0;
  s.n = a.n;
  const int64_t b_n = s.left ? b.m : b.n;
  if (b_n != a.n)
    ctx.fail("B " + shape_str(ctx.in(1).shape()) + " does not match A " +
             shape_str(ctx.in(0).shape()) +
             (s.left ? " (left: B's rows)" : " (right: B's columns)"));
  s.r = s.left ? b.n : b.m;
  const Shape& as = ctx.in(0).shape();
  const Shape& bs = ctx.in(1).shape();
  const Shape a_batch(as.begin(), as.end() - 2), b_batch(bs.begin(), bs.end() - 2);
  const Shape batch = broadcast_shapes(ctx, a_batch, b_batch);
  if (batch.size() > static_cast<size_t>(math::BatchBroadcast::kMaxRank))
    ctx.fail("at most " + std::to_string(math::BatchBroadcast::kMaxRank) + " batch dims");
  math::BatchBroadcast& bb = d.batches;
  bb.rank = static_cast<int>(batch.size());
  int64_t sa = 1, sb = 1;
  for (int i = bb.rank - 1; i >= 0; --i) {
    bb.dims[i] = batch[static_cast<size_t>(i)];
    const int ia = i - (bb.rank - static_cast<int>(a_batch.size()));
    const int ib = i - (bb.rank - static_cast<int>(b_batch.size()));
    const int64_t da = ia >= 0 ? a_batch[static_cast<size_t>(ia)] : 1;
    const int64_t db = ib >= 0 ? b_batch[static_cast<size_t>(ib)] : 1;
    bb.a_strides[i] = da == 1 ? 0 : sa;
    bb.b_strides[i] = db == 1 ? 0 : sb;
    sa *= da;
    sb *= db;
  }
  d.batch = dims_product(batch, 0, batch.size());
  d.out = batch;
  d.out.push_back(bs[bs.size() - 2]);
  d.out.push_back(bs[bs.size() - 1]);
  return d;
}

void lu_check_info(const OpContext& ctx, const int32_t* info, int64_t batch) {
  const std::string api = ctx.node.attr_string("api", "");
  for (int64_t i = 0; i < batch; ++i)
    if (info[i] > 0)
      ctx.fail((api.empty() ? "" : api + ": ") + "the input matrix is singular: U[" +
               std::to_string(info[i] - 1) + ", " + std::to_string(info[i] - 1) +
               "] is zero (batch element " + std::to_string(i) + ")");
}

namespace {

Shape batch_shape(const Shape& s) { return Shape(s.begin(), s.end() - 2); }

void require_float(const OpContext& ctx, size_t input) {
  if (!dtype_is_floating(ctx.in(input).dtype()))
    ctx.fail("input " + std::to_string(input) + " must be float32 or float64, not " +
             dtype_name(ctx.in(input).dtype()));
}

// Factorizes matrix i of `a` into `lu`, `piv`, returning info; work holds m * n doubles.
template <typename T>
int64_t lu_factor_one(const T* a, T* lu, int32_t* piv, int64_t m, int64_t n, double* work,
                      bool* odd) {
  for (int64_t e = 0; e < m * n; ++e) work[e] = static_cast<double>(a[e]);
  const int64_t info = math::lu_factor_inplace(work, m, n, piv, odd);
  if (lu)
    for (int64_t e = 0; e < m * n; ++e) lu[e] = static_cast<T>(work[e]);
  return info;
}

}  // namespace

std::vector<OutputInfo> shape_lu_factor(const OpContext& ctx) {
  require_float(ctx, 0);
  const MatrixBatch mb = matrix_batch(ctx, 0, false);
  Shape batch = batch_shape(ctx.in(0).shape());
  Shape piv = batch;
  piv.push_back(mb.k());
  return {OutputInfo{ctx.in(0).dtype(), ctx.in(0).shape()}, OutputInfo{DType::Int32, piv},
          OutputInfo{DType::Int32, batch}};
}

void cpu_lu_factor(OpContext& ctx) {
  const MatrixBatch mb = matrix_batch(ctx, 0, false);
  const int64_t m = mb.m, n = mb.n, k = mb.k();
  std::vector<int32_t> info_local(static_cast<size_t>(mb.batch));
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, {
    const scalar_t* a = ctx.in(0).data<scalar_t>();
    scalar_t* lu = ctx.has_output(0) ? ctx.out(0).data<scalar_t>() : nullptr;
    int32_t* piv = ctx.has_output(1) ? ctx.out(1).data<int32_t>() : nullptr;
    parallel_for(0, mb.batch, 1, [&](int64_t b0, int64_t b1) {
      std::vector<double> work(static_cast<size_t>(m * n));
      std::vector<int32_t> piv_local(static_cast<size_t>(k));
      for (int64_t b = b0; b < b1; ++b) {
        bool odd = false;
        int32_t* p = piv ? piv + b * k : piv_local.data();
        info_local[static_cast<size_t>(b)] = static_cast<int32_t>(lu_factor_one(
            a + b * m * n, lu ? lu + b * m * n : nullptr, p, m, n, work.data(), &odd));
      }
    });
  });
  if (ctx.has_output(2))
    std::copy(info_local.begin(), info_local.end(), ctx.out(2).data<int32_t>());
  if (ctx.node.attr_int("check_errors", 0) != 0) lu_check_info(ctx, info_local.data(), mb.batch);
}

std::vector<OutputInfo> shape_lu_unpack(const OpContext& ctx) {
  require_float(ctx, 0);
  const MatrixBatch mb = matrix_batch(ctx, 0, false);
  const Tensor& piv = ctx.in(1);
  if (piv.dtype() != DType::Int32 && piv.dtype() != DType::Int64)
    ctx.fail("pivots must be int32 or int64, not " + dtype_name(piv.dtype()));
  Shape batch = batch_shape(ctx.in(0).shape());
  Shape piv_shape = batch;
  piv_shape.push_back(mb.k());
  if (piv.shape() != piv_shape)
    ctx.fail("pivots " + shape_str(piv.shape()) + " do not match LU " +
             shape_str(ctx.in(0).shape()) + " (expected " + shape_str(piv_shape) + ")");
  Shape l = batch, u = batch, p = batch;
  l.insert(l.end(), {mb.m, mb.k()});
  u.insert(u.end(), {mb.k(), mb.n});
  p.insert(p.end(), {mb.m, mb.m});
  const DType dt = ctx.in(0).dtype();
  return {OutputInfo{dt, l}, OutputInfo{dt, u}, OutputInfo{dt, p}};
}

namespace {

template <typename T, typename I>
void lu_unpack_cpu(OpContext& ctx, const MatrixBatch& mb) {
  const int64_t m = mb.m, n = mb.n, k = mb.k();
  const T* lu = ctx.in(0).data<T>();
  const I* piv = ctx.in(1).data<I>();
  T* l = ctx.has_output(0) ? ctx.out(0).data<T>() : nullptr;
  T* u = ctx.has_output(1) ? ctx.out(1).data<T>() : nullptr;
  T* p = ctx.has_output(2) ? ctx.out(2).data<T>() : nullptr;
  parallel_for(0, mb.batch, 1, [&](int64_t b0, int64_t b1) {
    std::vector<int64_t> perm(static_cast<size_t>(m));
    for (int64_t b = b0; b < b1; ++b) {
      const T* a = lu + b * m * n;
      if (l)
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < k; ++j)
            l[b * m * k + i * k + j] = i > j ? a[i * n + j] : T(i == j ? 1 : 0);
      if (u)
        for (int64_t i = 0; i < k; ++i)
          for (int64_t j = 0; j < n; ++j) u[b * k * n + i * n + j] = j >= i ? a[i * n + j] : T(0);
      if (p) {
        if (!math::lu_permutation(piv + b * k, m, k, perm.data()))
          ctx.fail("pivots of batch element " + std::to_string(b) + " are out of [1, " +
                   std::to_string(m) + "]");
        T* pb = p + b * m * m;
        std::fill(pb, pb + m * m, T(0));
        for (int64_t i = 0; i < m; ++i) pb[perm[static_cast<size_t>(i)] * m + i] = T(1);
      }
    }
  });
}

}  // namespace

void cpu_lu_unpack(OpContext& ctx) {
  const MatrixBatch mb = matrix_batch(ctx, 0, false);
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, {
    if (ctx.in(1).dtype() == DType::Int32)
      lu_unpack_cpu<scalar_t, int32_t>(ctx, mb);
    else
      lu_unpack_cpu<scalar_t, int64_t>(ctx, mb);
  });
}

// LUUnpackGrad(LU, dL, dU) -> dLU: dL's strict lower triangle and dU's upper one put back in
// LU's [m, n] (either gradient may be absent).
std::vector<OutputInfo> shape_lu_unpack_grad(const OpContext& ctx) {
  require_float(ctx, 0);
  const MatrixBatch mb = matrix_batch(ctx, 0, false);
  const int64_t sizes[2] = {mb.batch * mb.m * mb.k(), mb.batch * mb.k() * mb.n};
  for (size_t i = 1; i <= 2; ++i) {
    if (!ctx.has_input(i)) continue;
    if (ctx.in(i).dtype() != ctx.in(0).dtype() || ctx.in(i).numel() != sizes[i - 1])
      ctx.fail("input " + std::to_string(i) + " " + shape_str(ctx.in(i).shape()) +
               " is not the gradient of " + (i == 1 ? "L" : "U") + " of LU " +
               shape_str(ctx.in(0).shape()));
  }
  return {OutputInfo{ctx.in(0).dtype(), ctx.in(0).shape()}};
}

void cpu_lu_unpack_grad(OpContext& ctx) {
  const MatrixBatch mb = matrix_batch(ctx, 0, false);
  const int64_t m = mb.m, n = mb.n, k = mb.k();
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, {
    const scalar_t* dl = ctx.has_input(1) ? ctx.in(1).data<scalar_t>() : nullptr;
    const scalar_t* du = ctx.has_input(2) ? ctx.in(2).data<scalar_t>() : nullptr;
    scalar_t* y = ctx.out(0).data<scalar_t>();
    parallel_for(0, mb.batch * m * n, 4096, [&](int64_t e0, int64_t e1) {
      for (int64_t e = e0; e < e1; ++e) y[e] = math::lu_unpack_grad_at(dl, du, e, m, n, k);
    });
  });
}

std::vector<OutputInfo> shape_triangular_solve(const OpContext& ctx) {
  require_float(ctx, 0);
  const TriangularSolveDims d = triangular_solve_dims(ctx);
  return {OutputInfo{ctx.in(1).dtype(), d.out}};
}

void cpu_triangular_solve(OpContext& ctx) {
  const TriangularSolveDims d = triangular_solve_dims(ctx);
  const int64_t an = d.system.n * d.system.n, bn = d.system.n * d.system.r;
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, {
    const scalar_t* a = ctx.in(0).data<scalar_t>();
    const scalar_t* b = ctx.in(1).data<scalar_t>();
    scalar_t* x = ctx.out(0).data<scalar_t>();
    parallel_for(0, d.batch, 1, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        int64_t ia = 0, ib = 0;
        math::batch_broadcast_index(d.batches, i, &ia, &ib);
        std::copy(b + ib * bn, b + (ib + 1) * bn, x + i * bn);
        math::triangular_solve_matrix(d.system, a + ia * an, x + i * bn);
      }
    });
  });
}

// Det and SlogDet: one output per matrix, [...] (A's batch dims).
std::vector<OutputInfo> shape_det(const OpContext& ctx) {
  require_float(ctx, 0);
  matrix_batch(ctx, 0, true);
  return {OutputInfo{ctx.in(0).dtype(), batch_shape(ctx.in(0).shape())}};
}

namespace {

// fn(i, lu, odd) for each factorized matrix i of input 0.
template <typename T, typename F>
void for_each_factorized(OpContext& ctx, F fn) {
  const MatrixBatch mb = matrix_batch(ctx, 0, true);
  const int64_t n = mb.n;
  const T* a = ctx.in(0).data<T>();
  parallel_for(0, mb.batch, 1, [&](int64_t b0, int64_t b1) {
    std::vector<double> work(static_cast<size_t>(n * n));
    std::vector<int32_t> piv(static_cast<size_t>(n));
    for (int64_t b = b0; b < b1; ++b) {
      bool odd = false;
      lu_factor_one<T>(a + b * n * n, nullptr, piv.data(), n, n, work.data(), &odd);
      fn(b, work.data(), odd);
    }
  });
}

}  // namespace

void cpu_det(OpContext& ctx) {
  const int64_t n = matrix_batch(ctx, 0, true).n;
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, {
    scalar_t* y = ctx.out(0).data<scalar_t>();
    for_each_factorized<scalar_t>(ctx, [&](int64_t b, const double* lu, bool odd) {
      y[b] = static_cast<scalar_t>(math::lu_det(lu, n, odd));
    });
  });
}

std::vector<OutputInfo> shape_slog_det(const OpContext& ctx) {
  const std::vector<OutputInfo> one = shape_det(ctx);
  return {one[0], one[0]};
}

void cpu_slog_det(OpContext& ctx) {
  const int64_t n = matrix_batch(ctx, 0, true).n;
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, {
    scalar_t* sign = ctx.has_output(0) ? ctx.out(0).data<scalar_t>() : nullptr;
    scalar_t* logabs = ctx.has_output(1) ? ctx.out(1).data<scalar_t>() : nullptr;
    for_each_factorized<scalar_t>(ctx, [&](int64_t b, const double* lu, bool odd) {
      double s = 0, l = 0;
      math::lu_slogdet(lu, n, odd, &s, &l);
      if (sign) sign[b] = static_cast<scalar_t>(s);
      if (logabs) logabs[b] = static_cast<scalar_t>(l);
    });
  });
}

}  // namespace ortmodule
