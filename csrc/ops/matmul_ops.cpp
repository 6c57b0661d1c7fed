// Gemm, MatMul and com.microsoft FusedMatMul (used by MatMul's gradient). float16 and
// bfloat16 products compute natively (tensor-core GEMMs on CUDA, float32 accumulation; on
// the CPU bfloat16 operands go to the packed bfloat16 GEMM where the CPU has AVX512-BF16
// (kernels/cpu/bgemm.h), and otherwise the float32 kernel runs between exact widening and
// one rounding, ops/widened_kernel.h).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "grad/grad_context.h"
#include "kernels/cpu/bgemm.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/matmul.h"
#include "kernels/gemm.h"
#include "ops/op_utils.h"
#include "ops/ops.h"
#include "ops/widened_kernel.h"

namespace ortmodule {

namespace {

// Whether the step's product reads bfloat16 operands as they are, through the packed bfloat16
// GEMM (the shape functions require the operands' dtypes to agree).
bool bf16_native(const OpContext& ctx) {
  return ctx.in(0).dtype() == DType::BFloat16 && packed_bgemm_available();
}

// The float32 sums of a bfloat16 product, rounded once into output 0.
template <typename Fn>
void round_sum_into_output(OpContext& ctx, const Fn& compute_sum) {
  Tensor sum = Tensor::empty(DType::Float32, ctx.out(0).shape());
  compute_sum(sum.data<float>());
  round_from_float32(sum, ctx.out(0));
}

const uint16_t* bits(const Tensor& t) { return t.data<uint16_t>(); }

// The bfloat16 product alpha * op(a) op(b) of inputs 0 and 1 (shapes a, b; y its shape) rounded
// once into output 0: a batch of small products (attention's per-head ones) each rounded while
// in cache, else all float32 sums first.
void round_product_into_output(OpContext& ctx, const Shape& a, bool ta, const Shape& b, bool tb,
                               float alpha, const Shape& y) {
  if (ctx.out(0).dtype() == DType::BFloat16 &&
      batched_matmul_round_bf16(a, bits(ctx.in(0)), ta, b, bits(ctx.in(1)), tb, alpha, y,
                                ctx.out(0).data<uint16_t>()))
    return;
  round_sum_into_output(ctx, [&](float* sum) {
    batched_matmul<float, uint16_t>(a, bits(ctx.in(0)), ta, b, bits(ctx.in(1)), tb, alpha, y, sum);
  });
}

}  // namespace

// ---- Gemm: y[M,N] = alpha * op(a) @ op(b) + beta * c ----

std::vector<OutputInfo> shape_gemm(const OpContext& ctx) {
  expect_same_dtype(ctx, 1);
  const Shape& a = ctx.in(0).shape();
  const Shape& b = ctx.in(1).shape();
  if (a.size() != 2 || b.size() != 2) {
    ctx.fail("inputs must be 2-D, got " + shape_str(a) + " and " + shape_str(b));
  }
  bool ta = ctx.node.attr_int("transA", 0), tb = ctx.node.attr_int("transB", 0);
  int64_t M = ta ? a[1] : a[0], K = ta ? a[0] : a[1];
  int64_t Kb = tb ? b[1] : b[0], N = tb ? b[0] : b[1];
  if (K != Kb) {
    ctx.fail("inner dimensions differ: A " + shape_str(a) + (ta ? " (transposed)" : "") + ", B " +
             shape_str(b) + (tb ? " (transposed)" : ""));
  }
  if (ctx.has_input(2)) {
    expect_same_dtype(ctx, 2);
    if (broadcast_shapes(ctx, ctx.in(2).shape(), {M, N}) != Shape{M, N})
      ctx.fail("C (input 2) of shape " + shape_str(ctx.in(2).shape()) +
               " does not broadcast to the output shape " + shape_str({M, N}));
  }
  return one_output(ctx.in(0).dtype(), {M, N});
}

namespace {
// Gemm over bfloat16 operands: alpha * op(a) op(b) in float32, plus beta * c (widened), rounded
// once.
void bf16_gemm(OpContext& ctx) {
  const Tensor& a = ctx.in(0);
  const Tensor& b = ctx.in(1);
  const bool ta = ctx.node.attr_int("transA", 0), tb = ctx.node.attr_int("transB", 0);
  const double alpha = ctx.node.attr_float("alpha", 1.0), beta = ctx.node.attr_float("beta", 1.0);
  const Shape& y_shape = ctx.out(0).shape();
  round_sum_into_output(ctx, [&](float* sum) {
    batched_matmul<float, uint16_t>(a.shape(), bits(a), ta, b.shape(), bits(b), tb,
                                    static_cast<float>(alpha), y_shape, sum);
    if (!ctx.has_input(2) || beta == 0.0) return;
    Tensor c = widen_to_float32(ctx.in(2));
    const float bt = static_cast<float>(beta);
    const int64_t N = y_shape[1];
    if (c.numel() == N && N > 1 && c.shape().back() == N) {
      // A bias row (Linear layers exported as Gemm): added row by row, in threaded chunks.
      float* cp = c.data<float>();
      for (int64_t j = 0; j < N; ++j) cp[j] *= bt;
      bias_activation<float>(y_shape[0], N, sum, cp, MatMulActivation::kNone, nullptr, sum);
      return;
    }
    binary_map(c.shape(), c.data<float>(), y_shape, sum, y_shape, sum,
               [bt](float p, float q) { return q + bt * p; });
  });
}
}  // namespace

void cpu_gemm(OpContext& ctx) {
  if (bf16_native(ctx)) return bf16_gemm(ctx);
  if (has_low_precision(ctx)) return run_widened(ctx, cpu_gemm);
  const Tensor& a = ctx.in(0);
  const Tensor& b = ctx.in(1);
  Tensor& y = ctx.out(0);
  bool ta = ctx.node.attr_int("transA", 0), tb = ctx.node.attr_int("transB", 0);
  double alpha = ctx.node.attr_float("alpha", 1.0), beta = ctx.node.attr_float("beta", 1.0);
  const int64_t M = y.dim(0), N = y.dim(1), K = ta ? a.dim(0) : a.dim(1);
  ORTM_DISPATCH_FLOAT(a.dtype(), ctx, {
    scalar_t* yp = y.data<scalar_t>();
    scalar_t gemm_beta = 0;
    if (ctx.has_input(2) && beta != 0.0) {
      const Tensor& c = ctx.in(2);
      scalar_t bt = static_cast<scalar_t>(beta);
      binary_map(c.shape(), c.data<scalar_t>(), Shape{}, c.data<scalar_t>(), y.shape(), yp,
                 [bt](scalar_t p, scalar_t) { return bt * p; });
      gemm_beta = 1;
    }
    gemm<scalar_t>(ta, tb, M, N, K, static_cast<scalar_t>(alpha), a.data<scalar_t>(), a.dim(1),
                   b.data<scalar_t>(), b.dim(1), gemm_beta, yp, N);
  });
}

void grad_gemm(GradContext& g) {
  Node& n = g.node();
  bool ta = n.attr_int("transA", 0), tb = n.attr_int("transB", 0);
  double alpha = n.attr_float("alpha", 1.0), beta = n.attr_float("beta", 1.0);
  Value* dy = g.output_grad(0);
  Value* a = g.input(0);
  Value* b = g.input(1);
  auto gemm_node = [&](Value* p, Value* q, bool tp, bool tq) {
    return g.emit("Gemm", {p, q},
                  {{"transA", Attribute::make_int(tp)},
                   {"transB", Attribute::make_int(tq)},
                   {"alpha", Attribute::make_float(alpha)}});
  };
  if (g.needs_grad(0)) {
    // d op(A) = dY op(B)^T, then undo op on A.
    g.set_input_grad(0, ta ? gemm_node(b, dy, tb, true) : gemm_node(dy, b, false, !tb));
  }
  if (g.needs_grad(1)) {
    // d op(B) = op(A)^T dY, then undo op on B.
    g.set_input_grad(1, tb ? gemm_node(dy, a, true, ta) : gemm_node(a, dy, !ta, false));
  }
  if (g.needs_grad(2)) {
    Value* dc = dy;
    if (beta != 1.0) dc = g.emit("Mul", {dy, g.scalar_constant(beta, dy)});
    g.set_input_grad(2, g.sum_to_shape(dc, g.input(2)));
  }
}

// ---- MatMul / FusedMatMul ----

std::vector<OutputInfo> shape_fused_matmul(const OpContext& ctx) {
  expect_same_dtype(ctx, 1);
  Shape a = ctx.in(0).shape(), b = ctx.in(1).shape();
  bool ta = ctx.node.attr_int("transA", 0), tb = ctx.node.attr_int("transB", 0);
  bool a_vec = a.size() == 1, b_vec = b.size() == 1;
  if (a.empty() || b.empty()) ctx.fail("inputs must have rank >= 1");
  if (a_vec) a = {1, a[0]};
  if (b_vec) b = {b[0], 1};
  int64_t M = ta ? a[a.size() - 1] : a[a.size() - 2], K = ta ? a[a.size() - 2] : a[a.size() - 1];
  int64_t Kb = tb ? b[b.size() - 1] : b[b.size() - 2], N = tb ? b[b.size() - 2] : b[b.size() - 1];
  if (K != Kb) {
    ctx.fail("inner dimensions differ: " + shape_str(ctx.in(0).shape()) + " @ " +
             shape_str(ctx.in(1).shape()));
  }
  Shape batch = broadcast_shapes(ctx, Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2));
  if (!a_vec) batch.push_back(M);
  if (!b_vec) batch.push_back(N);
  return one_output(ctx.in(0).dtype(), batch);
}

