#include "ops/widened_kernel.h"

#include <cstdint>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/math/bfloat16.h"
#include "kernels/math/cast.h"
#include "kernels/math/float16.h"

namespace ortmodule {

namespace {

bool is_low(const Tensor* t) { return t && t->defined() && dtype_is_low_precision(t->dtype()); }

}  // namespace

void widen_into_float32(const Tensor& x, Tensor& f) {
  const uint16_t* p = x.data<uint16_t>();
  if (x.dtype() == DType::BFloat16) {
    bf16_to_float_array(x.numel(), p, f.data<float>());
  } else {
    unary_map(x.numel(), p, f.data<float>(), [](uint16_t v) { return math::half_to_float(v); });
  }
}

Tensor widen_to_float32(const Tensor& x) {
  Tensor f = Tensor::empty(DType::Float32, x.shape());
  widen_into_float32(x, f);
  return f;
}

void round_from_float32(const Tensor& f, Tensor& y) {
  const float* p = f.data<float>();
  if (y.dtype() == DType::BFloat16) {
    float_to_bf16_array(y.numel(), p, y.data<uint16_t>());
  } else {
    unary_map(y.numel(), p, y.data<uint16_t>(), math::StoreFloat16());
  }
}

bool has_low_precision(const OpContext& ctx) {
  for (const Tensor* t : ctx.inputs)
    if (is_low(t)) return true;
  for (const Tensor& t : ctx.outputs)
    if (is_low(&t)) return true;
  return false;
}

void run_widened(OpContext& ctx, KernelFn float_kernel) {
  std::vector<Tensor> widened(ctx.inputs.size());
  OpContext wide{ctx.node, ctx.inputs, {}, ctx.seed};
  for (size_t i = 0; i < ctx.inputs.size(); ++i) {
    if (!is_low(ctx.inputs[i])) continue;
    widened[i] = widen_to_float32(*ctx.inputs[i]);
    wide.inputs[i] = &widened[i];
  }
  for (const Tensor& y : ctx.outputs)
    wide.outputs.push_back(is_low(&y) ? Tensor::empty(DType::Float32, y.shape()) : y);
  float_kernel(wide);
  for (size_t k = 0; k < ctx.outputs.size(); ++k)
    if (is_low(&ctx.outputs[k])) round_from_float32(wide.outputs[k], ctx.outputs[k]);
}

}  // namespace ortmodule
