// CUDA twins of ScaledMaskedSoftmax(x, mask?, fill?; scale) = Softmax(scale * x + mask,
// axis=-1) (x and mask broadcasting to the output; a boolean mask selects scale * x or fill)
// and ScaledMaskedSoftmaxGrad(dY, Y, mask?; scale) = scale * Y * (dY - sum(dY * Y, axis=-1))
// (0 where a boolean mask drops the element), as csrc/ops/attention_ops.cpp defines them.
//
// The row kernels (a warp or a block per row of the output) are masked_softmax_rows.cuh's.
#include <cmath>
#include <cstdint>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_ops_internal.h"
#include "kernels/cuda/masked_softmax_rows.cuh"
#include "kernels/math/random.h"
#include "kernels/math/softmax.h"
#include "ops/attention_probs.h"
#include "ops/op_utils.h"

namespace ortmodule {

namespace {

using cuda::Dims;
using cuda::row_dims;

template <typename T>
void launch_scaled_masked_softmax(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  const Tensor* mask = ctx.has_input(1) ? &ctx.in(1) : nullptr;
  Tensor& y = ctx.out(0);
  const Shape& out = y.shape();
  if (out.size() - 1 > static_cast<size_t>(cuda::kMaxRank))
    ctx.fail(cuda::rank_limit_message(out.size(), "ScaledMaskedSoftmax"));
  const int64_t dim = out.back();
  const int64_t rows = dim ? y.numel() / dim : 0;
  if (rows == 0) return;
  int64_t x_step = 0, mask_step = 0;
  const Dims x_rows = row_dims(x.shape(), out, &x_step);
  const Dims mask_rows = mask ? row_dims(mask->shape(), out, &mask_step) : Dims();
  const T scale = static_cast<T>(ctx.node.attr_float("scale", 1.0));
  const bool boolean = mask && mask->dtype() == DType::Bool;
  // The fill (input 2) is read on the host (the row's cuda_host_inputs).
  const T fill = boolean ? static_cast<T>(ctx.in(2).float_at(0)) : T(0);
  cuda::launch_scaled_masked_softmax_rows<T>(
      cuda::stream(y.device()), rows, dim, x_rows, x_step, mask_rows, mask_step, scale, x.data<T>(),
      mask && !boolean ? mask->data<T>() : nullptr, boolean ? mask->data<uint8_t>() : nullptr, fill,
      y.data<T>());
  cuda::check_launch("ScaledMaskedSoftmax");
}

template <typename T>
void launch_scaled_masked_softmax_grad(OpContext& ctx) {
  const Tensor& dy = ctx.in(0);
  const Tensor& y = ctx.in(1);
  const int64_t dim = y.shape().back();
  const int64_t rows = dim ? y.numel() / dim : 0;
  if (rows == 0) return;
  const T scale = static_cast<T>(ctx.node.attr_float("scale", 1.0));
  Tensor& dx = ctx.out(0);
  const Tensor* keep = ctx.has_input(2) ? &ctx.in(2) : nullptr;
  int64_t keep_step = 0;
  const Dims keep_rows = keep ? row_dims(keep->shape(), y.shape(), &keep_step) : Dims();
  cuda::launch_scaled_masked_softmax_grad_rows<T>(
      cuda::stream(dx.device()), rows, dim, scale, dy.data<T>(), y.data<T>(), keep_rows, keep_step,
      keep ? keep->data<uint8_t>() : nullptr, dx.data<T>());
  cuda::check_launch("ScaledMaskedSoftmaxGrad");
}

// ---- FusedAttention: the products through cuBLAS (cuda_strided_gemm), the softmax and its
// gradient with the row kernels above, the [batch, S, T] softmax in output 1 or in scratch
// memory (backward then recomputes it the same way).

struct AttentionShape {
  Shape scores;  // [lead..., S, T]
  int64_t batch = 1, S = 0, T = 0, D = 0, Dv = 0;
};

// Attribute bshd (attention_bshd_bits): operands laid out [batch, seq, heads, dim], which
// these kernels read through [batch, heads, seq, dim] copies (the CPU kernels read them in
// place).
// out[b, j, i, c] = in[b, i, j, c] for in: [B, I, J, C].
template <typename T>
__global__ void swap_middle_dims(int64_t n, int64_t I, int64_t J, int64_t C, const T* in, T* out) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; o < n; o += step) {
    const int64_t c = o % C, i = (o / C) % I, j = (o / (C * I)) % J, b = o / (C * I * J);
    out[o] = in[((b * I + i) * J + j) * C + c];
  }
}

