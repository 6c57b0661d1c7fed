// y = f(x) element-wise over the floating types, f computing in whatever precision it chooses
// (its result is cast back to x's dtype): the CPU kernels of the unary math ops share it.
#pragma once

#include "kernels/cpu/elementwise.h"
#include "ops/op_utils.h"

namespace ortmodule {

template <typename F>
void unary_float(OpContext& ctx, F f) {
  const Tensor& x = ctx.in(0);
  ORTM_DISPATCH_FLOAT(x.dtype(), ctx,
                      unary_map(x.numel(), x.data<scalar_t>(), ctx.out(0).data<scalar_t>(),
                                [&](scalar_t v) { return static_cast<scalar_t>(f(v)); }));
}

}  // namespace ortmodule
