#include "random_bits.h"

#include <algorithm>
#include <vector>

#include "weft/base/algorithm.h"
#include "weft/base/error.h"

namespace weft::runtime::exec {
namespace {

uint32_t Lo(uint64_t v) { return static_cast<uint32_t>(v); }
uint32_t Hi(uint64_t v) { return static_cast<uint32_t>(v >> 32); }
uint64_t Join(uint32_t lo, uint32_t hi) { return lo | static_cast<uint64_t>(hi) << 32; }
uint32_t RotateLeft(uint32_t v, int bits) { return v << bits | v >> (32 - bits); }

// Writes the 32 random bits `bits` as element `i` of `type` (u16: the low
// half, as XLA converts its u32 bits down).
void Store32(PrimitiveType type, void* out, int64_t i, uint32_t bits) {
  if (type == PrimitiveType::kU16) {
    static_cast<uint16_t*>(out)[i] = static_cast<uint16_t>(bits);
  } else {
    static_cast<uint32_t*>(out)[i] = bits;  // u32, s32: the same bits
  }
}

// XLA's Philox: the key is state[0]; the 128-bit counter is (state[1],
// state[2]) (low, high), or for a u64[2] state (state[1], state[0]); block b
// encrypts counter + b. 32-bit elements take one word each in block order,
// 64-bit elements two (words 0-1, then 2-3).
void PhiloxBits(std::span<const uint64_t> state, PrimitiveType type, int64_t total,
                const RngTile& tile, void* out, std::span<uint64_t> new_state) {
  const std::array<uint32_t, 2> key = {Lo(state[0]), Hi(state[0])};
  const uint64_t low = state[1], high = state.size() >= 3 ? state[2] : state[0];
  const bool wide = ByteWidth(type) == 8;
  const int64_t per_block = wide ? 2 : 4;
  auto counter = [&](uint64_t b) {
    const uint64_t l = low + b;
    return std::pair<uint64_t, uint64_t>{l, l < low ? high + 1 : high};
  };
  int64_t cached = -1;
  std::array<uint32_t, 4> w{};
  ForEachTileElement(tile.global_dims, tile.start, tile.dims, [&](int64_t e, int64_t g) {
    if (g < 0) {  // padding
      wide ? void(static_cast<uint64_t*>(out)[e] = 0) : Store32(type, out, e, 0);
      return;
    }
    const int64_t b = g / per_block, j = g % per_block;
    if (b != cached) {
      const auto [l, h] = counter(static_cast<uint64_t>(b));
      w = Philox4x32({Lo(l), Hi(l), Lo(h), Hi(h)}, key);
      cached = b;
    }
    if (wide) {
      static_cast<uint64_t*>(out)[e] = Join(w[2 * j], w[2 * j + 1]);
    } else {
      Store32(type, out, e, w[j]);
    }
  });
  const auto [l, h] = counter(static_cast<uint64_t>((total + per_block - 1) / per_block));
  new_state[0] = state[0];
  new_state[1] = l;
  if (state.size() >= 3) new_state[2] = h;
}

// XLA's ThreeFry: the key is state[0], the counter state[1]. 64-bit elements
// encrypt counter + their row-major index. 32-bit elements split the shape
// in halves along its first even dim (else its first largest): the element
// at index i there takes the first or second word (i % 2) of the pair made
// at index i / 2, the pairs numbered row-major over the halved shape.
void ThreeFryBits(std::span<const uint64_t> state, PrimitiveType type, int64_t total,
                  const RngTile& tile, void* out, std::span<uint64_t> new_state) {
  const std::array<uint32_t, 2> key = {Lo(state[0]), Hi(state[0])};
  const uint64_t start = state[1];
  auto pair = [&](uint64_t index) {
    const uint64_t c = start + index;
    return ThreeFry2x32({Lo(c), Hi(c)}, key);
  };
  new_state[0] = state[0];
  const std::span<const int64_t> dims = tile.global_dims;
  if (ByteWidth(type) == 8) {
    ForEachTileElement(dims, tile.start, tile.dims, [&](int64_t e, int64_t g) {
      const std::array<uint32_t, 2> w = g < 0 ? std::array<uint32_t, 2>{} : pair(g);
      static_cast<uint64_t*>(out)[e] = Join(w[0], w[1]);
    });
    new_state[1] = start + static_cast<uint64_t>(total);
    return;
  }
  if (dims.empty()) {  // a scalar: the first word of pair 0
    Store32(type, out, 0, pair(0)[0]);
    new_state[1] = start + 1;
    return;
  }
  int64_t split = -1;
  for (size_t d = 0; d < dims.size() && split < 0; ++d) {
    if (dims[d] % 2 == 0) split = static_cast<int64_t>(d);
  }
  if (split < 0) split = std::max_element(dims.begin(), dims.end()) - dims.begin();
  std::vector<int64_t> half(dims.begin(), dims.end());
  half[split] = (dims[split] + 1) / 2;
  int64_t half_count = 1;
  for (int64_t d : half) half_count *= d;
  // The pair of a global element: its index in the halved shape, and which
  // word (its index along the split dim, mod 2).
  std::vector<int64_t> index(dims.size());
  ForEachTileElement(dims, tile.start, tile.dims, [&](int64_t e, int64_t g) {
    if (g < 0) return Store32(type, out, e, 0);
    for (int64_t d = static_cast<int64_t>(dims.size()) - 1; d >= 0; --d) {
      index[d] = g % dims[d];
      g /= dims[d];
    }
    int64_t h = 0;
    for (size_t d = 0; d < dims.size(); ++d) {
      h = h * half[d] + (static_cast<int64_t>(d) == split ? index[d] / 2 : index[d]);
    }
    Store32(type, out, e, pair(static_cast<uint64_t>(h))[index[split] % 2]);
  });
  new_state[1] = start + static_cast<uint64_t>(half_count);
}

}  // namespace

std::array<uint32_t, 4> Philox4x32(std::array<uint32_t, 4> x, std::array<uint32_t, 2> key) {
  constexpr uint64_t kMulA = 0xD2511F53, kMulB = 0xCD9E8D57;
  constexpr uint32_t kBumpA = 0x9E3779B9, kBumpB = 0xBB67AE85;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = kMulA * x[0], p1 = kMulB * x[2];
    x = {Hi(p1) ^ x[1] ^ key[0], Lo(p1), Hi(p0) ^ x[3] ^ key[1], Lo(p0)};
    key = {key[0] + kBumpA, key[1] + kBumpB};
  }
  return x;
}

