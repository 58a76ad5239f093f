// CopyBytes: memcpy for the short rows that strided copies and collectives
// move by the hundred thousand a step (a head's 32 or 64 floats).
#pragma once

#include <cstddef>
#include <cstring>

namespace weft {

// Copies n bytes between buffers that do not overlap. 16 to 256 bytes are
// copied inline in fixed-size pieces (the compiler emits plain vector
// moves for them): a library call's dispatch costs as much as the copy at
// these sizes. Others go to memcpy.
inline void CopyBytes(void* dst, const void* src, size_t n) {
  auto* d = static_cast<std::byte*>(dst);
  const auto* s = static_cast<const std::byte*>(src);
  if (n < 16 || n > 256) {
    std::memcpy(d, s, n);
    return;
  }
  size_t i = 0;
  for (; i + 64 <= n; i += 64) std::memcpy(d + i, s + i, 64);
  for (; i + 16 <= n; i += 16) std::memcpy(d + i, s + i, 16);
  // The last piece overlaps bytes already copied: n >= 16.
  if (i < n) std::memcpy(d + n - 16, s + n - 16, 16);
}

}  // namespace weft
