// CUDA twins of MaxPool, AveragePool, GlobalAveragePool and their gradients (ai.ortmodule
// MaxPoolGrad, AveragePoolGrad, GlobalAveragePoolGrad), 1-D, 2-D and 3-D through one 3-D form
// (lower ranks have leading spatial dims of 1).
//
// Forward: one thread per output element, walking the window's taps inside the input in the
// CPU kernels' order with their helpers (kernels/math/pool.h), so maxima, tie-breaking, NaN
// propagation and averages match them. Backward is a gather: one thread per input cell sums
// the gradients of the windows that read it, visiting them in the order the CPU kernels
// scatter them (ascending output position), so the sums are the CPU's, without atomics.
#include <cstdint>
#include <limits>
#include <string>

#include "kernels/cuda/channel_reduce.cuh"
#include "kernels/cuda/cuda_common.h"
#include "kernels/math/pool.h"
#include "ops/op_utils.h"
#include "ops/window.h"

namespace ortmodule {

namespace {

struct PoolGeom {
  int64_t in[3], kernel[3], out[3], stride[3], pad[3], pad_end[3], dil[3];
  int64_t X, P;  // input and output plane sizes
  bool count_include_pad;
  int64_t divisor_override;  // AveragePoolTorch's; 0 where none
};

// The geometry of input shape x, checked as the shape rules check it.
PoolGeom pool_geom(const OpContext& ctx, const Shape& x, bool count_include_pad,
                   int64_t divisor_override = 0) {
  PoolGeom g{};
  g.count_include_pad = count_include_pad;
  g.divisor_override = divisor_override;
  if (is_pool3d(x)) {
    const Pool3dParams p = make_pool3d(ctx, x, count_include_pad);
    for (int i = 0; i < 3; ++i) {
      g.in[i] = p.in[i];
      g.kernel[i] = p.kernel[i];
      g.out[i] = p.out[i];
      g.stride[i] = p.stride[i];
      g.pad[i] = p.pad_begin[i];
      g.pad_end[i] = p.pad_end[i];
      g.dil[i] = p.dilation[i];
    }
  } else {
    const Pool2dParams p = pool_params(make_pool_window(ctx, x), count_include_pad);
    const int64_t in[3] = {1, p.H, p.W}, kernel[3] = {1, p.kH, p.kW}, out[3] = {1, p.outH, p.outW};
    const int64_t stride[3] = {1, p.stride_h, p.stride_w}, pad[3] = {0, p.pad_top, p.pad_left};
    const int64_t pad_end[3] = {0, p.pad_bottom, p.pad_right};
    const int64_t dil[3] = {1, p.dil_h, p.dil_w};
    for (int i = 0; i < 3; ++i) {
      g.in[i] = in[i];
      g.kernel[i] = kernel[i];
      g.out[i] = out[i];
      g.stride[i] = stride[i];
      g.pad[i] = pad[i];
      g.pad_end[i] = pad_end[i];
      g.dil[i] = dil[i];
    }
  }
  g.X = g.in[0] * g.in[1] * g.in[2];
  g.P = g.out[0] * g.out[1] * g.out[2];
  return g;
}

// The taps [lo[d], hi[d]) of output position q's window that fall inside the input, whose
// tap 0 sits at input coordinate start[d] (possibly negative).
struct Taps {
  int64_t lo[3], hi[3], start[3];
};

__device__ Taps window_taps(const PoolGeom& g, int64_t q) {
  const int64_t o[3] = {q / (g.out[1] * g.out[2]), (q / g.out[2]) % g.out[1], q % g.out[2]};
  Taps t;
  for (int d = 0; d < 3; ++d) {
    t.start[d] = o[d] * g.stride[d] - g.pad[d];
    pool_tap_range(t.start[d], g.dil[d], g.in[d], g.kernel[d], &t.lo[d], &t.hi[d]);
  }
  return t;
}

// AveragePool's divisor for a window (as avg_divisor / avg3d_divisor in kernels/cpu/pool.cpp).
__device__ int64_t average_divisor(const PoolGeom& g, const Taps& t) {
  if (g.divisor_override > 0) return g.divisor_override;
  int64_t inside = 1, padded = 1;
  for (int d = 0; d < 3; ++d) {
    inside *= t.hi[d] - t.lo[d];
    padded *= pool_padded_taps(t.start[d], g.dil[d], g.in[d], g.pad[d], g.pad_end[d], g.kernel[d]);
  }
  return g.count_include_pad ? padded : inside;
}

// Position `pos` in a plane as MaxPool's indices count it (storage_order=1: column-major).
__device__ int64_t index_position(const PoolGeom& g, int64_t pos, bool column_major) {
  return column_major ? pool_storage_order_position(pos, g.in, 3, true) : pos;
}

// x: [planes, X] -> y, indices (nullable): [planes, P].
template <typename T>
__global__ void maxpool_kernel(PoolGeom g, int64_t n, T lowest, bool column_major, const T* x, T* y,
                               int64_t* indices) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const int64_t plane = i / g.P;
    const Taps t = window_taps(g, i % g.P);
    const T* xp = x + plane * g.X;
    T best = lowest;
    int64_t best_at = -1;
    for (int64_t a = t.lo[0]; a < t.hi[0]; ++a) {
      for (int64_t b = t.lo[1]; b < t.hi[1]; ++b) {
        const int64_t row =
            ((t.start[0] + a * g.dil[0]) * g.in[1] + t.start[1] + b * g.dil[1]) * g.in[2];
        for (int64_t c = t.lo[2]; c < t.hi[2]; ++c) {
          const int64_t at = row + t.start[2] + c * g.dil[2];
          if (best_at < 0 || pool_max_replaces(xp[at], best)) {
            best = xp[at];
            best_at = at;
          }
        }
      }
    }
    y[i] = best;
    if (indices != nullptr)
      indices[i] = best_at < 0 ? -1 : plane * g.X + index_position(g, best_at, column_major);
  }
}

