// CUDA twins of FusedAttention(Q, K, V, mask?, fill?; scale, dropout, bshd) and
// FusedAttentionGrad (csrc/ops/attention_ops.cpp): the products through cuBLAS, the softmax
// and its gradient with masked_softmax_rows.cuh's row kernels, the [batch, S, T] softmax in
// output 1 or in scratch memory (backward then recomputes it the same way).
//
// Operands are read where they lie: with attribute bshd (attention_bshd_bits) an operand or
// output is laid out [batch, seq, heads, dim], and the products read and write its
// [seq, dim] matrices in place through matrix pointers (rows heads * dim apart; the CPU
// kernels read them in place too). K and V may broadcast over Q's leading dims (a head dim of
// 1): such an operand is read through a copy expanded to Q's, and its gradient is summed back.
#include <cstdint>
#include <string>

#include "backends/cuda/cuda_ops_internal.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/masked_softmax_rows.cuh"
#include "kernels/math/random.h"
#include "ops/attention_probs.h"
#include "ops/op_utils.h"

namespace ortmodule {

namespace {

using cuda::Dims;
using cuda::row_dims;

struct AttentionShape {
  Shape scores;  // [lead..., S, T]: Q's leading dims
  int64_t batch = 1, S = 0, T = 0, D = 0, Dv = 0;
};

// Input i's shape as [batch, heads, seq, dim] (its own, or with its bshd bit the middle dims
// swapped).
Shape logical_shape(const OpContext& ctx, size_t i, bool bshd, const char* name) {
  const Shape& s = ctx.in(i).shape();
  if (!bshd) return s;
  if (s.size() != 4)
    ctx.fail(std::string(name) + " is flagged [batch, seq, heads, dim] (attribute bshd) but has " +
             "shape " + shape_str(s) + "; expected rank 4");
  return {s[0], s[2], s[1], s[3]};
}

AttentionShape attention_shape(const OpContext& ctx, const Shape& q, const Shape& k,
                               const Shape& v) {
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

// Q's leading dims with an operand's [rows, cols] matrices after them.
Shape with_matrix(const AttentionShape& a, int64_t rows, int64_t cols) {
  Shape s(a.scores.begin(), a.scores.end() - 2);
  s.push_back(rows);
  s.push_back(cols);
  return s;
}

// A contiguous [batch, rows, cols] tensor as a product operand.
GemmOperand plain(const Tensor& t, int64_t rows, int64_t cols) {
  return {&t, 1, rows * cols, 0, cols};
}

// Tensor t (Q's leading dims) as a product operand, in its layout.
GemmOperand in_layout(const Tensor& t, bool bshd) {
  const Shape& s = t.shape();
  if (bshd) return {&t, s[2], s[1] * s[2] * s[3], s[3], s[2] * s[3]};
  return plain(t, s[s.size() - 2], s.back());
}

// One strided cuBLAS call when every operand is plain, else one through matrix pointers.
void gemm(OpContext& ctx, const GemmOperand& y, bool ta, bool tb, int64_t batch, int64_t M,
          int64_t N, int64_t K, const GemmOperand& a, const GemmOperand& b) {
  if (y.heads == 1 && a.heads == 1 && b.heads == 1)
    cuda_strided_gemm(ctx, const_cast<Tensor&>(*y.t), ta, tb, batch, M, N, K, 1.0, *a.t,
                      a.batch_stride, *b.t, b.batch_stride);
  else
    cuda_matrix_batched_gemm(ctx, y, ta, tb, batch, M, N, K, 1.0, a, b);
}

// out[b, j, i, c] = in[b, i, j, c] for in: [B, I, J, C].
template <typename T>
__global__ void swap_middle_dims(int64_t n, int64_t I, int64_t J, int64_t C, const T* in, T* out) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; o < n; o += step) {
    const int64_t c = o % C, i = (o / C) % I, j = (o / (C * I)) % J, b = o / (C * I * J);
    out[o] = in[((b * I + i) * J + j) * C + c];
  }
}

// x: [B, I, J, C] (shape) -> out: [B, J, I, C].
template <typename T>
void swap_middle(const Tensor& x, const Shape& shape, Tensor& out) {
  const int64_t n = x.numel();
  if (n == 0) return;
  swap_middle_dims<T><<<cuda::blocks_for(n), cuda::kThreads, 0, cuda::stream(x.device())>>>(
      n, shape[1], shape[2], shape[3], x.data<T>(), out.data<T>());
  cuda::check_launch("FusedAttention (heads layout)");
}

// out[r, e] = in[the row r of the output's leading dims reads, e]: rows of X elements.
template <typename T>
__global__ void expand_rows(int64_t n, int64_t X, Dims rows, const T* in, T* out) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; o < n; o += step)
    out[o] = in[cuda::dims_offset(rows, o / X) + o % X];
}

