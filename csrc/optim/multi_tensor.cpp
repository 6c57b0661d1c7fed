// Multi-tensor AdamW and SGD (see multi_tensor.h for the arithmetic they reproduce).
//
// This file is compiled with -ffp-contract=off, so a*b + c is rounded twice unless it is
// written as an explicit fma, and with -fno-math-errno, so sqrt vectorizes. The fused
// variants are compiled for AVX2+FMA (selected at run time); the loops are plain
// element-wise code over restrict pointers that the compiler vectorizes. AdamW's moments pass
// has an AVX-512 clone too (its square root and division are the cost where the buffers sit
// in cache), taken when the active instruction set (kernels/cpu/cpu_isa.h) is AVX-512: the
// same IEEE operations, so the same results.
#include "optim/multi_tensor.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cpu/cpu_isa.h"
#include "kernels/math/optim.h"
#include "kernels/parallel.h"

#if defined(__x86_64__) || defined(__i386__)
#define ORTMODULE_TARGET_FMA __attribute__((target("avx2,fma")))
#define ORTMODULE_TARGET_AVX512 __attribute__((target("avx512f,avx2,fma")))
#else
#define ORTMODULE_TARGET_FMA
#define ORTMODULE_TARGET_AVX512
#endif
#define ORTMODULE_ALWAYS_INLINE __attribute__((always_inline)) inline

namespace ortmodule {

namespace {

// Elements per task: large enough to amortize scheduling, small enough that the tail
// tensors of a group still spread over the threads.
constexpr int64_t kChunkElements = 16384;
// Below this many elements in a group, one thread finishes before others would start.
constexpr int64_t kSerialBelow = 65536;

struct Chunk {
  size_t tensor;
  int64_t begin;
  int64_t end;
};

// Cuts every tensor into pieces of at most kChunkElements; returns the total element count.
template <typename Tensor>
int64_t split_into_chunks(const std::vector<Tensor>& tensors, std::vector<Chunk>* chunks) {
  int64_t total = 0;
  for (size_t t = 0; t < tensors.size(); ++t) {
    const int64_t n = tensors[t].numel;
    for (int64_t b = 0; b < n; b += kChunkElements) {
      chunks->push_back({t, b, std::min(n, b + kChunkElements)});
    }
    total += n;
  }
  return total;
}

template <typename Fn>
void run_chunks(const std::vector<Chunk>& chunks, int64_t total, const Fn& fn) {
  if (total < kSerialBelow) {
    for (const Chunk& c : chunks) fn(c);
    return;
  }
  parallel_for(0, static_cast<int64_t>(chunks.size()), 1, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) fn(chunks[static_cast<size_t>(c)]);
  });
}

void check_buffer(const char* op, size_t index, const char* what, const void* data, int64_t n) {
  if (n < 0 || (n > 0 && data == nullptr)) {
    throw std::invalid_argument(std::string(op) + ": tensor " + std::to_string(index) + " has " +
                                std::to_string(n) + " elements and " +
                                (data == nullptr ? "no " : "a ") + what + " buffer");
  }
}

// ---- AdamW ----

// Moments of one piece: m, v (and vmax) in place. With kIeeeSqrt the parameters too, in the
// same pass, from the IEEE square root.
template <typename T, typename MulAdd, bool kAmsgrad, bool kIeeeSqrt>
ORTMODULE_ALWAYS_INLINE void adamw_moments(const AdamWScalars<T>& scalars, T step_size, T bc2_sqrt,
                                           T* __restrict p, const T* __restrict g, T* __restrict m,
                                           T* __restrict v, T* __restrict vmax, int64_t n) {
  const AdamWScalars<T> s = scalars;  // a local copy: the stores below cannot alias it
  for (int64_t i = 0; i < n; ++i) {
    const T gi = adamw_grad(s, g[i]);
    const T mi = adamw_exp_avg<MulAdd>(s, gi, m[i]);
    const T vi = adamw_exp_avg_sq<MulAdd>(s, gi, v[i]);
    T second = vi;
    if constexpr (kAmsgrad) {
      second = nan_propagating_max(vmax[i], vi);
      vmax[i] = second;
    }
    if constexpr (kIeeeSqrt) {
      p[i] = adamw_param(s, step_size, bc2_sqrt, p[i], mi, ieee_sqrt(second));
    }
    m[i] = mi;
    v[i] = vi;
  }
}

