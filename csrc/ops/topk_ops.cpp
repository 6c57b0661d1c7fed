// TopK(X, K; axis, largest, sorted) -> Values, Indices: the K largest (or smallest) elements
// along the axis, in order (also with sorted = 0, which leaves the order to the
// implementation), equal elements by increasing index, NaN above every number (as
// torch.topk / torch.sort). Its gradient scatters dValues into the selected positions
// (GatherElementsGrad with the forward's indices).
#include <cstdint>
#include <string>

#include "grad/grad_context.h"
#include "kernels/cpu/reduce.h"
#include "ops/op_utils.h"
#include "ops/ops.h"

namespace ortmodule {

int64_t topk_k(const OpContext& ctx, int64_t dim) {
  const Tensor& k_input = ctx.in(1);
  if (k_input.numel() != 1)
    ctx.fail("input 1 (K) must hold one value, not " + shape_str(k_input.shape()));
  const int64_t k = k_input.to_int_vector()[0];
  if (k < 0 || k > dim)
    ctx.fail("K = " + std::to_string(k) + " is outside [0, " + std::to_string(dim) +
             "], the size of the axis");
  return k;
}

std::vector<OutputInfo> shape_top_k(const OpContext& ctx) {
  const Shape& in = ctx.in(0).shape();
  const int64_t axis = check_axis(ctx, ctx.node.attr_int("axis", -1),
                                  static_cast<int64_t>(in.size()), "attribute 'axis'");
  Shape out = in;
  out[static_cast<size_t>(axis)] = topk_k(ctx, in[static_cast<size_t>(axis)]);
  return {OutputInfo{ctx.in(0).dtype(), out}, OutputInfo{DType::Int64, out}};
}

void cpu_top_k(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  const size_t axis = static_cast<size_t>(
      normalize_axis(ctx, ctx.node.attr_int("axis", -1), static_cast<int64_t>(x.rank())));
  const int64_t dim = x.dim(axis);
  const int64_t k = topk_k(ctx, dim);
  const bool largest = ctx.node.attr_int("largest", 1) != 0;
  const int64_t outer = dims_product(x.shape(), 0, axis);
  const int64_t inner = dims_product(x.shape(), axis + 1, x.rank());
  ORTM_DISPATCH_NUMERIC(
      x.dtype(), ctx,
      topk_forward(outer, dim, inner, k, x.data<scalar_t>(), ctx.out(0).data<scalar_t>(),
                   ctx.out(1).data<int64_t>(), largest));
}

void grad_top_k(GradContext& g) {
  Value* indices = g.forward_output(1, "topk_indices");
  g.set_input_grad(
      0, g.emit("GatherElementsGrad", {g.output_grad(0), g.shape_of(g.input(0)), indices},
                {{"axis", Attribute::make_int(g.node().attr_int("axis", -1))}}, "com.microsoft"));
}

}  // namespace ortmodule
