// ai.ortmodule's symmetric eigendecomposition and SVD, and the ops built on them
// (kernels/math/linalg_spectral.h: Jacobi rotations in double, one matrix at a time):
//   Eigh(A; lower) -> W [..., n] ascending, V [..., n, n]   (torch.linalg.eigh, UPLO)
//   Svd(A) -> U [..., m, k], S [..., k] descending, Vh [..., k, n]   (reduced SVD)
//   Pinv(A, atol?, rtol?; hermitian, atol, rtol) -> P [..., n, m]   (torch.linalg.pinv)
//   MatrixRank(A, atol?, rtol?; hermitian, atol, rtol) -> int64 [...]   (linalg.matrix_rank)
// The tolerances are the attributes, or tensors broadcast over the batch; rtol < 0 is torch's
// default, eps * max(m, n) (0 where atol > 0). Their gradients are the internal EighGrad,
// SvdGrad and PinvGrad (kernels/math/linalg_spectral_grad.h, torch's formulas).
#include <cfloat>
#include <cstdint>
#include <vector>

#include "grad/grad_context.h"
#include "kernels/math/linalg_spectral.h"
#include "kernels/math/linalg_spectral_grad.h"
#include "kernels/parallel.h"
#include "ops/linalg_spectral_tolerance.h"
#include "ops/op_utils.h"
#include "ops/ops.h"

