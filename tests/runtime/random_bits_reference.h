// Test references for rng-bit-generator, written independently of
// src/runtime/random_bits.cc: Philox4x32-10 and Threefry2x32-20 from the
// constants published with Random123 (Salmon et al., SC'11), and XLA's
// layout of their words as XLA's expansion builds it with array ops
// (iota counters, concatenate, reshape, slice) rather than by index
// arithmetic.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace weft::runtime::testing {

inline std::array<uint32_t, 4> RefPhilox(std::array<uint32_t, 4> ctr, std::array<uint32_t, 2> key) {
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {  // the key schedule: Weyl increments before rounds 2..10
      key[0] += 0x9E3779B9u;
      key[1] += 0xBB67AE85u;
    }
    const uint64_t a = uint64_t{0xD2511F53u} * ctr[0];
    const uint64_t b = uint64_t{0xCD9E8D57u} * ctr[2];
    const uint32_t hi_a = static_cast<uint32_t>(a >> 32), lo_a = static_cast<uint32_t>(a);
    const uint32_t hi_b = static_cast<uint32_t>(b >> 32), lo_b = static_cast<uint32_t>(b);
    ctr = {hi_b ^ ctr[1] ^ key[0], lo_b, hi_a ^ ctr[3] ^ key[1], lo_a};
  }
  return ctr;
}

inline std::array<uint32_t, 2> RefThreeFry(std::array<uint32_t, 2> ctr,
                                           std::array<uint32_t, 2> key) {
  const int rot[8] = {13, 15, 26, 6, 17, 29, 16, 24};
  const uint32_t k[3] = {key[0], key[1], 0x1BD11BDAu ^ key[0] ^ key[1]};
  uint32_t x[2] = {ctr[0] + k[0], ctr[1] + k[1]};
  for (int r = 0; r < 20; ++r) {
    x[0] += x[1];
    const int s = rot[r % 8];
    x[1] = (x[1] << s) | (x[1] >> (32 - s));
    x[1] ^= x[0];
    if (r % 4 == 3) {  // key injection s = 1..5
      const uint32_t inj = static_cast<uint32_t>(r / 4 + 1);
      x[0] += k[inj % 3];
      x[1] += k[(inj + 1) % 3] + inj;
    }
  }
  return {x[0], x[1]};
}

// XLA's Philox rng-bit-generator for 32-bit (`wide` false) or 64-bit
// elements: n values and the state after them.
inline std::vector<uint64_t> RefPhiloxBits(const std::vector<uint64_t>& state, int64_t n, bool wide,
                                           std::vector<uint64_t>* new_state) {
  const uint64_t key = state[0];
  // GetPhiloxStateOp: u64[3] -> state[1:3]; u64[2] -> reverse(state).
  const uint64_t lo = state[1], hi = state.size() == 3 ? state[2] : state[0];
  const int64_t words = wide ? 2 * n : n;
  const int64_t blocks = (words + 3) / 4;
  // One column per Philox output word, `blocks` rows (the iota counters).
  std::vector<std::vector<uint32_t>> column(4);
  for (int64_t i = 0; i < blocks; ++i) {
    const uint64_t l = lo + static_cast<uint64_t>(i);
    const uint64_t h = l < lo ? hi + 1 : hi;
    const auto w = RefPhilox({uint32_t(l), uint32_t(l >> 32), uint32_t(h), uint32_t(h >> 32)},
                             {uint32_t(key), uint32_t(key >> 32)});
    for (int j = 0; j < 4; ++j) column[j].push_back(w[j]);
  }
  std::vector<uint64_t> out;
  if (!wide) {  // concat([blocks,1] x 4, dim 1), reshape, slice
    for (int64_t i = 0; i < blocks; ++i) {
      for (int j = 0; j < 4; ++j) out.push_back(column[j][i]);
    }
  } else {  // two u64 columns from word pairs, interleaved the same way
    for (int64_t i = 0; i < blocks; ++i) {
      out.push_back(column[0][i] | uint64_t{column[1][i]} << 32);
      out.push_back(column[2][i] | uint64_t{column[3][i]} << 32);
    }
  }
  out.resize(static_cast<size_t>(n));
  const uint64_t l = lo + static_cast<uint64_t>(blocks);
  *new_state = {key, l};
  if (state.size() == 3) new_state->push_back(l < lo ? hi + 1 : hi);
  return out;
}

// XLA's ThreeFry rng-bit-generator with 32-bit elements over `dims`:
// SplitShapeIntoHalves, counters over the halved shape, the two output
// words concatenated along a new dim after the split one, reshaped, sliced.
inline std::vector<uint64_t> RefThreeFryBits32(const std::vector<uint64_t>& state,
                                               const std::vector<int64_t>& dims,
                                               std::vector<uint64_t>* new_state) {
  const std::array<uint32_t, 2> key = {uint32_t(state[0]), uint32_t(state[0] >> 32)};
  auto pair = [&](uint64_t c) { return RefThreeFry({uint32_t(c), uint32_t(c >> 32)}, key); };
  if (dims.empty()) {
    *new_state = {state[0], state[1] + 1};
    return {pair(state[1])[0]};
  }
  int64_t split = -1;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (split < 0 && dims[d] % 2 == 0) split = static_cast<int64_t>(d);
  }
  if (split < 0) {
    split = 0;
    for (size_t d = 1; d < dims.size(); ++d) {
      if (dims[d] > dims[split]) split = static_cast<int64_t>(d);
    }
  }
  // Halved shape [..., ceil(d/2), 1, ...] -> concat shape [..., ceil(d/2), 2, ...].
  std::vector<int64_t> concat;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (static_cast<int64_t>(d) == split) {
      concat.push_back((dims[d] + 1) / 2);
      concat.push_back(2);
    } else {
      concat.push_back(dims[d]);
    }
  }
  int64_t total = 1, half = 1;
  for (int64_t c : concat) total *= c;
  half = total / 2;
  std::vector<uint64_t> cat(static_cast<size_t>(total));
  for (int64_t flat = 0; flat < total; ++flat) {
    // Unravel over the concat shape; the half index drops the size-2 dim.
    int64_t rest = flat, h = 0, stride = 1, member = 0;
    for (int64_t d = static_cast<int64_t>(concat.size()) - 1; d >= 0; --d) {
      const int64_t i = rest % concat[d];
      rest /= concat[d];
      if (d == split + 1) {
        member = i;
      } else {
        h += i * stride;
        stride *= concat[d];
      }
    }
    cat[flat] = pair(state[1] + static_cast<uint64_t>(h))[member];
  }
  // The reshape keeps the order; the slice drops the last index along an odd split dim.
  std::vector<int64_t> full = dims;
  full[split] = concat[split] * 2;
  std::vector<uint64_t> out;
  for (int64_t flat = 0; flat < total; ++flat) {
    int64_t rest = flat;
    bool keep = true;
    for (int64_t d = static_cast<int64_t>(full.size()) - 1; d >= 0; --d) {
      keep = keep && rest % full[d] < dims[d];
      rest /= full[d];
    }
    if (keep) out.push_back(cat[flat]);
  }
  *new_state = {state[0], state[1] + static_cast<uint64_t>(half)};
  return out;
}

}  // namespace weft::runtime::testing
