// The caching host allocator: small requests from per-size free lists, large ones carved
// out of segments by best fit with splitting and coalescing.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "base/allocator.h"

namespace ortmodule {
namespace {

constexpr size_t kMiB = size_t(1) << 20;

bool disjoint(const Storage& a, const Storage& b) {
  const char* pa = static_cast<const char*>(a.data);
  const char* pb = static_cast<const char*>(b.data);
  return pa + a.bytes <= pb || pb + b.bytes <= pa;
}

TEST(Allocator, FreedLargeBlockServesSmallerRequestsAndMergesBack) {
  allocator_empty_cache();
  auto big = allocate_storage(8 * kMiB);
  const char* base = static_cast<const char*>(big->data);
  big.reset();
  const size_t os_before = allocator_stats().os_allocations;
  // Four 2 MiB requests fit in the freed 8 MiB block: no memory from the OS.
  std::vector<std::shared_ptr<Storage>> parts;
  for (int i = 0; i < 4; ++i) {
    parts.push_back(allocate_storage(2 * kMiB));
    const char* p = static_cast<const char*>(parts.back()->data);
    EXPECT_GE(p, base);
    EXPECT_LE(p + 2 * kMiB, base + 8 * kMiB);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
    std::memset(parts.back()->data, i + 1, 2 * kMiB);
  }
  EXPECT_EQ(allocator_stats().os_allocations, os_before);
  for (size_t i = 0; i < parts.size(); ++i)
    for (size_t j = i + 1; j < parts.size(); ++j) EXPECT_TRUE(disjoint(*parts[i], *parts[j]));
  for (int i = 0; i < 4; ++i) {
    const auto* bytes = static_cast<const unsigned char*>(parts[i]->data);
    EXPECT_EQ(bytes[0], i + 1);
    EXPECT_EQ(bytes[2 * kMiB - 1], i + 1);
  }
  // Freed in an order that leaves holes, the pieces merge back into one 8 MiB block.
  parts[1].reset();
  parts[3].reset();
  parts[0].reset();
  parts[2].reset();
  auto again = allocate_storage(8 * kMiB);
  EXPECT_EQ(static_cast<const char*>(again->data), base);
  EXPECT_EQ(allocator_stats().os_allocations, os_before);
}

TEST(Allocator, StatsCountLiveAndCachedBytes) {
  allocator_empty_cache();
  const AllocatorStats start = allocator_stats();
  EXPECT_EQ(start.cached_bytes, 0u);
  auto a = allocate_storage(3 * kMiB + 5);  // rounded to 4 KiB
  auto s = allocate_storage(100);           // rounded to 64 bytes
  EXPECT_EQ(allocator_stats().allocated_bytes - start.allocated_bytes, 3 * kMiB + 4096 + 128);
  a.reset();
  s.reset();
  EXPECT_EQ(allocator_stats().allocated_bytes, start.allocated_bytes);
  EXPECT_EQ(allocator_stats().cached_bytes, 3 * kMiB + 4096 + 128);
  allocator_empty_cache();
  EXPECT_EQ(allocator_stats().cached_bytes, 0u);
}

TEST(Allocator, EmptyCacheKeepsSegmentsInUse) {
  allocator_empty_cache();
  auto big = allocate_storage(4 * kMiB);
  const char* base = static_cast<const char*>(big->data);
  big.reset();
  auto part = allocate_storage(2 * kMiB);  // the front half of the freed block
  EXPECT_EQ(static_cast<const char*>(part->data), base);
  allocator_empty_cache();  // the segment is half in use: it stays
  EXPECT_EQ(allocator_stats().cached_bytes, 2 * kMiB);
  std::memset(part->data, 7, 2 * kMiB);
  part.reset();
  allocator_empty_cache();
  EXPECT_EQ(allocator_stats().cached_bytes, 0u);
}

TEST(Allocator, ThreadsAllocatingAndFreeingKeepBlocksDisjoint) {
  // Each thread fills its blocks with its own byte pattern and checks it before freeing: an
  // overlap between two live blocks (a bad split or merge) breaks another thread's pattern.
  auto work = [](int seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<size_t> size(1, 3 * kMiB);
    std::vector<std::pair<std::shared_ptr<Storage>, unsigned char>> live;
    for (int step = 0; step < 400; ++step) {
      if (live.size() < 6 && (rng() % 3 != 0 || live.empty())) {
        auto s = allocate_storage(size(rng));
        const auto tag = static_cast<unsigned char>(rng());
        std::memset(s->data, tag, s->bytes);
        live.emplace_back(std::move(s), tag);
      } else {
        const size_t k = rng() % live.size();
        const auto* bytes = static_cast<const unsigned char*>(live[k].first->data);
        const size_t n = live[k].first->bytes;
        for (size_t i = 0; i < n; i += 4093) ASSERT_EQ(bytes[i], live[k].second);
        ASSERT_EQ(bytes[n - 1], live[k].second);
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back(work, t + 1);
  for (auto& t : threads) t.join();
}

}  // namespace
}  // namespace ortmodule