// x: [B, I, J, C] -> [B, J, I, C] into `out` (allocated here when undefined).
template <typename T>
void swap_middle(const Tensor& x, const Shape& shape, Tensor& out) {
  const int64_t n = x.numel();
  if (!out.defined())
    out = Tensor::empty(x.dtype(), {shape[0], shape[2], shape[1], shape[3]}, x.device());
  if (n == 0) return;
  swap_middle_dims<T><<<cuda::blocks_for(n), cuda::kThreads, 0, cuda::stream(x.device())>>>(
      n, shape[1], shape[2], shape[3], x.data<T>(), out.data<T>());
  cuda::check_launch("FusedAttention (heads layout)");
}

// Input i as [batch, heads, seq, dim]: itself, or with its bshd bit a swapped copy.
template <typename T>
Tensor logical_input(const OpContext& ctx, size_t i, bool bshd, const char* name) {
  const Tensor& x = ctx.in(i);
  if (!bshd) return x;
  if (x.rank() != 4)
    ctx.fail(std::string(name) + " is flagged [batch, seq, heads, dim] (attribute bshd) but has " +
             "shape " + shape_str(x.shape()) + "; expected rank 4");
  Tensor out;
  swap_middle<T>(x, x.shape(), out);
  return out;
}

// Q's leading dims lead; K's and V's equal them or broadcast to them (a head dim of 1, say):
// such an operand is read through a copy expanded to Q's (expanded), and its gradient is
// summed back (reduce_to).
AttentionShape attention_shape(const OpContext& ctx, const Tensor& qt, const Tensor& kt,
                               const Tensor& vt) {
  const Shape &q = qt.shape(), &k = kt.shape(), &v = vt.shape();
  const Shape lead(q.begin(), q.end() - 2);
  auto broadcasts = [&](const Shape& x) {
    if (x.size() > q.size()) return false;
    const size_t skip = q.size() - x.size();
    for (size_t i = 0; i + 2 < x.size(); ++i)
      if (x[i] != 1 && x[i] != lead[skip + i]) return false;
    return true;
  };
  if (!broadcasts(k) || !broadcasts(v))
    ctx.fail(
        "the CUDA FusedAttention kernel needs K's and V's leading dims to equal Q's or "
        "broadcast to them; got " +
        shape_str(q) + ", " + shape_str(k) + ", " + shape_str(v));
  if (lead.size() + 1 > static_cast<size_t>(cuda::kMaxRank))
    ctx.fail(cuda::rank_limit_message(lead.size() + 1, "FusedAttention"));
  AttentionShape a;
  a.S = q[q.size() - 2];
  a.D = q.back();
  a.T = k[k.size() - 2];
  a.Dv = v.back();
  for (int64_t n : lead) a.batch *= n;
  a.scores = lead;
  a.scores.push_back(a.S);
  a.scores.push_back(a.T);
  return a;
}

// The leading dims of `a` with an operand's [rows, cols] matrices after them.
Shape with_matrix(const AttentionShape& a, int64_t rows, int64_t cols) {
  Shape s(a.scores.begin(), a.scores.end() - 2);
  s.push_back(rows);
  s.push_back(cols);
  return s;
}

// out[r, e] = in[the row r of the output's leading dims reads, e]: rows of X elements.
template <typename T>
__global__ void expand_rows(int64_t n, int64_t X, Dims rows, const T* in, T* out) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; o < n; o += step)
    out[o] = in[cuda::dims_offset(rows, o / X) + o % X];
}

