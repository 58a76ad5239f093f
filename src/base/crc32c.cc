#include "weft/base/crc32c.h"

#include <fmt/core.h>

#include <array>
#include <cstring>

namespace weft {
namespace {

constexpr uint32_t kReflectedPolynomial = 0x82F63B78u;

// Slice-by-8 tables: table[k][b] is the CRC of byte b followed by k zero bytes.
struct Tables {
  std::array<std::array<uint32_t, 256>, 8> t{};
  constexpr Tables() {
    for (uint32_t b = 0; b < 256; ++b) {
      uint32_t c = b;
      for (int i = 0; i < 8; ++i) c = (c >> 1) ^ ((c & 1u) ? kReflectedPolynomial : 0u);
      t[0][b] = c;
    }
    for (uint32_t b = 0; b < 256; ++b) {
      for (int k = 1; k < 8; ++k) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFFu];
    }
  }
};
constexpr Tables kTables;

uint32_t TableCrc(const unsigned char* p, size_t n, uint32_t c) {
  const auto& t = kTables.t;
  while (n >= 8) {
    uint64_t word = 0;
    std::memcpy(&word, p, 8);  // little-endian, as on every machine weft runs on
    word ^= c;
    c = t[7][word & 0xFF] ^ t[6][(word >> 8) & 0xFF] ^ t[5][(word >> 16) & 0xFF] ^
        t[4][(word >> 24) & 0xFF] ^ t[3][(word >> 32) & 0xFF] ^ t[2][(word >> 40) & 0xFF] ^
        t[1][(word >> 48) & 0xFF] ^ t[0][word >> 56];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) c = (c >> 8) ^ t[0][(c ^ *p++) & 0xFFu];
  return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t HardwareCrc(const unsigned char* p, size_t n,
                                                       uint32_t c) {
  uint64_t c64 = c;
  while (n >= 8) {
    uint64_t word = 0;
    std::memcpy(&word, p, 8);
    c64 = __builtin_ia32_crc32di(c64, word);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c64);
  while (n-- > 0) c32 = __builtin_ia32_crc32qi(c32, *p++);
  return c32;
}

bool HasSse42() {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}
#endif

}  // namespace

uint32_t Crc32c(const void* data, size_t size, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;
#if defined(__x86_64__)
  c = HasSse42() ? HardwareCrc(p, size, c) : TableCrc(p, size, c);
#else
  c = TableCrc(p, size, c);
#endif
  return ~c;
}

namespace base {
// The table path alone, for the test that both paths agree.
uint32_t Crc32cPortable(const void* data, size_t size, uint32_t crc) {
  return ~TableCrc(static_cast<const unsigned char*>(data), size, ~crc);
}
}  // namespace base

std::string Crc32cText(uint32_t crc) { return fmt::format("crc32c:{:08x}", crc); }

}  // namespace weft