void cpu_fused_matmul(OpContext& ctx) {
  const bool native = bf16_native(ctx);
  if (!native && has_low_precision(ctx)) return run_widened(ctx, cpu_fused_matmul);
  Shape a = ctx.in(0).shape(), b = ctx.in(1).shape();
  bool ta = ctx.node.attr_int("transA", 0), tb = ctx.node.attr_int("transB", 0);
  if (a.size() == 1) a = {1, a[0]};
  if (b.size() == 1) b = {b[0], 1};
  Shape batch = broadcast_shapes(ctx, Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2));
  Shape y = batch;
  y.push_back(ta ? a[a.size() - 1] : a[a.size() - 2]);
  y.push_back(tb ? b[b.size() - 2] : b[b.size() - 1]);
  double alpha = ctx.node.attr_float("alpha", 1.0);
  if (native) return round_product_into_output(ctx, a, ta, b, tb, static_cast<float>(alpha), y);
  ORTM_DISPATCH_FLOAT(
      ctx.in(0).dtype(), ctx,
      batched_matmul<scalar_t>(a, ctx.in(0).data<scalar_t>(), ta, b, ctx.in(1).data<scalar_t>(), tb,
                               static_cast<scalar_t>(alpha), y, ctx.out(0).data<scalar_t>()));
}

