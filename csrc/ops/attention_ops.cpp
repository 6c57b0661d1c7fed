// The engine's attention-scores softmax (what passes/attention_softmax_fusion.h makes of
// Softmax(Add(Mul(x, c), mask))), with its gradient.
//
// ScaledMaskedSoftmax(x, mask?, fill?; scale) = Softmax(scale * x + mask, axis=-1), x and
//   mask broadcasting against each other (the output has the broadcast shape). A boolean
//   mask keeps the elements where it is true: Softmax(Where(mask, scale * x, fill)), fill a
//   one-element tensor of x's dtype (torch's masked attention scores,
//   scaled_dot_product_attention's boolean attn_mask, masked_fill of the scores).
// ScaledMaskedSoftmaxGrad(dY, Y, mask?; scale) = scale * Y * (dY - sum(dY * Y, axis=-1)),
//   and 0 where the boolean mask (when given) drops the element.
#include <atomic>
#include <cstdint>

#include "grad/grad_context.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/broadcast.h"
#include "kernels/cpu/softmax.h"
#include "kernels/math/random.h"
#include "ops/attention_probs.h"
#include "ops/op_utils.h"
#include "ops/ops.h"

namespace ortmodule {

namespace {

bool boolean_mask(const OpContext& ctx) {
  return ctx.has_input(1) && ctx.in(1).dtype() == DType::Bool;
}

// The fill value of a boolean mask (input 2), checked.
double mask_fill(const OpContext& ctx) {
  if (!ctx.has_input(2))
    ctx.fail(
        "input 1 (mask) is boolean, so input 2 (fill: the value of the elements the "
        "mask drops) is required");
  const Tensor& fill = ctx.in(2);
  if (fill.numel() != 1)
    ctx.fail("input 2 (fill) has shape " + shape_str(fill.shape()) + "; expected one element");
  return fill.float_at(0);
}

}  // namespace

std::vector<OutputInfo> shape_scaled_masked_softmax(const OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  Shape out = x.shape();
  if (ctx.has_input(1)) {
    if (boolean_mask(ctx)) {
      expect_same_dtype(ctx, 2);
      mask_fill(ctx);
    } else {
      expect_same_dtype(ctx, 1);
      if (ctx.has_input(2))
        ctx.fail("input 2 (fill) is given, but input 1 (mask) is " + dtype_name(ctx.in(1).dtype()) +
                 "; a fill goes with a boolean mask only");
    }
    out = broadcast_shapes(ctx, out, ctx.in(1).shape());
  }
  if (out.empty())
    ctx.fail("the softmax runs along the last axis, but the inputs are scalars (rank 0)");
  return one_output(x.dtype(), out);
}

void cpu_scaled_masked_softmax(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  const Tensor* mask = ctx.has_input(1) ? &ctx.in(1) : nullptr;
  Tensor& y = ctx.out(0);
  ScaledMaskedSoftmaxShape shape;
  shape.out = y.shape();
  shape.x_strides = broadcast_strides(x.shape(), shape.out);
  if (mask) shape.mask_strides = broadcast_strides(mask->shape(), shape.out);
  const double scale = ctx.node.attr_float("scale", 1.0);
  if (mask && mask->dtype() == DType::Bool) {
    const double fill = mask_fill(ctx);
    ORTM_DISPATCH_FLOAT(
        x.dtype(), ctx,
        scaled_kept_softmax_forward<scalar_t>(shape, static_cast<scalar_t>(scale),
                                              x.data<scalar_t>(), mask->data<uint8_t>(),
                                              static_cast<scalar_t>(fill), y.data<scalar_t>()));
    return;
  }
  ORTM_DISPATCH_FLOAT(x.dtype(), ctx,
                      scaled_masked_softmax_forward<scalar_t>(
                          shape, static_cast<scalar_t>(scale), x.data<scalar_t>(),
                          mask ? mask->data<scalar_t>() : nullptr, y.data<scalar_t>()));
}

std::vector<OutputInfo> shape_scaled_masked_softmax_grad(const OpContext& ctx) {
  expect_same_dtype(ctx, 1);
  if (ctx.in(0).shape() != ctx.in(1).shape())
    ctx.fail("input 0 (dY) has shape " + shape_str(ctx.in(0).shape()) + ", input 1 (Y) has " +
             shape_str(ctx.in(1).shape()) + "; they must match");
  if (ctx.in(1).rank() == 0) ctx.fail("input 1 (Y) is a scalar; expected rank >= 1");
  if (ctx.has_input(2)) {
    if (ctx.in(2).dtype() != DType::Bool)
      ctx.fail("input 2 (mask) is " + dtype_name(ctx.in(2).dtype()) + "; expected bool");
    if (broadcast_shapes(ctx, ctx.in(1).shape(), ctx.in(2).shape()) != ctx.in(1).shape())
      ctx.fail("input 2 (mask) has shape " + shape_str(ctx.in(2).shape()) +
               ", which does not broadcast to Y's " + shape_str(ctx.in(1).shape()));
  }
  return one_output(ctx.in(0).dtype(), ctx.in(0).shape());
}

void cpu_scaled_masked_softmax_grad(OpContext& ctx) {
  const Tensor& dy = ctx.in(0);
  const Tensor& y = ctx.in(1);
  const int64_t dim = y.shape().back();
  const int64_t rows = dim ? y.numel() / dim : 0;
  const double scale = ctx.node.attr_float("scale", 1.0);
  if (ctx.has_input(2)) {
    ScaledMaskedSoftmaxShape shape;
    shape.out = y.shape();
    shape.mask_strides = broadcast_strides(ctx.in(2).shape(), shape.out);
    ORTM_DISPATCH_FLOAT(
        dy.dtype(), ctx,
        scaled_kept_softmax_backward<scalar_t>(
            shape, static_cast<scalar_t>(scale), dy.data<scalar_t>(), y.data<scalar_t>(),
            ctx.in(2).data<uint8_t>(), ctx.out(0).data<scalar_t>()));
    return;
  }
  ORTM_DISPATCH_FLOAT(dy.dtype(), ctx,
                      scaled_masked_softmax_backward<scalar_t>(
                          rows, dim, static_cast<scalar_t>(scale), dy.data<scalar_t>(),
                          y.data<scalar_t>(), ctx.out(0).data<scalar_t>()));
}

// d(scale * x + mask) = y * (dy - sum(dy * y)): times scale for x, as it is for the mask
// (an additive mask rarely needs one; a learned bias does). One node serves both at scale 1.
// A boolean mask (with its fill, input 2) has no gradient and zeroes x's where it drops x.
void grad_scaled_masked_softmax(GradContext& g) {
  const double scale = g.node().attr_float("scale", 1.0);
  const bool boolean = g.input(2) != nullptr;
  auto softmax_grad = [&](double s) {
    std::vector<Value*> inputs = {g.output_grad(0), g.output(0)};
    if (boolean) inputs.push_back(g.input(1));
    return g.emit("ScaledMaskedSoftmaxGrad", inputs, {{"scale", Attribute::make_float(s)}},
                  "ai.ortmodule");
  };
  Value* dx = g.needs_grad(0) ? softmax_grad(scale) : nullptr;
  if (dx) g.set_input_grad(0, g.sum_to_shape(dx, g.input(0)));
  if (g.input(1) && !boolean && g.needs_grad(1)) {
    Value* dmask = dx && scale == 1.0 ? dx : softmax_grad(1.0);
    g.set_input_grad(1, g.sum_to_shape(dmask, g.input(1)));
  }
}

// ---- FusedAttention ----
//
// FusedAttention(Q, K, V, mask?, fill?; scale) -> (Y, probs?):
//   Y = ScaledMaskedSoftmax(Q K^T, mask, fill; scale) V
// Q: [..., S, D], K: [..., T, D], V: [..., T, Dv] with the same leading dims; the mask as
// ScaledMaskedSoftmax's, broadcasting to the scores [..., S, T]. Output 1 (added by the
// gradient rule) holds the softmax for backward, [..., S, T], while that is at most
// attention_probs_limit() bytes, and is empty ([0]) above: backward then recomputes it
// (kernels/cpu/attention.h).
// bshd (a bitmask, default 0): operands laid out [batch, seq, heads, dim] and read as the
//   [batch, heads, seq, dim] ones above (1 Q, 2 K, 4 V, 8 Y), the layout models give heads
//   before their transposes, which the fusion then drops.
// FusedAttentionGrad(dY, Q, K, V, probs, mask?, fill?; scale, dropout, bshd) -> (dQ?, dK?,
//   dV?), dY in Y's layout and each gradient in its input's.
// mask_window (default 0): 1 where the mask is the diagonal row of a mask that depends only on
//   j - i (passes/attention_mask_window.h): S + T - 1 values W, query i and key j masked by
//   W[S - 1 - i + j], for every batch entry and head.
// FusedAttentionDropout(Q, K, V, mask?, fill?; scale, dropout) is FusedAttention with
//   Dropout(ratio = dropout) on the softmax before the product with V, drawing the elements
//   the replaced Dropout node drew (its random stream); its gradient draws them again.

namespace {

std::atomic<int64_t> g_attention_probs_limit{kDefaultAttentionProbsLimit};

// Attribute bshd: which operands are laid out [batch, seq, heads, dim] (a bit each: 1 Q,
// 2 K, 4 V, 8 the output Y, with dY and the gradients of the flagged inputs alike), read as the
// [batch, heads, seq, dim] operand the attention takes, so that the transposes models put
// around attention's heads are not run (passes/attention_fusion.cpp).
constexpr int64_t kBshdQ = 1, kBshdK = 2, kBshdV = 4, kBshdY = 8;

// The [batch, heads, seq, dim] shape an operand stands for: its own, or with a bshd bit its
// dims 1 and 2 swapped.
Shape logical_shape(const OpContext& ctx, const Shape& shape, bool bshd, const char* name) {
  if (!bshd) return shape;
  if (shape.size() != 4)
    ctx.fail(std::string(name) + " is flagged [batch, seq, heads, dim] (attribute bshd) but has " +
             "shape " + shape_str(shape) + "; expected rank 4");
  return {shape[0], shape[2], shape[1], shape[3]};
}

// The physical shape of an output or gradient over the output's leading dims `lead`
// ([batch, heads] with bshd): [lead..., rows, cols], or [batch, rows, heads, cols].
Shape physical_shape(const Shape& lead, int64_t rows, int64_t cols, bool bshd) {
  if (bshd) return {lead[0], rows, lead[1], cols};
  Shape out = lead;
  out.push_back(rows);
  out.push_back(cols);
  return out;
}

struct AttentionDims {
  Shape lead;                    // the output's leading dims (Q's, K's and V's broadcast)
  Shape q_lead, k_lead, v_lead;  // each operand's
  int64_t batch = 1, S = 0, T = 0, D = 0, Dv = 0;
  int64_t bshd = 0;
};

// Attribute mask_window: 0 or 1.
bool mask_window(const OpContext& ctx) {
  const int64_t window = ctx.node.attr_int("mask_window", 0);
  if (window != 0 && window != 1)
    ctx.fail("attribute mask_window must be 0 or 1, got " + std::to_string(window));
  return window == 1;
}

// Checks Q, K, V (inputs q0, q0 + 1, q0 + 2) and the mask (input m, with its fill m + 1).
AttentionDims attention_dims(const OpContext& ctx, size_t q0, size_t m) {
  expect_same_dtype(ctx, q0 + 1);
  expect_same_dtype(ctx, q0 + 2);
  AttentionDims d;
  d.bshd = attention_bshd_bits(ctx);
  const Shape q = logical_shape(ctx, ctx.in(q0).shape(), d.bshd & kBshdQ, "Q");
  const Shape k = logical_shape(ctx, ctx.in(q0 + 1).shape(), d.bshd & kBshdK, "K");
  const Shape v = logical_shape(ctx, ctx.in(q0 + 2).shape(), d.bshd & kBshdV, "V");
  if (q.size() < 2 || k.size() < 2 || v.size() < 2)
    ctx.fail(
        "Q, K and V must be matrices or batches of them ([..., S, D], [..., T, D], "
        "[..., T, Dv]); got " +
        shape_str(q) + ", " + shape_str(k) + ", " + shape_str(v));
  d.q_lead.assign(q.begin(), q.end() - 2);
  d.k_lead.assign(k.begin(), k.end() - 2);
  d.v_lead.assign(v.begin(), v.end() - 2);
  d.lead = broadcast_shapes(ctx, broadcast_shapes(ctx, d.q_lead, d.k_lead), d.v_lead);
  if (d.bshd != 0 && d.lead.size() != 2)
    ctx.fail("operands are flagged [batch, seq, heads, dim] (attribute bshd) but the leading " +
             std::string("dims are ") + shape_str(d.lead) + "; expected [batch, heads]");
  d.S = q[q.size() - 2];
  d.D = q.back();
  d.T = k[k.size() - 2];
  d.Dv = v.back();
  if (k.back() != d.D)
    ctx.fail("K's last dim " + std::to_string(k.back()) + " differs from Q's " +
             std::to_string(d.D));
  if (v[v.size() - 2] != d.T)
    ctx.fail("V has " + std::to_string(v[v.size() - 2]) + " rows, K has " + std::to_string(d.T) +
             "; they must match");
  for (int64_t n : d.lead) d.batch *= n;
  if (ctx.has_input(m)) {
    const Tensor& mask = ctx.in(m);
    Shape scores = d.lead;
    scores.push_back(d.S);
    scores.push_back(d.T);
    if (mask_window(ctx)) {
      if (mask.shape() != Shape{d.S + d.T - 1})
        ctx.fail(
            "with mask_window = 1 the mask is the S + T - 1 = " + std::to_string(d.S + d.T - 1) +
            " values of its diagonals; got shape " + shape_str(mask.shape()));
    } else if (broadcast_shapes(ctx, scores, mask.shape()) != scores) {
      ctx.fail("the mask has shape " + shape_str(mask.shape()) +
               ", which does not broadcast to the scores' " + shape_str(scores));
    }
    if (mask.dtype() == DType::Bool) {
      if (!ctx.has_input(m + 1) || ctx.in(m + 1).numel() != 1)
        ctx.fail("a boolean mask needs its fill (input " + std::to_string(m + 1) +
                 "): one element of Q's dtype");
      expect_same_dtype(ctx, m + 1);
    } else {
      expect_same_dtype(ctx, m);
    }
  }
  return d;
}

// Where an operand's matrices lie (AttentionOperand), per batch entry of the output's leading
// dims `out`: the operand's leading dims `lead` broadcast to them; `bshd` (then both are
// [batch, heads]) for an operand laid out [batch, rows, heads, cols].
AttentionOperand operand_layout(const Shape& lead, const Shape& out, int64_t rows, int64_t cols,
                                bool bshd) {
  int64_t batch = 1;
  for (int64_t n : out) batch *= n;
  AttentionOperand x;
  x.off.resize(static_cast<size_t>(batch));
  if (bshd) {
    x.ld = lead[1] * cols;
    const int64_t s0 = lead[0] == 1 ? 0 : rows * x.ld, s1 = lead[1] == 1 ? 0 : cols;
    for (int64_t b = 0; b < batch; ++b) x.off[b] = (b / out[1]) * s0 + (b % out[1]) * s1;
    return x;
  }
  x.ld = cols;
  const std::vector<int64_t> strides = broadcast_strides(lead, out);
  for (int64_t b = 0; b < batch; ++b)
    x.off[b] = (lead == out ? b : broadcast_offset(out, strides, b, out.size())) * rows * cols;
  return x;
}

bool keeps_probs(const OpContext& ctx, const AttentionDims& d) {
  return d.batch * d.S * d.T * static_cast<int64_t>(dtype_size(ctx.in(0).dtype())) <=
         g_attention_probs_limit.load(std::memory_order_relaxed);
}

Shape with_last_two(Shape lead, int64_t a, int64_t b) {
  lead.push_back(a);
  lead.push_back(b);
  return lead;
}

template <typename T>
AttentionArgs<T> attention_args(const OpContext& ctx, const AttentionDims& d, size_t m) {
  AttentionArgs<T> a;
  a.batch = d.batch;
  a.S = d.S;
  a.T_ = d.T;
  a.D = d.D;
  a.Dv = d.Dv;
  a.scale = static_cast<T>(ctx.node.attr_float("scale", 1.0));
  a.q = operand_layout(d.q_lead, d.lead, d.S, d.D, d.bshd & kBshdQ);
  a.k = operand_layout(d.k_lead, d.lead, d.T, d.D, d.bshd & kBshdK);
  a.v = operand_layout(d.v_lead, d.lead, d.T, d.Dv, d.bshd & kBshdV);
  a.o = operand_layout(d.lead, d.lead, d.S, d.Dv, d.bshd & kBshdY);
  a.dq = operand_layout(d.lead, d.lead, d.S, d.D, d.bshd & kBshdQ);
  a.dk = operand_layout(d.lead, d.lead, d.T, d.D, d.bshd & kBshdK);
  a.dv = operand_layout(d.lead, d.lead, d.T, d.Dv, d.bshd & kBshdV);
  // FusedAttentionDropout (and its gradient): the Dropout it replaces, its stream included.
  a.dropout_ratio = ctx.node.attr_float("dropout", 0.0);
  if (a.dropout_ratio < 0.0 || a.dropout_ratio >= 1.0)
    ctx.fail("attribute dropout must be in [0, 1), got " + std::to_string(a.dropout_ratio));
  if (a.dropout_ratio > 0)
    a.dropout_seed = math::dropout_seed(ctx.seed, static_cast<uint64_t>(ctx.node.random_stream()));
  if (ctx.has_input(m)) {
    const Tensor& mask = ctx.in(m);
    a.scores_shape = with_last_two(d.lead, d.S, d.T);
    // A window: row i of the scores starts at W + S - 1 - i (stride -1 along the queries).
    int64_t start = 0;
    if (mask_window(ctx)) {
      a.mask_strides.assign(a.scores_shape.size(), 0);
      a.mask_strides[a.mask_strides.size() - 2] = -1;
      a.mask_strides.back() = 1;
      start = d.S - 1;
    } else {
      a.mask_strides = broadcast_strides(mask.shape(), a.scores_shape);
    }
    if (mask.dtype() == DType::Bool) {
      a.keep = mask.data<uint8_t>() + start;
      a.fill = static_cast<T>(ctx.in(m + 1).float_at(0));
    } else {
      a.mask = mask.data<T>() + start;
    }
  }
  return a;
}

}  // namespace

int64_t attention_bshd_bits(const OpContext& ctx) {
  const int64_t bits = ctx.node.attr_int("bshd", 0);
  if (bits < 0 || bits > 15)
    ctx.fail("attribute bshd must be a bitmask of 1 (Q), 2 (K), 4 (V) and 8 (Y), got " +
             std::to_string(bits));
  return bits;
}

void set_attention_probs_limit(int64_t bytes) {
  g_attention_probs_limit.store(bytes, std::memory_order_relaxed);
}

int64_t attention_probs_limit() { return g_attention_probs_limit.load(std::memory_order_relaxed); }

std::vector<OutputInfo> shape_fused_attention(const OpContext& ctx) {
  const AttentionDims d = attention_dims(ctx, 0, 3);
  const DType dtype = ctx.in(0).dtype();
  return {{dtype, physical_shape(d.lead, d.S, d.Dv, d.bshd & kBshdY)},
          {dtype, keeps_probs(ctx, d) ? with_last_two(d.lead, d.S, d.T) : Shape{0}}};
}

void cpu_fused_attention(OpContext& ctx) {
  const AttentionDims d = attention_dims(ctx, 0, 3);
  Tensor* probs = ctx.has_output(1) && ctx.out(1).numel() > 0 ? &ctx.out(1) : nullptr;
  // Without a gradient graph there is no output 1: small softmaxes still take the batched
  // products, in scratch memory.
  Tensor scratch;
  if (!ctx.has_output(1) && keeps_probs(ctx, d)) {
    scratch = Tensor::empty(ctx.in(0).dtype(), {d.batch * d.S * d.T}, ctx.in(0).device());
    probs = &scratch;
  }
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx,
                      attention_forward<scalar_t>(
                          attention_args<scalar_t>(ctx, d, 3), ctx.in(0).data<scalar_t>(),
                          ctx.in(1).data<scalar_t>(), ctx.in(2).data<scalar_t>(),
                          ctx.out(0).data<scalar_t>(), probs ? probs->data<scalar_t>() : nullptr));
}

