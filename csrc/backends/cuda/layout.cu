// CUDA twins of the layout ops: Transpose and Expand (strided copies), Tile and its gradient
// TileGrad, Trilu and CumSum. Elements that are only moved are copied as unsigned integers of
// their width, so every dtype moves bit for bit. The per-element index math (tiled offsets,
// the Trilu mask, the CumSum line scan) is the CPU kernels' (kernels/math/index.h).
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cuda/movement.cuh"
#include "ops/data_movement.h"

namespace ortmodule {

namespace {

using cuda::DimArray;
using cuda::grid_stride;
using cuda::thread_index;

// y[i] = x[sum_d c_d * src_stride[d]] for y's coordinates (c_0, ...) over dims `dims`:
// Transpose (strides permuted) and Expand (stride 0 along broadcast dims).
// x: any shape, y: [dims[0], ..., dims[rank-1]] (n elements).
template <typename T>
__global__ void strided_copy_kernel(int64_t n, int rank, DimArray dims, DimArray src_stride,
                                    const T* x, T* y) {
  for (int64_t i = thread_index(); i < n; i += grid_stride()) {
    int64_t rem = i, off = 0;
    for (int d = rank - 1; d >= 0; --d) {
      off += (rem % dims.v[d]) * src_stride.v[d];
      rem /= dims.v[d];
    }
    y[i] = x[off];
  }
}

template <typename T>
void launch_strided_copy(const Shape& out, const std::vector<int64_t>& src_stride, const Tensor& x,
                         Tensor& y, const char* name) {
  const int64_t n = y.numel();
  if (n == 0) return;
  strided_copy_kernel<T><<<cuda::blocks_for(n), cuda::kThreads, 0, cuda::stream(y.device())>>>(
      n, static_cast<int>(out.size()), cuda::dim_array(out), cuda::dim_array(src_stride),
      x.data<T>(), y.data<T>());
  cuda::check_launch(name);
}

// Tile: y[i] = x[tiled offset of i]. x: small, y: big (a multiple of small in every dim).
template <typename T>
__global__ void tile_kernel(int64_t n, int rank, DimArray big, DimArray small,
                            DimArray small_stride, const T* x, T* y) {
  for (int64_t i = thread_index(); i < n; i += grid_stride())
    y[i] = x[math::tiled_offset(i, rank, big.v, small.v, small_stride.v)];
}

// TileGrad: dx[c] = sum over the tiles r (row-major) of dy[r * small + c]. One thread per
// element of dx sums its tiles in the order the CPU kernel adds them (dY in row-major order),
// so the result is deterministic and equal to the CPU's.
// dy: big [B_0, ...], dx: small [S_0, ...], reps[d] = B_d / S_d.
template <typename T>
__global__ void tile_grad_kernel(int64_t n, int64_t tiles, int rank, DimArray small, DimArray reps,
                                 DimArray big_stride, const T* dy, T* dx) {
  for (int64_t i = thread_index(); i < n; i += grid_stride()) {
    int64_t base = 0, rem = i;
    for (int d = rank - 1; d >= 0; --d) {
      base += (rem % small.v[d]) * big_stride.v[d];
      rem /= small.v[d];
    }
    T acc = 0;
    for (int64_t t = 0; t < tiles; ++t) {
      int64_t off = base, r = t;
      for (int d = rank - 1; d >= 0; --d) {
        off += (r % reps.v[d]) * small.v[d] * big_stride.v[d];
        r /= reps.v[d];
      }
      acc += dy[off];
    }
    dx[i] = acc;
  }
}

// Trilu over a stack of [rows, cols] matrices: elements off the kept triangle become 0.
template <typename T>
__global__ void trilu_kernel(int64_t n, int64_t rows, int64_t cols, int64_t k, bool upper,
                             const T* x, T* y) {
  for (int64_t o = thread_index(); o < n; o += grid_stride()) {
    const int64_t j = o % cols, i = (o / cols) % rows;
    y[o] = math::trilu_keeps(i, j, k, upper) ? x[o] : T(0);
  }
}

// CumSum: one thread per line along the axis ([outer, len, inner] view, lines = outer *
// inner); neighbouring threads scan neighbouring columns, so their reads coalesce.
template <typename T>
__global__ void cumsum_kernel(int64_t lines, int64_t len, int64_t inner, bool exclusive,
                              bool reverse, const T* x, T* y) {
  for (int64_t line = thread_index(); line < lines; line += grid_stride()) {
    const int64_t base = (line / inner) * len * inner + line % inner;
    math::cumsum_line(x + base, y + base, len, inner, exclusive, reverse);
  }
}

}  // namespace

void cuda_transpose(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  cuda::check_rank(ctx, x.rank(), "Transpose");
  const std::vector<int64_t> perm = transpose_perm(ctx);
  const Shape x_stride = row_major_strides(x.shape());
  std::vector<int64_t> src_stride(perm.size());
  for (size_t d = 0; d < perm.size(); ++d) src_stride[d] = x_stride[perm[d]];
  ORTM_DISPATCH_BITS(x.dtype(), ctx,
                     launch_strided_copy<scalar_t>(y.shape(), src_stride, x, y, "Transpose"));
}

// Expand(x, shape): shape read on the host; x broadcast to y's shape (numpy rules).
void cuda_expand(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  const Shape& out = y.shape();
  cuda::check_rank(ctx, out.size(), "Expand");
  const Shape x_stride = row_major_strides(x.shape());
  std::vector<int64_t> src_stride(out.size(), 0);
  const size_t lead = out.size() - x.rank();
  for (size_t d = 0; d < x.rank(); ++d) src_stride[lead + d] = x.dim(d) == 1 ? 0 : x_stride[d];
  ORTM_DISPATCH_BITS(x.dtype(), ctx,
                     launch_strided_copy<scalar_t>(out, src_stride, x, y, "Expand"));
}

// Tile(x, repeats): repeats read on the host (by the shape rule; y has the tiled shape).
void cuda_tile(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  cuda::check_rank(ctx, x.rank(), "Tile");
  const int64_t n = y.numel();
  if (n == 0) return;
  const Shape st = row_major_strides(x.shape());
  ORTM_DISPATCH_BITS(x.dtype(), ctx, {
    tile_kernel<scalar_t><<<cuda::blocks_for(n), cuda::kThreads, 0, cuda::stream(y.device())>>>(
        n, static_cast<int>(x.rank()), cuda::dim_array(y.shape()), cuda::dim_array(x.shape()),
        cuda::dim_array(st), x.data<scalar_t>(), y.data<scalar_t>());
    cuda::check_launch("Tile");
  });
}

// TileGrad(dY, input_shape): input_shape read on the host (by the shape rule).
void cuda_tile_grad(OpContext& ctx) {
  const Tensor& dy = ctx.in(0);
  Tensor& dx = ctx.out(0);
  cuda::check_rank(ctx, dx.rank(), "TileGrad");
  const int64_t n = dx.numel();
  if (n == 0) return;
  // dx is not empty, so every dim of it is >= 1 and dY is a whole number of tiles of it.
  std::vector<int64_t> reps(dx.rank());
  for (size_t d = 0; d < dx.rank(); ++d) reps[d] = dy.dim(d) / dx.dim(d);
  const int64_t tiles = dy.numel() / n;
  ORTM_DISPATCH_NUMERIC(dy.dtype(), ctx, {
    tile_grad_kernel<scalar_t>
        <<<cuda::blocks_for(n), cuda::kThreads, 0, cuda::stream(dx.device())>>>(
            n, tiles, static_cast<int>(dx.rank()), cuda::dim_array(dx.shape()),
            cuda::dim_array(reps), cuda::dim_array(row_major_strides(dy.shape())),
            dy.data<scalar_t>(), dx.data<scalar_t>());
    cuda::check_launch("TileGrad");
  });
}

// Trilu(x, k?; upper): k read on the host.
void cuda_trilu(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  const int64_t k = trilu_offset(ctx);
  const bool upper = ctx.node.attr_int("upper", 1) != 0;
  const int64_t rows = x.dim(x.rank() - 2), cols = x.dim(x.rank() - 1);
  const int64_t n = y.numel();
  if (n == 0) return;
  ORTM_DISPATCH_BITS(x.dtype(), ctx, {
    trilu_kernel<scalar_t><<<cuda::blocks_for(n), cuda::kThreads, 0, cuda::stream(y.device())>>>(
        n, rows, cols, k, upper, x.data<scalar_t>(), y.data<scalar_t>());
    cuda::check_launch("Trilu");
  });
}

// CumSum(x, axis; exclusive, reverse): axis read on the host.
void cuda_cumsum(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  const int64_t axis = cumsum_axis(ctx);
  const bool exclusive = ctx.node.attr_int("exclusive", 0) != 0;
  const bool reverse = ctx.node.attr_int("reverse", 0) != 0;
  const int64_t outer = dims_product(x.shape(), 0, axis), len = x.dim(axis);
  const int64_t inner = dims_product(x.shape(), axis + 1, x.rank());
  const int64_t lines = outer * inner;
  if (lines == 0 || len == 0) return;
  ORTM_DISPATCH_NUMERIC(x.dtype(), ctx, {
    cumsum_kernel<scalar_t>
        <<<cuda::blocks_for(lines), cuda::kThreads, 0, cuda::stream(y.device())>>>(
            lines, len, inner, exclusive, reverse, x.data<scalar_t>(), y.data<scalar_t>());
    cuda::check_launch("CumSum");
  });
}

}  // namespace ortmodule
