// Safety nets under every model: errors thrown in parallel loops reach the caller, the
// allocator refuses absurd sizes instead of hanging, and shape arithmetic never overflows.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include "base/allocator.h"
#include "ir/tensor.h"
#include "kernels/parallel.h"

namespace ortmodule {
namespace {

TEST(ParallelFor, ExceptionInAChunkReachesTheCaller) {
  const int64_t n = 1 << 20;
  std::atomic<int64_t> chunks{0};
  try {
    parallel_for(0, n, 1024, [&](int64_t b, int64_t e) {
      ++chunks;
      if (b <= n / 2 + 7 && n / 2 + 7 < e) throw std::out_of_range("bad index at 524295");
    });
    FAIL() << "parallel_for swallowed the exception";
  } catch (const std::out_of_range& e) {
    // The original exception type and message, on the calling thread.
    EXPECT_STREQ(e.what(), "bad index at 524295");
  }
  EXPECT_GE(chunks.load(), 1);
  // The pool still works afterwards.
  std::atomic<int64_t> sum{0};
  parallel_for(0, n, 1024, [&](int64_t b, int64_t e) { sum += e - b; });
  EXPECT_EQ(sum.load(), n);
}

TEST(ParallelFor, ExceptionsFromEveryChunkGiveOne) {
  EXPECT_THROW(parallel_for(0, 1 << 16, 1, [](int64_t, int64_t) { throw std::runtime_error("x"); }),
               std::runtime_error);
}

TEST(Allocator, RefusesAbsurdSizes) {
  EXPECT_THROW(allocate_storage(SIZE_MAX), std::runtime_error);
  EXPECT_THROW(allocate_storage(SIZE_MAX / 2 + 1), std::runtime_error);
  EXPECT_THROW(allocate_storage(allocator_limit() + 1), std::runtime_error);
  try {
    allocate_storage(SIZE_MAX);
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("refusing to allocate"), std::string::npos) << e.what();
  }
  // Small allocations still work after a refusal.
  EXPECT_NE(allocate_storage(64)->data, nullptr);
}

TEST(Allocator, LimitCanBeLowered) {
  const size_t before = allocator_limit();
  allocator_set_limit(1 << 20);
  EXPECT_EQ(allocator_limit(), size_t(1) << 20);
  EXPECT_THROW(allocate_storage((1 << 20) + 1), std::runtime_error);
  EXPECT_NE(allocate_storage(1 << 20)->data, nullptr);
  allocator_set_limit(0);
  EXPECT_EQ(allocator_limit(), before);
}

TEST(TensorShape, NegativeOrOverflowingShapesAreRefused) {
  EXPECT_EQ(shape_numel_checked({2, 3}), 6);
  EXPECT_EQ(shape_numel_checked({}), 1);
  EXPECT_EQ(shape_numel_checked({0, -1}), -1);
  EXPECT_EQ(shape_numel_checked({-2, -3}), -1);
  EXPECT_EQ(shape_numel_checked({int64_t(1) << 40, int64_t(1) << 40}), -1);
  EXPECT_EQ(shape_numel_checked({int64_t(1) << 40, 0}), 0);
  // Strides of an empty tensor are products of its other dims: they must fit as well.
  EXPECT_EQ(shape_numel_checked({int64_t(1) << 40, int64_t(1) << 40, 0}), -1);
  EXPECT_EQ(tensor_bytes_checked(INT64_MAX, DType::Float64), SIZE_MAX);
  EXPECT_THROW(Tensor::empty(DType::Float32, {-1, 4}), std::runtime_error);
  EXPECT_THROW(Tensor::empty(DType::Float32, {int64_t(1) << 40, int64_t(1) << 40}),
               std::runtime_error);
  Tensor t = Tensor::empty(DType::Float32, {2, 3});
  EXPECT_THROW(t.view({-2, -3}), std::runtime_error);
}

TEST(TensorShape, FloatShapeEntriesSaturate) {
  Tensor t = Tensor::empty(DType::Float32, {3});
  t.data<float>()[0] = 1e30f;
  t.data<float>()[1] = -1e30f;
  t.data<float>()[2] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(t.int_at(0), INT64_MAX);
  EXPECT_EQ(t.int_at(1), INT64_MIN);
  EXPECT_EQ(t.int_at(2), 0);
}

}  // namespace
}  // namespace ortmodule
