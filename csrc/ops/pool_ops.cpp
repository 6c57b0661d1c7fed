// MaxPool, AveragePool and GlobalAveragePool with their gradients (ai.ortmodule pool grads).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "grad/grad_context.h"
#include "kernels/cpu/pool.h"
#include "ops/op_utils.h"
#include "ops/ops.h"
#include "ops/window.h"

namespace ortmodule {

// ---- MaxPool(X) -> Y, Indices?; MaxPoolGrad(dY, Indices, x_shape) ----

// storage_order=1 (Indices counted column-major over the spatial dims) is converted after
// the kernels, which count row-major; MaxPoolGrad converts back before scattering.
bool column_major_indices(const OpContext& ctx) {
  const int64_t order = ctx.node.attr_int("storage_order", 0);
  if (order != 0 && order != 1)
    ctx.fail("attribute storage_order=" + std::to_string(order) + ", expected 0 or 1");
  return order == 1;
}

std::vector<OutputInfo> shape_maxpool(const OpContext& ctx) {
  column_major_indices(ctx);
  const Shape& x = ctx.in(0).shape();
  Shape out;
  if (is_pool3d(x)) {
    out = pool3d_out_shape(make_pool3d(ctx, x, false));
  } else {
    Window w = make_pool_window(ctx, x);
    out = window_out_shape(w, w.C);
  }
  OutputInfo y{ctx.in(0).dtype(), out};
  OutputInfo idx{DType::Int64, y.shape};
  return {y, idx};
}

// MaxPool's forward types: the floating types, int8 and uint8.
#define ORTM_DISPATCH_MAXPOOL(DTYPE, CTX, ...)                         \
  switch (DTYPE) {                                                     \
    ORTM_DTYPE_CASE(Float32, float, __VA_ARGS__)                       \
    ORTM_DTYPE_CASE(Float64, double, __VA_ARGS__)                      \
    ORTM_DTYPE_CASE(Int8, int8_t, __VA_ARGS__)                         \
    ORTM_DTYPE_CASE(UInt8, uint8_t, __VA_ARGS__)                       \
    default:                                                           \
      (CTX).fail("dtype " + dtype_name(DTYPE) +                        \
                 " is not supported (float32, float64, int8, uint8)"); \
  }

void cpu_maxpool(OpContext& ctx) {
  const Shape& x = ctx.in(0).shape();
  int64_t* idx = ctx.has_output(1) ? ctx.out(1).data<int64_t>() : nullptr;
  if (is_pool3d(x)) {
    const Pool3dParams p = make_pool3d(ctx, x, false);
    ORTM_DISPATCH_MAXPOOL(ctx.in(0).dtype(), ctx,
                          maxpool3d_forward<scalar_t>(p, ctx.in(0).data<scalar_t>(),
                                                      ctx.out(0).data<scalar_t>(), idx));
  } else {
    Window w = make_window(ctx, x, ctx.node.attr_ints("kernel_shape"));
    ORTM_DISPATCH_MAXPOOL(
        ctx.in(0).dtype(), ctx,
        maxpool2d_forward<scalar_t>(pool_params(w, false), ctx.in(0).data<scalar_t>(),
                                    ctx.out(0).data<scalar_t>(), idx));
  }
  if (idx && column_major_indices(ctx)) convert_storage_order(x, idx, ctx.out(1).numel(), true);
}
#undef ORTM_DISPATCH_MAXPOOL

// Pool gradients take dY first and the input's shape last.
std::vector<OutputInfo> shape_pool_grad(const OpContext& ctx) {
  const Shape x = ctx.in(ctx.num_inputs() - 1).to_int_vector();
  check_shape(ctx, x, "shape input (input " + std::to_string(ctx.num_inputs() - 1) + ")");
  Shape dy;
  if (ctx.node.op_type == "GlobalAveragePoolGrad") {
    if (x.size() < 3) ctx.fail("input shape must be [N, C, spatial...], got " + shape_str(x));
    dy = x;
    for (size_t i = 2; i < dy.size(); ++i) dy[i] = 1;
  } else if (is_pool3d(x)) {
    dy = pool3d_out_shape(make_pool3d(ctx, x, false));
  } else {
    Window w = make_pool_window(ctx, x);
    dy = window_out_shape(w, w.C);
  }
  if (ctx.in(0).shape() != dy)
    ctx.fail("input 0 (dY) has shape " + shape_str(ctx.in(0).shape()) + ", expected " +
             shape_str(dy));
  if (ctx.node.op_type == "MaxPoolGrad" &&
      (ctx.in(1).dtype() != DType::Int64 || ctx.in(1).shape() != dy))
    ctx.fail("indices (input 1) must be int64 of shape " + shape_str(dy) + ", got " +
             dtype_name(ctx.in(1).dtype()) + " " + shape_str(ctx.in(1).shape()));
  return one_output(ctx.in(0).dtype(), x);
}

void cpu_maxpool_grad(OpContext& ctx) {
  const Shape x = ctx.in(2).to_int_vector();
  const int64_t* indices = ctx.in(1).data<int64_t>();
  std::vector<int64_t> row_major;
  if (column_major_indices(ctx)) {
    row_major.assign(indices, indices + ctx.in(1).numel());
    convert_storage_order(x, row_major.data(), static_cast<int64_t>(row_major.size()), false);
    indices = row_major.data();
  }
  if (x.size() < 3) ctx.fail("input_shape (input 2) " + shape_str(x) + " has no spatial dims");
  // The kernels check that every index points into its own plane (or is -1 for an empty
  // window) while they scatter, and return the position of the first that does not.
  int64_t bad = -1;
  if (is_pool3d(x)) {
    const Pool3dParams p = make_pool3d(ctx, x, false);
    ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx,
                        bad = maxpool3d_backward<scalar_t>(p, ctx.in(0).data<scalar_t>(), indices,
                                                           ctx.out(0).data<scalar_t>()));
  } else {
    Window w = make_pool_window(ctx, x);
    ORTM_DISPATCH_FLOAT(
        ctx.in(0).dtype(), ctx,
        bad = maxpool2d_backward<scalar_t>(pool_params(w, false), ctx.in(0).data<scalar_t>(),
                                           indices, ctx.out(0).data<scalar_t>()));
  }
  if (bad >= 0)
    ctx.fail("indices (input 1) entry " + std::to_string(ctx.in(1).data<int64_t>()[bad]) +
             " at position " + std::to_string(bad) + " is out of range for its plane");
}

