#include "weft/runtime/executor_tensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <set>

#include "weft/base/error.h"

namespace weft::runtime {
namespace {

TEST(HostTensorTest, BuffersAre64ByteAlignedAndLargeOnesAvoid4KAliasing) {
  std::set<uintptr_t> page_offsets;
  std::vector<HostTensor> keep;
  for (int i = 0; i < 8; ++i) {
    keep.push_back(HostTensor::Uninitialized(Shape(PrimitiveType::kF32, {64 << 10})));
    const auto p = reinterpret_cast<uintptr_t>(keep.back().raw_data());
    EXPECT_EQ(p % 64, 0u);
    page_offsets.insert(p % 4096);
  }
  // Consecutive large buffers start at different offsets within a page.
  EXPECT_EQ(page_offsets.size(), 8u);
  HostTensor small = HostTensor::Uninitialized(Shape(PrimitiveType::kPred, {3}));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small.raw_data()) % 64, 0u);
}

TEST(HostTensorTest, ValuesRoundTripThroughEveryElementType) {
  const std::vector<double> values = {1.5, -2.25, 3.0, 100.75};
  for (PrimitiveType t :
       {PrimitiveType::kF32, PrimitiveType::kBF16, PrimitiveType::kF16, PrimitiveType::kS32,
        PrimitiveType::kS64, PrimitiveType::kU32, PrimitiveType::kPred}) {
    HostTensor x = HostTensor::FromDoubles(Shape(t, {2, 2}), values);
    for (int64_t i = 0; i < 4; ++i) {
      double want = RoundToType(values[i], t);
      if (IsInteger(t)) want = std::trunc(values[i]);
      if (t == PrimitiveType::kU32 && values[i] < 0) want = 4294967294.0;  // -2 wraps
      if (t == PrimitiveType::kPred) want = 1;
      EXPECT_EQ(x.GetDouble(i), want) << PrimitiveTypeName(t) << " element " << i;
    }
  }
}

TEST(HostTensorTest, HalfConversionsRoundToNearestEven) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-70000.0f, 70000.0f);
  for (int i = 0; i < 20000; ++i) {
    const float x = i < 10000 ? dist(rng) : dist(rng) * 1e-7f;  // normals and subnormals
    EXPECT_EQ(Bf16BitsToFloat(FloatToBf16Bits(x)), RoundToType(x, PrimitiveType::kBF16)) << x;
    EXPECT_EQ(F16BitsToFloat(FloatToF16Bits(x)),
              static_cast<float>(RoundToType(x, PrimitiveType::kF16)))
        << x;
  }
  EXPECT_TRUE(std::isnan(Bf16BitsToFloat(FloatToBf16Bits(NAN))));
  EXPECT_TRUE(std::isnan(F16BitsToFloat(FloatToF16Bits(NAN))));
  EXPECT_EQ(F16BitsToFloat(FloatToF16Bits(1e6f)), INFINITY);
}

TEST(HostTensorTest, CopiesShareBytesAndCloneDoesNot) {
  HostTensor a = HostTensor::FromVector<float>(PrimitiveType::kF32, {2, 3}, {1, 2, 3, 4, 5, 6});
  HostTensor shared = a;
  HostTensor clone = a.Clone();
  HostTensor flat = a.Reshaped(Shape(PrimitiveType::kF32, {6}));
  HostTensor row = a.View(Shape(PrimitiveType::kF32, {3}), 3 * 4);
  a.mutable_data<float>()[3] = 40;
  EXPECT_EQ(shared.data<float>()[3], 40);
  EXPECT_EQ(flat.data<float>()[3], 40);
  EXPECT_EQ(row.data<float>()[0], 40);
  EXPECT_EQ(clone.data<float>()[3], 4);
  EXPECT_FALSE(a.IsExclusivelyOwned());
  EXPECT_TRUE(clone.IsExclusivelyOwned());
  EXPECT_FALSE(clone.Borrowed(nullptr).IsExclusivelyOwned());  // borrowed bytes are read-only
}

TEST(HostTensorTest, MisuseIsAnError) {
  HostTensor a(Shape(PrimitiveType::kF32, {4}));
  EXPECT_THROW(a.data<int32_t>(), Error);
  EXPECT_THROW(a.Reshaped(Shape(PrimitiveType::kF32, {5})), Error);
  EXPECT_THROW(a.View(Shape(PrimitiveType::kF32, {2}), 12), Error);
  EXPECT_THROW(HostTensor::FromVector<float>(PrimitiveType::kF32, {3}, {1, 2}), Error);
  EXPECT_THROW(HostTensor(Shape::Tuple({})), Error);
}