// x ([lead_x..., R, C]) itself when its leading dims are Q's, else a copy expanded to them.
template <typename T>
Tensor expanded(const Tensor& x, const AttentionShape& a) {
  const Shape& xs = x.shape();
  const int64_t R = xs[xs.size() - 2], C = xs.back();
  if (x.numel() == a.batch * R * C) return x;
  Shape from(xs.begin(), xs.end() - 2), to(a.scores.begin(), a.scores.end() - 2);
  from.push_back(R * C);
  to.push_back(R * C);
  int64_t step = 0;
  const Dims rows = row_dims(from, to, &step);
  Tensor out = Tensor::empty(x.dtype(), with_matrix(a, R, C), x.device());
  const int64_t n = out.numel();
  if (n == 0) return out;
  expand_rows<T><<<cuda::blocks_for(n), cuda::kThreads, 0, cuda::stream(x.device())>>>(
      n, R * C, rows, x.data<T>(), out.data<T>());
  cuda::check_launch("FusedAttention (K or V broadcast to Q's heads)");
  return out;
}

// Output i computed as [batch, heads, seq, dim]: the output itself, or with bshd a scratch
// tensor that finish_output swaps into it.
Tensor logical_output(OpContext& ctx, size_t i, bool bshd, int64_t rows, int64_t cols,
                      const AttentionShape& a) {
  Tensor& out = ctx.out(i);
  if (!bshd) return out;
  return Tensor::empty(out.dtype(), {a.batch * rows * cols}, out.device());
}

template <typename T>
void finish_output(OpContext& ctx, size_t i, bool bshd, const Tensor& logical) {
  if (!bshd) return;
  Tensor& out = ctx.out(i);  // [batch, seq, heads, dim]
  const Shape& s = out.shape();
  swap_middle<T>(logical, {s[0], s[2], s[1], s[3]}, out);
}

// Where the gradient of K or V (input x, [lead_x..., R, C], output i) is computed: over Q's
// leading dims when x broadcasts to them, else the output (or its bshd scratch) itself.
Tensor operand_grad(OpContext& ctx, size_t i, bool bshd, const Tensor& x, const AttentionShape& a) {
  const Shape& xs = x.shape();
  const int64_t R = xs[xs.size() - 2], C = xs.back();
  if (x.numel() != a.batch * R * C)
    return Tensor::empty(x.dtype(), with_matrix(a, R, C), x.device());
  return logical_output(ctx, i, bshd, R, C, a);
}

// Output i from operand_grad's tensor: summed down to x's leading dims where x broadcasts.
template <typename T>
void finish_operand_grad(OpContext& ctx, size_t i, bool bshd, const Tensor& x, const Tensor& grad) {
  if (grad.numel() == x.numel()) {
    finish_output<T>(ctx, i, bshd, grad);
    return;
  }
  Tensor logical = bshd ? Tensor::empty(x.dtype(), x.shape(), x.device()) : ctx.out(i);
  cuda_sum_to_shape_into(ctx, grad, logical);
  finish_output<T>(ctx, i, bshd, logical);
}

// out = Dropout(in) over the [batch * S * T] softmax (or its gradient), the elements
// FusedAttentionDropout's Dropout draws (kernels/math/random.h, as dropout.cu).
template <typename T>
__global__ void dropout_elements(int64_t n, uint64_t seed, double ratio, T scale, const T* in,
                                 T* out) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    out[i] = math::dropout_keeps(seed, static_cast<uint64_t>(i), ratio) ? in[i] * scale : T(0);
}

template <typename T>
void attention_dropout(OpContext& ctx, const Tensor& in, Tensor& out) {
  const double ratio = ctx.node.attr_float("dropout", 0.0);
  const int64_t n = in.numel();
  if (n == 0) return;
  const uint64_t seed =
      math::dropout_seed(ctx.seed, static_cast<uint64_t>(ctx.node.random_stream()));
  dropout_elements<T><<<cuda::blocks_for(n), cuda::kThreads, 0, cuda::stream(out.device())>>>(
      n, seed, ratio, static_cast<T>(1.0 / (1.0 - ratio)), in.data<T>(), out.data<T>());
  cuda::check_launch("FusedAttentionDropout (dropout)");
}