// Parameter update of one piece from the square roots of its second moments.
template <typename T>
void adamw_params(const AdamWScalars<T>& scalars, T step_size, T bc2_sqrt, T* __restrict p,
                  const T* __restrict m, const T* __restrict root, int64_t n) {
  const AdamWScalars<T> s = scalars;
  for (int64_t i = 0; i < n; ++i) p[i] = adamw_param(s, step_size, bc2_sqrt, p[i], m[i], root[i]);
}

#define ORTMODULE_ADAMW_MOMENTS_ARGS \
  const AdamWScalars<T>&s, T step_size, T bc2_sqrt, T *p, const T *g, T *m, T *v, T *vmax, int64_t n
#define ORTMODULE_ADAMW_MOMENTS_CALL s, step_size, bc2_sqrt, p, g, m, v, vmax, n

template <typename T, bool kAmsgrad, bool kIeeeSqrt>
ORTMODULE_TARGET_FMA void adamw_moments_fused(ORTMODULE_ADAMW_MOMENTS_ARGS) {
  adamw_moments<T, FusedMulAdd, kAmsgrad, kIeeeSqrt>(ORTMODULE_ADAMW_MOMENTS_CALL);
}

template <typename T, bool kAmsgrad, bool kIeeeSqrt>
ORTMODULE_TARGET_AVX512 void adamw_moments_fused_avx512(ORTMODULE_ADAMW_MOMENTS_ARGS) {
  adamw_moments<T, FusedMulAdd, kAmsgrad, kIeeeSqrt>(ORTMODULE_ADAMW_MOMENTS_CALL);
}

template <typename T, bool kAmsgrad, bool kIeeeSqrt>
void adamw_moments_separate(ORTMODULE_ADAMW_MOMENTS_ARGS) {
  adamw_moments<T, SeparateMulAdd, kAmsgrad, kIeeeSqrt>(ORTMODULE_ADAMW_MOMENTS_CALL);
}

template <typename T>
using AdamWMomentsFn = void (*)(ORTMODULE_ADAMW_MOMENTS_ARGS);

template <typename T, bool kIeeeSqrt>
AdamWMomentsFn<T> adamw_moments_fn(MultiplyAdd mode, bool amsgrad) {
  if (mode == MultiplyAdd::kFused && cpu_isa_has_avx512(active_cpu_isa())) {
    return amsgrad ? &adamw_moments_fused_avx512<T, true, kIeeeSqrt>
                   : &adamw_moments_fused_avx512<T, false, kIeeeSqrt>;
  }
  if (mode == MultiplyAdd::kFused) {
    return amsgrad ? &adamw_moments_fused<T, true, kIeeeSqrt>
                   : &adamw_moments_fused<T, false, kIeeeSqrt>;
  }
  return amsgrad ? &adamw_moments_separate<T, true, kIeeeSqrt>
                 : &adamw_moments_separate<T, false, kIeeeSqrt>;
}

void check_mode(const char* op, MultiplyAdd mode) {
  if (mode == MultiplyAdd::kFused && !cpu_has_fused_multiply_add()) {
    throw std::invalid_argument(std::string(op) +
                                ": fused multiply-add requested but this CPU has no AVX2/FMA");
  }
}

// ---- SGD ----

template <typename T, typename MulAdd, bool kMomentum>
ORTMODULE_ALWAYS_INLINE void sgd_elements(const SGDScalars<T>& scalars, bool first_step,
                                          T* __restrict p, const T* __restrict g, T* __restrict buf,
                                          int64_t n) {
  const SGDScalars<T> s = scalars;
  for (int64_t i = 0; i < n; ++i) {
    T d = sgd_grad<MulAdd>(s, g[i], p[i]);
    if constexpr (kMomentum) {
      const T b = sgd_momentum_buffer<MulAdd>(s, first_step, d, buf[i]);
      buf[i] = b;
      d = sgd_direction<MulAdd>(s, d, b);
    }
    p[i] = sgd_param<MulAdd>(s, p[i], d);
  }
}

