// Fibers: control passes between Resume and Yield in order, a fiber's locals
// survive its yields, exceptions stay inside the fiber that threw them, and a
// stack serves fiber after fiber.
#include "weft/base/fiber.h"

#include <gtest/gtest.h>

#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "weft/base/error.h"

namespace weft {
namespace {

TEST(Fiber, RunsUntilItYieldsAndKeepsItsLocals) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> uniform(-1, 1);
  std::vector<double> values(50);
  for (double& v : values) v = uniform(rng);
  Fiber::Stack stack;
  std::vector<double> seen;  // the fiber's running sums, one per resume
  Fiber fiber(stack, [&] {
    double sum = 0;  // on the fiber's stack, across its yields
    for (double v : values) {
      sum += v;
      seen.push_back(sum);
      Fiber::Yield();
    }
  });
  double reference = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_FALSE(fiber.finished());
    fiber.Resume();
    reference += values[i];
    ASSERT_EQ(seen.size(), i + 1);
    EXPECT_EQ(seen.back(), reference);
  }
  EXPECT_FALSE(fiber.finished());  // it yielded after the last value
  fiber.Resume();
  EXPECT_TRUE(fiber.finished());
  EXPECT_EQ(seen.size(), values.size());
}

TEST(Fiber, FibersOnOneThreadInterleaveAtTheirYields) {
  Fiber::Stack a_stack, b_stack;
  std::string order;
  auto body = [&order](char name) {
    return [&order, name] {
      for (int i = 0; i < 3; ++i) {
        order += name;
        Fiber::Yield();
      }
    };
  };
  Fiber a(a_stack, body('a')), b(b_stack, body('b'));
  while (!a.finished() || !b.finished()) {
    if (!a.finished()) a.Resume();
    if (!b.finished()) b.Resume();
  }
  EXPECT_EQ(order, "ababab");
}

// A thrown exception unwinds the thrower's stack only, across its yields,
// while another fiber holds frames of its own.
// The calling thread, asked afresh: glibc declares pthread_self `const`, so
// the compiler may reuse a get_id() from before a yield after it, on
// another thread (what fiber.h warns of).
[[gnu::noipa]] std::thread::id ThisThread() { return std::this_thread::get_id(); }

// A fiber that yielded on one thread goes on when another resumes it: its
// locals survive, and the code after the yield runs on the new thread.
TEST(Fiber, AnotherThreadMayResumeIt) {
  std::mt19937 rng(29);
  std::uniform_int_distribution<int> pick(0, 2);
  Fiber::Stack stack;
  constexpr int kRuns = 30;
  std::vector<std::thread::id> ran_on;
  int64_t sum = 0;
  Fiber fiber(stack, [&] {
    int64_t local = 0;  // on the fiber's stack, across its yields
    for (int i = 0; i < kRuns; ++i) {
      local += i;
      ran_on.push_back(ThisThread());
      Fiber::Yield();
    }
    sum = local;
  });
  std::vector<std::thread::id> resumed_by;
  for (int i = 0; i <= kRuns; ++i) {
    const int who = pick(rng);  // 0: this thread, else a new one
    if (who == 0) {
      resumed_by.push_back(std::this_thread::get_id());
      fiber.Resume();
    } else {
      std::thread([&] {
        resumed_by.push_back(std::this_thread::get_id());
        fiber.Resume();
      }).join();
    }
  }
  EXPECT_TRUE(fiber.finished());
  EXPECT_EQ(sum, int64_t{kRuns} * (kRuns - 1) / 2);
  ASSERT_EQ(ran_on.size(), static_cast<size_t>(kRuns));
  for (int i = 0; i < kRuns; ++i) EXPECT_EQ(ran_on[i], resumed_by[i]) << "run " << i;
}

TEST(Fiber, AnExceptionIsCaughtInsideItsFiber) {
  Fiber::Stack thrower_stack, other_stack;
  std::string caught;
  int other_steps = 0;
  Fiber thrower(thrower_stack, [&] {
    try {
      Fiber::Yield();
      throw Error("bad input " + std::to_string(3));
    } catch (const Error& e) {
      caught = e.what();
    }
    Fiber::Yield();
  });
  Fiber other(other_stack, [&] {
    std::vector<int> held(100, 1);  // frames that must survive the unwinding
    for (int i = 0; i < 3; ++i) {
      other_steps += held[i];
      Fiber::Yield();
    }
  });
  thrower.Resume();
  other.Resume();
  thrower.Resume();  // throws and catches
  EXPECT_EQ(caught, "bad input 3");
  other.Resume();
  other.Resume();
  thrower.Resume();
  other.Resume();
  EXPECT_TRUE(thrower.finished());
  EXPECT_TRUE(other.finished());
  EXPECT_EQ(other_steps, 3);
}

int Depth(int n, volatile char* sink) {
  char frame[1024];  // 1 KiB a frame: 2 MiB for 2048 levels
  frame[n % sizeof(frame)] = static_cast<char>(n);
  *sink = frame[n % sizeof(frame)];
  return n == 0 ? 0 : 1 + Depth(n - 1, sink);
}

TEST(Fiber, AStackServesDeepCallsAndFiberAfterFiber) {
  Fiber::Stack stack;
  EXPECT_GE(stack.size(), size_t{8} << 20);
  volatile char sink = 0;
  for (int round = 0; round < 3; ++round) {
    int depth = -1;
    Fiber fiber(stack, [&] { depth = Depth(2048, &sink); });
    fiber.Resume();
    EXPECT_TRUE(fiber.finished());
    EXPECT_EQ(depth, 2048);
  }
}

TEST(Fiber, MisuseIsAnInternalError) {
  EXPECT_THROW(Fiber::Yield(), InternalError);
  Fiber::Stack stack;
  Fiber fiber(stack, [] {});
  fiber.Resume();
  EXPECT_THROW(fiber.Resume(), InternalError);
}

}  // namespace
}  // namespace weft
