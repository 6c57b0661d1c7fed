// Thread-parallel loop used by every CPU kernel.
//
// Kernels stay free of torch headers; the runtime layer implements this with
// at::parallel_for so that torch.set_num_threads governs the engine too and only
// one thread pool ever runs.
#pragma once

#include <cstdint>
#include <functional>

namespace ortmodule {

// Calls fn(chunk_begin, chunk_end) over [begin, end) split into chunks of at least
// `grain` iterations, possibly on several threads. Nested calls run serially.
void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn);

// The threads a parallel_for called here shares its chunks among: 1 inside a parallel region
// (whose nested calls run serially).
int parallel_threads();

}  // namespace ortmodule