// Calls f(output position in the plane) for every window that reads input cell `pos`, in
// ascending output order: tap k of output o reads o * stride - pad + k * dil, so descending
// taps give ascending outputs.
template <typename F>
__device__ void for_each_window_reading(const PoolGeom& g, int64_t pos, F f) {
  const int64_t cell[3] = {pos / (g.in[1] * g.in[2]), (pos / g.in[2]) % g.in[1], pos % g.in[2]};
  for (int64_t k0 = g.kernel[0] - 1; k0 >= 0; --k0) {
    const int64_t s0 = cell[0] + g.pad[0] - k0 * g.dil[0];
    if (s0 < 0 || s0 % g.stride[0] != 0 || s0 / g.stride[0] >= g.out[0]) continue;
    for (int64_t k1 = g.kernel[1] - 1; k1 >= 0; --k1) {
      const int64_t s1 = cell[1] + g.pad[1] - k1 * g.dil[1];
      if (s1 < 0 || s1 % g.stride[1] != 0 || s1 / g.stride[1] >= g.out[1]) continue;
      for (int64_t k2 = g.kernel[2] - 1; k2 >= 0; --k2) {
        const int64_t s2 = cell[2] + g.pad[2] - k2 * g.dil[2];
        if (s2 < 0 || s2 % g.stride[2] != 0 || s2 / g.stride[2] >= g.out[2]) continue;
        f(((s0 / g.stride[0]) * g.out[1] + s1 / g.stride[1]) * g.out[2] + s2 / g.stride[2]);
      }
    }
  }
}

// dy, indices: [planes, P] -> dx: [planes, X] (overwritten). A cell receives dy of the
// windows whose index names it. Indices come from MaxPool on the same geometry; an entry
// that names no cell of its window (the CPU kernel refuses out-of-plane ones after reading
// them on the host, which the device kernel does not do) contributes nothing.
template <typename T>
__global__ void maxpool_grad_kernel(PoolGeom g, int64_t n, bool column_major, const T* dy,
                                    const int64_t* indices, T* dx) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const int64_t plane = i / g.X, pos = i % g.X;
    const int64_t me = plane * g.X + index_position(g, pos, column_major);
    const int64_t* ip = indices + plane * g.P;
    const T* dyp = dy + plane * g.P;
    T acc = 0;
    for_each_window_reading(g, pos, [&](int64_t q) {
      if (ip[q] == me) acc += dyp[q];
    });
    dx[i] = acc;
  }
}

