// CUDA twins of NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss and their gradients
// (NegativeLogLikelihoodLossGrad, com.microsoft SoftmaxCrossEntropyLossGrad), over the
// [N, C, D] scores and [N, D] labels of kernels/cpu/loss.h, with its semantics: ignore_index,
// class weights, reductions none / sum / mean (mean divides by the kept entries' weights).
// Entry indexing and weighting are kernels/math/loss.h, shared with the CPU loops; the
// log-softmax is softmax.cuh's.
//
// Sums (the reduced loss, the mean's divisor) run in one block in double, combined by
// block_reduce: deterministic, no atomics. The gradient scatter writes one element per entry.
//
// Labels: the CPU refuses a label outside [0, C) that is not ignore_index. Here a kernel
// records the first such entry (an atomicMin on its index, the one atomic), the loss kernels
// skip it (no out-of-bounds read), and after the launches the host reads that index back:
// one small device-to-host copy and a stream sync per call, the price of reporting a bad
// label as the CPU does instead of a silent wrong loss.
#include <cstdint>
#include <sstream>
#include <string>

#include "kernels/cuda/softmax.cuh"
#include "kernels/math/loss.h"
#include "ops/loss_attrs.h"
#include "ops/op_utils.h"

namespace ortmodule {

namespace {

using cuda::kRowThreads;
using cuda::kWarp;

struct LossParams {
  int64_t N = 0, C = 0, D = 0;
  Reduction reduction = Reduction::Mean;
  int64_t ignore_index = -100;
  bool has_ignore_index = false;
  __host__ __device__ int64_t count() const { return N * D; }
};

__device__ bool label_valid(int64_t label, int64_t C) { return label >= 0 && label < C; }

__global__ void find_bad_label(LossParams p, const int64_t* labels, unsigned long long* first_bad) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < p.count();
       k += step) {
    const int64_t label = labels[k];
    if (!label_valid(label, p.C) && !loss_entry_ignored(label, p.ignore_index, p.has_ignore_index))
      atomicMin(first_bad, static_cast<unsigned long long>(k));
  }
}

// Whether entry k contributes (neither ignored nor an invalid label, reported separately).
__device__ bool entry_kept(const LossParams& p, int64_t label) {
  return label_valid(label, p.C) && !loss_entry_ignored(label, p.ignore_index, p.has_ignore_index);
}

// reduction none: loss[k] = -input[n, label, d] * weight[label], 0 where not kept.
template <typename T>
__global__ void nll_forward_entries(LossParams p, const T* input, const int64_t* labels,
                                    const T* weight, T* loss) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < p.count();
       k += step) {
    const int64_t label = labels[k];
    loss[k] =
        entry_kept(p, label)
            ? static_cast<T>(-static_cast<double>(input[loss_class_offset(k, label, p.C, p.D)]) *
                             loss_class_weight(weight, label))
            : T(0);
  }
}

// One block: loss_sum = sum of kept -input * w and weight_sum = sum of kept w, in double.
// With `input` null only the weights are summed. Writes loss[0] (sum, or the mean: 0/0 = NaN
// with nothing kept, as PyTorch) and/or *weight_sum.
template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    nll_sums(LossParams p, const T* input, const int64_t* labels, const T* weight, T* loss,
             double* weight_sum) {
  __shared__ double shared[kWarp];
  double l = 0, w = 0;
  for (int64_t k = threadIdx.x; k < p.count(); k += blockDim.x) {
    const int64_t label = labels[k];
    if (!entry_kept(p, label)) continue;
    const double wk = loss_class_weight(weight, label);
    if (input) l -= static_cast<double>(input[loss_class_offset(k, label, p.C, p.D)]) * wk;
    w += wk;
  }
  w = cuda::block_reduce(w, cuda::SumOp(), 0.0, shared);
  if (input) l = cuda::block_reduce(l, cuda::SumOp(), 0.0, shared);
  if (threadIdx.x != 0) return;
  if (weight_sum) *weight_sum = w;
  if (loss) loss[0] = static_cast<T>(p.reduction == Reduction::Mean ? l / w : l);
}