// ---- FusedMatMulBias (ai.ortmodule): act(FusedMatMul(a, b) + bias), pre-activation too ----
// Made by passes/matmul_bias_fusion.h from a product, the Add of its bias and the activation
// after it, once gradients are built: the GEMM accumulates onto the bias and the activation
// runs on each block of rows while it is in cache. Output 1 (optional) is the value before
// the activation, for the gradient rules that read it.

MatMulActivation matmul_activation(const OpContext& ctx) {
  const std::string a = ctx.node.attr_string("activation", "");
  if (a.empty()) return MatMulActivation::kNone;
  if (a == "Relu") return MatMulActivation::kRelu;
  if (a == "Gelu") return MatMulActivation::kGelu;
  if (a == "GeluTanh") return MatMulActivation::kGeluTanh;
  ctx.fail("activation=\"" + a + "\" is not one of \"\", \"Relu\", \"Gelu\", \"GeluTanh\"");
}

std::vector<OutputInfo> shape_fused_matmul_bias(const OpContext& ctx) {
  matmul_activation(ctx);
  std::vector<OutputInfo> out = shape_fused_matmul(ctx);
  const Shape& y = out[0].shape;
  expect_same_dtype(ctx, 2);
  const Shape& bias = ctx.in(2).shape();
  if (y.empty() || bias != Shape{y.back()})
    ctx.fail("bias (input 2) of shape " + shape_str(bias) +
             " is not [N] for the product of shape " + shape_str(y));
  out.push_back(out[0]);
  return out;
}