// x: [planes, X] -> y: [planes, P]; the sum in double, as on the CPU.
template <typename T>
__global__ void avgpool_kernel(PoolGeom g, int64_t n, const T* x, T* y) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const Taps t = window_taps(g, i % g.P);
    const T* xp = x + (i / g.P) * g.X;
    double sum = 0;
    for (int64_t a = t.lo[0]; a < t.hi[0]; ++a) {
      for (int64_t b = t.lo[1]; b < t.hi[1]; ++b) {
        const int64_t row =
            ((t.start[0] + a * g.dil[0]) * g.in[1] + t.start[1] + b * g.dil[1]) * g.in[2];
        for (int64_t c = t.lo[2]; c < t.hi[2]; ++c) sum += xp[row + t.start[2] + c * g.dil[2]];
      }
    }
    const int64_t divisor = average_divisor(g, t);
    // An empty window (only possible without count_include_pad) averages to zero.
    y[i] = divisor > 0 ? static_cast<T>(sum / static_cast<double>(divisor)) : T(0);
  }
}

// dy: [planes, P] -> dx: [planes, X] (overwritten).
template <typename T>
__global__ void avgpool_grad_kernel(PoolGeom g, int64_t n, const T* dy, T* dx) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const T* dyp = dy + (i / g.X) * g.P;
    T acc = 0;
    for_each_window_reading(g, i % g.X, [&](int64_t q) {
      const int64_t divisor = average_divisor(g, window_taps(g, q));
      if (divisor != 0) acc += dyp[q] / static_cast<T>(divisor);
    });
    dx[i] = acc;
  }
}

// x: [planes, S] -> y: [planes]: one block per plane, summed in double.
template <typename T>
__global__ void __launch_bounds__(cuda::kReduceThreads)
    global_avgpool_kernel(int64_t planes, int64_t S, const T* x, T* y) {
  __shared__ double shared[2 * cuda::kWarp];
  for (int64_t plane = blockIdx.x; plane < planes; plane += gridDim.x) {
    double sum = 0, unused = 0;
    for (int64_t s = threadIdx.x; s < S; s += blockDim.x) sum += x[plane * S + s];
    cuda::block_sum2(&sum, &unused, shared);
    if (threadIdx.x == 0) y[plane] = S > 0 ? static_cast<T>(sum / static_cast<double>(S)) : T(0);
  }
}

// dy: [planes] -> dx: [planes, S].
template <typename T>
__global__ void global_avgpool_grad_kernel(int64_t n, int64_t S, const T* dy, T* dx) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    dx[i] = dy[i / S] / static_cast<T>(S);
}

// storage_order: 0 row-major indices, 1 column-major (as column_major_indices in pool_ops.cpp).
bool column_major_indices(const OpContext& ctx) {
  const int64_t order = ctx.node.attr_int("storage_order", 0);
  if (order != 0 && order != 1)
    ctx.fail("attribute storage_order=" + std::to_string(order) + ", expected 0 or 1");
  return order == 1;
}

template <typename T>
void launch_maxpool(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  const PoolGeom g = pool_geom(ctx, x.shape(), false);
  Tensor& y = ctx.out(0);
  const int64_t n = y.numel();
  if (n == 0) return;
  int64_t* indices = ctx.has_output(1) ? ctx.out(1).data<int64_t>() : nullptr;
  const T lowest = std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity()
                                                        : std::numeric_limits<T>::lowest();
  maxpool_kernel<T><<<cuda::blocks_for(n), cuda::kThreads, 0, cuda::stream(y.device())>>>(
      g, n, lowest, column_major_indices(ctx), x.data<T>(), y.data<T>(), indices);
  cuda::check_launch("MaxPool");
}

template <typename T>
void launch_maxpool_grad(OpContext& ctx) {
  const Shape x = ctx.in(2).to_int_vector();  // a host input (the row's cuda host inputs)
  if (x.size() < 3) ctx.fail("input_shape (input 2) " + shape_str(x) + " has no spatial dims");
  const PoolGeom g = pool_geom(ctx, x, false);
  Tensor& dx = ctx.out(0);
  const int64_t n = dx.numel();
  if (n == 0) return;
  maxpool_grad_kernel<T><<<cuda::blocks_for(n), cuda::kThreads, 0, cuda::stream(dx.device())>>>(
      g, n, column_major_indices(ctx), ctx.in(0).data<T>(), ctx.in(1).data<int64_t>(),
      dx.data<T>());
  cuda::check_launch("MaxPoolGrad");
}