std::vector<OutputInfo> shape_fused_attention_grad(const OpContext& ctx) {
  const AttentionDims d = attention_dims(ctx, 1, 5);
  const DType dtype = ctx.in(1).dtype();
  const Shape dy = physical_shape(d.lead, d.S, d.Dv, d.bshd & kBshdY);
  if (ctx.in(0).shape() != dy)
    ctx.fail("input 0 (dY) has shape " + shape_str(ctx.in(0).shape()) + "; expected " +
             shape_str(dy));
  const Tensor& probs = ctx.in(4);
  if (probs.numel() != 0 && probs.shape() != with_last_two(d.lead, d.S, d.T))
    ctx.fail("input 4 (probs) has shape " + shape_str(probs.shape()) + "; expected " +
             shape_str(with_last_two(d.lead, d.S, d.T)) + " or empty");
  // Gradients over the output's leading dims (the gradient rule sums broadcast ones away).
  return {{dtype, physical_shape(d.lead, d.S, d.D, d.bshd & kBshdQ)},
          {dtype, physical_shape(d.lead, d.T, d.D, d.bshd & kBshdK)},
          {dtype, physical_shape(d.lead, d.T, d.Dv, d.bshd & kBshdV)}};
}

void cpu_fused_attention_grad(OpContext& ctx) {
  const AttentionDims d = attention_dims(ctx, 1, 5);
  const Tensor& probs = ctx.in(4);
  ORTM_DISPATCH_FLOAT(ctx.in(1).dtype(), ctx, {
    auto out = [&](size_t i) -> scalar_t* {
      return ctx.has_output(i) ? ctx.out(i).data<scalar_t>() : nullptr;
    };
    attention_backward<scalar_t>(attention_args<scalar_t>(ctx, d, 5), ctx.in(1).data<scalar_t>(),
                                 ctx.in(2).data<scalar_t>(), ctx.in(3).data<scalar_t>(),
                                 probs.numel() ? probs.data<scalar_t>() : nullptr,
                                 ctx.in(0).data<scalar_t>(), out(0), out(1), out(2));
  });
}

