// Per-element AdamW and SGD updates of the multi-tensor optimizers, shared by the CPU loops
// (optim/multi_tensor.cpp) and the CUDA kernels (kernels/cuda/optim.cu), so the CPU tests
// cover the arithmetic the GPU runs. The sequence of roundings is torch.optim's foreach
// arithmetic, described in optim/multi_tensor.h.
//
// Every a*b + c goes through a MulAdd policy: SeparateMulAdd rounds the product first (torch's
// DEFAULT CPU kernels), FusedMulAdd rounds once (torch's AVX2/AVX-512 CPU kernels, and the
// CUDA kernels, which always fuse). On the host, SeparateMulAdd relies on the including file
// being compiled with -ffp-contract=off (CMakeLists.txt sets it for multi_tensor.cpp); on the
// device it uses the explicitly rounded intrinsics, which nvcc never contracts.
#pragma once

#include <cmath>
#include <limits>

#include "kernels/math/host_device.h"

namespace ortmodule {

struct SeparateMulAdd {
  ORTM_HOST_DEVICE static float apply(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
    return __fadd_rn(__fmul_rn(a, b), c);
#else
    return a * b + c;
#endif
  }
  ORTM_HOST_DEVICE static double apply(double a, double b, double c) {
#if defined(__CUDA_ARCH__)
    return __dadd_rn(__dmul_rn(a, b), c);
#else
    return a * b + c;
#endif
  }
};

struct FusedMulAdd {
  ORTM_HOST_DEVICE static float apply(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
    return __fmaf_rn(a, b, c);
#else
    return __builtin_fmaf(a, b, c);
#endif
  }
  ORTM_HOST_DEVICE static double apply(double a, double b, double c) {
#if defined(__CUDA_ARCH__)
    return __fma_rn(a, b, c);
#else
    return __builtin_fma(a, b, c);
#endif
  }
};

// torch.maximum: a quiet NaN when either operand is NaN.
template <typename T>
ORTM_HOST_DEVICE T nan_propagating_max(T a, T b) {
#if defined(__CUDA_ARCH__)
  const T nan = static_cast<T>(::nan(""));
#else
  const T nan = std::numeric_limits<T>::quiet_NaN();
#endif
  return (a != a || b != b) ? nan : (a < b ? b : a);
}

// The correctly rounded square root (torch.sqrt on CUDA; torch.optim.AdamW(fused=True)'s).
template <typename T>
ORTM_HOST_DEVICE T ieee_sqrt(T x) {
  using std::sqrt;
  return sqrt(x);
}

// ---- AdamW ----

// Group-wide scalars, rounded once from double to T as torch rounds a Python number.
template <typename T>
struct AdamWScalars {
  T decay;            // 1 - lr*wd
  T grad_sign;        // -1 with maximize
  T lerp_coeff;       // w = 1 - beta1 when |w| < 0.5, else w - 1
  bool lerp_small;    // torch's lerp: m + w*(g - m) for |w| < 0.5, else g + (w - 1)*(g - m)
  T beta2;            //
  T one_minus_beta2;  //
  T eps;
};

template <typename T>
inline AdamWScalars<T> adamw_scalars(double lr, double beta1, double beta2, double eps,
                                     double weight_decay, bool maximize) {
  AdamWScalars<T> s;
  s.decay = static_cast<T>(1 - lr * weight_decay);
  s.grad_sign = maximize ? T(-1) : T(1);
  const T lerp_weight = static_cast<T>(1 - beta1);
  s.lerp_small = std::abs(lerp_weight) < T(0.5);
  s.lerp_coeff = s.lerp_small ? lerp_weight : lerp_weight - T(1);
  s.beta2 = static_cast<T>(beta2);
  s.one_minus_beta2 = static_cast<T>(1 - beta2);
  s.eps = static_cast<T>(eps);
  return s;
}

// One tensor's bias corrections at `step` (updates including this one), formed as
// torch.optim's Python code forms them: step_size = -(lr / (1 - beta1^t)), and
// bc2_sqrt = (1 - beta2^t)^0.5.
template <typename T>
struct AdamWBiasCorrection {
  T step_size;
  T bc2_sqrt;
};

template <typename T>
inline AdamWBiasCorrection<T> adamw_bias_correction(double lr, double beta1, double beta2,
                                                    double step) {
  const double bc1 = 1 - std::pow(beta1, step);
  const double bc2 = 1 - std::pow(beta2, step);
  return {static_cast<T>((lr / bc1) * -1), static_cast<T>(std::pow(bc2, 0.5))};
}

// The gradient as the moments see it (negated with maximize).
template <typename T>
ORTM_HOST_DEVICE T adamw_grad(const AdamWScalars<T>& s, T g) {
  return g * s.grad_sign;
}

// exp_avg.lerp_(g, 1 - beta1).
template <typename MulAdd, typename T>
ORTM_HOST_DEVICE T adamw_exp_avg(const AdamWScalars<T>& s, T g, T m) {
  return MulAdd::apply(s.lerp_coeff, g - m, s.lerp_small ? m : g);
}

// exp_avg_sq.mul_(beta2).addcmul_(g, g, value=1 - beta2).
template <typename MulAdd, typename T>
ORTM_HOST_DEVICE T adamw_exp_avg_sq(const AdamWScalars<T>& s, T g, T v) {
  return MulAdd::apply(s.one_minus_beta2 * g, g, v * s.beta2);
}

// p.mul_(1 - lr*wd), then p.addcdiv_(m, root / bc2_sqrt + eps, value=step_size), with root the
// square root of the second moment (its running maximum with amsgrad). Both are separate torch
// ops, so the decay product is rounded on its own.
template <typename T>
ORTM_HOST_DEVICE T adamw_param(const AdamWScalars<T>& s, T step_size, T bc2_sqrt, T p, T m,
                               T root) {
  const T denom = root / bc2_sqrt + s.eps;
  return SeparateMulAdd::apply(p, s.decay, (step_size * m) / denom);
}

// ---- SGD ----

template <typename T>
struct SGDScalars {
  T grad_sign;
  T weight_decay;
  bool has_weight_decay;
  T momentum;
  T one_minus_dampening;
  bool nesterov;
  T neg_lr;
};

template <typename T>
inline SGDScalars<T> sgd_scalars(double lr, double momentum, double dampening, double weight_decay,
                                 bool nesterov, bool maximize) {
  SGDScalars<T> s;
  s.grad_sign = maximize ? T(-1) : T(1);
  s.weight_decay = static_cast<T>(weight_decay);
  s.has_weight_decay = weight_decay != 0;
  s.momentum = static_cast<T>(momentum);
  s.one_minus_dampening = static_cast<T>(1 - dampening);
  s.nesterov = nesterov;
  s.neg_lr = static_cast<T>(-lr);
  return s;
}

// g = maximize ? -g : g;  g = g + wd*p.
template <typename MulAdd, typename T>
ORTM_HOST_DEVICE T sgd_grad(const SGDScalars<T>& s, T g, T p) {
  const T signed_grad = g * s.grad_sign;
  return s.has_weight_decay ? MulAdd::apply(p, s.weight_decay, signed_grad) : signed_grad;
}

// b = first step ? g : b*momentum + (1 - dampening)*g.
template <typename MulAdd, typename T>
ORTM_HOST_DEVICE T sgd_momentum_buffer(const SGDScalars<T>& s, bool first_step, T g, T b) {
  return first_step ? g : MulAdd::apply(g, s.one_minus_dampening, b * s.momentum);
}

// The step direction from the momentum buffer: nesterov ? g + momentum*b : b.
template <typename MulAdd, typename T>
ORTM_HOST_DEVICE T sgd_direction(const SGDScalars<T>& s, T g, T b) {
  return s.nesterov ? MulAdd::apply(b, s.momentum, g) : b;
}

// p = p + (-lr)*d.
template <typename MulAdd, typename T>
ORTM_HOST_DEVICE T sgd_param(const SGDScalars<T>& s, T p, T d) {
  return MulAdd::apply(d, s.neg_lr, p);
}

}  // namespace ortmodule
