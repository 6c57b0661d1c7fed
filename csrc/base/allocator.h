// Caching host allocator: freed memory is kept and handed out again, so the steady-state
// training step allocates no new memory from the OS (large glibc allocations would otherwise
// be fresh, zero-filled mmap pages). Requests up to 64 KiB come from per-size free lists;
// larger ones are carved out of cached segments by best fit, splitting a larger free block
// and merging neighbours when freed, so that what the cache holds stays close to the peak
// of live bytes (BERT-small's step: 73 MiB held for a 70 MiB peak, against 81 MiB with
// per-size lists alone).
#pragma once

#include <cstddef>
#include <memory>

#include "base/storage.h"

namespace ortmodule {

// Throws std::runtime_error for a request above allocator_limit() (an overflowed or
// absurd size) instead of asking the OS for it.
std::shared_ptr<Storage> allocate_storage(size_t bytes);
// `bytes` of zeros that are never written (writable and immutable set accordingly): above
// 1 MiB a read-only anonymous mapping, whose pages cost nothing until read (and then map
// the kernel's one zero page), so a gradient of zeros nobody reads (the logits a model
// returns beside its loss) takes neither a memset nor memory; below, a zeroed block.
std::shared_ptr<Storage> zero_storage(size_t bytes);
// Largest single allocation the allocator accepts: the machine's physical memory unless
// lowered with allocator_set_limit (0 restores the default).
size_t allocator_limit();
void allocator_set_limit(size_t bytes);

struct AllocatorStats {
  size_t allocated_bytes;  // live bytes handed out
  size_t cached_bytes;     // bytes held in free lists
  size_t peak_allocated_bytes;
  size_t os_allocations;  // blocks obtained from the OS (cache misses)
  // Peak of live bytes since allocator_reset_window_peak: a second counter, so that a
  // report (ortmodule.profile, the first-run log) can measure a window without moving
  // peak_allocated_bytes, which benchmarks reset and read themselves.
  size_t window_peak_bytes;
};
AllocatorStats allocator_stats();
void allocator_reset_peak();
void allocator_reset_window_peak();
// Returns cached blocks to the OS.
void allocator_empty_cache();

}  // namespace ortmodule
