#include "weft/base/copy_bytes.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

namespace weft {
namespace {

// Every length from 0 to past the inline limit, at every alignment of source
// and destination in a 64-byte line: exactly the source's bytes land, and
// not one byte around them changes.
TEST(CopyBytesTest, CopiesExactlyTheBytesAtEveryLengthAndAlignment) {
  std::mt19937 rng(20261129);
  std::uniform_int_distribution<int> byte(0, 255);
  constexpr size_t kMax = 300, kPad = 80;
  std::vector<uint8_t> src(kMax + 2 * kPad), dst(kMax + 2 * kPad), want;
  for (size_t n = 0; n <= kMax; ++n) {
    for (size_t s_off : {0, 1, 7, 16, 33, 63}) {
      for (size_t d_off : {0, 3, 15, 32, 61}) {
        for (uint8_t& b : src) b = static_cast<uint8_t>(byte(rng));
        for (uint8_t& b : dst) b = static_cast<uint8_t>(byte(rng));
        want = dst;
        for (size_t i = 0; i < n; ++i) want[kPad + d_off + i] = src[kPad + s_off + i];
        CopyBytes(dst.data() + kPad + d_off, src.data() + kPad + s_off, n);
        ASSERT_EQ(dst, want) << "n=" << n << " src offset " << s_off << " dst offset " << d_off;
      }
    }
  }
}

// A large copy (through memcpy) between fresh buffers.
TEST(CopyBytesTest, CopiesLargeBuffers) {
  std::mt19937 rng(7);
  std::vector<uint32_t> src(100003), dst(src.size());
  for (uint32_t& v : src) v = static_cast<uint32_t>(rng());
  CopyBytes(dst.data(), src.data(), src.size() * sizeof(uint32_t));
  EXPECT_EQ(dst, src);
}

}  // namespace
}  // namespace weft
