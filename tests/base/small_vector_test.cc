// SmallVector behaves as std::vector does: a long random sequence of the
// operations weft uses, applied to both, leaves them equal at every step,
// across the move from inline storage to the heap and back (clear, then
// copies of short vectors); copies and moves are independent of their
// source, inside and outside the inline capacity; ranges that lie in the
// vector itself can be inserted and assigned.
#include "weft/base/small_vector.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace weft {
namespace {

using Small = SmallVector<int64_t, 4>;

void ExpectSame(const Small& s, const std::vector<int64_t>& v) {
  ASSERT_EQ(s.size(), v.size());
  EXPECT_EQ(s.empty(), v.empty());
  EXPECT_TRUE(s == v);
  EXPECT_EQ(std::vector<int64_t>(s), v);
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(s[i], v[i]) << i;
}

TEST(SmallVector, RandomOperationsMatchStdVector) {
  std::mt19937 rng(std::random_device{}());
  auto pick = [&](int64_t n) { return std::uniform_int_distribution<int64_t>(0, n - 1)(rng); };
  Small s;
  std::vector<int64_t> v;
  for (int step = 0; step < 4000; ++step) {
    const int64_t value = pick(1000) - 500;
    switch (pick(10)) {
      case 0:
      case 1:
        s.push_back(value);
        v.push_back(value);
        break;
      case 2:
        if (!v.empty()) {
          s.pop_back();
          v.pop_back();
        }
        break;
      case 3: {
        const int64_t at = pick(static_cast<int64_t>(v.size()) + 1);
        s.insert(s.begin() + at, value);
        v.insert(v.begin() + at, value);
        break;
      }
      case 4:
        if (!v.empty()) {
          const int64_t at = pick(static_cast<int64_t>(v.size()));
          const int64_t n = pick(static_cast<int64_t>(v.size()) - at + 1);
          s.erase(s.begin() + at, s.begin() + at + n);
          v.erase(v.begin() + at, v.begin() + at + n);
        }
        break;
      case 5: {
        const size_t n = static_cast<size_t>(pick(12));
        if (!v.empty() && pick(2) == 0) {  // grown with one of its own elements
          const int64_t own = v.back();
          s.resize(n, s.back());
          v.resize(n, own);
        } else {
          s.resize(n, value);
          v.resize(n, value);
        }
        break;
      }
      case 6: {  // a copy of the vector's own front half, inserted into it
        const int64_t half = static_cast<int64_t>(v.size()) / 2;
        const int64_t at = pick(static_cast<int64_t>(v.size()) + 1);
        s.insert(s.begin() + at, s.begin(), s.begin() + half);
        const std::vector<int64_t> front(v.begin(), v.begin() + half);
        v.insert(v.begin() + at, front.begin(), front.end());
        break;
      }
      case 7: {  // assigned from its own back half
        const int64_t half = static_cast<int64_t>(v.size()) / 2;
        s.assign(s.begin() + half, s.end());
        v.assign(v.begin() + half, v.end());
        break;
      }
      case 8: {  // round trips through a copy and a move
        Small copy = s;
        Small moved = std::move(copy);
        s = moved;
        break;
      }
      default:
        if (pick(8) == 0) {
          s.clear();
          v.clear();
        }
        break;
    }
    ExpectSame(s, v);
    if (::testing::Test::HasFailure()) FAIL() << "at step " << step;
  }
}

TEST(SmallVector, CopiesAndMovesAreIndependentOfTheirSource) {
  for (size_t n : {size_t{0}, size_t{3}, size_t{4}, size_t{5}, size_t{40}}) {
    Small a;
    for (size_t i = 0; i < n; ++i) a.push_back(static_cast<int64_t>(i * i) + 7);
    const std::vector<int64_t> want(a);
    Small copy(a);
    Small assigned;
    assigned = a;
    if (n > 0) a[0] = -1;  // the copies keep their own elements
    ExpectSame(copy, want);
    ExpectSame(assigned, want);
    Small moved(std::move(copy));
    ExpectSame(moved, want);
    EXPECT_TRUE(copy.empty());  // NOLINT(bugprone-use-after-move): the moved-from state
    copy.push_back(3);          // and it is usable again
    ExpectSame(copy, {3});
    Small target = {9, 9, 9, 9, 9, 9};  // on the heap before the move
    target = std::move(moved);
    ExpectSame(target, want);
  }
}

TEST(SmallVector, ConvertsAndCompares) {
  const Small s = {4, 256, 192};
  const std::span<const int64_t> view = s;
  EXPECT_EQ(view.size(), 3u);
  EXPECT_EQ(view[1], 256);
  const Small from_vector = std::vector<int64_t>{4, 256, 192};
  EXPECT_EQ(from_vector, s);
  EXPECT_LT(Small({4, 255, 999}), s);
  EXPECT_LT(Small({4, 256}), s);
  EXPECT_NE(Small({4, 256, 193}), s);
  EXPECT_EQ(Small(3, 7), Small({7, 7, 7}));
  EXPECT_EQ(s.front(), 4);
  EXPECT_EQ(s.back(), 192);
  EXPECT_THROW(s.at(3), std::out_of_range);
  EXPECT_EQ(std::vector<int64_t>(s.rbegin(), s.rend()), (std::vector<int64_t>{192, 256, 4}));
}

}  // namespace
}  // namespace weft