std::array<uint32_t, 2> ThreeFry2x32(std::array<uint32_t, 2> c, std::array<uint32_t, 2> key) {
  constexpr int kRotations[8] = {13, 15, 26, 6, 17, 29, 16, 24};
  const uint32_t ks[3] = {key[0], key[1], 0x1BD11BDA ^ key[0] ^ key[1]};
  uint32_t x0 = c[0] + ks[0], x1 = c[1] + ks[1];
  for (uint32_t group = 1; group <= 5; ++group) {
    for (int j = 0; j < 4; ++j) {
      x0 += x1;
      x1 = RotateLeft(x1, kRotations[((group - 1) % 2) * 4 + j]);
      x1 ^= x0;
    }
    x0 += ks[group % 3];
    x1 += ks[(group + 1) % 3] + group;
  }
  return {x0, x1};
}

void RngBitGenerator(RngAlgorithm algorithm, std::span<const uint64_t> state, PrimitiveType type,
                     const RngTile& tile, void* out, std::span<uint64_t> new_state) {
  WEFT_INTERNAL_CHECK(state.size() >= 2 && new_state.size() == state.size(),
                      "rng-bit-generator state of {} words", state.size());
  WEFT_INTERNAL_CHECK(
      tile.start.size() == tile.global_dims.size() && tile.dims.size() == tile.global_dims.size(),
      "rng-bit-generator tile of rank {} in a value of rank {}", tile.dims.size(),
      tile.global_dims.size());
  int64_t total = 1;
  for (int64_t d : tile.global_dims) total *= d;
  if (algorithm == RngAlgorithm::kThreeFry) {
    return ThreeFryBits(state, type, total, tile, out, new_state);
  }
  PhiloxBits(state, type, total, tile, out, new_state);
}

void RngBitGenerator(RngAlgorithm algorithm, std::span<const uint64_t> state, PrimitiveType type,
                     std::span<const int64_t> dims, void* out, std::span<uint64_t> new_state) {
  const std::vector<int64_t> start(dims.size(), 0);
  RngBitGenerator(algorithm, state, type, RngTile{dims, start, dims}, out, new_state);
}

}  // namespace weft::runtime::exec
