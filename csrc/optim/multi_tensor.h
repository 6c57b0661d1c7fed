// Multi-tensor AdamW and SGD steps with the arithmetic of torch.optim's foreach
// implementations on the CPU, over raw buffers.
//
// One call updates every parameter of a parameter group: the elements of all tensors are
// cut into chunks that run on the engine's thread pool, and each element is read and
// written once (torch's foreach path makes one pass over memory per operation).
//
// Each element goes through the same sequence of roundings as torch.optim.AdamW /
// torch.optim.SGD with foreach=True (torch 2.13), so the results are bitwise equal:
//   AdamW  p = p * (1 - lr*wd)                       (skipped by torch when wd == 0; p*1 == p)
//          g = maximize ? -g : g
//          m = lerp(m, g, 1 - beta1)                 (torch's lerp: see lerp_weight_is_small)
//          v = v * beta2;  v = v + ((1-beta2)*g)*g   (addcmul)
//          vmax = maximum(vmax, v)                   (amsgrad; NaN propagates as torch's)
//          d = sqrt(amsgrad ? vmax : v) / sqrt(1 - beta2^t) + eps   (torch.sqrt, see below)
//          p = p + (-(lr / (1 - beta1^t)) * m) / d   (addcdiv)
//   SGD    g = maximize ? -g : g;  g = g + wd*p
//          b = first step ? g : b*momentum + (1-dampening)*g
//          g = nesterov ? g + momentum*b : b;  p = p + (-lr)*g
// Scalars are formed in double as Python does (bias corrections with pow, the step count
// read from its tensor) and rounded once to the element type, as a torch Scalar is.
//
// torch's vectorized CPU kernels (AVX2/AVX-512 capability) evaluate a*b + c of lerp, add
// with alpha and addcmul as one fused multiply-add; its baseline kernels round the product
// first. MultiplyAdd selects which of the two to reproduce.
//
// torch.sqrt on the CPU is not the IEEE square root: with MKL it is MKL's vector sqrt, which
// differs from the correctly rounded one in the last bit for many inputs (a fifth of random
// float32 inputs on an AMD EPYC with torch 2.13). The AdamW step therefore takes the square
// root as a function over arrays (VectorSqrt), which the torch boundary implements with
// torch.sqrt itself. Without one it uses the IEEE square root, inline in a single pass over
// memory (faster; the results then differ from torch foreach's in the last bits, as
// torch.optim.AdamW(fused=True)'s do).
#pragma once

#include <cstdint>
#include <vector>

namespace ortmodule {

enum class MultiplyAdd {
  kSeparate,  // round(round(a*b) + c): torch's DEFAULT CPU capability
  kFused,     // fma(a, b, c): torch's AVX2 / AVX-512 capability; needs a CPU with FMA
};

// True when this CPU can run MultiplyAdd::kFused.
bool cpu_has_fused_multiply_add();

struct AdamWHyperParams {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
  bool amsgrad = false;
  bool maximize = false;
};

// One parameter's buffers, numel elements each, all updated in place except grad.
template <typename T>
struct AdamWTensor {
  T* param = nullptr;
  const T* grad = nullptr;
  T* exp_avg = nullptr;
  T* exp_avg_sq = nullptr;
  T* max_exp_avg_sq = nullptr;  // read and written only with amsgrad
  int64_t numel = 0;
  double step = 1;  // number of updates including this one (torch's state['step'] after +1)
};

// out[i] = sqrt(in[i]) for i < n (in and out do not overlap). Called from several threads
// at once, on pieces of at most a few tens of thousands of elements.
template <typename T>
using VectorSqrt = void (*)(const T* in, T* out, int64_t n);

// Throws std::invalid_argument on a step below 1, a negative size, a missing buffer, or
// kFused on a CPU without FMA. vector_sqrt == nullptr: the IEEE square root.
template <typename T>
void multi_tensor_adamw(const AdamWHyperParams& h, MultiplyAdd mode, VectorSqrt<T> vector_sqrt,
                        const std::vector<AdamWTensor<T>>& tensors);

struct SGDHyperParams {
  double lr = 1e-3;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
  bool maximize = false;
};

template <typename T>
struct SGDTensor {
  T* param = nullptr;
  const T* grad = nullptr;
  T* momentum_buffer = nullptr;  // used only when momentum != 0
  bool first_step = false;       // true: the buffer is written as the gradient (torch's clone)
  int64_t numel = 0;
};

template <typename T>
void multi_tensor_sgd(const SGDHyperParams& h, MultiplyAdd mode,
                      const std::vector<SGDTensor<T>>& tensors);

// What multi_tensor_adamw / multi_tensor_sgd (and their CUDA twins) check before touching
// memory: a step below 1, a negative size or a missing buffer throw std::invalid_argument
// naming `op` and the tensor's index.
template <typename T>
void check_adamw_tensors(const char* op, const AdamWHyperParams& h,
                         const std::vector<AdamWTensor<T>>& tensors);
template <typename T>
void check_sgd_tensors(const char* op, const SGDHyperParams& h,
                       const std::vector<SGDTensor<T>>& tensors);

}  // namespace ortmodule
