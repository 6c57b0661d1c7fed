// Marks per-element math helpers that both the CPU loops and the CUDA kernels
// call, so the CPU build tests the arithmetic the GPU runs.
#pragma once

#if defined(__CUDACC__)
#define ORTM_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define ORTM_HOST_DEVICE inline
#endif
