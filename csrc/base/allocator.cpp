#include "base/allocator.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <set>
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

// Requests up to kSmallLimit are served from per-size free lists (64-byte granularity);
// larger ones are carved out of segments by best fit, with splitting and coalescing, so
// that a freed 4 MiB block can serve four 1 MiB requests later in the step: the cached
// memory then stays close to the step's peak of live bytes instead of the sum of the peaks
// of each size.
constexpr size_t kSmallLimit = size_t(1) << 16;
constexpr size_t kLargeGranularity = 4096;

// `bytes` is at most the allocation limit, far below SIZE_MAX / 2, so this cannot overflow.
size_t round_size(size_t bytes) {
  if (bytes == 0) bytes = 1;
  if (bytes <= kSmallLimit) return (bytes + kAlignment - 1) & ~(kAlignment - 1);
  return (bytes + kLargeGranularity - 1) & ~(kLargeGranularity - 1);
}

// A piece of a segment; neighbours in address order are linked so that free pieces merge.
struct Block {
  char* ptr;
  size_t size;
  bool free;
  bool segment_start;  // the first block of a segment: its ptr is what the OS returned
  Block* prev;         // the block just below in the same segment, or nullptr
  Block* next;         // the block just above in the same segment, or nullptr
};

struct BySizeThenAddress {
  bool operator()(const Block* a, const Block* b) const {
    return a->size != b->size ? a->size < b->size : a->ptr < b->ptr;
  }
};

struct Cache {
  std::mutex mu;
  std::map<size_t, std::vector<void*>> small_free;
  std::set<Block*, BySizeThenAddress> large_free;
  AllocatorStats stats{0, 0, 0, 0, 0};

  // Memory from the OS for a request already counted as allocated (uncounted on failure).
  void* os_alloc(size_t size) {
    void* p = std::aligned_alloc(kAlignment, size);
    if (!p) {
      std::lock_guard<std::mutex> lock(mu);
      stats.allocated_bytes -= size;
      throw std::bad_alloc();
    }
    return p;
  }

  void count_allocation(size_t size) {
    stats.allocated_bytes += size;
    stats.peak_allocated_bytes = std::max(stats.peak_allocated_bytes, stats.allocated_bytes);
    stats.window_peak_bytes = std::max(stats.window_peak_bytes, stats.allocated_bytes);
  }

  void* get_small(size_t size) {
    {
      std::lock_guard<std::mutex> lock(mu);
      count_allocation(size);
      auto it = small_free.find(size);
      if (it != small_free.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        stats.cached_bytes -= size;
        return p;
      }
      ++stats.os_allocations;
    }
    return os_alloc(size);
  }

  void put_small(void* p, size_t size) {
    std::lock_guard<std::mutex> lock(mu);
    stats.allocated_bytes -= size;
    stats.cached_bytes += size;
    small_free[size].push_back(p);
  }

  void* get_uncached(size_t size) {
    {
      std::lock_guard<std::mutex> lock(mu);
      count_allocation(size);
      ++stats.os_allocations;
    }
    return os_alloc(size);
  }

  void put_uncached(void* p, size_t size) {
    std::free(p);
    std::lock_guard<std::mutex> lock(mu);
    stats.allocated_bytes -= size;
  }

  // Takes the front `size` bytes of a free block (removed from large_free by the caller);
  // the rest, if any, stays free.
  Block* split(Block* b, size_t size) {
    if (b->size > size) {
      Block* rest = new Block{b->ptr + size, b->size - size, true, false, b, b->next};
      if (b->next) b->next->prev = rest;
      b->next = rest;
      b->size = size;
      large_free.insert(rest);
    }
    b->free = false;
    return b;
  }

  Block* get_large(size_t size) {
    {
      std::lock_guard<std::mutex> lock(mu);
      count_allocation(size);
      Block key{nullptr, size, true, false, nullptr, nullptr};
      auto it = large_free.lower_bound(&key);
      if (it != large_free.end()) {
        Block* b = *it;
        large_free.erase(it);
        stats.cached_bytes -= size;
        return split(b, size);
      }
      ++stats.os_allocations;
    }
    return new Block{static_cast<char*>(os_alloc(size)), size, false, true, nullptr, nullptr};
  }

  // Joins b's upper neighbour (out of large_free) to b.
  static void absorb_next(Block* b) {
    Block* up = b->next;
    b->size += up->size;
    b->next = up->next;
    if (up->next) up->next->prev = b;
    delete up;
  }

  void put_large(Block* b) {
    std::lock_guard<std::mutex> lock(mu);
    stats.allocated_bytes -= b->size;
    stats.cached_bytes += b->size;
    b->free = true;
    // Merge with the free neighbours of the same segment.
    if (b->next && b->next->free) {
      large_free.erase(b->next);
      absorb_next(b);
    }
    if (Block* down = b->prev; down && down->free) {
      large_free.erase(down);
      absorb_next(down);
      b = down;
    }
    large_free.insert(b);
  }

  // Returns whole free segments and the small free lists to the OS.
  void release_free() {
    std::lock_guard<std::mutex> lock(mu);
    for (auto& kv : small_free)
      for (void* p : kv.second) {
        std::free(p);
        stats.cached_bytes -= kv.first;
      }
    small_free.clear();
    for (auto it = large_free.begin(); it != large_free.end();) {
      Block* b = *it;
      if (b->segment_start && !b->next) {
        stats.cached_bytes -= b->size;
        std::free(b->ptr);
        delete b;
        it = large_free.erase(it);
      } else {
        ++it;
      }
    }
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
  const size_t size = round_size(bytes);
#ifdef ORTMODULE_NO_ALLOCATOR_CACHE
  // Sanitizer builds: a cached block would hide a use after free from ASan.
  void* raw = cache().get_uncached(size);
  return std::make_shared<Storage>(raw, bytes, [size](void* q) { cache().put_uncached(q, size); });
#else
  if (size <= kSmallLimit) {
    void* p = cache().get_small(size);
    return std::make_shared<Storage>(p, bytes, [size](void* q) { cache().put_small(q, size); });
  }
  Block* b = cache().get_large(size);
  return std::make_shared<Storage>(b->ptr, bytes, [b](void*) { cache().put_large(b); });
#endif
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

void allocator_reset_window_peak() {
  std::lock_guard<std::mutex> lock(cache().mu);
  cache().stats.window_peak_bytes = cache().stats.allocated_bytes;
}

void allocator_empty_cache() { cache().release_free(); }

std::shared_ptr<Storage> zero_storage(size_t bytes) {
  constexpr size_t kMappedFrom = size_t(1) << 20;
  std::shared_ptr<Storage> storage;
  if (bytes >= kMappedFrom && bytes <= limit_bytes().load()) {
    void* p = mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED)
      storage = std::make_shared<Storage>(p, bytes, [bytes](void* q) { munmap(q, bytes); });
  }
  if (!storage) {
    storage = allocate_storage(bytes);
    if (bytes) std::memset(storage->data, 0, bytes);
  }
  storage->writable = false;
  storage->immutable = true;
  return storage;
}

}  // namespace ortmodule