#define ORTMODULE_SGD_CHUNK_ARGS \
  const SGDScalars<T>&s, bool first_step, T *p, const T *g, T *buf, int64_t n
#define ORTMODULE_SGD_CHUNK_CALL s, first_step, p, g, buf, n

template <typename T, bool kMomentum>
ORTMODULE_TARGET_FMA void sgd_chunk_fused(ORTMODULE_SGD_CHUNK_ARGS) {
  sgd_elements<T, FusedMulAdd, kMomentum>(ORTMODULE_SGD_CHUNK_CALL);
}

template <typename T, bool kMomentum>
void sgd_chunk_separate(ORTMODULE_SGD_CHUNK_ARGS) {
  sgd_elements<T, SeparateMulAdd, kMomentum>(ORTMODULE_SGD_CHUNK_CALL);
}

template <typename T>
using SGDChunkFn = void (*)(ORTMODULE_SGD_CHUNK_ARGS);

template <typename T>
SGDChunkFn<T> sgd_chunk_fn(MultiplyAdd mode, bool momentum) {
  if (mode == MultiplyAdd::kFused) {
    return momentum ? &sgd_chunk_fused<T, true> : &sgd_chunk_fused<T, false>;
  }
  return momentum ? &sgd_chunk_separate<T, true> : &sgd_chunk_separate<T, false>;
}

}  // namespace

bool cpu_has_fused_multiply_add() {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return true;
#endif
}

template <typename T>
void check_adamw_tensors(const char* op, const AdamWHyperParams& h,
                         const std::vector<AdamWTensor<T>>& tensors) {
  for (size_t t = 0; t < tensors.size(); ++t) {
    const AdamWTensor<T>& x = tensors[t];
    if (!(x.step >= 1)) {
      throw std::invalid_argument(std::string(op) + ": tensor " + std::to_string(t) + " has step " +
                                  std::to_string(x.step) +
                                  "; the step count including this update must be >= 1");
    }
    check_buffer(op, t, "parameter", x.param, x.numel);
    check_buffer(op, t, "gradient", x.grad, x.numel);
    check_buffer(op, t, "exp_avg", x.exp_avg, x.numel);
    check_buffer(op, t, "exp_avg_sq", x.exp_avg_sq, x.numel);
    if (h.amsgrad) check_buffer(op, t, "max_exp_avg_sq", x.max_exp_avg_sq, x.numel);
  }
}

template <typename T>
void check_sgd_tensors(const char* op, const SGDHyperParams& h,
                       const std::vector<SGDTensor<T>>& tensors) {
  const bool momentum = h.momentum != 0;
  for (size_t t = 0; t < tensors.size(); ++t) {
    const SGDTensor<T>& x = tensors[t];
    check_buffer(op, t, "parameter", x.param, x.numel);
    check_buffer(op, t, "gradient", x.grad, x.numel);
    if (momentum) check_buffer(op, t, "momentum", x.momentum_buffer, x.numel);
  }
}

