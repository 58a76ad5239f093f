// Internal to the executor: counter-based random bits (Salmon, Moraes, Dror,
// Shaw, "Parallel random numbers: as easy as 1, 2, 3", SC'11), and XLA's
// rng-bit-generator built on them, laid out element by element exactly as
// XLA's expansion does (xla/hlo/builder/lib/prng.cc,
// xla/service/rng_bit_generator_expander.cc), so a module gets XLA's bits.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "weft/hlo/instruction.h"

namespace weft::runtime::exec {

// Philox4x32 with 10 rounds: a 128-bit counter (four words, least
// significant first) under a 64-bit key (two words).
std::array<uint32_t, 4> Philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);
// Threefry2x32 with 20 rounds: a 64-bit counter under a 64-bit key.
std::array<uint32_t, 2> ThreeFry2x32(std::array<uint32_t, 2> counter, std::array<uint32_t, 2> key);

// One tile of a random value: the value's dims, the tile's start in it and
// the tile's dims (a padded tile may reach past the value's end).
struct RngTile {
  std::span<const int64_t> global_dims, start, dims;
};

// The elements of one tile, row-major over `dims`, each at `start` + its
// index in the value of `global` dims: calls fn(local, global) with the
// element's row-major numbers in the tile and in the value, or global -1 for
// an element past the value's end (a padded tile's padding).
template <typename Fn>
void ForEachTileElement(std::span<const int64_t> global, std::span<const int64_t> start,
                        std::span<const int64_t> dims, Fn&& fn) {
  const size_t rank = dims.size();
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<int64_t> index(rank, 0);
  for (int64_t e = 0; e < n; ++e) {
    int64_t g = 0;
    bool inside = true;
    for (size_t d = 0; d < rank; ++d) {
      const int64_t at = start[d] + index[d];
      inside = inside && at < global[d];
      g = g * global[d] + at;
    }
    fn(e, inside ? g : -1);
    for (int64_t d = static_cast<int64_t>(rank) - 1; d >= 0; --d) {
      if (++index[d] < dims[d]) break;
      index[d] = 0;
    }
  }
}

// rng-bit-generator: fills `out` (row-major over tile.dims, element type
// `type`: u16, u32, s32, u64 or s64) with the elements the unsharded
// instruction makes at the tile's positions of a value of tile.global_dims
// (0 past its end), from `state` (u64[2], or u64[3] for Philox), and writes
// the state after the whole value to `new_state` (as many words): every
// tile of a sharded value has the unsharded value's bits. kDefault is
// Philox, as on XLA's CPU and GPU.
void RngBitGenerator(RngAlgorithm algorithm, std::span<const uint64_t> state, PrimitiveType type,
                     const RngTile& tile, void* out, std::span<uint64_t> new_state);
// The whole value (one tile of `dims` at 0).
void RngBitGenerator(RngAlgorithm algorithm, std::span<const uint64_t> state, PrimitiveType type,
                     std::span<const int64_t> dims, void* out, std::span<uint64_t> new_state);

}  // namespace weft::runtime::exec
