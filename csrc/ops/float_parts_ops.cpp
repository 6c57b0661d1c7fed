// ai.ortmodule NextAfter(a, b) (torch.nextafter, a and b broadcast) and Frexp(x) -> (mantissa,
// int32 exponent) (torch.frexp), and their gradients: PyTorch's formulas, built from forward
// ops (kernels/math/float_parts.h).
#include "grad/grad_context.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/math/float_parts.h"
#include "ops/op_utils.h"
#include "ops/ops.h"

namespace ortmodule {

// float16 and bfloat16 step on their own bits (the graph keeps them in 16 bits: the
// neighbour of a float32 widening would round back to a).
void cpu_next_after(OpContext& ctx) {
  expect_same_dtype(ctx, 1);
  const Tensor& a = ctx.in(0);
  const Tensor& b = ctx.in(1);
  Tensor& y = ctx.out(0);
  if (dtype_is_low_precision(a.dtype())) {
    const uint16_t inf_bits = a.dtype() == DType::Float16 ? 0x7c00 : 0x7f80;
    binary_map(
        a.shape(), a.data<uint16_t>(), b.shape(), b.data<uint16_t>(), y.shape(), y.data<uint16_t>(),
        [inf_bits](uint16_t p, uint16_t q) { return math::next_after_bits16(p, q, inf_bits); });
    return;
  }
  ORTM_DISPATCH_FLOAT(a.dtype(), ctx,
                      binary_map(a.shape(), a.data<scalar_t>(), b.shape(), b.data<scalar_t>(),
                                 y.shape(), y.data<scalar_t>(),
                                 [](scalar_t p, scalar_t q) { return math::next_after(p, q); }));
}

std::vector<OutputInfo> shape_frexp(const OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  if (!dtype_is_floating(x.dtype()))
    ctx.fail("Frexp needs a float input, got " + dtype_name(x.dtype()));
  return {OutputInfo{x.dtype(), x.shape()}, OutputInfo{DType::Int32, x.shape()}};
}

void cpu_frexp(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  ORTM_DISPATCH_FLOAT(x.dtype(), ctx, {
    const scalar_t* xp = x.data<scalar_t>();
    if (ctx.has_output(0))
      unary_map(x.numel(), xp, ctx.out(0).data<scalar_t>(),
                [](scalar_t v) { return math::frexp_mantissa(v); });
    if (ctx.has_output(1))
      unary_map(x.numel(), xp, ctx.out(1).data<int32_t>(),
                [](scalar_t v) { return math::frexp_exponent(v); });
  });
}

// y = nextafter(a, b):  da = dy where a != b, else 0;  db = 0.
void grad_next_after(GradContext& g) {
  Value* a = g.input(0);
  Value* b = g.input(1);
  if (g.needs_grad(0)) {
    Value* dy = g.output_grad(0);
    Value* zero = g.emit("ZerosLike", {dy}, {}, "ai.ortmodule");
    Value* da = g.emit("Where", {g.emit("Equal", {a, b}), zero, dy});
    g.set_input_grad(0, g.sum_to_shape(da, a));
  }
  if (g.needs_grad(1)) g.set_input_grad(1, g.emit("ZerosLike", {b}, {}, "ai.ortmodule"));
}

// (m, e) = frexp(x):  dx = dm / 2^e, 2^e computed in float32 as eager's exponent.exp2() is
// (an int32 tensor's exp2 has torch's default dtype): inf beyond float32's range, so that
// float64 inputs above 2^128 get eager's zero gradient and those below 2^-149 its inf.
void grad_frexp(GradContext& g) {
  Value* dm = g.output_grad(0);
  if (!dm) return;
  Value* e = g.emit("Cast", {g.forward_output(1, "exponent")}, {{"to", Attribute::make_int(1)}});
  Value* scale = g.emit("Pow", {g.scalar_constant(2.0, e), e});
  g.set_input_grad(0, g.emit("Div", {dm, g.emit("CastLike", {scale, dm})}));
}

}  // namespace ortmodule
