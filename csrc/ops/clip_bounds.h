// The bounds of Clip(x, min?, max?) and ClipGrad(dY, x, min?, max?), read on the host by the
// CPU and the CUDA kernels alike (the CUDA rows read the bound inputs on the host).
#pragma once

#include <limits>
#include <string>
#include <type_traits>

#include "kernels/math/elementwise.h"
#include "ops/op_table.h"

namespace ortmodule {

// A bound given as a double (a float attribute, or a bound tensor of another dtype) in T.
// C++ leaves converting NaN or an out-of-range value to an integer undefined: a NaN bound of
// an integer input fails, and a bound beyond T's range clips exactly as T's extreme does.
// (Floating types round as IEEE defines: beyond float's range is an infinity.)
template <typename T>
T clip_bound_value(const OpContext& ctx, const std::string& what, double v) {
  if constexpr (std::is_integral_v<T>) {
    if (v != v)
      ctx.fail(what + " is NaN, and input 0 has dtype " + dtype_name(ctx.in(0).dtype()) +
               ": an integer tensor has no NaN to clip to");
    return math::saturate_to_int<T>(v);
  } else {
    return static_cast<T>(v);
  }
}

// A bound is read in the dtype of input 0 (x, or dY of ClipGrad), the type T binds:
// exactly when the bound has that dtype (64-bit integers do not pass through double).
// Before opset 11 the bounds are the float attributes min and max.
template <typename T>
T clip_bound(const OpContext& ctx, size_t k, const char* attr, T absent) {
  if (!ctx.has_input(k))
    return ctx.node.has_attr(attr) ? clip_bound_value<T>(ctx, std::string("attribute ") + attr,
                                                         ctx.node.attr_float(attr, 0))
                                   : absent;
  const Tensor& b = ctx.in(k);
  if (b.numel() != 1)
    ctx.fail("input " + std::to_string(k) + " (a bound) has shape " + shape_str(b.shape()) +
             "; expected a single value");
  if (b.dtype() == ctx.in(0).dtype()) return b.data<T>()[0];
  return clip_bound_value<T>(ctx, "input " + std::to_string(k) + " (a bound)", b.float_at(0));
}
template <typename T>
void clip_bounds(const OpContext& ctx, size_t first, T* lo, T* hi) {
  *lo = clip_bound(ctx, first, "min", std::numeric_limits<T>::lowest());
  *hi = clip_bound(ctx, first + 1, "max", std::numeric_limits<T>::max());
}

}  // namespace ortmodule