namespace {

// y = act(alpha * op(a) op(b) + bias) into ctx's output 0, the sum into output 1 when there
// is one (float32, float64).
void biased_product(OpContext& ctx, MatMulActivation act) {
  const Tensor& a = ctx.in(0);
  const Tensor& b = ctx.in(1);
  Tensor& y = ctx.out(0);
  const bool ta = ctx.node.attr_int("transA", 0), tb = ctx.node.attr_int("transB", 0);
  const double alpha = ctx.node.attr_float("alpha", 1.0);
  const int64_t N = y.shape().back(), rows = N ? y.numel() / N : 0;
  ORTM_DISPATCH_FLOAT(a.dtype(), ctx, {
    scalar_t* pre = ctx.has_output(1) ? ctx.out(1).data<scalar_t>() : nullptr;
    const scalar_t* bias = ctx.in(2).data<scalar_t>();
    if (!ta && a.rank() >= 2 && b.rank() == 2) {
      // Every row of a times one weight matrix: one GEMM over the rows, in blocks.
      matmul_bias_activation<scalar_t>(rows, N, a.shape().back(), a.data<scalar_t>(),
                                       b.data<scalar_t>(), tb, static_cast<scalar_t>(alpha), bias,
                                       act, pre, y.data<scalar_t>());
    } else {
      cpu_fused_matmul(ctx);
      scalar_t* yp = y.data<scalar_t>();
      bias_activation<scalar_t>(rows, N, yp, bias, act, pre, yp);
    }
  });
}

// The product of bfloat16 operands through the packed bfloat16 GEMM, into sum (float32).
void product_bf16(OpContext& ctx, Tensor& sum) {
  const Tensor& a = ctx.in(0);
  const Tensor& b = ctx.in(1);
  const bool ta = ctx.node.attr_int("transA", 0), tb = ctx.node.attr_int("transB", 0);
  const float alpha = static_cast<float>(ctx.node.attr_float("alpha", 1.0));
  Shape as = a.shape(), bs = b.shape();
  if (!ta && as.size() > 2 && bs.size() == 2) as = {a.numel() / as.back(), as.back()};  // one GEMM
  if (as.size() == 1) as = {1, as[0]};
  if (bs.size() == 1) bs = {bs[0], 1};
  Shape ys = matmul_batch_shape(as, bs);
  ys.push_back(ta ? as[as.size() - 1] : as[as.size() - 2]);
  ys.push_back(tb ? bs[bs.size() - 2] : bs[bs.size() - 1]);
  batched_matmul<float, uint16_t>(as, bits(a), ta, bs, bits(b), tb, alpha, ys, sum.data<float>());
}

// The 16-bit epilogue of a biased product, chunks of rows at a time while they are in cache:
// v = sum + bias (float32; no bias: v = sum), pre = v rounded once; y = act(pre widened)
// rounded once, or pre without an activation. pre (output 1) may be null. sum is overwritten.
void round_biased_activate(int64_t rows, int64_t N, float* sum, const float* bias,
                           MatMulActivation act, Tensor* pre, Tensor& y) {
  const DType type = y.dtype();
  uint16_t* yp = y.data<uint16_t>();
  uint16_t* pp = pre ? pre->data<uint16_t>() : nullptr;
  const int64_t grain = std::max<int64_t>(1, (int64_t{16} << 10) / std::max<int64_t>(N, 1));
  const auto fused = vec_kernels().bias_round_gelu_bf16;
  if (fused && type == DType::BFloat16 && act != MatMulActivation::kRelu) {
    // In registers, row by row: the same bits as the passes below.
    const VecGelu gelu = act == MatMulActivation::kGelu       ? VecGelu::kErf
                         : act == MatMulActivation::kGeluTanh ? VecGelu::kTanh
                                                              : VecGelu::kNone;
    parallel_for(0, rows, grain, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        fused(N, sum + r * N, bias, gelu, pp ? pp + r * N : nullptr, yp + r * N);
    });
    return;
  }
  parallel_for(0, rows, grain, [&](int64_t r0, int64_t r1) {
    float* s = sum + r0 * N;
    const int64_t n = (r1 - r0) * N;
    if (bias)
      for (int64_t i = 0; i < r1 - r0; ++i)
        for (int64_t j = 0; j < N; ++j) s[i * N + j] += bias[j];
    // Without pre, y holds the rounded sum until the activation's result replaces it.
    uint16_t* rounded = pp ? pp + r0 * N : yp + r0 * N;
    round_to_16bit(type == DType::BFloat16, n, s, rounded);
    if (act == MatMulActivation::kNone) {
      if (pp) std::copy(rounded, rounded + n, yp + r0 * N);
      return;
    }
    widen_16bit(type == DType::BFloat16, n, rounded, s);
    apply_activation(act, n, s, s);  // serial here: a nested parallel region
    round_to_16bit(type == DType::BFloat16, n, s, yp + r0 * N);
  });
}

