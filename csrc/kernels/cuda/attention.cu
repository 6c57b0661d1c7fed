// CUDA twins of ScaledMaskedSoftmax(x, mask?, fill?; scale) = Softmax(scale * x + mask,
// axis=-1) (x and mask broadcasting to the output; a boolean mask selects scale * x or fill)
// and ScaledMaskedSoftmaxGrad(dY, Y, mask?; scale) = scale * Y * (dY - sum(dY * Y, axis=-1))
// (0 where a boolean mask drops the element), as csrc/ops/attention_ops.cpp defines them.
//
// One block per row of the output (the row-softmax pattern of softmax.cuh): the row's
// scale * x + mask is written to y, its max and sum found by block_reduce, then y is
// normalised in place. Each thread revisits only the elements it wrote. The per-element
// formulas (scaled_masked, softmax_grad) are kernels/math/softmax.h's, shared with the CPU;
// the row sum accumulates in double as the CPU row does.
#include <cmath>
#include <cstdint>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_ops_internal.h"
#include "kernels/math/random.h"
#include "kernels/math/softmax.h"
#include "ops/attention_probs.h"
#include "ops/op_utils.h"

namespace ortmodule {

namespace {

using cuda::Dims;
using cuda::kRowThreads;
using cuda::kWarp;

// x_rows / mask_rows: the output's leading dims (all but the last) with each operand's
// broadcast strides, so row r of x starts at dims_offset(x_rows, r); x_step / mask_step: the
// operand's stride along the last dim (0 where it broadcasts there).
template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    scaled_masked_softmax_rows(int64_t rows, int64_t dim, Dims x_rows, int64_t x_step,
                               Dims mask_rows, int64_t mask_step, T scale, const T* x,
                               const T* mask, const uint8_t* keep, T fill, T* y) {
  __shared__ T shared_max[kWarp];
  __shared__ double shared_sum[kWarp];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + cuda::dims_offset(x_rows, row);
    const T* mr = mask ? mask + cuda::dims_offset(mask_rows, row) : nullptr;
    const uint8_t* kr = keep ? keep + cuda::dims_offset(mask_rows, row) : nullptr;
    T* yr = y + row * dim;
    T m = -INFINITY;
    for (int64_t k = threadIdx.x; k < dim; k += blockDim.x) {
      const T v = kr   ? scaled_or_fill(xr[k * x_step], scale, kr[k * mask_step] != 0, fill)
                  : mr ? scaled_masked(xr[k * x_step], scale, mr[k * mask_step])
                       : xr[k * x_step] * scale;
      yr[k] = v;
      m = cuda::MaxOp()(m, v);
    }
    m = cuda::block_reduce(m, cuda::MaxOp(), T(-INFINITY), shared_max);
    double s = 0;
    for (int64_t k = threadIdx.x; k < dim; k += blockDim.x) s += std::exp(yr[k] - m);
    s = cuda::block_reduce(s, cuda::SumOp(), 0.0, shared_sum);
    const T inv_sum = static_cast<T>(1.0 / s);
    for (int64_t k = threadIdx.x; k < dim; k += blockDim.x) yr[k] = std::exp(yr[k] - m) * inv_sum;
  }
}

// dx = scale * softmax_grad(dy, y, sum(dy * y)) per row, 0 where keep (when given, rows
// and step as the forward's mask) drops the element; dx may alias dy.
template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    scaled_masked_softmax_grad_rows(int64_t rows, int64_t dim, T scale, const T* dy, const T* y,
                                    Dims keep_rows, int64_t keep_step, const uint8_t* keep, T* dx) {
  __shared__ T shared[kWarp];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t off = row * dim;
    T s = 0;
    for (int64_t k = threadIdx.x; k < dim; k += blockDim.x) s += dy[off + k] * y[off + k];
    s = cuda::block_reduce(s, cuda::SumOp(), T(0), shared);
    const uint8_t* kr = keep ? keep + cuda::dims_offset(keep_rows, row) : nullptr;
    for (int64_t k = threadIdx.x; k < dim; k += blockDim.x) {
      const T g = softmax_grad(dy[off + k], y[off + k], s);
      dx[off + k] = kr && !kr[k * keep_step] ? T(0) : scale == T(1) ? g : g * scale;
    }
  }
}