// probs = ScaledMaskedSoftmax(Q K^T, mask, fill; scale) (mask: input m, fill m + 1).
template <typename T>
void attention_probs(OpContext& ctx, const AttentionShape& a, const Tensor& q, const Tensor& k,
                     size_t m, Tensor& probs) {
  cuda_strided_gemm(ctx, probs, false, true, a.batch, a.S, a.T, a.D, 1.0, q, a.S * a.D, k,
                    a.T * a.D);
  const Tensor* mask = ctx.has_input(m) ? &ctx.in(m) : nullptr;
  const bool boolean = mask && mask->dtype() == DType::Bool;
  int64_t x_step = 0, mask_step = 0;
  const Dims x_rows = row_dims(a.scores, a.scores, &x_step);
  const Dims mask_rows = mask ? row_dims(mask->shape(), a.scores, &mask_step) : Dims();
  const int64_t rows = a.batch * a.S;
  cuda::launch_scaled_masked_softmax_rows<T>(
      cuda::stream(probs.device()), rows, a.T, x_rows, x_step, mask_rows, mask_step,
      static_cast<T>(ctx.node.attr_float("scale", 1.0)), probs.data<T>(),
      mask && !boolean ? mask->data<T>() : nullptr, boolean ? mask->data<uint8_t>() : nullptr,
      boolean ? static_cast<T>(ctx.in(m + 1).float_at(0)) : T(0), probs.data<T>());
  cuda::check_launch("FusedAttention (softmax)");
}

template <typename T>
void launch_fused_attention(OpContext& ctx) {
  const int64_t bits = attention_bshd_bits(ctx);
  const Tensor q = logical_input<T>(ctx, 0, bits & 1, "Q");
  const Tensor k = logical_input<T>(ctx, 1, bits & 2, "K");
  const Tensor v = logical_input<T>(ctx, 2, bits & 4, "V");
  const AttentionShape a = attention_shape(ctx, q, k, v);
  if (a.batch * a.S * a.Dv == 0) return;
  const Tensor ke = expanded<T>(k, a), ve = expanded<T>(v, a);
  Tensor y = logical_output(ctx, 0, bits & 8, a.S, a.Dv, a);
  const bool kept = ctx.has_output(1) && ctx.out(1).numel() > 0;
  Tensor probs = kept ? ctx.out(1) : Tensor::empty(y.dtype(), {a.batch * a.S * a.T}, y.device());
  attention_probs<T>(ctx, a, q, ke, 3, probs);
  Tensor weights = probs;  // the softmax, or its dropout
  if (ctx.node.attr_float("dropout", 0.0) > 0) {
    weights = Tensor::empty(y.dtype(), {a.batch * a.S * a.T}, y.device());
    attention_dropout<T>(ctx, probs, weights);
  }
  cuda_strided_gemm(ctx, y, false, false, a.batch, a.S, a.Dv, a.T, 1.0, weights, a.S * a.T, ve,
                    a.T * a.Dv);
  finish_output<T>(ctx, 0, bits & 8, y);
}

