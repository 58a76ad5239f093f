// Internal to the executor: counter-based random bits (Salmon, Moraes, Dror,
// Shaw, "Parallel random numbers: as easy as 1, 2, 3", SC'11), and XLA's
// rng-bit-generator built on them, laid out element by element exactly as
// XLA's expansion does (xla/hlo/builder/lib/prng.cc,
// xla/service/rng_bit_generator_expander.cc), so a module gets XLA's bits.
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "weft/hlo/instruction.h"

namespace weft::runtime::exec {

// Philox4x32 with 10 rounds: a 128-bit counter (four words, least
// significant first) under a 64-bit key (two words).
std::array<uint32_t, 4> Philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);
// Threefry2x32 with 20 rounds: a 64-bit counter under a 64-bit key.
std::array<uint32_t, 2> ThreeFry2x32(std::array<uint32_t, 2> counter, std::array<uint32_t, 2> key);

// rng-bit-generator: fills the `count` elements of `out` (row-major,
// element type `type`: u16, u32, s32, u64 or s64; `dims` its dims) from
// `state` (u64[2], or u64[3] for Philox) and writes the state after it to
// `new_state` (as many words). kDefault is Philox, as on XLA's CPU and GPU.
void RngBitGenerator(RngAlgorithm algorithm, std::span<const uint64_t> state, PrimitiveType type,
                     std::span<const int64_t> dims, void* out, std::span<uint64_t> new_state);

}  // namespace weft::runtime::exec