// d_input (zeroed before) at [n, label, d] = -dloss * w / divisor (divisor null: 1).
template <typename T>
__global__ void nll_backward_entries(LossParams p, const T* dloss, const int64_t* labels,
                                     const T* weight, const double* divisor, T* d_input) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < p.count();
       k += step) {
    const int64_t label = labels[k];
    if (!entry_kept(p, label)) continue;
    const double d = divisor ? *divisor : 1.0;
    const double g = static_cast<double>(p.reduction == Reduction::None ? dloss[k] : dloss[0]) / d;
    d_input[loss_class_offset(k, label, p.C, p.D)] =
        static_cast<T>(-g * loss_class_weight(weight, label));
  }
}

LossParams loss_params(const OpContext& ctx, const Shape& scores, const Shape& labels) {
  LossParams p;
  loss_dims(ctx, scores, labels, &p.N, &p.C, &p.D);
  p.reduction = reduction_of(ctx);
  p.has_ignore_index = ctx.node.has_attr("ignore_index");
  p.ignore_index = ctx.node.attr_int("ignore_index", -100);
  return p;
}

// Label validation: start() launches the search, finish() (after the loss kernels) reads the
// result back and fails naming the label as the CPU kernels do.
class LabelCheck {
 public:
  LabelCheck(const LossParams& p, const Tensor& labels, cudaStream_t stream)
      : p_(p), labels_(labels), stream_(stream) {
    if (p.count() == 0) return;
    first_bad_ = Tensor::empty(DType::UInt64, {1}, labels.device());
    cuda::check(cudaMemsetAsync(first_bad_.raw(), 0xff, sizeof(unsigned long long), stream),
                "loss label check (reset)");
    find_bad_label<<<cuda::blocks_for(p.count()), cuda::kThreads, 0, stream>>>(
        p, labels.data<int64_t>(), first_bad_.data<unsigned long long>());
    cuda::check_launch("loss label check");
  }

  void finish(OpContext& ctx) {
    if (!first_bad_.defined()) return;
    unsigned long long k = 0;
    cuda::check(cudaMemcpyAsync(&k, first_bad_.raw(), sizeof(k), cudaMemcpyDeviceToHost, stream_),
                "loss label check (read back)");
    cuda::check(cudaStreamSynchronize(stream_), "loss label check (sync)");
    if (k == ~0ull) return;
    int64_t label = 0;
    cuda::check(cudaMemcpyAsync(&label, labels_.data<int64_t>() + k, sizeof(label),
                                cudaMemcpyDeviceToHost, stream_),
                "loss label check (read label)");
    cuda::check(cudaStreamSynchronize(stream_), "loss label check (sync)");
    const int64_t pos = static_cast<int64_t>(k);
    std::ostringstream msg;
    msg << "label " << label << " at position (n=" << pos / p_.D << ", d=" << pos % p_.D
        << ") is outside the class range [0, " << p_.C << ") (C = " << p_.C << ")";
    if (p_.has_ignore_index) msg << " and is not ignore_index " << p_.ignore_index;
    ctx.fail(msg.str());
  }

 private:
  LossParams p_;
  const Tensor& labels_;
  cudaStream_t stream_;
  Tensor first_bad_;
};

template <typename T>
void nll_forward(const LossParams& p, const T* input, const int64_t* labels, const T* weight,
                 T* loss, cudaStream_t stream) {
  if (p.reduction == Reduction::None) {
    if (p.count() == 0) return;
    nll_forward_entries<T><<<cuda::blocks_for(p.count()), cuda::kThreads, 0, stream>>>(
        p, input, labels, weight, loss);
  } else {
    nll_sums<T><<<1, kRowThreads, 0, stream>>>(p, input, labels, weight, loss, nullptr);
  }
  cuda::check_launch("NegativeLogLikelihoodLoss");
}

template <typename T>
void nll_backward(const LossParams& p, const T* dloss, const int64_t* labels, const T* weight,
                  Tensor& d_input, cudaStream_t stream) {
  if (d_input.numel() == 0) return;
  cuda::check(cudaMemsetAsync(d_input.raw(), 0, d_input.nbytes(), stream),
              "NegativeLogLikelihoodLoss backward (zero)");
  if (p.count() == 0) return;
  Tensor divisor;
  if (p.reduction == Reduction::Mean) {
    divisor = Tensor::empty(DType::Float64, {1}, d_input.device());
    nll_sums<T><<<1, kRowThreads, 0, stream>>>(p, nullptr, labels, weight, nullptr,
                                               divisor.data<double>());
    cuda::check_launch("NegativeLogLikelihoodLoss backward (weight sum)");
  }
  nll_backward_entries<T><<<cuda::blocks_for(p.count()), cuda::kThreads, 0, stream>>>(
      p, dloss, labels, weight, divisor.defined() ? divisor.data<double>() : nullptr,
      d_input.data<T>());
  cuda::check_launch("NegativeLogLikelihoodLoss backward");
}