template <typename T>
void multi_tensor_adamw(const AdamWHyperParams& h, MultiplyAdd mode, VectorSqrt<T> vector_sqrt,
                        const std::vector<AdamWTensor<T>>& tensors) {
  const char* op = "multi_tensor_adamw";
  check_mode(op, mode);
  check_adamw_tensors(op, h, tensors);
  const AdamWScalars<T> s =
      adamw_scalars<T>(h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, h.maximize);
  // Per-tensor bias corrections, formed as torch.optim's Python code forms them.
  std::vector<T> step_size(tensors.size()), bc2_sqrt(tensors.size());
  for (size_t t = 0; t < tensors.size(); ++t) {
    const AdamWBiasCorrection<T> c =
        adamw_bias_correction<T>(h.lr, h.beta1, h.beta2, tensors[t].step);
    step_size[t] = c.step_size;
    bc2_sqrt[t] = c.bc2_sqrt;
  }

  std::vector<Chunk> chunks;
  const int64_t total = split_into_chunks(tensors, &chunks);
  if (vector_sqrt == nullptr) {
    // One pass: moments, IEEE square root and parameters together.
    const AdamWMomentsFn<T> update_fn = adamw_moments_fn<T, true>(mode, h.amsgrad);
    run_chunks(chunks, total, [&](const Chunk& c) {
      const AdamWTensor<T>& x = tensors[c.tensor];
      T* vmax = h.amsgrad ? x.max_exp_avg_sq + c.begin : nullptr;
      update_fn(s, step_size[c.tensor], bc2_sqrt[c.tensor], x.param + c.begin, x.grad + c.begin,
                x.exp_avg + c.begin, x.exp_avg_sq + c.begin, vmax, c.end - c.begin);
    });
    return;
  }
  const AdamWMomentsFn<T> moments_fn = adamw_moments_fn<T, false>(mode, h.amsgrad);
  run_chunks(chunks, total, [&](const Chunk& c) {
    // Three passes over a piece that stays in cache: moments, square roots, parameters.
    thread_local std::vector<T> root;
    root.resize(static_cast<size_t>(kChunkElements));
    const AdamWTensor<T>& x = tensors[c.tensor];
    const int64_t n = c.end - c.begin;
    T* p = x.param + c.begin;
    T* m = x.exp_avg + c.begin;
    T* v = x.exp_avg_sq + c.begin;
    T* vmax = h.amsgrad ? x.max_exp_avg_sq + c.begin : nullptr;
    moments_fn(s, step_size[c.tensor], bc2_sqrt[c.tensor], p, x.grad + c.begin, m, v, vmax, n);
    vector_sqrt(h.amsgrad ? vmax : v, root.data(), n);
    adamw_params(s, step_size[c.tensor], bc2_sqrt[c.tensor], p, m, root.data(), n);
  });
}

template <typename T>
void multi_tensor_sgd(const SGDHyperParams& h, MultiplyAdd mode,
                      const std::vector<SGDTensor<T>>& tensors) {
  const char* op = "multi_tensor_sgd";
  check_mode(op, mode);
  const bool momentum = h.momentum != 0;
  check_sgd_tensors(op, h, tensors);
  const SGDScalars<T> s =
      sgd_scalars<T>(h.lr, h.momentum, h.dampening, h.weight_decay, h.nesterov, h.maximize);
  const SGDChunkFn<T> chunk_fn = sgd_chunk_fn<T>(mode, momentum);
  std::vector<Chunk> chunks;
  const int64_t total = split_into_chunks(tensors, &chunks);
  run_chunks(chunks, total, [&](const Chunk& c) {
    const SGDTensor<T>& x = tensors[c.tensor];
    T* buf = momentum ? x.momentum_buffer + c.begin : nullptr;
    chunk_fn(s, x.first_step, x.param + c.begin, x.grad + c.begin, buf, c.end - c.begin);
  });
}

template void multi_tensor_adamw<float>(const AdamWHyperParams&, MultiplyAdd, VectorSqrt<float>,
                                        const std::vector<AdamWTensor<float>>&);
template void multi_tensor_adamw<double>(const AdamWHyperParams&, MultiplyAdd, VectorSqrt<double>,
                                         const std::vector<AdamWTensor<double>>&);
template void check_adamw_tensors<float>(const char*, const AdamWHyperParams&,
                                         const std::vector<AdamWTensor<float>>&);
template void check_adamw_tensors<double>(const char*, const AdamWHyperParams&,
                                          const std::vector<AdamWTensor<double>>&);
template void check_sgd_tensors<float>(const char*, const SGDHyperParams&,
                                       const std::vector<SGDTensor<float>>&);
template void check_sgd_tensors<double>(const char*, const SGDHyperParams&,
                                        const std::vector<SGDTensor<double>>&);
template void multi_tensor_sgd<float>(const SGDHyperParams&, MultiplyAdd,
                                      const std::vector<SGDTensor<float>>&);
template void multi_tensor_sgd<double>(const SGDHyperParams&, MultiplyAdd,
                                       const std::vector<SGDTensor<double>>&);

}  // namespace ortmodule
