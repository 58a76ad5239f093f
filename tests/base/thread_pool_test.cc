#include "weft/base/thread_pool.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
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

// Jobs of any number of tasks run on the same threads: a team sized to each
// job made OpenMP end the threads beyond a smaller team and create new ones
// for the next larger job (stacks and TLS faulted in inside training loops).
TEST(ThreadPool, KeepsItsThreadsAcrossJobsOfAnySize) {
  ThreadPool pool(4);
  std::mutex mu;
  std::set<pid_t> tids;
  for (int64_t tasks : {4, 2, 4, 3, 2, 4}) {
    pool.ParallelFor(tasks, [&](int64_t, int) {
      {
        std::lock_guard<std::mutex> lock(mu);
        tids.insert(gettid());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    });
  }
  EXPECT_GE(tids.size(), 2u);
  EXPECT_LE(tids.size(), 4u) << "threads were created again between jobs";
}

// A thread given a share of the pool (a device's) runs its jobs on teams of
// that size; 0 gives it the whole pool again.
TEST(ThreadPool, AThreadsShareSizesItsTeams) {
  ThreadPool pool(4);
  std::atomic<int> highest{-1};
  EXPECT_EQ(pool.TeamSize(), 4);
  std::thread device([&] {
    ThreadPool::SetThreadsForThisThread(2);
    EXPECT_EQ(pool.TeamSize(), 2);
    pool.ParallelFor(16, [&](int64_t, int thread) {
      int seen = highest.load();
      while (thread > seen && !highest.compare_exchange_weak(seen, thread)) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    });
    ThreadPool::SetThreadsForThisThread(0);
  });
  device.join();
  EXPECT_GE(highest.load(), 0);
  EXPECT_LE(highest.load(), 1);
}

bool ThreadIsAlive(pid_t tid) {
  return std::filesystem::exists("/proc/self/task/" + std::to_string(tid));
}

// A joined thread leaves /proc a moment after its joiner wakes: waits up to
// 20 s for it to go.
bool ThreadEnds(pid_t tid) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (ThreadIsAlive(tid)) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// Runs a job of `team` tasks in which every task waits for all the others to
// start, so each thread of the team holds one, and returns the threads' ids.
std::set<pid_t> ThreadsOfAJob(ThreadPool& pool, int team) {
  std::mutex mu;
  std::set<pid_t> tids;
  std::atomic<int> started{0};
  pool.ParallelFor(team, [&](int64_t, int) {
    {
      std::lock_guard<std::mutex> lock(mu);
      tids.insert(gettid());
    }
    started++;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (started.load() < team && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::yield();
    }
  });
  return tids;
}

// Before LocalCluster's device threads start, the launching thread ends its
// idle workers: libgomp counted them as threads competing for the cores and
// made every team's barriers sleep at once. The next job starts them again.
// The test follows the team's own threads by id: the process's thread count
// also moves when threads that earlier tests started finish exiting.
TEST(ThreadPool, EndingAThreadsWorkersLeavesFewerThreadsAndTheNextJobRuns) {
  ThreadPool pool(3);
  std::thread launcher([&] {  // a thread of its own: no team from other tests
    const pid_t self = gettid();
    std::set<pid_t> first = ThreadsOfAJob(pool, 3);
    ASSERT_EQ(first.size(), 3u);
    first.erase(self);
    ASSERT_EQ(first.size(), 2u) << "the launching thread runs in its own team";
    for (pid_t worker : first) EXPECT_TRUE(ThreadIsAlive(worker));
    ThreadPool::EndWorkersOfThisThread();
    for (pid_t worker : first) EXPECT_TRUE(ThreadEnds(worker)) << "worker " << worker;
    std::set<pid_t> second = ThreadsOfAJob(pool, 3);
    ASSERT_EQ(second.size(), 3u);
    second.erase(self);
    for (pid_t worker : second) {
      EXPECT_EQ(first.count(worker), 0u) << "worker " << worker << " outlived the end";
      EXPECT_TRUE(ThreadIsAlive(worker));
    }
  });
  launcher.join();
}

}  // namespace
}  // namespace weft
