// Philox4x32-10 and Threefry2x32-20 against Random123's known-answer
// vectors, and rng-bit-generator's bits against XLA's layout built
// independently (random_bits_reference.h) over shapes, element widths,
// u64[2] and u64[3] states and counters that carry.
#include "random_bits.h"

#include <gtest/gtest.h>

#include <cstring>

#include "random_bits_reference.h"

namespace weft::runtime::exec {
namespace {

using testing::RefPhilox;
using testing::RefPhiloxBits;
using testing::RefThreeFry;
using testing::RefThreeFryBits32;

TEST(RandomBitsTest, PhiloxMatchesRandom123KnownAnswers) {
  // Random123 kat_vectors: philox4x32 10 counter key -> output.
  EXPECT_EQ(Philox4x32({0, 0, 0, 0}, {0, 0}),
            (std::array<uint32_t, 4>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(Philox4x32({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (std::array<uint32_t, 4>{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(Philox4x32({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (std::array<uint32_t, 4>{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
  // The test's own implementation answers the same.
  EXPECT_EQ(RefPhilox({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (std::array<uint32_t, 4>{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(RandomBitsTest, ThreeFryMatchesRandom123KnownAnswers) {
  // Random123 kat_vectors: threefry2x32 20 counter key -> output.
  EXPECT_EQ(ThreeFry2x32({0, 0}, {0, 0}), (std::array<uint32_t, 2>{0x6b200159, 0x99ba4efe}));
  EXPECT_EQ(ThreeFry2x32({0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (std::array<uint32_t, 2>{0x1cb996fc, 0xbb002be7}));
  EXPECT_EQ(ThreeFry2x32({0x243f6a88, 0x85a308d3}, {0x13198a2e, 0x03707344}),
            (std::array<uint32_t, 2>{0xc4923a9c, 0x483df7a0}));
  EXPECT_EQ(RefThreeFry({0x243f6a88, 0x85a308d3}, {0x13198a2e, 0x03707344}),
            (std::array<uint32_t, 2>{0xc4923a9c, 0x483df7a0}));
}

std::vector<uint64_t> Generate(RngAlgorithm algorithm, const std::vector<uint64_t>& state,
                               PrimitiveType type, const std::vector<int64_t>& dims,
                               std::vector<uint64_t>* new_state) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<std::byte> bytes(static_cast<size_t>(n * ByteWidth(type)));
  new_state->assign(state.size(), 0);
  RngBitGenerator(algorithm, state, type, dims, bytes.data(), *new_state);
  std::vector<uint64_t> out;
  for (int64_t i = 0; i < n; ++i) {
    uint64_t v = 0;
    std::memcpy(&v, bytes.data() + i * ByteWidth(type), static_cast<size_t>(ByteWidth(type)));
    out.push_back(v);
  }
  return out;
}

const std::vector<std::vector<int64_t>> kShapes = {
    {}, {1}, {7}, {8}, {3, 5}, {5, 4}, {3, 5, 7}, {2, 1, 9}, {1, 3}, {9, 1, 1}, {0, 3}};

TEST(RandomBitsTest, PhiloxBitsFollowXlasLayout) {
  const std::vector<std::vector<uint64_t>> states = {
      {0x0123456789abcdefULL, 42},
      {7, 0xfffffffffffffffeULL},  // the counter's low word carries
      {0xdeadbeefULL, 0xfffffffffffffffdULL, 5},
  };
  for (const auto& state : states) {
    for (const auto& dims : kShapes) {
      for (PrimitiveType t : {PrimitiveType::kU32, PrimitiveType::kS32, PrimitiveType::kU16,
                              PrimitiveType::kU64, PrimitiveType::kS64}) {
        SCOPED_TRACE(::testing::Message() << PrimitiveTypeName(t) << " dims " << dims.size()
                                          << " state words " << state.size());
        int64_t n = 1;
        for (int64_t d : dims) n *= d;
        const bool wide = ByteWidth(t) == 8;
        std::vector<uint64_t> want_state, got_state;
        std::vector<uint64_t> want = RefPhiloxBits(state, n, wide, &want_state);
        if (t == PrimitiveType::kU16) {
          for (uint64_t& v : want) v &= 0xffff;
        }
        for (RngAlgorithm a : {RngAlgorithm::kPhilox, RngAlgorithm::kDefault}) {
          EXPECT_EQ(Generate(a, state, t, dims, &got_state), want);
          EXPECT_EQ(got_state, want_state);
        }
      }
    }
  }
}

TEST(RandomBitsTest, ThreeFryBitsFollowXlasLayout) {
  const std::vector<uint64_t> state = {0x243f6a8885a308d3ULL, 0xfffffffffffffff0ULL};
  for (const auto& dims : kShapes) {
    SCOPED_TRACE(::testing::Message() << "dims " << dims.size());
    std::vector<uint64_t> want_state, got_state;
    const std::vector<uint64_t> want32 = RefThreeFryBits32(state, dims, &want_state);
    EXPECT_EQ(Generate(RngAlgorithm::kThreeFry, state, PrimitiveType::kU32, dims, &got_state),
              want32);
    EXPECT_EQ(got_state, want_state);
    // 64-bit elements: counter + row-major index, the pair's words joined.
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    std::vector<uint64_t> want64;
    for (int64_t i = 0; i < n; ++i) {
      const uint64_t c = state[1] + static_cast<uint64_t>(i);
      const auto w = RefThreeFry({uint32_t(c), uint32_t(c >> 32)},
                                 {uint32_t(state[0]), uint32_t(state[0] >> 32)});
      want64.push_back(w[0] | uint64_t{w[1]} << 32);
    }
    EXPECT_EQ(Generate(RngAlgorithm::kThreeFry, state, PrimitiveType::kU64, dims, &got_state),
              want64);
    EXPECT_EQ(got_state, (std::vector<uint64_t>{state[0], state[1] + static_cast<uint64_t>(n)}));
  }
}

}  // namespace
}  // namespace weft::runtime::exec