template <typename T>
const T* weights_of(const OpContext& ctx, size_t i) {
  return ctx.has_input(i) ? ctx.in(i).data<T>() : nullptr;
}

template <typename T>
void run_nll(OpContext& ctx) {
  const Tensor& input = ctx.in(0);
  const LossParams p = loss_params(ctx, input.shape(), ctx.in(1).shape());
  cudaStream_t stream = cuda::stream(input.device());
  LabelCheck check(p, ctx.in(1), stream);
  nll_forward<T>(p, input.data<T>(), ctx.in(1).data<int64_t>(), weights_of<T>(ctx, 2),
                 ctx.out(0).data<T>(), stream);
  check.finish(ctx);
}

template <typename T>
void run_nll_grad(OpContext& ctx) {
  Tensor& dx = ctx.out(0);
  const LossParams p = loss_params(ctx, dx.shape(), ctx.in(2).shape());
  cudaStream_t stream = cuda::stream(dx.device());
  LabelCheck check(p, ctx.in(2), stream);
  nll_backward<T>(p, ctx.in(0).data<T>(), ctx.in(2).data<int64_t>(), weights_of<T>(ctx, 3), dx,
                  stream);
  check.finish(ctx);
}

template <typename T>
void run_softmax_cross_entropy(OpContext& ctx) {
  const Tensor& scores = ctx.in(0);
  const LossParams p = loss_params(ctx, scores.shape(), ctx.in(1).shape());
  cudaStream_t stream = cuda::stream(scores.device());
  LabelCheck check(p, ctx.in(1), stream);
  // log_prob is output 1; without it, a temporary (the loss reads it).
  Tensor log_prob = ctx.has_output(1)
                        ? ctx.out(1)
                        : Tensor::empty(scores.dtype(), scores.shape(), scores.device());
  cuda::launch_softmax_layout<T>(stream, p.N, p.C, p.D, scores.data<T>(), log_prob.data<T>(),
                                 /*log=*/true);
  nll_forward<T>(p, log_prob.data<T>(), ctx.in(1).data<int64_t>(), weights_of<T>(ctx, 2),
                 ctx.out(0).data<T>(), stream);
  check.finish(ctx);
}

// The chain rule through the two forward kernels, as the CPU: the NLL gradient (-w * g at the
// label, 0 elsewhere) into d_scores, then the log-softmax backward in place.
template <typename T>
void run_softmax_cross_entropy_grad(OpContext& ctx) {
  const Tensor& log_prob = ctx.in(1);
  const LossParams p = loss_params(ctx, log_prob.shape(), ctx.in(2).shape());
  cudaStream_t stream = cuda::stream(log_prob.device());
  LabelCheck check(p, ctx.in(2), stream);
  Tensor& d_scores = ctx.out(0);
  nll_backward<T>(p, ctx.in(0).data<T>(), ctx.in(2).data<int64_t>(), weights_of<T>(ctx, 3),
                  d_scores, stream);
  cuda::launch_softmax_grad_layout<T>(stream, p.N, p.C, p.D, d_scores.data<T>(), log_prob.data<T>(),
                                      d_scores.data<T>(), /*log=*/true);
  check.finish(ctx);
}

}  // namespace

void cuda_nll_loss(OpContext& ctx) {
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, run_nll<scalar_t>(ctx));
}
void cuda_nll_loss_grad(OpContext& ctx) {
  ORTM_DISPATCH_FLOAT(ctx.out(0).dtype(), ctx, run_nll_grad<scalar_t>(ctx));
}
void cuda_softmax_cross_entropy(OpContext& ctx) {
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, run_softmax_cross_entropy<scalar_t>(ctx));
}
void cuda_softmax_cross_entropy_grad(OpContext& ctx) {
  ORTM_DISPATCH_FLOAT(ctx.in(1).dtype(), ctx, run_softmax_cross_entropy_grad<scalar_t>(ctx));
}

}  // namespace ortmodule
