// What the data-movement kernels (layout.cu, slice_pad.cu, gather.cu, index.cu) share: dims
// passed by value, grid-stride indexing, atomic updates of any element width, and the check
// of device-side indices that reports the first out-of-range one as the CPU kernel does.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cuda/cuda_common.h"
#include "kernels/math/index.h"
#include "ops/op_utils.h"

namespace ortmodule {
namespace cuda {

// Dims, strides or pads of up to kMaxRank axes, passed to a kernel by value.
struct DimArray {
  int64_t v[kMaxRank] = {};
};

// Fails naming the op unless `rank` fits the kernels' fixed index arrays.
inline void check_rank(const OpContext& ctx, size_t rank, const char* op) {
  if (rank > static_cast<size_t>(kMaxRank)) {
    ctx.fail("rank " + std::to_string(rank) + " is above the CUDA " + op + " kernel's limit of " +
             std::to_string(kMaxRank) + "; reshape the tensor to fewer dims");
  }
}

inline DimArray dim_array(const std::vector<int64_t>& values) {
  DimArray a;
  for (size_t i = 0; i < values.size() && i < static_cast<size_t>(kMaxRank); ++i)
    a.v[i] = values[i];
  return a;
}

inline void zero_fill(const Tensor& t) {
  if (t.nbytes() == 0) return;
  check(cudaMemsetAsync(t.raw(), 0, t.nbytes(), stream(t.device())), "cudaMemsetAsync");
}

inline void copy_on_device(void* dst, const void* src, size_t bytes, Device device) {
  if (bytes == 0 || dst == src) return;
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream(device)),
        "cudaMemcpyAsync");
}

__device__ inline int64_t thread_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline int64_t grid_stride() { return static_cast<int64_t>(blockDim.x) * gridDim.x; }

// *addr = f(*addr) as one atomic step, for elements of 1, 2, 4 or 8 bytes: a compare-and-swap
// loop on the aligned 32- or 64-bit word that holds the element.
template <typename T, typename F>
__device__ void atomic_update(T* addr, F f) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8,
                "element width");
  if constexpr (sizeof(T) == 8) {
    auto* word = reinterpret_cast<unsigned long long*>(addr);
    unsigned long long old = *word, assumed;
    do {
      assumed = old;
      T cur;
      memcpy(&cur, &assumed, sizeof(T));
      const T next = f(cur);
      unsigned long long bits;
      memcpy(&bits, &next, sizeof(T));
      old = atomicCAS(word, assumed, bits);
    } while (old != assumed);
  } else {
    const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
    auto* word = reinterpret_cast<unsigned int*>(a & ~uintptr_t(3));
    const unsigned shift = static_cast<unsigned>(a & 3) * 8;
    const unsigned mask =
        sizeof(T) == 4 ? 0xffffffffu : ((1u << (8 * (sizeof(T) & 3))) - 1u) << shift;
    unsigned old = *word, assumed;
    do {
      assumed = old;
      const unsigned field = (assumed & mask) >> shift;  // little-endian: the low bytes
      T cur;
      memcpy(&cur, &field, sizeof(T));
      const T next = f(cur);
      unsigned bits = 0;
      memcpy(&bits, &next, sizeof(T));
      old = atomicCAS(word, assumed, (assumed & ~mask) | ((bits << shift) & mask));
    } while (old != assumed);
  }
}

// *addr += v. Threads adding into one element do so in no fixed order, so float sums can
// differ in their last bits from run to run (as PyTorch's index_add_ on CUDA).
template <typename T>
__device__ void atomic_add(T* addr, T v) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    atomicAdd(addr, v);
  } else {
    atomic_update(addr, [v](T cur) { return static_cast<T>(cur + v); });
  }
}

// Index tensors the kernels read: int64 and int32 (what ONNX allows for indices).
#define ORTM_CUDA_DISPATCH_INDEX(DTYPE, CTX, WHAT, ...)                                    \
  switch (DTYPE) {                                                                         \
    case DType::Int64: {                                                                   \
      using index_t = int64_t;                                                             \
      __VA_ARGS__;                                                                         \
      break;                                                                               \
    }                                                                                      \
    case DType::Int32: {                                                                   \
      using index_t = int32_t;                                                             \
      __VA_ARGS__;                                                                         \
      break;                                                                               \
    }                                                                                      \
    default:                                                                               \
      (CTX).fail(std::string(WHAT) + " have dtype " + dtype_name(DTYPE) +                  \
                 "; the CUDA kernel reads int64 and int32 indices (cast them, or run the " \
                 "model on the CPU)");                                                     \
  }

// Records in `flag` the smallest position p of `idx` (n indices) whose value is out of range
// for extent[p % k] (k = 1: one extent for all; k > 1: index tuples of GatherND/ScatterND).
template <typename I>
__global__ void find_bad_index_kernel(const I* idx, int64_t n, int64_t k, DimArray extent,
                                      unsigned long long* flag) {
  for (int64_t p = thread_index(); p < n; p += grid_stride()) {
    if (!math::index_in_range(static_cast<int64_t>(idx[p]), extent.v[p % k]))
      atomicMin(flag, static_cast<unsigned long long>(p));
  }
}

// Checks indices that live on the device. The index kernels guard their reads (an index out
// of range is skipped, never clamped); this check, launched before them, records the position
// of the first out-of-range index in a device flag, and first_bad() reads it back after them.
// That read synchronizes the stream once per index op (none when there are no indices): the
// price of failing, as the CPU kernel does, with the offending index and its position rather
// than with a device-side assert that leaves the CUDA context unusable.
class IndexCheck {
 public:
  template <typename I>
  static IndexCheck launch(const Tensor& indices, int64_t k, const DimArray& extent) {
    IndexCheck c;
    const int64_t n = indices.numel();
    if (n == 0) return c;
    c.indices_ = indices;
    c.flag_ = Tensor::empty(DType::UInt64, {1}, indices.device());
    cudaStream_t s = stream(indices.device());
    check(cudaMemsetAsync(c.flag_.raw(), 0xff, sizeof(uint64_t), s), "cudaMemsetAsync");
    find_bad_index_kernel<I><<<blocks_for(n), kThreads, 0, s>>>(
        indices.data<I>(), n, k, extent, static_cast<unsigned long long*>(c.flag_.raw()));
    check_launch("index range check");
    return c;
  }

  // Position of the first out-of-range index, or -1; waits for the stream.
  int64_t first_bad() const {
    if (!flag_.defined()) return -1;
    const Tensor host = flag_.to(Device());
    const uint64_t pos = host.data<uint64_t>()[0];
    return pos == UINT64_MAX ? -1 : static_cast<int64_t>(pos);
  }

  // The value of index `pos`, read back for the error message.
  int64_t value_at(int64_t pos) const {
    int64_t v64 = 0;
    int32_t v32 = 0;
    const bool wide = indices_.dtype() == DType::Int64;
    const size_t elem = wide ? sizeof(v64) : sizeof(v32);
    const char* src = static_cast<const char*>(indices_.raw()) + pos * static_cast<int64_t>(elem);
    cudaStream_t s = stream(indices_.device());
    check(cudaMemcpyAsync(wide ? static_cast<void*>(&v64) : static_cast<void*>(&v32), src, elem,
                          cudaMemcpyDeviceToHost, s),
          "cudaMemcpyAsync");
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    return wide ? v64 : v32;
  }

 private:
  Tensor indices_, flag_;
};

}  // namespace cuda
}  // namespace ortmodule
