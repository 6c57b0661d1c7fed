// The gradient rules of the LU family (linalg_lu_ops.cpp), PyTorch's formulas as graph code
// over FusedMatMul, Trilu, Slice, Concat and the family's own LUUnpack and TriangularSolve:
// LUFactor (torch's linalg_lu_backward for square, wide and tall matrices), LUUnpack,
// TriangularSolve, Det and SlogDet (through A^-T from a factorization of A).
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "grad/grad_context.h"
#include "ops/ops.h"

namespace ortmodule {

namespace {

constexpr const char* kOwnDomain = "ai.ortmodule";

Value* int64s(GradContext& g, const std::vector<int64_t>& values) {
  Tensor t = Tensor::empty(DType::Int64, {static_cast<int64_t>(values.size())});
  for (size_t i = 0; i < values.size(); ++i) t.data<int64_t>()[i] = values[i];
  return g.emit("Constant", {}, {{"value", Attribute::make_tensor(t)}});
}

Value* int64_scalar(GradContext& g, int64_t v) {
  Tensor t = Tensor::empty(DType::Int64, {});
  t.data<int64_t>()[0] = v;
  return g.emit("Constant", {}, {{"value", Attribute::make_tensor(t)}});
}

// Trilu(x, k): the upper (j - i >= k) or lower (j - i <= k) part of each matrix.
Value* trilu(GradContext& g, Value* x, bool upper, int64_t k) {
  return g.emit("Trilu", {x, int64_scalar(g, k)}, {{"upper", Attribute::make_int(upper)}});
}

// alpha * op(a) op(b), batch dims broadcast.
Value* matmul(GradContext& g, Value* a, Value* b, bool ta, bool tb, double alpha = 1.0) {
  return g.emit("FusedMatMul", {a, b},
                {{"transA", Attribute::make_int(ta)},
                 {"transB", Attribute::make_int(tb)},
                 {"alpha", Attribute::make_float(alpha)}},
                "com.microsoft");
}

Value* tri_solve(GradContext& g, Value* a, Value* b, bool upper, bool left, bool unit, bool trans) {
  return g.emit("TriangularSolve", {a, b},
                {{"upper", Attribute::make_int(upper)},
                 {"left", Attribute::make_int(left)},
                 {"unitriangular", Attribute::make_int(unit)},
                 {"transpose", Attribute::make_int(trans)}},
                kOwnDomain);
}

// x's size along `axis` (-2 or -1) as a one-element int64 tensor.
Value* size_of(GradContext& g, Value* x, int64_t axis) {
  if (axis == -1) return g.emit("Shape", {x}, {{"start", Attribute::make_int(-1)}});
  return g.emit("Shape", {x},
                {{"start", Attribute::make_int(-2)}, {"end", Attribute::make_int(-1)}});
}

// x[..., :count] (head) or x[..., count:] (tail) along `axis`.
Value* head(GradContext& g, Value* x, int64_t axis, Value* count) {
  return g.emit("Slice", {x, int64s(g, {0}), count, int64s(g, {axis})});
}
Value* tail(GradContext& g, Value* x, int64_t axis, Value* count) {
  return g.emit("Slice",
                {x, count, int64s(g, {std::numeric_limits<int64_t>::max()}), int64s(g, {axis})});
}

Value* concat(GradContext& g, Value* a, Value* b, int64_t axis) {
  return g.emit("Concat", {a, b}, {{"axis", Attribute::make_int(axis)}});
}

Value* add_or(GradContext& g, Value* a, Value* b) { return a ? g.emit("Add", {a, b}) : b; }

// The shape class of the factorized matrices, which picks linalg_lu_backward's formula:
// from the input's static shape, else the lowering's `form` attribute (checked against the
// runtime shape by LUFactor's shape rule).
enum class LUForm { Square = 0, Wide = 1, Tall = 2 };

LUForm lu_form(GradContext& g) {
  Value* a = g.input(0);
  if (a && a->has_shape && a->shape.size() >= 2) {
    const int64_t m = a->shape[a->shape.size() - 2].value, n = a->shape.back().value;
    if (m >= 0 && n >= 0) return m == n ? LUForm::Square : m < n ? LUForm::Wide : LUForm::Tall;
  }
  return static_cast<LUForm>(g.node().attr_int("form", 0));
}

// A = P L U (L [m, k] unit lower, U [k, n] upper): dA from dL and dU (either may be null).
Value* lu_backward(GradContext& g, LUForm form, Value* dl, Value* du, Value* p, Value* l,
                   Value* u) {
  Value* da = nullptr;
  if (form == LUForm::Square) {
    // dA = P L^-T [tril(L^T dL, -1) + triu(dU U^T)] U^-T
    if (dl) da = trilu(g, matmul(g, l, dl, true, false), false, -1);
    if (du) da = add_or(g, da, trilu(g, matmul(g, du, u, false, true), true, 0));
    da = tri_solve(g, u, da, true, false, false, true);
    da = tri_solve(g, l, da, false, true, true, true);
  } else if (form == LUForm::Wide) {
    // k = m < n, U = [U1 U2]: dA1 = P L^-T [triu(dU1) + tril(L^T dL - triu(dU) U^T, -1) U1^-T],
    // dA2 = P L^-T dU2.
    Value* m = size_of(g, u, -2);
    if (dl) da = matmul(g, l, dl, true, false);
    if (du) {
      Value* t = matmul(g, trilu(g, du, true, 0), u, false, true, -1.0);
      da = add_or(g, da, t);
    }
    da = tri_solve(g, head(g, u, -1, m), trilu(g, da, false, -1), true, false, false, true);
    if (du) {
      da = concat(g, g.emit("Add", {da, trilu(g, head(g, du, -1, m), true, 0)}), tail(g, du, -1, m),
                  -1);
    }
    da = tri_solve(g, l, da, false, true, true, true);
    if (!du) da = concat(g, da, g.emit("ZerosLike", {tail(g, u, -1, m)}, {}, kOwnDomain), -1);
  } else {
    // k = n < m, L = [L1; L2]: dA1 = P [tril(dL1, -1) + L1^-T triu(dU U^T - L^T tril(dL, -1))]
    // U^-T, dA2 = P dL2 U^-T.
    Value* n = size_of(g, l, -1);
    if (du) da = matmul(g, du, u, false, true);
    if (dl) da = add_or(g, da, matmul(g, l, trilu(g, dl, false, -1), true, false, -1.0));
    da = tri_solve(g, head(g, l, -2, n), trilu(g, da, true, 0), false, true, true, true);
    if (dl) {
      da = concat(g, g.emit("Add", {da, trilu(g, head(g, dl, -2, n), false, -1)}),
                  tail(g, dl, -2, n), -2);
    }
    da = tri_solve(g, u, da, true, false, false, true);
    if (!dl) da = concat(g, da, g.emit("ZerosLike", {tail(g, l, -2, n)}, {}, kOwnDomain), -2);
  }
  return matmul(g, p, da, false, false);
}

// A^-T of square matrices a [..., n, n] = P L^-T U^-T from a factorization of a.
Value* inverse_transpose(GradContext& g, Value* a) {
  std::vector<Value*> f = g.emit_multi("LUFactor", {a}, {true, true, false}, {}, kOwnDomain);
  Value* p = g.emit_multi("LUUnpack", {f[0], f[1]}, {false, false, true}, {}, kOwnDomain)[2];
  Value* ones =
      g.emit("Add", {g.emit("ZerosLike", {a}, {}, kOwnDomain), g.scalar_constant(1.0, a)});
  Value* eye = trilu(g, trilu(g, ones, true, 0), false, 0);
  Value* y = tri_solve(g, f[0], eye, true, true, false, true);
  y = tri_solve(g, f[0], y, false, true, true, true);
  return matmul(g, p, y, false, false);
}

// The rules read inputs 0 .. count - 1 (a malformed node may lack them).
void require_inputs(GradContext& g, size_t count) {
  for (size_t i = 0; i < count; ++i)
    if (!g.input(i)) g.fail("its gradient needs input " + std::to_string(i));
}

Value* unsqueeze_matrix(GradContext& g, Value* x) {
  return g.emit("Unsqueeze", {x, int64s(g, {-1, -2})});
}

}  // namespace

// (LU, pivots, info) = LUFactor(A): torch's lu_factor_ex_backward, dL = dLU[..., :, :k] and
// dU = dLU[..., :k, :] through linalg_lu_backward.
void grad_lu_factor(GradContext& g) {
  Value* dlu = g.output_grad(0);
  if (!dlu) return;
  require_inputs(g, 1);
  const LUForm form = lu_form(g);
  Value* lu = g.output(0);
  Value* piv = g.forward_output(1, "lu_pivots");
  std::vector<Value*> lup = g.emit_multi("LUUnpack", {lu, piv}, {true, true, true}, {}, kOwnDomain);
  Value* dl = dlu;
  Value* du = dlu;
  if (form == LUForm::Wide) dl = head(g, dlu, -1, size_of(g, lu, -2));
  if (form == LUForm::Tall) du = head(g, dlu, -2, size_of(g, lu, -1));
  g.set_input_grad(0, lu_backward(g, form, dl, du, lup[2], lup[0], lup[1]));
}

// (L, U, P) = LUUnpack(LU, pivots): dLU = tril(dL, -1) and triu(dU) in LU's shape.
void grad_lu_unpack(GradContext& g) {
  if (!g.needs_grad(0)) return;
  Value* dl = g.output_grad(0);
  Value* du = g.output_grad(1);
  if (!dl && !du) return;
  require_inputs(g, 2);
  g.set_input_grad(0, g.emit("LUUnpackGrad", {g.input(0), dl, du}, {}, kOwnDomain));
}

// X = op(A)^-1 B (left) or B op(A)^-1 (right): dB = op(A)^-T dX (dX op(A)^-T), and
// d op(A) = -dB X^T (-X^T dB), kept on A's triangle (its strict part when unit).
void grad_triangular_solve(GradContext& g) {
  Value* dx = g.output_grad(0);
  if (!dx) return;
  require_inputs(g, 2);
  const Node& node = g.node();
  const bool upper = node.attr_int("upper", 1) != 0, left = node.attr_int("left", 1) != 0;
  const bool unit = node.attr_int("unitriangular", 0) != 0;
  const bool trans = node.attr_int("transpose", 0) != 0;
  Value* a = g.input(0);
  Value* x = g.output(0);
  Value* db = tri_solve(g, a, dx, upper, left, unit, !trans);
  if (g.needs_grad(1)) g.set_input_grad(1, g.sum_to_shape(db, g.input(1)));
  if (!g.needs_grad(0)) return;
  Value* da =
      left ? (trans ? matmul(g, x, db, false, true, -1.0) : matmul(g, db, x, false, true, -1.0))
           : (trans ? matmul(g, db, x, true, false, -1.0) : matmul(g, x, db, true, false, -1.0));
  da = trilu(g, da, upper, upper ? (unit ? 1 : 0) : (unit ? -1 : 0));
  g.set_input_grad(0, g.sum_to_shape(da, a));
}

// det = Det(A): dA = (dDet det) A^-T.
void grad_det(GradContext& g) {
  Value* dy = g.output_grad(0);
  if (!dy) return;
  require_inputs(g, 1);
  Value* scale = unsqueeze_matrix(g, g.emit("Mul", {dy, g.output(0)}));
  g.set_input_grad(0, g.emit("Mul", {scale, inverse_transpose(g, g.input(0))}));
}

// (sign, logabsdet) = SlogDet(A): dA = dLogabsdet A^-T (sign is piecewise constant).
void grad_slog_det(GradContext& g) {
  Value* dl = g.output_grad(1);
  if (!dl) return;
  require_inputs(g, 1);
  g.set_input_grad(0, g.emit("Mul", {unsqueeze_matrix(g, dl), inverse_transpose(g, g.input(0))}));
}

}  // namespace ortmodule