// float16/bfloat16 operands: the biased sum computed in float32 (by the bfloat16 GEMM, or from
// the exactly widened operands) and rounded once (as eager's addmm rounds a Linear's output);
// the activation reads the rounded sum, computes in float32 (the float32 epilogue's
// activation) and is rounded once.
void biased_product_low(OpContext& ctx, MatMulActivation act) {
  Tensor& y = ctx.out(0);
  Tensor sum = Tensor::empty(DType::Float32, y.shape());
  const int64_t N = y.shape().back(), rows = N ? y.numel() / N : 0;
  Tensor* pre = ctx.has_output(1) ? &ctx.out(1) : nullptr;
  if (bf16_native(ctx)) {
    product_bf16(ctx, sum);
    const Tensor bias = widen_to_float32(ctx.in(2));
    round_biased_activate(rows, N, sum.data<float>(), bias.data<float>(), act, pre, y);
    return;
  }
  std::vector<Tensor> wide(ctx.num_inputs());
  OpContext w{ctx.node, ctx.inputs, {sum}, ctx.seed};
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) continue;
    wide[i] = widen_to_float32(ctx.in(i));
    w.inputs[i] = &wide[i];
  }
  biased_product(w, MatMulActivation::kNone);
  round_biased_activate(rows, N, sum.data<float>(), nullptr, act, pre, y);
}

}  // namespace

void cpu_fused_matmul_bias(OpContext& ctx) {
  const MatMulActivation act = matmul_activation(ctx);
  if (has_low_precision(ctx)) return biased_product_low(ctx, act);
  biased_product(ctx, act);
}

// ---- FusedMatMulSumToShape (ai.ortmodule): FusedMatMul summed down to a shape ----
// The gradient of a MatMul operand that was broadcast over batch dims (a Linear's weight over
// [batch, sequence, features] inputs): one kernel call, no [...batch, M, N] temporary.

std::vector<OutputInfo> shape_fused_matmul_sum(const OpContext& ctx) {
  expect_same_dtype(ctx, 1);
  const Shape& a = ctx.in(0).shape();
  const Shape& b = ctx.in(1).shape();
  if (a.size() < 2 || b.size() < 2) {
    ctx.fail("inputs must have rank >= 2, got " + shape_str(a) + " and " + shape_str(b));
  }
  Shape product = shape_fused_matmul(ctx)[0].shape;
  Shape target = ctx.in(2).to_int_vector();
  check_shape(ctx, target, "shape input (input 2)");
  bool sums_to = target.size() >= 2 && target.size() <= product.size();
  for (size_t k = 0; sums_to && k < target.size(); ++k) {
    const int64_t t = target[target.size() - 1 - k], d = product[product.size() - 1 - k];
    sums_to = t == d || (k >= 2 && t == 1);
  }
  if (!sums_to) {
    ctx.fail("shape " + shape_str(target) + " is not the product's shape " + shape_str(product) +
             " with batch dims summed away");
  }
  return one_output(ctx.in(0).dtype(), target);
}

