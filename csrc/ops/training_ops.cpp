// Ops of on-device training graphs (com.microsoft, as ONNX Runtime Training defines them)
// and the standard ops that gradient graphs written for other runtimes use.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "grad/grad_context.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/parallel.h"
#include "ops/op_utils.h"
#include "ops/ops.h"

namespace ortmodule {

// ---- InPlaceAccumulatorV2(buffer, value, overwrite_flag?) -> (updated, buffer_out?) ----
// buffer = overwrite_flag ? value : buffer + value, in the buffer's own memory; `updated` is
// true. Output 1 is that buffer (a view of input 0). It is required: the training session
// names it as the buffer's state update, and without it nothing would keep the op (whose
// other output is only a flag) honest about writing into a graph input.
std::vector<OutputInfo> shape_inplace_accumulator(const OpContext& ctx) {
  const Tensor& buffer = ctx.in(0);
  const Tensor& value = ctx.in(1);
  if (ctx.node.outputs.size() < 2 || !ctx.node.outputs[1])
    ctx.fail(
        "output 1 (the accumulated buffer) is missing: the op updates its buffer in place, "
        "which only a training session does (ortmodule.training.api.Module / "
        "ortmodule::TrainingSession run training models)");
  if (buffer.dtype() != value.dtype())
    ctx.fail("buffer (input 0) is " + dtype_name(buffer.dtype()) + " but value (input 1) is " +
             dtype_name(value.dtype()) + "; expected the same dtype");
  if (buffer.shape() != value.shape())
    ctx.fail("buffer (input 0) has shape " + shape_str(buffer.shape()) +
             " but value (input 1) has shape " + shape_str(value.shape()));
  if (ctx.has_input(2)) {
    const Tensor& flag = ctx.in(2);
    if (flag.dtype() != DType::Bool || flag.numel() != 1)
      ctx.fail("overwrite_flag (input 2) must be one bool, got " + dtype_name(flag.dtype()) + " " +
               shape_str(flag.shape()));
  }
  return {OutputInfo{DType::Bool, {1}, -1}, OutputInfo{buffer.dtype(), buffer.shape(), 0}};
}

void cpu_inplace_accumulator(OpContext& ctx) {
  const Tensor& buffer = ctx.in(0);
  const Tensor& value = ctx.in(1);
  const bool overwrite = ctx.has_input(2) && ctx.in(2).data<uint8_t>()[0] != 0;
  ctx.out(0).data<uint8_t>()[0] = 1;
  if (buffer.raw() == value.raw()) {
    if (!overwrite) ctx.fail("value (input 1) is the buffer itself");
    return;
  }
  if (overwrite) {
    std::memcpy(buffer.raw(), value.raw(), value.nbytes());
    return;
  }
  ORTM_DISPATCH_FLOAT(buffer.dtype(), ctx, {
    scalar_t* __restrict b = buffer.data<scalar_t>();
    const scalar_t* __restrict v = value.data<scalar_t>();
    parallel_for(0, buffer.numel(), 1 << 14, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) b[i] += v[i];
    });
  });
}

// ---- BroadcastGradientArgs(a_shape, b_shape) -> (a_axes?, b_axes?) ----
// For C = op(A, B) with numpy broadcasting: the axes of C (0 .. rank(C)-1, ascending) that
// A's (B's) gradient must be summed over, keeping dims, before reshaping it to A's (B's)
// shape.
namespace {
void broadcast_gradient_axes(const OpContext& ctx, std::vector<int64_t>* a_axes,
                             std::vector<int64_t>* b_axes) {
  for (size_t k = 0; k < 2; ++k)
    if (ctx.in(k).dtype() != DType::Int64 || ctx.in(k).rank() != 1)
      ctx.fail("input " + std::to_string(k) + " must be a 1-D int64 shape, got " +
               dtype_name(ctx.in(k).dtype()) + " " + shape_str(ctx.in(k).shape()));
  const Shape a = ctx.in(0).to_int_vector(), b = ctx.in(1).to_int_vector();
  check_shape(ctx, a, "shape A (input 0)");
  check_shape(ctx, b, "shape B (input 1)");
  const size_t rank = std::max(a.size(), b.size());
  for (size_t i = 0; i < rank; ++i) {
    const size_t from_right = rank - 1 - i;
    const bool in_a = from_right < a.size(), in_b = from_right < b.size();
    const int64_t da = in_a ? a[a.size() - 1 - from_right] : 1;
    const int64_t db = in_b ? b[b.size() - 1 - from_right] : 1;
    if (da != db && da != 1 && db != 1)
      ctx.fail("shapes " + shape_str(a) + " and " + shape_str(b) + " do not broadcast (axis " +
               std::to_string(i) + ": " + std::to_string(da) + " vs " + std::to_string(db) + ")");
    const int64_t axis = static_cast<int64_t>(i);
    if (!in_a || (da == 1 && db != 1)) a_axes->push_back(axis);
    if (!in_b || (db == 1 && da != 1)) b_axes->push_back(axis);
  }
}
}  // namespace

