// FunctionRef calls the callable it refers to, without copying it: captures
// by value and by reference are seen as they are when it is called, return
// values come back, a mutable lambda keeps its state between calls, and a
// std::function or a plain function's address binds too.
#include "weft/base/function_ref.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace weft {
namespace {

int64_t Apply(FunctionRef<int64_t(int64_t, int)> f, int64_t a, int b) { return f(a, b); }

int64_t Twice(int64_t a, int b) { return 2 * a + b; }

TEST(FunctionRef, CallsLambdasWithCapturesWithoutCopyingThem) {
  std::vector<int64_t> seen;
  const std::string label = "x";
  const int64_t base = 40;
  const int64_t r = Apply(
      [&seen, &label, base](int64_t a, int b) {
        seen.push_back(a);
        return base + a * b + static_cast<int64_t>(label.size());
      },
      3, 4);
  EXPECT_EQ(r, 40 + 12 + 1);
  EXPECT_EQ(seen, std::vector<int64_t>{3});

  int calls = 0;
  auto counter = [calls](int64_t a, int) mutable { return a + ++calls; };
  FunctionRef<int64_t(int64_t, int)> ref(counter);
  EXPECT_EQ(ref(10, 0), 11);
  EXPECT_EQ(ref(10, 0), 12);  // the referred lambda's own state
  EXPECT_EQ(counter(10, 0), 13);
}

TEST(FunctionRef, BindsStdFunctionsAndPlainFunctions) {
  const std::function<int64_t(int64_t, int)> f = [](int64_t a, int b) { return a - b; };
  EXPECT_EQ(Apply(f, 9, 4), 5);
  EXPECT_EQ(Apply(&Twice, 5, 1), 11);
  // A void callable with a conversion of its arguments.
  double sum = 0;
  auto accumulate = [&sum](double a, double b) { sum += a + b; };
  FunctionRef<void(int64_t, int)> add(accumulate);
  add(2, 3);
  add(1, 1);
  EXPECT_EQ(sum, 7.0);
}

}  // namespace
}  // namespace weft