void cpu_fused_matmul_sum(OpContext& ctx) {
  const bool native = bf16_native(ctx);
  if (!native && has_low_precision(ctx)) return run_widened(ctx, cpu_fused_matmul_sum);
  bool ta = ctx.node.attr_int("transA", 0), tb = ctx.node.attr_int("transB", 0);
  double alpha = ctx.node.attr_float("alpha", 1.0);
  if (native) {
    // Nothing summed (the gradient of an operand that was not broadcast): the plain product.
    Shape full = matmul_batch_shape(ctx.in(0).shape(), ctx.in(1).shape());
    const Shape& ys = ctx.out(0).shape();
    full.push_back(ys[ys.size() - 2]);
    full.push_back(ys.back());
    if (shape_numel(full) == ctx.out(0).numel())
      return round_product_into_output(ctx, ctx.in(0).shape(), ta, ctx.in(1).shape(), tb,
                                       static_cast<float>(alpha), full);
    round_sum_into_output(ctx, [&](float* sum) {
      batched_matmul_sum<float, uint16_t>(ctx.in(0).shape(), bits(ctx.in(0)), ta, ctx.in(1).shape(),
                                          bits(ctx.in(1)), tb, static_cast<float>(alpha),
                                          ctx.out(0).shape(), sum);
    });
    return;
  }
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx,
                      batched_matmul_sum<scalar_t>(
                          ctx.in(0).shape(), ctx.in(0).data<scalar_t>(), ta, ctx.in(1).shape(),
                          ctx.in(1).data<scalar_t>(), tb, static_cast<scalar_t>(alpha),
                          ctx.out(0).shape(), ctx.out(0).data<scalar_t>()));
}

namespace {
// An int64 Constant node (axes for the rank-1 promotions below).
Value* ints_constant(GradContext& g, const std::vector<int64_t>& values) {
  Tensor t = Tensor::empty(DType::Int64, {static_cast<int64_t>(values.size())});
  for (size_t i = 0; i < values.size(); ++i) t.data<int64_t>()[i] = values[i];
  return g.emit("Constant", {}, {{"value", Attribute::make_tensor(t)}});
}

// A missing operand (a malformed node) is not rank 1; the emitted nodes then fail cleanly.
bool is_rank1(Value* v) { return v && v->has_shape && v->shape.size() == 1; }
}  // namespace

void grad_matmul(GradContext& g) {
  Value* dy = g.output_grad(0);
  Value* a = g.input(0);
  Value* b = g.input(1);
  bool ta = g.node().attr_int("transA", 0), tb = g.node().attr_int("transB", 0);
  double alpha = g.node().attr_float("alpha", 1.0);
  // Each gradient is a product summed down to its operand's (promoted) shape in one node.
  auto fused_sum = [&](Value* p, Value* q, bool tp, bool tq, Value* like) {
    return g.emit("FusedMatMulSumToShape", {p, q, g.shape_of(like)},
                  {{"transA", Attribute::make_int(tp)},
                   {"transB", Attribute::make_int(tq)},
                   {"alpha", Attribute::make_float(alpha)}},
                  "ai.ortmodule");
  };
  // Rank-1 operands are promoted as numpy does (a: [K] -> [1, K], b: [K] -> [K, 1],
  // the promoted dim dropped from y); the rules below run on the promoted forms and
  // reshape the gradient back.
  const bool a_vec = is_rank1(a), b_vec = is_rank1(b);
  if ((a_vec || b_vec) && (ta || tb)) g.fail("transposed rank-1 operands are not supported");
  Value* a2 = a_vec ? g.emit("Unsqueeze", {a, ints_constant(g, {0})}) : a;
  Value* b2 = b_vec ? g.emit("Unsqueeze", {b, ints_constant(g, {1})}) : b;
  if (a_vec || b_vec) {
    std::vector<int64_t> axes = a_vec && b_vec ? std::vector<int64_t>{0, 1}
                                : a_vec        ? std::vector<int64_t>{-2}
                                               : std::vector<int64_t>{-1};
    dy = g.emit("Unsqueeze", {dy, ints_constant(g, axes)});
  }
  auto restore = [&](Value* grad, Value* promoted, Value* original) {
    return promoted == original ? grad : g.emit("Reshape", {grad, g.shape_of(original)});
  };
  if (g.needs_grad(0)) {
    Value* da = ta ? fused_sum(b2, dy, tb, true, a2) : fused_sum(dy, b2, false, !tb, a2);
    g.set_input_grad(0, restore(da, a2, a));
  }
  if (g.needs_grad(1)) {
    Value* db = tb ? fused_sum(dy, a2, true, ta, b2) : fused_sum(a2, dy, !ta, false, b2);
    g.set_input_grad(1, restore(db, b2, b));
  }
}

}  // namespace ortmodule