TEST(MemoryTrackerTest, CountsLiveAndPeakBytesOfTrackedBuffers) {
  auto tracker = std::make_shared<MemoryTracker>();
  {
    HostTensor a = HostTensor::Uninitialized(Shape(PrimitiveType::kF32, {100}), tracker);
    HostTensor b = HostTensor::Uninitialized(Shape(PrimitiveType::kS64, {10}), tracker);
    EXPECT_EQ(tracker->live_bytes(), 480);
    HostTensor view = a.Reshaped(Shape(PrimitiveType::kF32, {10, 10}));  // no new bytes
    EXPECT_EQ(tracker->live_bytes(), 480);
  }
  EXPECT_EQ(tracker->live_bytes(), 0);
  EXPECT_EQ(tracker->peak_bytes(), 480);
  HostTensor untracked(Shape(PrimitiveType::kF32, {8}));
  {
    HostTensor borrowed = untracked.Borrowed(tracker);
    EXPECT_EQ(tracker->live_bytes(), 32);
  }
  EXPECT_EQ(tracker->live_bytes(), 0);
}

TEST(BufferPoolTest, SizeClassesAreAtMostAnEighthLarger) {
  std::mt19937_64 rng(std::random_device{}());
  for (int trial = 0; trial < 2000; ++trial) {
    const int64_t bytes = 1 + static_cast<int64_t>(rng() % (int64_t{1} << (1 + rng() % 34)));
    const int64_t c = BufferPool::SizeClass(bytes);
    ASSERT_GE(c, bytes);
    ASSERT_LE(c, std::max<int64_t>(bytes + 63, bytes + bytes / 8)) << bytes;
    ASSERT_EQ(c % 64, 0) << bytes;
    ASSERT_EQ(BufferPool::SizeClass(c), c) << "a class is its own class";
  }
}

TEST(BufferPoolTest, FreedBuffersServeTheNextRequestsOfTheirClass) {
  auto pool = std::make_shared<BufferPool>();
  pool->set_capacity(int64_t{1} << 30);
  const Shape a(PrimitiveType::kF32, {300, 500});
  const Shape b(PrimitiveType::kF32, {301, 500});  // the same size class as a
  const void* first = nullptr;
  {
    HostTensor t = HostTensor::Uninitialized(a, nullptr, pool);
    EXPECT_FALSE(t.storage()->reused());
    first = t.storage()->data();
  }
  EXPECT_GT(pool->idle_bytes(), 0);
  HostTensor u = HostTensor::Uninitialized(b, nullptr, pool);
  EXPECT_TRUE(u.storage()->reused());
  EXPECT_EQ(pool->idle_bytes(), 0);
  // Its bytes are usable in full, and stay 64-byte aligned.
  float* data = u.mutable_data<float>();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(data) % 64, 0u);
  for (int64_t i = 0; i < u.element_count(); ++i) data[i] = static_cast<float>(i);
  EXPECT_EQ(data[u.element_count() - 1], static_cast<float>(u.element_count() - 1));
  (void)first;
  // A request of another class does not take it.
  HostTensor w = HostTensor::Uninitialized(Shape(PrimitiveType::kF32, {7}), nullptr, pool);
  EXPECT_FALSE(w.storage()->reused());
}

TEST(BufferPoolTest, IdleBytesStayWithinCapacityAndTheOldestGoFirst) {
  auto pool = std::make_shared<BufferPool>();
  const Shape shape(PrimitiveType::kU32, {16 << 10});
  pool->set_capacity(int64_t{1} << 30);
  { HostTensor probe = HostTensor::Uninitialized(shape, nullptr, pool); }
  const int64_t one = pool->idle_bytes();  // the class of this shape's buffer
  ASSERT_GE(one, shape.ByteSize());
  pool->set_capacity(3 * one);
  std::vector<HostTensor> held;
  for (int k = 0; k < 5; ++k) held.push_back(HostTensor::Uninitialized(shape, nullptr, pool));
  EXPECT_EQ(pool->idle_bytes(), 0);
  held.clear();  // five freed, three kept
  EXPECT_EQ(pool->idle_bytes(), 3 * one);
  pool->set_capacity(one);
  EXPECT_EQ(pool->idle_bytes(), one);
  pool->set_capacity(0);
  EXPECT_EQ(pool->idle_bytes(), 0);
}

TEST(BufferPoolTest, ATensorMayOutliveItsPool) {
  HostTensor t;
  {
    auto pool = std::make_shared<BufferPool>();
    pool->set_capacity(int64_t{1} << 20);
    t = HostTensor::Uninitialized(Shape(PrimitiveType::kF32, {1000}), nullptr, pool);
  }
  t.mutable_data<float>()[999] = 2.5f;  // still valid; freed normally later
  EXPECT_EQ(t.data<float>()[999], 2.5f);
}

}  // namespace
}  // namespace weft::runtime