// An input as the products read it: the tensor itself in its layout, or (K or V broadcast
// over Q's leading dims) a [batch, R, C] copy expanded to them.
struct Operand {
  Tensor tensor;
  bool bshd = false;
  GemmOperand view() const {
    return bshd ? in_layout(tensor, true)
                : plain(tensor, tensor.shape()[tensor.rank() - 2], tensor.shape().back());
  }
};

template <typename T>
Operand operand(const OpContext& ctx, size_t i, bool bshd, const Shape& logical,
                const AttentionShape& a) {
  const Tensor& x = ctx.in(i);
  const int64_t R = logical[logical.size() - 2], C = logical.back();
  if (x.numel() == a.batch * R * C) return {x, bshd};
  Tensor source = x;
  if (bshd) {
    source = Tensor::empty(x.dtype(), logical, x.device());
    swap_middle<T>(x, x.shape(), source);
  }
  Shape from(logical.begin(), logical.end() - 2), to(a.scores.begin(), a.scores.end() - 2);
  from.push_back(R * C);
  to.push_back(R * C);
  int64_t step = 0;
  const Dims rows = row_dims(from, to, &step);
  Tensor out = Tensor::empty(x.dtype(), with_matrix(a, R, C), x.device());
  const int64_t n = out.numel();
  if (n > 0) {
    expand_rows<T><<<cuda::blocks_for(n), cuda::kThreads, 0, cuda::stream(x.device())>>>(
        n, R * C, rows, source.data<T>(), out.data<T>());
    cuda::check_launch("FusedAttention (K or V broadcast to Q's heads)");
  }
  return {out, false};
}

// Gradient i of K or V (logical shape xs): computed into the output in its layout, or where
// the operand broadcasts, into `scratch` ([batch, R, C]) that finish_grad sums down.
Tensor grad_scratch(const OpContext& ctx, size_t i, const Shape& xs, const AttentionShape& a) {
  const int64_t R = xs[xs.size() - 2], C = xs.back();
  if (shape_numel(xs) == a.batch * R * C) return Tensor();
  return Tensor::empty(ctx.in(i).dtype(), with_matrix(a, R, C), ctx.in(i).device());
}

GemmOperand grad_target(OpContext& ctx, size_t out, bool bshd, const Tensor& scratch,
                        const Shape& xs) {
  if (scratch.defined()) return plain(scratch, xs[xs.size() - 2], xs.back());
  return in_layout(ctx.out(out), bshd);
}

template <typename T>
void finish_grad(OpContext& ctx, size_t out, bool bshd, const Shape& xs, const Tensor& scratch) {
  if (!scratch.defined()) return;
  Tensor logical = bshd ? Tensor::empty(scratch.dtype(), xs, scratch.device()) : ctx.out(out);
  cuda_sum_to_shape_into(ctx, scratch, logical);
  if (bshd) swap_middle<T>(logical, xs, ctx.out(out));
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

// out[i, j] = w[S - 1 - i + j] over [S, T], elements of `width` bytes copied byte by byte (one
// kernel for every dtype): a mask's diagonal row (attribute mask_window).
__global__ void spread_window_kernel(const unsigned char* w, int64_t S, int64_t T, int64_t width,
                                     unsigned char* out) {
  const int64_t n = S * T * width;
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < n; b += step) {
    const int64_t e = b / width;
    out[b] = w[(S - 1 - e / T + e % T) * width + b % width];
  }
}

