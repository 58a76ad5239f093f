// CRC-32C (Castagnoli, polynomial 0x1EDC6F41, reflected; the checksum of
// iSCSI, ext4 and LevelDB): the per-tensor checksum of checkpoints.
// Crc32c("123456789") == 0xE3069283. Uses the SSE4.2 crc32 instruction where
// the CPU has it, a table otherwise; both give the same value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace weft {

// `crc` continues a running checksum (0 to start).
uint32_t Crc32c(const void* data, size_t size, uint32_t crc = 0);
inline uint32_t Crc32c(std::string_view bytes, uint32_t crc = 0) {
  return Crc32c(bytes.data(), bytes.size(), crc);
}

// "crc32c:" followed by 8 lower-case hex digits: how files record a checksum.
std::string Crc32cText(uint32_t crc);

}  // namespace weft