// dQ, dK, dV from one FusedAttentionGrad. An additive mask that needs a gradient (a learned
// bias) gets it from the unfused rule: the scores' softmax gradient, recomputed here with
// ScaledMaskedSoftmax(Grad) (the [..., S, T] tensors the fused op avoids, in that case only).
void grad_fused_attention(GradContext& g) {
  Value* dy = g.output_grad(0);
  const double scale = g.node().attr_float("scale", 1.0);
  const auto scale_attr = Attribute::make_float(scale);
  Value* probs = g.forward_output(1, g.node().name + "/probs");
  std::vector<Value*> inputs = {dy, g.input(0), g.input(1), g.input(2), probs};
  if (g.input(3)) inputs.push_back(g.input(3));
  if (g.input(4)) inputs.push_back(g.input(4));
  const std::vector<bool> wanted = {g.needs_grad(0), g.needs_grad(1), g.needs_grad(2)};
  const double dropout = g.node().attr_float("dropout", 0.0);
  const int64_t bshd = g.node().attr_int("bshd", 0);
  if (dropout > 0 && g.input(3) && !g.input(4) && g.needs_grad(3))
    g.fail(
        "an additive attention mask that needs a gradient cannot be fused with dropout on "
        "the attention weights");
  if (wanted[0] || wanted[1] || wanted[2]) {
    const std::vector<Value*> grads = g.emit_multi("FusedAttentionGrad", inputs, wanted,
                                                   {{"scale", scale_attr},
                                                    {"dropout", Attribute::make_float(dropout)},
                                                    {"bshd", Attribute::make_int(bshd)}},
                                                   "ai.ortmodule");
    // Backward draws the forward's dropout elements again: the same random stream; and reads
    // the mask as forward does.
    const bool window = g.node().attr_int("mask_window", 0) != 0;
    for (Value* grad : grads) {
      if (!grad || !grad->producer) continue;
      grad->producer->random_index = g.node().random_stream();
      if (window) grad->producer->attrs["mask_window"] = Attribute::make_int(1);
    }
    for (size_t i = 0; i < 3; ++i)
      if (wanted[i]) g.set_input_grad(i, g.sum_to_shape(grads[i], g.input(i)));
  }
  if (g.input(3) && !g.input(4) && g.needs_grad(3)) {
    if (g.node().attr_int("mask_window", 0) != 0)
      g.fail("a windowed attention mask (mask_window = 1) is a constant; it has no gradient");
    // Operands in the heads layout (bshd) as [batch, heads, seq, dim] for the products.
    auto heads_first = [&](Value* x, int64_t bit) {
      return bshd & bit ? g.emit("Transpose", {x}, {{"perm", Attribute::make_ints({0, 2, 1, 3})}})
                        : x;
    };
    const auto trans_b = Attribute::make_int(1);
    Value* scores = g.emit("FusedMatMul", {heads_first(g.input(0), 1), heads_first(g.input(1), 2)},
                           {{"transB", trans_b}}, "com.microsoft");
    Value* p = g.emit("ScaledMaskedSoftmax", {scores, g.input(3)}, {{"scale", scale_attr}},
                      "ai.ortmodule");
    Value* dp = g.emit("FusedMatMul", {heads_first(dy, 8), heads_first(g.input(2), 4)},
                       {{"transB", trans_b}}, "com.microsoft");
    Value* dmask = g.emit("ScaledMaskedSoftmaxGrad", {dp, p},
                          {{"scale", Attribute::make_float(1.0)}}, "ai.ortmodule");
    g.set_input_grad(3, g.sum_to_shape(dmask, g.input(3)));
  }
}

}  // namespace ortmodule