// Mask input m as the row kernels read it: itself, or with mask_window = 1 its S + T - 1
// diagonal values spread to [S, T] in `spread` (the CPU reads the window in place).
const Tensor* mask_input(OpContext& ctx, size_t m, const AttentionShape& a, Tensor& spread) {
  if (!ctx.has_input(m)) return nullptr;
  const Tensor& mask = ctx.in(m);
  if (ctx.node.attr_int("mask_window", 0) == 0) return &mask;
  spread = Tensor::empty(mask.dtype(), {a.S, a.T}, mask.device());
  const int64_t width = static_cast<int64_t>(dtype_size(mask.dtype()));
  if (a.S * a.T == 0) return &spread;
  spread_window_kernel<<<cuda::blocks_for(a.S * a.T * width), cuda::kThreads, 0,
                         cuda::stream(spread.device())>>>(
      static_cast<const unsigned char*>(mask.raw()), a.S, a.T, width,
      static_cast<unsigned char*>(spread.raw()));
  cuda::check_launch("FusedAttention (mask window)");
  return &spread;
}

// probs = ScaledMaskedSoftmax(Q K^T, mask, fill; scale) (mask: input m, fill m + 1).
template <typename T>
void attention_probs(OpContext& ctx, const AttentionShape& a, const Operand& q, const Operand& k,
                     size_t m, Tensor& probs) {
  gemm(ctx, plain(probs, a.S, a.T), false, true, a.batch, a.S, a.T, a.D, q.view(), k.view());
  Tensor spread;
  const Tensor* mask = mask_input(ctx, m, a, spread);
  const bool boolean = mask && mask->dtype() == DType::Bool;
  int64_t x_step = 0, mask_step = 0;
  const Dims x_rows = row_dims(a.scores, a.scores, &x_step);
  const Dims mask_rows = mask ? row_dims(mask->shape(), a.scores, &mask_step) : Dims();
  cuda::launch_scaled_masked_softmax_rows<T>(
      cuda::stream(probs.device()), a.batch * a.S, a.T, x_rows, x_step, mask_rows, mask_step,
      static_cast<T>(ctx.node.attr_float("scale", 1.0)), probs.data<T>(),
      mask && !boolean ? mask->data<T>() : nullptr, boolean ? mask->data<uint8_t>() : nullptr,
      boolean ? static_cast<T>(ctx.in(m + 1).float_at(0)) : T(0), probs.data<T>());
  cuda::check_launch("FusedAttention (softmax)");
}

template <typename T>
void launch_fused_attention(OpContext& ctx) {
  const int64_t bits = attention_bshd_bits(ctx);
  const Shape qs = logical_shape(ctx, 0, bits & 1, "Q"), ks = logical_shape(ctx, 1, bits & 2, "K"),
              vs = logical_shape(ctx, 2, bits & 4, "V");
  const AttentionShape a = attention_shape(ctx, qs, ks, vs);
  if (a.batch * a.S * a.Dv == 0) return;
  const Operand q = operand<T>(ctx, 0, bits & 1, qs, a), k = operand<T>(ctx, 1, bits & 2, ks, a),
                v = operand<T>(ctx, 2, bits & 4, vs, a);
  Tensor& y = ctx.out(0);
  const bool kept = ctx.has_output(1) && ctx.out(1).numel() > 0;
  Tensor probs = kept ? ctx.out(1) : Tensor::empty(y.dtype(), {a.batch * a.S * a.T}, y.device());
  attention_probs<T>(ctx, a, q, k, 3, probs);
  Tensor weights = probs;  // the softmax, or its dropout
  if (ctx.node.attr_float("dropout", 0.0) > 0) {
    weights = Tensor::empty(y.dtype(), {a.batch * a.S * a.T}, y.device());
    attention_dropout<T>(ctx, probs, weights);
  }
  gemm(ctx, in_layout(y, bits & 8), false, false, a.batch, a.S, a.Dv, a.T, plain(weights, a.S, a.T),
       v.view());
}

