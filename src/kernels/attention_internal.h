// Shared machinery of the attention forward and backward kernels: one call's
// sizes, its packed operands, and the scoring of one (q block, kv block) tile.
// Internal to the kernels module.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>

#include "weft/base/aligned.h"
#include "weft/base/bfloat16.h"
#include "weft/kernels/attention.h"
#include "weft/kernels/attention_config.h"
#include "weft/kernels/simd.h"
#include "workspace.h"

namespace weft::kernels::internal {

// Operands are packed once per call so that every GEMM sees the layout its
// micro-kernel wants: column counts padded to simd::kPadN with zeros.
// Extra memory is O(S * D): never O(Sq * Skv).
// The forward (backward = false) or backward of one call: validates, then
// chooses the kernel tiles (attention_config.h) and the instruction set.
struct Problem {
  Problem(const AttentionDims& dims, const AttentionOptions& options, PrimitiveType dtype,
          bool backward);

  AttentionDims d;
  float scale = 1;
  const ScoreMod* score_mod = nullptr;
  const BlockMask* mask = nullptr;  // never null: `dense` when no mask was given
  std::optional<BlockMask> dense;
  const simd::Primitives& simd;
  // bfloat16 call: the GEMMs take bf16 operands (simd gemm_bf16, pair-packed
  // B panels) and accumulate in float32; see ScoreTile.
  bool use_bf16 = false;
  ChosenTiles chosen;        // the tiles and where they came from
  int64_t group = 1;         // query heads per kv head
  int64_t bq = 0, bk = 0;    // kernel tile sizes (divide the mask's blocks)
  int64_t rq = 1, rk = 1;    // tiles per mask block (rows, columns)
  int64_t bkp = 0;           // bk padded to kPadN
  int64_t dp = 0, dvp = 0;   // D and Dv padded to kPadN
  int64_t nqb = 0, nkb = 0;  // number of query / kv tiles

  // Number of queries / keys in tile qb / kb (the last may be short).
  int64_t QRows(int64_t qb) const;
  int64_t KRows(int64_t kb) const;
  const float* QHead(const float* q, int64_t b, int64_t h) const {
    return q + (b * d.q_heads + h) * d.q_len * d.head_dim;
  }

  // q * scale, [B, Hq, Sq, D]: scores come out of one GEMM already scaled
  // (no extra pass over each tile), identically in forward and backward.
  WorkspaceBuffer<float> q_scaled;
  template <typename T>
  void ScaleQ(const T* q);
  const float* QScaledRows(int64_t b, int64_t h, int64_t qb) const {
    return q_scaled.data() + ((b * d.q_heads + h) * d.q_len + qb * bq) * d.head_dim;
  }

  // K^T panels, one per (b, kv head, kv block): chunked [D x bkp] matrices
  // (see Chunked below), so Q * panel gives a score tile.
  WorkspaceBuffer<float> kt;
  template <typename T>
  void PackKt(const T* k);

