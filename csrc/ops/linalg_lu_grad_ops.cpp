// The gradient rules of the LU family (linalg_lu_ops.cpp), PyTorch's formulas as graph code
// over FusedMatMul, Trilu, Slice, Concat and the family's own LUUnpack and TriangularSolve:
// LUFactor (torch's linalg_lu_backward, one formula for square, wide and tall matrices), LUUnpack,
// TriangularSolve, Det and SlogDet (through A^-T from a factorization of A); and MatrixExp's
// (linalg_matrix_exp_ops.cpp), torch's differential of an analytic matrix function.
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
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

// A = P L U with L = [L1; L2] [m, k] unit lower, U = [U1 U2] [k, n] upper (L1, U1 [k, k]; L2
// or U2 or both empty): dA from dL and dU, torch's linalg_lu_backward for every shape at
// once. With dL1 = tril(dL1, -1), dU1 = triu(dU1) and
//   phi = tril(L1^T dL1 - dU2 U2^T, -1) + triu(dU1 U1^T - L2^T dL2),
// P^T dA = [[L1^-T phi U1^-T, L1^-T dU2], [dL2 U1^-T, 0]]. (Square: torch's first formula;
// wide, L2 empty, and tall, U2 empty: its other two, rearranged.)
Value* lu_backward(GradContext& g, Value* dl, Value* du, Value* p, Value* l, Value* u, Value* lu) {
  Value* k = size_of(g, l, -1);
  Value* l1 = head(g, l, -2, k);
  Value* l2 = tail(g, l, -2, k);
  Value* u1 = head(g, u, -1, k);
  Value* u2 = tail(g, u, -1, k);
  Value* dl1 = trilu(g, head(g, dl, -2, k), false, -1);
  Value* dl2 = tail(g, dl, -2, k);
  Value* du1 = trilu(g, head(g, du, -1, k), true, 0);
  Value* du2 = tail(g, du, -1, k);
  Value* lower = g.emit("Sub", {matmul(g, l1, dl1, true, false), matmul(g, du2, u2, false, true)});
  Value* upper = g.emit("Sub", {matmul(g, du1, u1, false, true), matmul(g, l2, dl2, true, false)});
  Value* phi = g.emit("Add", {trilu(g, lower, false, -1), trilu(g, upper, true, 0)});
  Value* x11 =
      tri_solve(g, l1, tri_solve(g, u1, phi, true, false, false, true), false, true, true, true);
  Value* x12 = tri_solve(g, l1, du2, false, true, true, true);
  Value* x21 = tri_solve(g, u1, dl2, true, false, false, true);
  Value* x22 = g.emit("ZerosLike", {tail(g, tail(g, lu, -2, k), -1, k)}, {}, kOwnDomain);
  Value* x = concat(g, concat(g, x11, x21, -2), concat(g, x12, x22, -2), -1);
  return matmul(g, p, x, false, false);
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

// x^T of a batch of matrices: a Transpose of the last two dims where x's rank is known, else
// the product x^T I.
Value* matrix_transpose(GradContext& g, Value* x) {
  if (x->has_shape && x->shape.size() >= 2) {
    std::vector<int64_t> perm(x->shape.size());
    for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(i);
    std::swap(perm[perm.size() - 2], perm[perm.size() - 1]);
    return g.emit("Transpose", {x}, {{"perm", Attribute::make_ints(perm)}});
  }
  Value* ones =
      g.emit("Add", {g.emit("ZerosLike", {x}, {}, kOwnDomain), g.scalar_constant(1.0, x)});
  Value* eye = trilu(g, trilu(g, ones, true, 0), false, 0);
  return matmul(g, x, eye, true, false);
}

}  // namespace

// (LU, pivots, info) = LUFactor(A): torch's lu_factor_ex_backward, dL = dLU[..., :, :k] and
// dU = dLU[..., :k, :] through linalg_lu_backward.
void grad_lu_factor(GradContext& g) {
  Value* dlu = g.output_grad(0);
  if (!dlu) return;
  require_inputs(g, 1);
  Value* lu = g.output(0);
  Value* piv = g.forward_output(1, "lu_pivots");
  std::vector<Value*> lup = g.emit_multi("LUUnpack", {lu, piv}, {true, true, true}, {}, kOwnDomain);
  Value* k = size_of(g, lup[0], -1);
  g.set_input_grad(
      0, lu_backward(g, head(g, dlu, -1, k), head(g, dlu, -2, k), lup[2], lup[0], lup[1], lu));
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

// Y = MatrixExp(A): torch's linalg_matrix_exp_differential (adjoint), dA = the upper right
// n x n block of exp([[A^T, dY], [0, A^T]]).
void grad_matrix_exp(GradContext& g) {
  Value* dy = g.output_grad(0);
  if (!dy) return;
  require_inputs(g, 1);
  Value* at = matrix_transpose(g, g.input(0));
  Value* zeros = g.emit("ZerosLike", {at}, {}, kOwnDomain);
  Value* block = concat(g, concat(g, at, dy, -1), concat(g, zeros, at, -1), -2);
  Value* e = g.emit("MatrixExp", {block}, {}, kOwnDomain);
  Value* n = size_of(g, at, -1);
  g.set_input_grad(0, tail(g, head(g, e, -2, n), -1, n));
}

}  // namespace ortmodule