// The output's leading dims with the strides of `operand` broadcast to `out`, and the
// operand's stride along the last dim.
Dims row_dims(const Shape& operand, const Shape& out, int64_t* step) {
  const size_t rank = out.size();
  Dims d;
  d.rank = static_cast<int>(rank) - 1;
  int64_t k = 1;
  for (size_t i = rank; i-- > 0;) {
    const int64_t j = static_cast<int64_t>(i) - static_cast<int64_t>(rank - operand.size());
    const int64_t n = j >= 0 ? operand[j] : 1;
    const int64_t stride = n == 1 ? 0 : k;
    if (i + 1 == rank) {
      *step = stride;
    } else {
      d.size[i] = out[i];
      d.stride[i] = stride;
    }
    k *= n;
  }
  return d;
}

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
  scaled_masked_softmax_rows<T>
      <<<cuda::row_blocks(rows), kRowThreads, 0, cuda::stream(y.device())>>>(
          rows, dim, x_rows, x_step, mask_rows, mask_step, scale, x.data<T>(),
          mask && !boolean ? mask->data<T>() : nullptr, boolean ? mask->data<uint8_t>() : nullptr,
          fill, y.data<T>());
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
  scaled_masked_softmax_grad_rows<T>
      <<<cuda::row_blocks(rows), kRowThreads, 0, cuda::stream(dx.device())>>>(
          rows, dim, scale, dy.data<T>(), y.data<T>(), keep_rows, keep_step,
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

// Q, K, V with equal leading dims (the CPU kernels also broadcast them).
AttentionShape attention_shape(const OpContext& ctx, const Tensor& qt, const Tensor& kt,
                               const Tensor& vt) {
  const Shape &q = qt.shape(), &k = kt.shape(), &v = vt.shape();
  const Shape lead(q.begin(), q.end() - 2);
  if (Shape(k.begin(), k.end() - 2) != lead || Shape(v.begin(), v.end() - 2) != lead)
    ctx.fail("the CUDA FusedAttention kernel needs Q, K and V with the same leading dims; got " +
             shape_str(q) + ", " + shape_str(k) + ", " + shape_str(v) +
             " (expand K and V to Q's heads before the product)");
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
  scaled_masked_softmax_rows<T>
      <<<cuda::row_blocks(rows), kRowThreads, 0, cuda::stream(probs.device())>>>(
          rows, a.T, x_rows, x_step, mask_rows, mask_step,
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
  Tensor y = logical_output(ctx, 0, bits & 8, a.S, a.Dv, a);
  const bool kept = ctx.has_output(1) && ctx.out(1).numel() > 0;
  Tensor probs = kept ? ctx.out(1) : Tensor::empty(y.dtype(), {a.batch * a.S * a.T}, y.device());
  attention_probs<T>(ctx, a, q, k, 3, probs);
  Tensor weights = probs;  // the softmax, or its dropout
  if (ctx.node.attr_float("dropout", 0.0) > 0) {
    weights = Tensor::empty(y.dtype(), {a.batch * a.S * a.T}, y.device());
    attention_dropout<T>(ctx, probs, weights);
  }
  cuda_strided_gemm(ctx, y, false, false, a.batch, a.S, a.Dv, a.T, 1.0, weights, a.S * a.T, v,
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
  Tensor probs = ctx.in(4);
  if (probs.numel() == 0) {
    probs = Tensor::empty(q.dtype(), {a.batch * a.S * a.T}, q.device());
    attention_probs<T>(ctx, a, q, k, 5, probs);
  }
  const bool dropout = ctx.node.attr_float("dropout", 0.0) > 0;
  Tensor ds = Tensor::empty(q.dtype(), {a.batch * a.S * a.T}, q.device());
  if (ctx.has_output(2)) {
    // dV from the softmax's dropout, drawn again into ds, or from the softmax.
    if (dropout) attention_dropout<T>(ctx, probs, ds);
    Tensor dv = logical_output(ctx, 2, bits & 4, a.T, a.Dv, a);
    cuda_strided_gemm(ctx, dv, true, false, a.batch, a.T, a.Dv, a.S, 1.0, dropout ? ds : probs,
                      a.S * a.T, dy, a.S * a.Dv);
    finish_output<T>(ctx, 2, bits & 4, dv);
  }
  if (!ctx.has_output(0) && !ctx.has_output(1)) return;
  cuda_strided_gemm(ctx, ds, false, true, a.batch, a.S, a.T, a.Dv, 1.0, dy, a.S * a.Dv, v,
                    a.T * a.Dv);
  if (dropout) attention_dropout<T>(ctx, ds, ds);
  const Tensor* keep = ctx.has_input(5) && ctx.in(5).dtype() == DType::Bool ? &ctx.in(5) : nullptr;
  int64_t keep_step = 0;
  const Dims keep_rows = keep ? row_dims(keep->shape(), a.scores, &keep_step) : Dims();
  const int64_t rows = a.batch * a.S;
  scaled_masked_softmax_grad_rows<T>
      <<<cuda::row_blocks(rows), kRowThreads, 0, cuda::stream(q.device())>>>(
          rows, a.T, static_cast<T>(ctx.node.attr_float("scale", 1.0)), ds.data<T>(),
          probs.data<T>(), keep_rows, keep_step, keep ? keep->data<uint8_t>() : nullptr,
          ds.data<T>());
  cuda::check_launch("FusedAttentionGrad (softmax)");
  if (ctx.has_output(0)) {
    Tensor dq = logical_output(ctx, 0, bits & 1, a.S, a.D, a);
    cuda_strided_gemm(ctx, dq, false, false, a.batch, a.S, a.D, a.T, 1.0, ds, a.S * a.T, k,
                      a.T * a.D);
    finish_output<T>(ctx, 0, bits & 1, dq);
  }
  if (ctx.has_output(1)) {
    Tensor dk = logical_output(ctx, 1, bits & 2, a.T, a.D, a);
    cuda_strided_gemm(ctx, dk, true, false, a.batch, a.T, a.D, a.S, 1.0, ds, a.S * a.T, q,
                      a.S * a.D);
    finish_output<T>(ctx, 1, bits & 2, dk);
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