  // bfloat16 calls instead: Q as given (scores are scaled after the GEMM:
  // q * scale would round to bf16 once more), and K^T as pair-packed
  // [D x bkp] panels, one per (b, kv head, kv block).
  const bf16* q_bf16 = nullptr;
  WorkspaceBuffer<uint16_t> kt_pairs;
  void PackKtPairs(const bf16* q, const bf16* k);
  int64_t KtPairsPanelSize() const;
};

// dst[0..n) = src as float32 (a copy, or the bfloat16 conversion).
inline void ToFloats(const simd::Primitives&, const float* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}
inline void ToFloats(const simd::Primitives& s, const bf16* src, float* dst, int64_t n) {
  s.bf16_to_f32(reinterpret_cast<const uint16_t*>(src), dst, n);
}
inline void FromFloats(const simd::Primitives&, const float* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}
inline void FromFloats(const simd::Primitives& s, const float* src, bf16* dst, int64_t n) {
  s.f32_to_bf16(src, reinterpret_cast<uint16_t*>(dst), n);
}

// A GEMM B operand (simd::Primitives::gemm): element (k, n) at
// data[(n / kPadN) * chunk_stride + k * ldb + n % kPadN].
struct BOperand {
  const float* data;
  int64_t ldb;
  int64_t chunk_stride;
};

// A "chunked" matrix [rows x PadN(cols)]: chunk c (columns c*kPadN ..) is a
// contiguous [rows][kPadN] block, so the GEMM streams each chunk through
// consecutive cache lines (a row-major B with a 256-byte or 512-byte row
// stride maps a chunk onto a few cache sets only).
struct Chunked {
  float* data;
  int64_t rows;
  // Rows r0.. as a GEMM B operand.
  BOperand Rows(int64_t r0) const {
    return BOperand{data + r0 * simd::kPadN, simd::kPadN, rows * simd::kPadN};
  }
  // Writes x [n x cols] (leading dim ld) into rows r0 .. r0 + n, zero-filling
  // the padded columns up to padded_cols. T is float or bf16 (converted).
  template <typename T>
  void SetRows(const simd::Primitives& s, int64_t r0, const T* x, int64_t n, int64_t cols,
               int64_t ld, int64_t padded_cols) const;
  // Writes x^T into columns 0 .. n of rows 0 .. cols (x is [n x cols] with
  // leading dim ld), zero-filling columns n .. padded_cols.
  template <typename T>
  void SetTransposed(const T* x, int64_t n, int64_t cols, int64_t ld, int64_t padded_cols) const;
};

// A pair-packed GEMM B operand [rows x padded cols] of bfloat16 (see
// simd::Primitives::gemm_bf16): chunk c holds columns c*kPadN .. as
// ceil(rows/2) rows of kPadN (k, k+1) pairs; rows past the data are zero.
struct PairPanel {
  uint16_t* data;
  int64_t rows;
  int64_t ChunkStride() const { return simd::PairChunkSize(rows); }
  // Elements of a panel with `rows` rows and padded_cols columns.
  static int64_t Size(int64_t rows, int64_t padded_cols) {
    return padded_cols / simd::kPadN * simd::PairChunkSize(rows);
  }
  // Writes x [n x cols] (leading dim ld) as rows 0 .. n, zero-filling rows
  // n .. rows and columns cols .. padded_cols.
  void SetRows(const bf16* x, int64_t n, int64_t cols, int64_t ld, int64_t padded_cols) const;
  // Writes x^T (x is [n x cols], leading dim ld) as rows 0 .. cols and
  // columns 0 .. n, zero-filling columns n .. padded_cols.
  void SetTransposed(const bf16* x, int64_t n, int64_t cols, int64_t ld, int64_t padded_cols) const;
};

inline const uint16_t* Bits(const bf16* x) { return reinterpret_cast<const uint16_t*>(x); }

inline Chunked KtPanel(const Problem& p, int64_t b, int64_t kvh, int64_t kb) {
  float* base = const_cast<float*>(p.kt.data());
  return Chunked{base + ((b * p.d.kv_heads + kvh) * p.nkb + kb) * p.d.head_dim * p.bkp,
                 p.d.head_dim};
}

// Writes the scores of queries of tile qb against kv tile kb into s
// (leading dim p.bkp, bkp columns): q.k * scale (from p.q_scaled),
// then the score mod, then -inf where the mask (if `partial`) or the end of
// the keys excludes a pair. When grad is not null it receives
// d(modified score)/d(raw score) (1 without a score mod). keep is scratch of
// p.bq * p.bkp bytes.
void ScoreTile(const Problem& p, int64_t b, int64_t h, int64_t qb, int64_t kb, bool partial,
               float* s, float* grad, uint8_t* keep);

// Merges a block list's full and partial blocks into ascending order and
// calls fn(block, partial) for each.
template <typename Fn>
void ForEachBlock(const BlockMask::BlockList& list, Fn&& fn) {
  int32_t i = 0, j = 0;
  while (i < list.num_full || j < list.num_partial) {
    if (j >= list.num_partial || (i < list.num_full && list.full[i] < list.partial[j])) {
      fn(list.full[i++], false);
    } else {
      fn(list.partial[j++], true);
    }
  }
}

// Calls fn(kv tile, partial) for the kv tiles of query tile qt, ascending:
// each mask block's tiles (those that start before the end of the keys).
template <typename Fn>
void ForEachKvTile(const Problem& p, int64_t b, int64_t h, int64_t qt, Fn&& fn) {
  ForEachBlock(p.mask->KvBlocks(b, h, qt / p.rq), [&](int32_t kb, bool partial) {
    const int64_t t0 = int64_t{kb} * p.rk, t1 = std::min(t0 + p.rk, p.nkb);
    for (int64_t t = t0; t < t1; ++t) fn(t, partial);
  });
}

// Calls fn(query tile, partial) for the query tiles of kv tile kt, ascending.
template <typename Fn>
void ForEachQTile(const Problem& p, int64_t b, int64_t h, int64_t kt, Fn&& fn) {
  ForEachBlock(p.mask->QBlocks(b, h, kt / p.rk), [&](int32_t qb, bool partial) {
    const int64_t t0 = int64_t{qb} * p.rq, t1 = std::min(t0 + p.rq, p.nqb);
    for (int64_t t = t0; t < t1; ++t) fn(t, partial);
  });
}

}  // namespace weft::kernels::internal
