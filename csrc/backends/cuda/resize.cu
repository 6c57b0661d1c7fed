// CUDA twins of Resize, ai.ortmodule ResizeTorch and ResizeGrad. The host builds the plan's
// tap tables (ops/resize_plan.h) exactly as for the CPU kernels and copies them to the device;
// one thread per output element gathers its taps forward, one per input cell gathers the
// gradients of the outputs that read it backward (resize_gather / resize_adjoint_gather in
// kernels/math/resize.h, the CPU kernels' arithmetic), so no atomics are needed.
#include <cstdint>
#include <vector>

#include "kernels/cuda/cuda_common.h"
#include "kernels/math/resize.h"
#include "ops/op_utils.h"
#include "ops/resize_plan.h"

namespace ortmodule {

namespace {

// Host vectors packed into one device buffer each (int64 and double), in the stream's order.
class DeviceTables {
 public:
  DeviceTables(Device device, cudaStream_t stream) : device_(device), stream_(stream) {}

  // Appends `v`; returns its offset in the packed buffer.
  size_t add(const std::vector<int64_t>& v) { return append(&ints_, v); }
  size_t add(const std::vector<double>& v) { return append(&doubles_, v); }

  void upload() {
    ints_dev_ = Tensor::empty(DType::Int64, {static_cast<int64_t>(ints_.size())}, device_);
    doubles_dev_ = Tensor::empty(DType::Float64, {static_cast<int64_t>(doubles_.size())}, device_);
    // From pageable memory the copies are staged before the call returns, so the host vectors
    // may go when this object does.
    cuda::check(cudaMemcpyAsync(ints_dev_.raw(), ints_.data(), ints_.size() * sizeof(int64_t),
                                cudaMemcpyHostToDevice, stream_),
                "ResizeTables");
    cuda::check(cudaMemcpyAsync(doubles_dev_.raw(), doubles_.data(),
                                doubles_.size() * sizeof(double), cudaMemcpyHostToDevice, stream_),
                "ResizeTables");
  }
  const int64_t* ints(size_t offset) const { return ints_dev_.data<int64_t>() + offset; }
  const double* doubles(size_t offset) const { return doubles_dev_.data<double>() + offset; }

 private:
  template <typename V>
  static size_t append(std::vector<V>* to, const std::vector<V>& v) {
    const size_t at = to->size();
    to->insert(to->end(), v.begin(), v.end());
    return at;
  }
  Device device_;
  cudaStream_t stream_;
  std::vector<int64_t> ints_;
  std::vector<double> doubles_;
  Tensor ints_dev_, doubles_dev_;
};

// y: [planes, out...] from x: [planes, in...].
template <typename T>
__global__ void resize_kernel(ResizeGeometry g, int64_t n, const T* x, T* y) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    y[i] = resize_gather(g, i, x);
}

// dx: [planes, in...] from dy: [planes, out...].
template <typename T>
__global__ void resize_grad_kernel(ResizeAdjointGeometry g, int64_t n, const T* dy, T* dx) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    dx[i] = resize_adjoint_gather(g, i, dy);
}

template <typename T>
void launch_resize(OpContext& ctx) {
  const ResizePlan plan = resize_plan(ctx, ctx.in(0).shape());
  Tensor& y = ctx.out(0);
  const int64_t n = y.numel();
  if (n == 0) return;
  cudaStream_t stream = cuda::stream(y.device());
  DeviceTables tables(y.device(), stream);
  size_t index_at[3], weight_at[3];
  for (int d = 0; d < 3; ++d) {
    index_at[d] = tables.add(plan.axes[d].index);
    weight_at[d] = tables.add(plan.axes[d].weight);
  }
  tables.upload();
  ResizeGeometry g = plan.geometry();
  for (int d = 0; d < 3; ++d) {
    g.index[d] = tables.ints(index_at[d]);
    g.weight[d] = tables.doubles(weight_at[d]);
  }
  resize_kernel<T>
      <<<cuda::blocks_for(n), cuda::kThreads, 0, stream>>>(g, n, ctx.in(0).data<T>(), y.data<T>());
  cuda::check_launch(ctx.node.op_type.c_str());
}

template <typename T>
void launch_resize_grad(OpContext& ctx) {
  ResizePlan plan = resize_plan(ctx, ctx.in(1).to_int_vector());  // x_shape: a host input
  Tensor& dx = ctx.out(0);
  const int64_t n = dx.numel();
  if (n == 0) return;
  cudaStream_t stream = cuda::stream(dx.device());
  if (ctx.in(0).numel() == 0) {
    cuda::check(cudaMemsetAsync(dx.raw(), 0, dx.nbytes(), stream), "ResizeGrad");
    return;
  }
  plan.build_adjoint();
  DeviceTables tables(dx.device(), stream);
  size_t offset_at[3], output_at[3], weight_at[3];
  for (int d = 0; d < 3; ++d) {
    offset_at[d] = tables.add(plan.adjoint[d].offset);
    output_at[d] = tables.add(plan.adjoint[d].output);
    weight_at[d] = tables.add(plan.adjoint[d].weight);
  }
  tables.upload();
  ResizeAdjointGeometry g = plan.adjoint_geometry();
  for (int d = 0; d < 3; ++d) {
    g.offset[d] = tables.ints(offset_at[d]);
    g.output[d] = tables.ints(output_at[d]);
    g.weight[d] = tables.doubles(weight_at[d]);
  }
  resize_grad_kernel<T>
      <<<cuda::blocks_for(n), cuda::kThreads, 0, stream>>>(g, n, ctx.in(0).data<T>(), dx.data<T>());
  cuda::check_launch("ResizeGrad");
}

}  // namespace

void cuda_resize(OpContext& ctx) {
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, launch_resize<scalar_t>(ctx));
}

void cuda_resize_grad(OpContext& ctx) {
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, launch_resize_grad<scalar_t>(ctx));
}

}  // namespace ortmodule