template <typename T>
void launch_fused_attention_grad(OpContext& ctx) {
  const int64_t bits = attention_bshd_bits(ctx);
  const Shape dys = logical_shape(ctx, 0, bits & 8, "dY"),
              qs = logical_shape(ctx, 1, bits & 1, "Q"), ks = logical_shape(ctx, 2, bits & 2, "K"),
              vs = logical_shape(ctx, 3, bits & 4, "V");
  const AttentionShape a = attention_shape(ctx, qs, ks, vs);
  const Operand dy = operand<T>(ctx, 0, bits & 8, dys, a), q = operand<T>(ctx, 1, bits & 1, qs, a),
                k = operand<T>(ctx, 2, bits & 2, ks, a), v = operand<T>(ctx, 3, bits & 4, vs, a);
  Tensor probs = ctx.in(4);
  if (probs.numel() == 0) {
    probs = Tensor::empty(ctx.in(1).dtype(), {a.batch * a.S * a.T}, ctx.in(1).device());
    attention_probs<T>(ctx, a, q, k, 5, probs);
  }
  const bool dropout = ctx.node.attr_float("dropout", 0.0) > 0;
  Tensor ds = Tensor::empty(probs.dtype(), {a.batch * a.S * a.T}, probs.device());
  if (ctx.has_output(2)) {
    // dV from the softmax's dropout, drawn again into ds, or from the softmax.
    if (dropout) attention_dropout<T>(ctx, probs, ds);
    const Tensor scratch = grad_scratch(ctx, 3, vs, a);
    gemm(ctx, grad_target(ctx, 2, bits & 4, scratch, vs), true, false, a.batch, a.T, a.Dv, a.S,
         plain(dropout ? ds : probs, a.S, a.T), dy.view());
    finish_grad<T>(ctx, 2, bits & 4, vs, scratch);
  }
  if (!ctx.has_output(0) && !ctx.has_output(1)) return;
  gemm(ctx, plain(ds, a.S, a.T), false, true, a.batch, a.S, a.T, a.Dv, dy.view(), v.view());
  if (dropout) attention_dropout<T>(ctx, ds, ds);
  Tensor spread;
  const Tensor* keep = ctx.has_input(5) && ctx.in(5).dtype() == DType::Bool
                           ? mask_input(ctx, 5, a, spread)
                           : nullptr;
  int64_t keep_step = 0;
  const Dims keep_rows = keep ? row_dims(keep->shape(), a.scores, &keep_step) : Dims();
  cuda::launch_scaled_masked_softmax_grad_rows<T>(
      cuda::stream(ds.device()), a.batch * a.S, a.T,
      static_cast<T>(ctx.node.attr_float("scale", 1.0)), ds.data<T>(), probs.data<T>(), keep_rows,
      keep_step, keep ? keep->data<uint8_t>() : nullptr, ds.data<T>());
  cuda::check_launch("FusedAttentionGrad (softmax)");
  if (ctx.has_output(0))
    gemm(ctx, in_layout(ctx.out(0), bits & 1), false, false, a.batch, a.S, a.D, a.T,
         plain(ds, a.S, a.T), k.view());
  if (ctx.has_output(1)) {
    const Tensor scratch = grad_scratch(ctx, 2, ks, a);
    gemm(ctx, grad_target(ctx, 1, bits & 2, scratch, ks), true, false, a.batch, a.T, a.D, a.S,
         plain(ds, a.S, a.T), q.view());
    finish_grad<T>(ctx, 1, bits & 2, ks, scratch);
  }
}

}  // namespace

void cuda_fused_attention(OpContext& ctx) {
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, launch_fused_attention<scalar_t>(ctx));
}

void cuda_fused_attention_grad(OpContext& ctx) {
  ORTM_DISPATCH_FLOAT(ctx.in(1).dtype(), ctx, launch_fused_attention_grad<scalar_t>(ctx));
}

}  // namespace ortmodule