bool count_include_pad(const OpContext& ctx) {
  return ctx.node.attr_int("count_include_pad", 0) != 0;
}

template <typename T>
void launch_avgpool(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  const PoolGeom g = pool_geom(ctx, x.shape(), count_include_pad(ctx), pool_divisor_override(ctx));
  Tensor& y = ctx.out(0);
  const int64_t n = y.numel();
  if (n == 0) return;
  avgpool_kernel<T><<<cuda::blocks_for(n), cuda::kThreads, 0, cuda::stream(y.device())>>>(
      g, n, x.data<T>(), y.data<T>());
  cuda::check_launch("AveragePool");
}

template <typename T>
void launch_avgpool_grad(OpContext& ctx) {
  const PoolGeom g =
      pool_geom(ctx, ctx.in(1).to_int_vector(), count_include_pad(ctx), pool_divisor_override(ctx));
  Tensor& dx = ctx.out(0);
  const int64_t n = dx.numel();
  if (n == 0) return;
  avgpool_grad_kernel<T><<<cuda::blocks_for(n), cuda::kThreads, 0, cuda::stream(dx.device())>>>(
      g, n, ctx.in(0).data<T>(), dx.data<T>());
  cuda::check_launch("AveragePoolGrad");
}

template <typename T>
void launch_global_avgpool(OpContext& ctx) {
  const Shape& s = ctx.in(0).shape();
  const int64_t planes = s[0] * s[1], S = dims_product(s, 2, s.size());
  if (planes == 0) return;
  global_avgpool_kernel<T>
      <<<cuda::item_blocks(planes), cuda::kReduceThreads, 0, cuda::stream(ctx.out(0).device())>>>(
          planes, S, ctx.in(0).data<T>(), ctx.out(0).data<T>());
  cuda::check_launch("GlobalAveragePool");
}

template <typename T>
void launch_global_avgpool_grad(OpContext& ctx) {
  const Shape s = ctx.in(1).to_int_vector();  // a host input, checked by the shape rule
  const int64_t S = dims_product(s, 2, s.size());
  Tensor& dx = ctx.out(0);
  const int64_t n = dx.numel();
  if (n == 0) return;
  global_avgpool_grad_kernel<T>
      <<<cuda::blocks_for(n), cuda::kThreads, 0, cuda::stream(dx.device())>>>(
          n, S, ctx.in(0).data<T>(), dx.data<T>());
  cuda::check_launch("GlobalAveragePoolGrad");
}

}  // namespace

// MaxPool's forward types, as the CPU kernel's: the floating types, int8 and uint8.
void cuda_maxpool(OpContext& ctx) {
  switch (ctx.in(0).dtype()) {
    ORTM_DTYPE_CASE(Float32, float, launch_maxpool<scalar_t>(ctx))
    ORTM_DTYPE_CASE(Float64, double, launch_maxpool<scalar_t>(ctx))
    ORTM_DTYPE_CASE(Int8, int8_t, launch_maxpool<scalar_t>(ctx))
    ORTM_DTYPE_CASE(UInt8, uint8_t, launch_maxpool<scalar_t>(ctx))
    default:
      ctx.fail("dtype " + dtype_name(ctx.in(0).dtype()) +
               " is not supported by the CUDA MaxPool kernel (float32, float64, int8, uint8)");
  }
}

void cuda_maxpool_grad(OpContext& ctx) {
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, launch_maxpool_grad<scalar_t>(ctx));
}

void cuda_avgpool(OpContext& ctx) {
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, launch_avgpool<scalar_t>(ctx));
}

void cuda_avgpool_grad(OpContext& ctx) {
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, launch_avgpool_grad<scalar_t>(ctx));
}

void cuda_global_avgpool(OpContext& ctx) {
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, launch_global_avgpool<scalar_t>(ctx));
}

void cuda_global_avgpool_grad(OpContext& ctx) {
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, launch_global_avgpool_grad<scalar_t>(ctx));
}

}  // namespace ortmodule
