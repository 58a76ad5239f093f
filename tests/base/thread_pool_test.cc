#include "weft/base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

namespace weft {
namespace {

TEST(ThreadPool, RunsEveryTaskExactlyOnceWithValidThreadIds) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(1000);
  std::atomic<bool> bad_thread{false};
  pool.ParallelFor(1000, [&](int64_t task, int thread) {
    hits[task]++;
    if (thread < 0 || thread >= 3) bad_thread = true;
  });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  EXPECT_FALSE(bad_thread);
}

TEST(ThreadPool, UsesMoreThanOneThreadWhenAvailable) {
  ThreadPool pool(2);
  std::atomic<int> seen_mask{0};
  pool.ParallelFor(64, [&](int64_t, int thread) {
    seen_mask |= 1 << thread;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  EXPECT_EQ(seen_mask.load(), 3);
}

TEST(ThreadPool, RethrowsTheFirstExceptionAndStaysUsable) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.ParallelFor(100,
                                [&](int64_t task, int) {
                                  if (task == 17) throw std::runtime_error("task 17 failed");
                                }),
               std::runtime_error);
  std::atomic<int> count{0};
  pool.ParallelFor(10, [&](int64_t, int) { count++; });
  EXPECT_EQ(count.load(), 10);
}

TEST(ThreadPool, NestedAndConcurrentCallersRunInlineWithoutDeadlock) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  // A nested call from inside a task, and several outside callers at once.
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&] {
      pool.ParallelFor(
          8, [&](int64_t, int) { pool.ParallelFor(5, [&](int64_t t, int) { total += t; }); });
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(total.load(), 4 * 8 * (0 + 1 + 2 + 3 + 4));
}

}  // namespace
}  // namespace weft