std::vector<OutputInfo> shape_broadcast_gradient_args(const OpContext& ctx) {
  std::vector<int64_t> a_axes, b_axes;
  broadcast_gradient_axes(ctx, &a_axes, &b_axes);
  return {OutputInfo{DType::Int64, {static_cast<int64_t>(a_axes.size())}, -1},
          OutputInfo{DType::Int64, {static_cast<int64_t>(b_axes.size())}, -1}};
}

void cpu_broadcast_gradient_args(OpContext& ctx) {
  std::vector<int64_t> a_axes, b_axes;
  broadcast_gradient_axes(ctx, &a_axes, &b_axes);
  if (ctx.has_output(0)) std::copy(a_axes.begin(), a_axes.end(), ctx.out(0).data<int64_t>());
  if (ctx.has_output(1)) std::copy(b_axes.begin(), b_axes.end(), ctx.out(1).data<int64_t>());
}

// ---- Size(x) -> int64 scalar: the number of elements ----
std::vector<OutputInfo> shape_size(const OpContext& ctx) { return one_output(DType::Int64, {}); }
void cpu_size(OpContext& ctx) { ctx.out(0).data<int64_t>()[0] = ctx.in(0).numel(); }

// ---- com.microsoft Scale (ONNX Runtime Training's gradient graphs) ----

// Scale(input, scale; scale_down=0): input * s, with s the single value of `scale` taken as
// float32 and, with scale_down=1, replaced by its float32 reciprocal; s is then cast to the
// input's dtype. The reference runtime computes it this way (ReduceMean's gradient divides by
// the reduced count with scale_down=1).
std::vector<OutputInfo> shape_scale(const OpContext& ctx) {
  const Tensor& scale = ctx.in(1);
  if (scale.numel() != 1)
    ctx.fail("input 1 (scale) must hold a single value, got shape " + shape_str(scale.shape()));
  const DType st = scale.dtype();
  if (st != DType::Float32 && st != DType::Float64 && st != DType::Int64 && st != DType::Int32)
    ctx.fail("input 1 (scale) must be float32, float64, int64 or int32, got " + dtype_name(st));
  return one_output(ctx.in(0).dtype(), ctx.in(0).shape());
}

void cpu_scale(OpContext& ctx) {
  const Tensor& scale = ctx.in(1);
  float s = 0.f;
  ORTM_DISPATCH_NUMERIC(scale.dtype(), ctx, s = static_cast<float>(scale.data<scalar_t>()[0]));
  if (s == 0.f) ctx.fail("input 1 (scale) is 0; expected a non-zero scale");
  if (ctx.node.attr_int("scale_down", 0) != 0) s = 1.0f / s;
  const Tensor& x = ctx.in(0);
  ORTM_DISPATCH_FLOAT(x.dtype(), ctx, {
    const auto factor = static_cast<scalar_t>(s);
    unary_map(x.numel(), x.data<scalar_t>(), ctx.out(0).data<scalar_t>(),
              [factor](scalar_t v) { return static_cast<scalar_t>(v * factor); });
  });
}

// Scale is linear in its input: dX = Scale(dY, scale) with the same scale_down.
void grad_scale(GradContext& g) {
  g.set_input_grad(0,
                   g.emit("Scale", {g.output_grad(0), g.input(1)},
                          {{"scale_down", Attribute::make_int(g.node().attr_int("scale_down", 0))}},
                          "com.microsoft"));
}

}  // namespace ortmodule
