// CUDA twins of the ops that create or overwrite tensors of their input's dtype and shape:
// ZerosLike and ScalarLike (ai.ortmodule, emitted by gradient rules) and com.microsoft
// InPlaceAccumulatorV2 (gradient accumulation of on-device training graphs).
#include <cstdint>
#include <string>

#include "backends/cuda/map.cuh"
#include "ops/op_utils.h"

namespace ortmodule {

namespace {

template <typename T>
struct FillOp {
  T value;
  __device__ T operator()() const { return value; }
};
struct AccumulateOp {
  template <typename T>
  __device__ T operator()(T buffer, T value) const {
    return buffer + value;
  }
};

}  // namespace

// ZerosLike(x): zeros of x's dtype and shape (every dtype: all-zero bytes).
void cuda_zeros_like(OpContext& ctx) {
  Tensor& y = ctx.out(0);
  if (y.nbytes() == 0) return;
  cuda::check(cudaMemsetAsync(y.raw(), 0, y.nbytes(), cuda::stream(y.device())), "ZerosLike");
}

// ScalarLike(x; value): a 0-d tensor holding `value` in x's dtype, converted on the host as
// the CPU kernel converts it.
void cuda_scalar_like(OpContext& ctx) {
  const double v = ctx.node.attr_float("value", 0.0);
  ORTM_CUDA_DISPATCH_NUMERIC(
      ctx.out(0).dtype(), ctx,
      cuda::launch_map<scalar_t>(ctx, ctx.out(0), FillOp<scalar_t>{static_cast<scalar_t>(v)},
                                 "ScalarLike"));
}

// InPlaceAccumulatorV2(buffer, value, overwrite_flag?) -> (updated, buffer_out): buffer =
// overwrite_flag ? value : buffer + value, in the buffer's own memory (output 1 is a view of
// it). The flag (one bool) is read on the host (host input 2), as ONNX Runtime reads it, so
// the choice between a copy and an addition is made before launching either.
void cuda_inplace_accumulator(OpContext& ctx) {
  Tensor buffer = ctx.in(0);
  const Tensor& value = ctx.in(1);
  const bool overwrite = ctx.has_input(2) && ctx.in(2).data<uint8_t>()[0] != 0;
  cuda::launch_map<uint8_t>(ctx, ctx.out(0), FillOp<uint8_t>{1}, "InPlaceAccumulatorV2");
  if (buffer.raw() == value.raw()) {
    if (!overwrite) ctx.fail("value (input 1) is the buffer itself");
    return;
  }
  if (overwrite) {
    if (value.nbytes() == 0) return;
    cuda::check(cudaMemcpyAsync(buffer.raw(), value.raw(), value.nbytes(), cudaMemcpyDeviceToDevice,
                                cuda::stream(buffer.device())),
                "InPlaceAccumulatorV2 (overwrite)");
    return;
  }
  ORTM_CUDA_DISPATCH_FLOAT(buffer.dtype(), ctx,
                           cuda::launch_map<scalar_t, scalar_t, scalar_t>(
                               ctx, buffer, AccumulateOp{}, "InPlaceAccumulatorV2", buffer, value));
}

}  // namespace ortmodule
