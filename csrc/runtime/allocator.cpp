#include "runtime/allocator.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

namespace ortmodule {
namespace {

constexpr size_t kAlignment = 64;

// The machine's physical memory: no single block can usefully be larger.
size_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return size_t(1) << 46;
  return static_cast<size_t>(pages) * static_cast<size_t>(page);
}

std::atomic<size_t>& limit_bytes() {
  static std::atomic<size_t> limit{physical_memory_bytes()};
  return limit;
}

// Round to a bucket: 64-byte granularity below 1 MiB, then to 1/8 of the next power of two.
// `bytes` is at most the allocation limit, far below SIZE_MAX / 2, so this cannot overflow.
size_t round_size(size_t bytes) {
  if (bytes == 0) bytes = 1;
  if (bytes <= (1u << 20)) return (bytes + 63) & ~size_t(63);
  size_t p = 1;
  while (p < bytes) p <<= 1;
  size_t step = p / 8;
  return (bytes + step - 1) / step * step;
}

struct Cache {
  std::mutex mu;
  std::map<size_t, std::vector<void*>> free_blocks;
  AllocatorStats stats{0, 0, 0, 0};

  void* get(size_t size) {
    {
      std::lock_guard<std::mutex> lock(mu);
      auto it = free_blocks.find(size);
      stats.allocated_bytes += size;
      if (stats.allocated_bytes > stats.peak_allocated_bytes)
        stats.peak_allocated_bytes = stats.allocated_bytes;
      if (it != free_blocks.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        stats.cached_bytes -= size;
        return p;
      }
      ++stats.os_allocations;
    }
    void* p = std::aligned_alloc(kAlignment, size);
    if (!p) throw std::bad_alloc();
    return p;
  }

  void put(void* p, size_t size) {
    std::lock_guard<std::mutex> lock(mu);
    stats.allocated_bytes -= size;
#ifdef ORTMODULE_NO_ALLOCATOR_CACHE
    // Sanitizer builds: a cached block would hide a use after free from ASan.
    std::free(p);
    return;
#endif
    stats.cached_bytes += size;
    free_blocks[size].push_back(p);
  }
};

Cache& cache() {
  // Leaked on purpose: storages may be released during static destruction.
  static Cache* c = new Cache();
  return *c;
}

}  // namespace

std::shared_ptr<Storage> allocate_storage(size_t bytes) {
  const size_t limit = limit_bytes().load();
  if (bytes > limit) {
    throw std::runtime_error(
        "refusing to allocate " + std::to_string(bytes) +
        " bytes for one tensor: above the "
        "limit of " +
        std::to_string(limit) +
        " bytes (the machine's memory unless set otherwise); the model asks for an absurd size "
        "(a shape or size overflowed, or a crafted model)");
  }
  size_t size = round_size(bytes);
  void* p = cache().get(size);
  return std::make_shared<Storage>(p, bytes, [size](void* q) { cache().put(q, size); });
}

size_t allocator_limit() { return limit_bytes().load(); }

void allocator_set_limit(size_t bytes) {
  limit_bytes().store(bytes ? std::min(bytes, physical_memory_bytes()) : physical_memory_bytes());
}

AllocatorStats allocator_stats() {
  std::lock_guard<std::mutex> lock(cache().mu);
  return cache().stats;
}

void allocator_reset_peak() {
  std::lock_guard<std::mutex> lock(cache().mu);
  cache().stats.peak_allocated_bytes = cache().stats.allocated_bytes;
}

void allocator_empty_cache() {
  std::lock_guard<std::mutex> lock(cache().mu);
  for (auto& kv : cache().free_blocks)
    for (void* p : kv.second) std::free(p);
  cache().free_blocks.clear();
  cache().stats.cached_bytes = 0;
}

}  // namespace ortmodule