void grad_maxpool(GradContext& g) {
  Value* indices = g.forward_output(1, "indices");
  Value* dx = g.emit("MaxPoolGrad", {g.output_grad(0), indices, g.shape_of(g.input(0))}, {},
                     "ai.ortmodule");
  copy_window_attrs(g.node(), dx->producer);
  g.set_input_grad(0, dx);
}

// ---- AveragePool(X), ai.ortmodule AveragePoolTorch(X); AveragePoolGrad(dY, x_shape) ----
// AveragePoolTorch is AveragePool with torch's divisor_override: every window divides its sum
// by that number. The gradient node carries it over with the window attributes.

std::vector<OutputInfo> shape_avgpool(const OpContext& ctx) {
  pool_divisor_override(ctx);
  const Shape& x = ctx.in(0).shape();
  if (is_pool3d(x))
    return one_output(ctx.in(0).dtype(), pool3d_out_shape(make_pool3d(ctx, x, false)));
  Window w = make_pool_window(ctx, x);
  return one_output(ctx.in(0).dtype(), window_out_shape(w, w.C));
}

void cpu_avgpool(OpContext& ctx) {
  bool include = ctx.node.attr_int("count_include_pad", 0) != 0;
  const int64_t divisor = pool_divisor_override(ctx);
  if (is_pool3d(ctx.in(0).shape())) {
    const Pool3dParams p = make_pool3d(ctx, ctx.in(0).shape(), include, divisor);
    ORTM_DISPATCH_FLOAT(
        ctx.in(0).dtype(), ctx,
        avgpool3d_forward<scalar_t>(p, ctx.in(0).data<scalar_t>(), ctx.out(0).data<scalar_t>()));
    return;
  }
  Window w = make_window(ctx, ctx.in(0).shape(), ctx.node.attr_ints("kernel_shape"));
  ORTM_DISPATCH_FLOAT(
      ctx.in(0).dtype(), ctx,
      avgpool2d_forward<scalar_t>(pool_params(w, include, divisor), ctx.in(0).data<scalar_t>(),
                                  ctx.out(0).data<scalar_t>()));
}

void cpu_avgpool_grad(OpContext& ctx) {
  bool include = ctx.node.attr_int("count_include_pad", 0) != 0;
  const int64_t divisor = pool_divisor_override(ctx);
  const Shape x = ctx.in(1).to_int_vector();
  if (is_pool3d(x)) {
    const Pool3dParams p = make_pool3d(ctx, x, include, divisor);
    ORTM_DISPATCH_FLOAT(
        ctx.in(0).dtype(), ctx,
        avgpool3d_backward<scalar_t>(p, ctx.in(0).data<scalar_t>(), ctx.out(0).data<scalar_t>()));
    return;
  }
  Window w = make_window(ctx, x, ctx.node.attr_ints("kernel_shape"));
  ORTM_DISPATCH_FLOAT(
      ctx.in(0).dtype(), ctx,
      avgpool2d_backward<scalar_t>(pool_params(w, include, divisor), ctx.in(0).data<scalar_t>(),
                                   ctx.out(0).data<scalar_t>()));
}

void grad_avgpool(GradContext& g) {
  Value* dx =
      g.emit("AveragePoolGrad", {g.output_grad(0), g.shape_of(g.input(0))}, {}, "ai.ortmodule");
  copy_window_attrs(g.node(), dx->producer);
  g.set_input_grad(0, dx);
}

// ---- GlobalAveragePool(X); GlobalAveragePoolGrad(dY, x_shape) ----

std::vector<OutputInfo> shape_global_avgpool(const OpContext& ctx) {
  Shape s = ctx.in(0).shape();
  if (s.size() < 3) ctx.fail("input must be [N, C, spatial...], got " + shape_str(s));
  for (size_t i = 2; i < s.size(); ++i) s[i] = 1;
  return one_output(ctx.in(0).dtype(), s);
}

void cpu_global_avgpool(OpContext& ctx) {
  const Shape& s = ctx.in(0).shape();
  ORTM_DISPATCH_FLOAT(
      ctx.in(0).dtype(), ctx,
      global_avgpool_forward<scalar_t>(s[0], s[1], dims_product(s, 2, s.size()),
                                       ctx.in(0).data<scalar_t>(), ctx.out(0).data<scalar_t>()));
}

void cpu_global_avgpool_grad(OpContext& ctx) {
  Shape s = ctx.in(1).to_int_vector();
  ORTM_DISPATCH_FLOAT(
      ctx.in(0).dtype(), ctx,
      global_avgpool_backward<scalar_t>(s[0], s[1], dims_product(s, 2, s.size()),
                                        ctx.in(0).data<scalar_t>(), ctx.out(0).data<scalar_t>()));
}

void grad_global_avgpool(GradContext& g) {
  g.set_input_grad(0, g.emit("GlobalAveragePoolGrad", {g.output_grad(0), g.shape_of(g.input(0))},
                             {}, "ai.ortmodule"));
}

}  // namespace ortmodule