template <typename T>
void launch_fused_attention_grad(OpContext& ctx) {
  const int64_t bits = attention_bshd_bits(ctx);
  const Tensor dy = logical_input<T>(ctx, 0, bits & 8, "dY");
  const Tensor q = logical_input<T>(ctx, 1, bits & 1, "Q");
  const Tensor k = logical_input<T>(ctx, 2, bits & 2, "K");
  const Tensor v = logical_input<T>(ctx, 3, bits & 4, "V");
  const AttentionShape a = attention_shape(ctx, q, k, v);
  const Tensor ke = expanded<T>(k, a), ve = expanded<T>(v, a);
  Tensor probs = ctx.in(4);
  if (probs.numel() == 0) {
    probs = Tensor::empty(q.dtype(), {a.batch * a.S * a.T}, q.device());
    attention_probs<T>(ctx, a, q, ke, 5, probs);
  }
  const bool dropout = ctx.node.attr_float("dropout", 0.0) > 0;
  Tensor ds = Tensor::empty(q.dtype(), {a.batch * a.S * a.T}, q.device());
  if (ctx.has_output(2)) {
    // dV from the softmax's dropout, drawn again into ds, or from the softmax.
    if (dropout) attention_dropout<T>(ctx, probs, ds);
    Tensor dv = operand_grad(ctx, 2, bits & 4, v, a);
    cuda_strided_gemm(ctx, dv, true, false, a.batch, a.T, a.Dv, a.S, 1.0, dropout ? ds : probs,
                      a.S * a.T, dy, a.S * a.Dv);
    finish_operand_grad<T>(ctx, 2, bits & 4, v, dv);
  }
  if (!ctx.has_output(0) && !ctx.has_output(1)) return;
  cuda_strided_gemm(ctx, ds, false, true, a.batch, a.S, a.T, a.Dv, 1.0, dy, a.S * a.Dv, ve,
                    a.T * a.Dv);
  if (dropout) attention_dropout<T>(ctx, ds, ds);
  const Tensor* keep = ctx.has_input(5) && ctx.in(5).dtype() == DType::Bool ? &ctx.in(5) : nullptr;
  int64_t keep_step = 0;
  const Dims keep_rows = keep ? row_dims(keep->shape(), a.scores, &keep_step) : Dims();
  const int64_t rows = a.batch * a.S;
  cuda::launch_scaled_masked_softmax_grad_rows<T>(
      cuda::stream(q.device()), rows, a.T, static_cast<T>(ctx.node.attr_float("scale", 1.0)),
      ds.data<T>(), probs.data<T>(), keep_rows, keep_step, keep ? keep->data<uint8_t>() : nullptr,
      ds.data<T>());
  cuda::check_launch("FusedAttentionGrad (softmax)");
  if (ctx.has_output(0)) {
    Tensor dq = logical_output(ctx, 0, bits & 1, a.S, a.D, a);
    cuda_strided_gemm(ctx, dq, false, false, a.batch, a.S, a.D, a.T, 1.0, ds, a.S * a.T, ke,
                      a.T * a.D);
    finish_output<T>(ctx, 0, bits & 1, dq);
  }
  if (ctx.has_output(1)) {
    Tensor dk = operand_grad(ctx, 1, bits & 2, k, a);
    cuda_strided_gemm(ctx, dk, true, false, a.batch, a.T, a.D, a.S, 1.0, ds, a.S * a.T, q,
                      a.S * a.D);
    finish_operand_grad<T>(ctx, 1, bits & 2, k, dk);
  }
}

}  // namespace

void cuda_fused_attention(OpContext& ctx) {
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, launch_fused_attention<scalar_t>(ctx));
}

void cuda_fused_attention_grad(OpContext& ctx) {
  ORTM_DISPATCH_FLOAT(ctx.in(1).dtype(), ctx, launch_fused_attention_grad<scalar_t>(ctx));
}

void cuda_scaled_masked_softmax(OpContext& ctx) {
  if (ctx.has_input(1) && ctx.in(1).dtype() != DType::Bool) expect_same_dtype(ctx, 1);
  if (ctx.has_input(1) && ctx.in(1).dtype() == DType::Bool && !ctx.has_input(2))
    ctx.fail("input 1 (mask) is boolean, so input 2 (fill) is required");
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, launch_scaled_masked_softmax<scalar_t>(ctx));
}

void cuda_scaled_masked_softmax_grad(OpContext& ctx) {
  expect_same_dtype(ctx, 1);
  if (ctx.in(0).shape() != ctx.in(1).shape() || ctx.in(1).rank() == 0)
    ctx.fail("input 0 (dY) has shape " + shape_str(ctx.in(0).shape()) + ", input 1 (Y) has " +
             shape_str(ctx.in(1).shape()) + "; they must match and have rank >= 1");
  if (ctx.has_input(2) && ctx.in(2).dtype() != DType::Bool)
    ctx.fail("input 2 (mask) is " + dtype_name(ctx.in(2).dtype()) + "; expected bool");
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, launch_scaled_masked_softmax_grad<scalar_t>(ctx));
}

}  // namespace ortmodule
