#include "weft/base/crc32c.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

namespace weft {
namespace base {
uint32_t Crc32cPortable(const void* data, size_t size, uint32_t crc);
}
namespace {

// Bit by bit, straight from the definition (reflected, init and xor-out ~0).
uint32_t BitwiseCrc32c(std::string_view bytes) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : bytes) {
    c ^= b;
    for (int i = 0; i < 8; ++i) c = (c >> 1) ^ ((c & 1u) ? 0x82F63B78u : 0u);
  }
  return ~c;
}

std::string RandomBytes(size_t n, std::mt19937_64& rng) {
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng() & 0xFF);
  return s;
}

TEST(Crc32cTest, CheckValueOfTheStandard) {
  EXPECT_EQ(Crc32c(std::string_view("123456789")), 0xE3069283u);
  EXPECT_EQ(Crc32c(std::string_view("")), 0u);
}

TEST(Crc32cTest, AgreesWithTheBitwiseDefinitionAtEveryLengthAndAlignment) {
  std::mt19937_64 rng(std::random_device{}());
  const std::string data = RandomBytes(300, rng);
  for (size_t offset = 0; offset < 9; ++offset) {
    for (size_t n = 0; offset + n <= data.size(); n += 1 + n / 7) {
      const std::string_view piece(data.data() + offset, n);
      const uint32_t expected = BitwiseCrc32c(piece);
      ASSERT_EQ(Crc32c(piece), expected) << "offset " << offset << " length " << n;
      ASSERT_EQ(base::Crc32cPortable(piece.data(), piece.size(), 0), expected);
    }
  }
}

TEST(Crc32cTest, ContinuesARunningChecksum) {
  std::mt19937_64 rng(std::random_device{}());
  const std::string data = RandomBytes(1000 + rng() % 1000, rng);
  const size_t cut = rng() % data.size();
  const std::string_view all(data);
  EXPECT_EQ(Crc32c(all.substr(cut), Crc32c(all.substr(0, cut))), Crc32c(all));
}

TEST(Crc32cTest, AnyFlippedBitChangesIt) {
  std::mt19937_64 rng(std::random_device{}());
  std::string data = RandomBytes(4096, rng);
  const uint32_t before = Crc32c(data);
  for (int trial = 0; trial < 64; ++trial) {
    const size_t bit = rng() % (data.size() * 8);
    data[bit / 8] ^= static_cast<char>(1 << (bit % 8));
    EXPECT_NE(Crc32c(data), before) << "bit " << bit;
    data[bit / 8] ^= static_cast<char>(1 << (bit % 8));
  }
  EXPECT_EQ(Crc32c(data), before);
}

TEST(Crc32cTest, TextForm) { EXPECT_EQ(Crc32cText(0xE3069283u), "crc32c:e3069283"); }

}  // namespace
}  // namespace weft