namespace ortmodule {

namespace {

struct MatrixDims {
  int64_t batch = 1, m = 0, n = 0;
  Shape leading;
};

MatrixDims matrix_dims(const OpContext& ctx, const Tensor& a, bool square) {
  const Shape& s = a.shape();
  if (s.size() < 2)
    ctx.fail("input 0 must be a matrix or a batch of matrices, not " + shape_str(s));
  MatrixDims d;
  d.leading.assign(s.begin(), s.end() - 2);
  d.batch = shape_numel(d.leading);
  d.m = s[s.size() - 2];
  d.n = s[s.size() - 1];
  if (square && d.m != d.n) ctx.fail("input 0 must hold square matrices, not " + shape_str(s));
  return d;
}

Shape with(Shape leading, std::initializer_list<int64_t> tail) {
  leading.insert(leading.end(), tail);
  return leading;
}

// Runs fn(matrix, workspace) for every matrix of the batch, each thread with its workspace.
template <typename F>
void for_each_matrix(int64_t batch, int64_t work, int64_t cost, F fn) {
  parallel_for(0, batch, cost > 4096 ? 1 : 16, [&](int64_t begin, int64_t end) {
    std::vector<double> buffer(static_cast<size_t>(work > 0 ? work : 1));
    for (int64_t b = begin; b < end; ++b) fn(b, buffer.data());
  });
}

template <typename T>
const T* optional_data(const OpContext& ctx, size_t i) {
  return ctx.has_input(i) ? ctx.in(i).data<T>() : nullptr;
}

double dtype_eps(DType dtype) { return dtype == DType::Float64 ? DBL_EPSILON : FLT_EPSILON; }

// The offset in `t` (shape broadcast against `leading`, right-aligned) of batch element b.
int64_t broadcast_offset(const Shape& t, const Shape& leading, int64_t b) {
  int64_t offset = 0, stride = 1;
  for (size_t k = 0; k < leading.size(); ++k) {
    const size_t axis = leading.size() - 1 - k;
    const int64_t index = b % leading[axis];
    b /= leading[axis];
    if (k < t.size()) {
      const int64_t size = t[t.size() - 1 - k];
      if (size != 1) offset += index * stride;
      stride *= size;
    }
  }
  return offset;
}

std::vector<double> tolerance_values(const OpContext& ctx, size_t input, const Shape& leading,
                                     int64_t batch, double attr) {
  std::vector<double> out(static_cast<size_t>(batch), attr);
  if (!ctx.has_input(input)) return out;
  const Tensor& t = ctx.in(input);
  const Shape& ts = t.shape();
  bool fits = ts.size() <= leading.size();
  for (size_t k = 0; fits && k < ts.size(); ++k) {
    const int64_t size = ts[ts.size() - 1 - k];
    fits = size == 1 || size == leading[leading.size() - 1 - k];
  }
  if (!fits)
    ctx.fail(std::string(input == 1 ? "atol " : "rtol ") + shape_str(ts) +
             " must broadcast to the batch shape " + shape_str(leading));
  for (int64_t b = 0; b < batch; ++b) {
    const double v = t.float_at(broadcast_offset(ts, leading, b));
    // A negative rtol counts as 0 (torch's max(atol, rtol * largest) for atol >= 0), apart
    // from the kernels' "unset".
    out[static_cast<size_t>(b)] = input == 2 && v < 0.0 ? 0.0 : v;
  }
  return out;
}

}  // namespace

SpectralTolerances spectral_tolerances(const OpContext& ctx) {
  const Shape& s = ctx.in(0).shape();
  const Shape leading(s.begin(), s.end() - 2);
  const int64_t batch = shape_numel(leading);
  return {tolerance_values(ctx, 1, leading, batch, ctx.node.attr_float("atol", 0.0)),
          tolerance_values(ctx, 2, leading, batch, ctx.node.attr_float("rtol", -1.0))};
}

std::vector<OutputInfo> shape_eigh(const OpContext& ctx) {
  const MatrixDims d = matrix_dims(ctx, ctx.in(0), true);
  const DType t = ctx.in(0).dtype();
  return {OutputInfo{t, with(d.leading, {d.n})}, OutputInfo{t, with(d.leading, {d.n, d.n})}};
}

void cpu_eigh(OpContext& ctx) {
  const Tensor& a = ctx.in(0);
  const MatrixDims d = matrix_dims(ctx, a, true);
  const bool lower = ctx.node.attr_int("lower", 1) != 0;
  const int64_t n = d.n;
  ORTM_DISPATCH_FLOAT(a.dtype(), ctx, {
    const scalar_t* x = a.data<scalar_t>();
    scalar_t* w = ctx.out(0).data<scalar_t>();
    scalar_t* v = ctx.out(1).data<scalar_t>();
    for_each_matrix(d.batch, math::eigh_work(n), n * n * n, [&](int64_t b, double* work) {
      math::eigh_matrix(x + b * n * n, n, lower, w + b * n, v + b * n * n, work);
    });
  });
}

void grad_eigh(GradContext& g) {
  Value* w = g.forward_output(0, "eigh_values");
  Value* v = g.forward_output(1, "eigh_vectors");
  g.set_input_grad(
      0, g.emit("EighGrad", {w, v, g.output_grad(0), g.output_grad(1)}, {}, "ai.ortmodule"));
}

std::vector<OutputInfo> shape_eigh_grad(const OpContext& ctx) {
  return {OutputInfo{ctx.in(1).dtype(), ctx.in(1).shape()}};
}

void cpu_eigh_grad(OpContext& ctx) {
  const Tensor& v = ctx.in(1);
  const MatrixDims d = matrix_dims(ctx, v, true);
  const int64_t n = d.n;
  ORTM_DISPATCH_FLOAT(v.dtype(), ctx, {
    const scalar_t* w = ctx.in(0).data<scalar_t>();
    const scalar_t* vd = v.data<scalar_t>();
    const scalar_t* gw = optional_data<scalar_t>(ctx, 2);
    const scalar_t* gv = optional_data<scalar_t>(ctx, 3);
    scalar_t* ga = ctx.out(0).data<scalar_t>();
    for_each_matrix(d.batch, math::eigh_grad_work(n), n * n * n, [&](int64_t b, double* work) {
      math::eigh_grad_matrix(w + b * n, vd + b * n * n, gw ? gw + b * n : nullptr,
                             gv ? gv + b * n * n : nullptr, n, ga + b * n * n, work);
    });
  });
}

std::vector<OutputInfo> shape_svd(const OpContext& ctx) {
  const MatrixDims d = matrix_dims(ctx, ctx.in(0), false);
  const int64_t k = d.m < d.n ? d.m : d.n;
  const DType t = ctx.in(0).dtype();
  return {OutputInfo{t, with(d.leading, {d.m, k})}, OutputInfo{t, with(d.leading, {k})},
          OutputInfo{t, with(d.leading, {k, d.n})}};
}

void cpu_svd(OpContext& ctx) {
  const Tensor& a = ctx.in(0);
  const MatrixDims d = matrix_dims(ctx, a, false);
  const int64_t m = d.m, n = d.n, k = m < n ? m : n;
  ORTM_DISPATCH_FLOAT(a.dtype(), ctx, {
    const scalar_t* x = a.data<scalar_t>();
    scalar_t* u = ctx.out(0).data<scalar_t>();
    scalar_t* s = ctx.out(1).data<scalar_t>();
    scalar_t* vt = ctx.out(2).data<scalar_t>();
    for_each_matrix(d.batch, math::svd_matrix_work(m, n), m * n * k, [&](int64_t b, double* work) {
      math::svd_matrix(x + b * m * n, m, n, u + b * m * k, s + b * k, vt + b * k * n, work);
    });
  });
}

void grad_svd(GradContext& g) {
  Value* u = g.forward_output(0, "svd_u");
  Value* s = g.forward_output(1, "svd_s");
  Value* vt = g.forward_output(2, "svd_vh");
  g.set_input_grad(
      0, g.emit("SvdGrad", {u, s, vt, g.output_grad(0), g.output_grad(1), g.output_grad(2)}, {},
                "ai.ortmodule"));
}

std::vector<OutputInfo> shape_svd_grad(const OpContext& ctx) {
  const Shape& u = ctx.in(0).shape();
  const Shape& vt = ctx.in(2).shape();
  Shape out = u;
  out.back() = vt.back();
  return {OutputInfo{ctx.in(0).dtype(), out}};
}

void cpu_svd_grad(OpContext& ctx) {
  const Tensor& u = ctx.in(0);
  const MatrixDims du = matrix_dims(ctx, u, false);
  const int64_t m = du.m, k = du.n, n = ctx.in(2).shape().back();
  ORTM_DISPATCH_FLOAT(u.dtype(), ctx, {
    const scalar_t* ud = u.data<scalar_t>();
    const scalar_t* s = ctx.in(1).data<scalar_t>();
    const scalar_t* vt = ctx.in(2).data<scalar_t>();
    const scalar_t* gu = optional_data<scalar_t>(ctx, 3);
    const scalar_t* gs = optional_data<scalar_t>(ctx, 4);
    const scalar_t* gvt = optional_data<scalar_t>(ctx, 5);
    scalar_t* ga = ctx.out(0).data<scalar_t>();
    for_each_matrix(du.batch, math::svd_grad_work(m, n), m * n * k, [&](int64_t b, double* work) {
      math::svd_grad_matrix(ud + b * m * k, s + b * k, vt + b * k * n,
                            gu ? gu + b * m * k : nullptr, gs ? gs + b * k : nullptr,
                            gvt ? gvt + b * k * n : nullptr, m, n, ga + b * m * n, work);
    });
  });
}

std::vector<OutputInfo> shape_pinv(const OpContext& ctx) {
  const bool hermitian = ctx.node.attr_int("hermitian", 0) != 0;
  const MatrixDims d = matrix_dims(ctx, ctx.in(0), hermitian);
  return {OutputInfo{ctx.in(0).dtype(), with(d.leading, {d.n, d.m})}};
}

void cpu_pinv(OpContext& ctx) {
  const Tensor& a = ctx.in(0);
  const bool hermitian = ctx.node.attr_int("hermitian", 0) != 0;
  const MatrixDims d = matrix_dims(ctx, a, hermitian);
  const SpectralTolerances tol = spectral_tolerances(ctx);
  const double eps = dtype_eps(a.dtype());
  const int64_t m = d.m, n = d.n;
  ORTM_DISPATCH_FLOAT(a.dtype(), ctx, {
    const scalar_t* x = a.data<scalar_t>();
    scalar_t* p = ctx.out(0).data<scalar_t>();
    for_each_matrix(d.batch, math::pinv_work(m, n), m * n * n, [&](int64_t b, double* work) {
      const size_t i = static_cast<size_t>(b);
      math::pinv_matrix(x + b * m * n, m, n, hermitian, tol.atol[i], tol.rtol[i], eps,
                        p + b * m * n, work);
    });
  });
}

void grad_pinv(GradContext& g) {
  g.set_input_grad(
      0, g.emit("PinvGrad", {g.input(0), g.output(0), g.output_grad(0)}, {}, "ai.ortmodule"));
}

std::vector<OutputInfo> shape_pinv_grad(const OpContext& ctx) {
  return {OutputInfo{ctx.in(0).dtype(), ctx.in(0).shape()}};
}

void cpu_pinv_grad(OpContext& ctx) {
  const Tensor& a = ctx.in(0);
  const MatrixDims d = matrix_dims(ctx, a, false);
  const int64_t m = d.m, n = d.n;
  ORTM_DISPATCH_FLOAT(a.dtype(), ctx, {
    const scalar_t* x = a.data<scalar_t>();
    const scalar_t* p = ctx.in(1).data<scalar_t>();
    const scalar_t* gp = ctx.in(2).data<scalar_t>();
    scalar_t* ga = ctx.out(0).data<scalar_t>();
    for_each_matrix(d.batch, math::pinv_grad_work(m, n), m * n * n, [&](int64_t b, double* work) {
      const int64_t at = b * m * n;
      math::pinv_grad_matrix(x + at, p + at, gp + at, m, n, ga + at, work);
    });
  });
}

std::vector<OutputInfo> shape_matrix_rank(const OpContext& ctx) {
  const bool hermitian = ctx.node.attr_int("hermitian", 0) != 0;
  const MatrixDims d = matrix_dims(ctx, ctx.in(0), hermitian);
  return {OutputInfo{DType::Int64, d.leading}};
}

void cpu_matrix_rank(OpContext& ctx) {
  const Tensor& a = ctx.in(0);
  const bool hermitian = ctx.node.attr_int("hermitian", 0) != 0;
  const MatrixDims d = matrix_dims(ctx, a, hermitian);
  const SpectralTolerances tol = spectral_tolerances(ctx);
  const double eps = dtype_eps(a.dtype());
  const int64_t m = d.m, n = d.n;
  ORTM_DISPATCH_FLOAT(a.dtype(), ctx, {
    const scalar_t* x = a.data<scalar_t>();
    int64_t* rank = ctx.out(0).data<int64_t>();
    for_each_matrix(d.batch, math::pinv_work(m, n), m * n * n, [&](int64_t b, double* work) {
      const size_t i = static_cast<size_t>(b);
      rank[b] = math::matrix_rank_matrix(x + b * m * n, m, n, hermitian, tol.atol[i], tol.rtol[i],
                                         eps, work);
    });
  });
}

}  // namespace ortmodule
