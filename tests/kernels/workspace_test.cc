#include "workspace.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <thread>
#include <vector>

namespace weft::kernels::internal {
namespace {

TEST(WorkspaceTest, AReleasedBlockServesTheNextCallOfTheSameOrASmallerSize) {
  std::mt19937_64 rng(std::random_device{}());
  const size_t count = 1000 + rng() % 100000;
  const float* first = nullptr;
  {
    WorkspaceBuffer<float> a(count);
    ASSERT_NE(a.data(), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % 64, 0u);
    EXPECT_EQ(a.size(), count);
    for (size_t i = 0; i < count; ++i) a[i] = static_cast<float>(i);  // writable throughout
    first = a.data();
  }
  const size_t idle = IdleWorkspaceBlocks();
  EXPECT_GE(IdleWorkspaceBytes(), count * sizeof(float));
  {
    WorkspaceBuffer<float> b(count);  // the same size: the same block
    EXPECT_EQ(b.data(), first);
    EXPECT_EQ(IdleWorkspaceBlocks(), idle - 1);
  }
  {
    WorkspaceBuffer<uint16_t> c(count);  // fewer bytes: still that block
    EXPECT_EQ(static_cast<const void*>(c.data()), static_cast<const void*>(first));
    WorkspaceBuffer<float> d(count);  // the block is taken: a new one
    EXPECT_NE(d.data(), first);
  }
}

TEST(WorkspaceTest, GrowingTakesALargerBlockAndKeepsTheSmallestFewIdle) {
  WorkspaceBuffer<float> a(256);
  const float* small = a.data();
  a.Resize(128);  // shrinking keeps the block
  EXPECT_EQ(a.data(), small);
  EXPECT_EQ(a.size(), 128u);
  a.Resize(1 << 20);  // growing gives the old block back and takes a larger one
  EXPECT_NE(a.data(), small);
  a.Zero();
  for (size_t i = 0; i < a.size(); i += 4097) EXPECT_EQ(a[i], 0.0f);
  // Many buffers released at once (on a fresh thread, so the free list
  // starts empty): the kMaxIdleWorkspaceBlocks largest stay idle.
  const size_t n = kMaxIdleWorkspaceBlocks + 8;
  size_t blocks = 0, bytes = 0;
  std::thread t([&] {
    {
      std::vector<WorkspaceBuffer<float>> many(n);
      for (size_t i = 0; i < n; ++i) many[i].Resize(64 * (i + 1));
    }
    blocks = IdleWorkspaceBlocks();
    bytes = IdleWorkspaceBytes();
  });
  t.join();
  size_t largest = 0;
  for (size_t i = n - kMaxIdleWorkspaceBlocks; i < n; ++i) largest += 64 * (i + 1) * sizeof(float);
  EXPECT_EQ(blocks, kMaxIdleWorkspaceBlocks);
  EXPECT_EQ(bytes, largest);
}

TEST(WorkspaceTest, EachThreadHasItsOwnFreeList) {
  { WorkspaceBuffer<float> a(4096); }
  const size_t here = IdleWorkspaceBlocks();
  size_t there = 1;
  std::thread t([&] { there = IdleWorkspaceBlocks(); });
  t.join();
  EXPECT_EQ(there, 0u);
  EXPECT_EQ(IdleWorkspaceBlocks(), here);
}

}  // namespace
}  // namespace weft::kernels::internal
