// Flash attention backward (FlashAttention-2 style): scores and
// probabilities are recomputed per (query block, kv block) tile from the
// saved LSE, never stored for the whole sequence.
//
//   P  = exp(S - lse)             dV += P^T dO
//   dP = dO V^T                   dS  = P * (dP - Delta) * score_mod' * scale
//   dK += dS^T Q                  dQ += dS K
//
// with Delta = rowsum(dO * O) - dlse (the LSE's gradient enters here, exactly).
// Work split: see BackwardSplit in attention.h. Every task owns its outputs
// and visits blocks in a fixed order, so results are deterministic.
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "attention_internal.h"
#include "weft/base/thread_pool.h"

namespace weft::kernels {

using internal::Problem;

namespace {

// The backward's GEMM B operands, packed once per call (O(S * D) memory).
struct BackwardOperands {
  const float* lse;
  const float* dout;   // [B, Hq, Sq, Dv] as given (float32 calls)
  const float* delta;  // [B, Hq, Sq]
  float* q_rows;       // per (b, q head): chunked [Sq x dp]
  float* do_rows;      // per (b, q head): chunked [Sq x dvp]
  float* k_rows;       // per (b, kv head): chunked [Skv x dp]
  float* vt;           // per (b, kv head, kv block): chunked [Dv x bkp]
};

// bfloat16 calls: pair-packed panels (internal::PairPanel) per tile, so a
// tile starting at an odd row still begins a pair.
struct Bf16Operands {
  const uint16_t* dout = nullptr;   // [B, Hq, Sq, Dv] as given: dP's A operand
  uint16_t* q = nullptr;            // per (b, q head, q tile): [bq x dp]
  uint16_t* dout_panels = nullptr;  // per (b, q head, q tile): [bq x dvp]
  uint16_t* k = nullptr;            // per (b, kv head, kv tile): [bk x dp]
  uint16_t* vt = nullptr;           // per (b, kv head, kv tile): [Dv x bkp]
  int64_t q_panel = 0, do_panel = 0, k_panel = 0, vt_panel = 0;  // elements per panel

  explicit Bf16Operands(const Problem& p)
      : q_panel(internal::PairPanel::Size(p.bq, p.dp)),
        do_panel(internal::PairPanel::Size(p.bq, p.dvp)),
        k_panel(internal::PairPanel::Size(p.bk, p.dp)),
        vt_panel(internal::PairPanel::Size(p.d.value_dim, p.bkp)) {}
};

struct BackwardScratch {
  AlignedBuffer<float> p, g, dp;
  AlignedBuffer<uint8_t> keep;
  AlignedBuffer<float> dk, dv;  // one kv block's accumulators [bk, dp], [bk, dvp]
  AlignedBuffer<float> dq;      // query accumulators [rows, dp]
  // bf16 calls: dS rounded to bf16 [bq x bkp] (dq's A operand), and P and dS
  // rounded and transposed [bk x bq] (dv's and dk's).
  AlignedBuffer<uint16_t> ds_bf16, pt_bf16, dst_bf16;

  void Reserve(const Problem& p) {
    this->p.Resize(p.bq * p.bkp);
    g.Resize(p.bq * p.bkp);
    dp.Resize(p.bq * p.bkp);
    keep.Resize(p.bq * p.bkp);
    dk.Resize(p.bk * p.dp);
    dv.Resize(p.bk * p.dvp);
    if (p.use_bf16) {
      ds_bf16.Resize(p.bq * p.bkp);
      pt_bf16.Resize(p.bk * p.bq);
      dst_bf16.Resize(p.bk * p.bq);
    }
  }
};

// dS = P * (dP - Delta) * scale (times the score mod's derivative where P is
// not 0), in place of dP in w.dp.
void SoftmaxGradRows(const Problem& p, const BackwardOperands& x, BackwardScratch& w, int64_t row0,
                     int64_t nq, int64_t nk) {
  const float* P = w.p.data();
  float* dP = w.dp.data();
  const float* G = p.score_mod != nullptr ? w.g.data() : nullptr;
  for (int64_t i = 0; i < nq; ++i) {
    p.simd.softmax_grad(P + i * p.bkp, dP + i * p.bkp, x.delta[row0 + i], p.scale, dP + i * p.bkp,
                        nk);
    if (G != nullptr) {
      float* ds = dP + i * p.bkp;
      const float* g = G + i * p.bkp;
      for (int64_t j = 0; j < nk; ++j) ds[j] = P[i * p.bkp + j] == 0.0f ? 0.0f : ds[j] * g[j];
    }
  }
}

// The bf16 GEMMs of one tile, P (float32, in w.p) given: P and dS are
// rounded to bf16 as GEMM A operands (as FlashAttention does); dP, dS and
// the accumulators stay float32. P^T and dS^T are rounded and transposed in
// one pass from float32.
void TileGradsBf16(const Problem& p, const BackwardOperands& x, const Bf16Operands& y,
                   BackwardScratch& w, int64_t bh, int64_t bkvh, int64_t qb, int64_t kb, float* dq,
                   float* dk, float* dv) {
  const AttentionDims& d = p.d;
  const int64_t nq = p.QRows(qb), nk = p.KRows(kb);
  const int64_t row0 = bh * d.q_len + qb * p.bq;
  const int64_t q_tile = bh * p.nqb + qb, k_tile = bkvh * p.nkb + kb;
  if (dv != nullptr) {
    p.simd.f32_to_bf16_transposed(w.p.data(), nq, nk, p.bkp, w.pt_bf16.data(), p.bq);
    p.simd.gemm_bf16(nk, p.dvp, nq, w.pt_bf16.data(), p.bq, y.dout_panels + q_tile * y.do_panel,
                     simd::PairChunkSize(p.bq), dv, p.dvp, true);
  }
  float* dP = w.dp.data();
  p.simd.gemm_bf16(nq, p.bkp, d.value_dim, y.dout + row0 * d.value_dim, d.value_dim,
                   y.vt + k_tile * y.vt_panel, simd::PairChunkSize(d.value_dim), dP, p.bkp, false);
  SoftmaxGradRows(p, x, w, row0, nq, nk);
  if (dk != nullptr) {
    p.simd.f32_to_bf16_transposed(dP, nq, nk, p.bkp, w.dst_bf16.data(), p.bq);
    p.simd.gemm_bf16(nk, p.dp, nq, w.dst_bf16.data(), p.bq, y.q + q_tile * y.q_panel,
                     simd::PairChunkSize(p.bq), dk, p.dp, true);
  }
  if (dq != nullptr) {
    uint16_t* dsb = w.ds_bf16.data();
    for (int64_t i = 0; i < nq; ++i) p.simd.f32_to_bf16(dP + i * p.bkp, dsb + i * p.bkp, nk);
    p.simd.gemm_bf16(nq, p.dp, nk, dsb, p.bkp, y.k + k_tile * y.k_panel, simd::PairChunkSize(p.bk),
                     dq, p.dp, true);
  }
}

// Adds the contributions of one (query block, kv block) tile: to dq (rows of
// the query block, leading dim p.dp) and to dk/dv (rows of the kv block);
// a null accumulator is skipped.
void TileBackward(const Problem& p, const BackwardOperands& x, const Bf16Operands& y,
                  BackwardScratch& w, int64_t b, int64_t h, int64_t qb, int64_t kb, bool partial,
                  float* dq, float* dk, float* dv) {
  const AttentionDims& d = p.d;
  const int64_t nq = p.QRows(qb), nk = p.KRows(kb);
  const int64_t kvh = h / p.group;
  const int64_t row0 = (b * d.q_heads + h) * d.q_len + qb * p.bq;  // first query row
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();

  float* P = w.p.data();
  float* G = p.score_mod != nullptr ? w.g.data() : nullptr;
  internal::ScoreTile(p, b, h, qb, kb, partial, P, G, w.keep.data());
  for (int64_t i = 0; i < nq; ++i) {
    float* row = P + i * p.bkp;
    float l = x.lse[row0 + i];
    if (l == kNegInf) {
      std::fill(row, row + p.bkp, 0.0f);
    } else {
      p.simd.exp_shift_sum(row, p.bkp, l);
    }
  }
  const int64_t bh = b * d.q_heads + h, bkvh = b * d.kv_heads + kvh;
  if (p.use_bf16) {
    TileGradsBf16(p, x, y, w, bh, bkvh, qb, kb, dq, dk, dv);
    return;
  }
  // dv += P^T dO and dk += dS^T Q read P and dS [nq x bkp] in place as
  // transposed A operands (gemm_transposed_a): the same multiply-adds, in the
  // same order, as on transposed copies.
  if (dv != nullptr) {
    internal::BOperand dO =
        internal::Chunked{x.do_rows + bh * d.q_len * p.dvp, d.q_len}.Rows(qb * p.bq);
    p.simd.gemm_transposed_a(nk, p.dvp, nq, P, p.bkp, dO.data, dO.ldb, dO.chunk_stride, dv, p.dvp,
                             true);
  }
  float* dP = w.dp.data();
  internal::BOperand vt =
      internal::Chunked{x.vt + (bkvh * p.nkb + kb) * d.value_dim * p.bkp, d.value_dim}.Rows(0);
  p.simd.gemm(nq, p.bkp, d.value_dim, x.dout + row0 * d.value_dim, d.value_dim, vt.data, vt.ldb,
              vt.chunk_stride, dP, p.bkp, false);
  SoftmaxGradRows(p, x, w, row0, nq, nk);
  if (dk != nullptr) {
    internal::BOperand qr =
        internal::Chunked{x.q_rows + bh * d.q_len * p.dp, d.q_len}.Rows(qb * p.bq);
    p.simd.gemm_transposed_a(nk, p.dp, nq, dP, p.bkp, qr.data, qr.ldb, qr.chunk_stride, dk, p.dp,
                             true);
  }
  if (dq != nullptr) {
    internal::BOperand kr =
        internal::Chunked{x.k_rows + bkvh * d.kv_len * p.dp, d.kv_len}.Rows(kb * p.bk);
    p.simd.gemm(nq, p.dp, nk, dP, p.bkp, kr.data, kr.ldb, kr.chunk_stride, dq, p.dp, true);
  }
}

// Writes an accumulator [rows, ld_in] to an unpadded output [rows, cols].
template <typename T>
void StoreRows(const simd::Primitives& s, const float* acc, int64_t rows, int64_t cols,
               int64_t ld_in, T* out) {
  for (int64_t r = 0; r < rows; ++r) internal::FromFloats(s, acc + r * ld_in, out + r * cols, cols);
}

bool UseFused(const Problem& p, BackwardSplit split, int threads) {
  if (split != BackwardSplit::kAuto) return split == BackwardSplit::kFused;
  int64_t units = p.d.batch * p.d.kv_heads;
  return units % threads == 0 || units >= 4 * threads;
}

// dk and dv of kv block kb of (batch b, kv head kvh): from scratch to the
// results.
template <typename T>
void StoreKvBlock(const Problem& p, BackwardScratch& w, int64_t b, int64_t kvh, int64_t kb, T* dk,
                  T* dv) {
  const AttentionDims& d = p.d;
  int64_t row0 = (b * d.kv_heads + kvh) * d.kv_len + kb * p.bk;
  StoreRows(p.simd, w.dk.data(), p.KRows(kb), d.head_dim, p.dp, dk + row0 * d.head_dim);
  StoreRows(p.simd, w.dv.data(), p.KRows(kb), d.value_dim, p.dvp, dv + row0 * d.value_dim);
}

// One task per (b, kv head): kv blocks outer, the group's query heads and
// their query blocks inner; dq of the whole group accumulates in scratch.
template <typename T>
void FusedBackward(const Problem& p, const BackwardOperands& x, const Bf16Operands& y,
                   std::vector<BackwardScratch>& scratch, T* dq, T* dk, T* dv) {
  const AttentionDims& d = p.d;
  ThreadPool& pool = ThreadPool::Global();
  pool.ParallelFor(d.batch * d.kv_heads, [&](int64_t task, int thread) {
    const simd::AmxTileScope tiles(p.simd);
    const int64_t b = task / d.kv_heads, kvh = task % d.kv_heads;
    BackwardScratch& w = scratch[thread];
    w.Reserve(p);
    w.dq.Resize(p.group * d.q_len * p.dp);
    w.dq.Zero();
    for (int64_t kb = 0; kb < p.nkb; ++kb) {
      w.dk.Zero();
      w.dv.Zero();
      for (int64_t g = 0; g < p.group; ++g) {
        const int64_t h = kvh * p.group + g;
        internal::ForEachQTile(p, b, h, kb, [&](int64_t qb, bool partial) {
          float* dq_rows = w.dq.data() + (g * d.q_len + qb * p.bq) * p.dp;
          TileBackward(p, x, y, w, b, h, qb, kb, partial, dq_rows, w.dk.data(), w.dv.data());
        });
      }
      StoreKvBlock(p, w, b, kvh, kb, dk, dv);
    }
    for (int64_t g = 0; g < p.group; ++g) {
      const int64_t h = kvh * p.group + g;
      StoreRows(p.simd, w.dq.data() + g * d.q_len * p.dp, d.q_len, d.head_dim, p.dp,
                dq + (b * d.q_heads + h) * d.q_len * d.head_dim);
    }
  });
}

// Split: dk/dv over (b, kv head, kv block), then dq over (b, q head, q block).
template <typename T>
void SplitBackward(const Problem& p, const BackwardOperands& x, const Bf16Operands& y,
                   std::vector<BackwardScratch>& scratch, T* dq, T* dk, T* dv) {
  const AttentionDims& d = p.d;
  const int64_t q_heads = d.batch * d.q_heads;
  ThreadPool& pool = ThreadPool::Global();
  pool.ParallelFor(d.batch * d.kv_heads * p.nkb, [&](int64_t task, int thread) {
    const simd::AmxTileScope tiles(p.simd);
    const int64_t kb = p.nkb - 1 - task % p.nkb, bkvh = task / p.nkb;
    const int64_t b = bkvh / d.kv_heads, kvh = bkvh % d.kv_heads;
    BackwardScratch& w = scratch[thread];
    w.Reserve(p);
    w.dk.Zero();
    w.dv.Zero();
    for (int64_t g = 0; g < p.group; ++g) {
      const int64_t h = kvh * p.group + g;
      internal::ForEachQTile(p, b, h, kb, [&](int64_t qb, bool partial) {
        TileBackward(p, x, y, w, b, h, qb, kb, partial, nullptr, w.dk.data(), w.dv.data());
      });
    }
    StoreKvBlock(p, w, b, kvh, kb, dk, dv);
  });
  pool.ParallelFor(q_heads * p.nqb, [&](int64_t task, int thread) {
    const simd::AmxTileScope tiles(p.simd);
    const int64_t qb = p.nqb - 1 - task / q_heads, bh = task % q_heads;
    const int64_t b = bh / d.q_heads, h = bh % d.q_heads;
    BackwardScratch& w = scratch[thread];
    w.Reserve(p);
    w.dq.Resize(p.bq * p.dp);
    w.dq.Zero();
    internal::ForEachKvTile(p, b, h, qb, [&](int64_t kb, bool partial) {
      TileBackward(p, x, y, w, b, h, qb, kb, partial, w.dq.data(), nullptr, nullptr);
    });
    StoreRows(p.simd, w.dq.data(), p.QRows(qb), d.head_dim, p.dp,
              dq + (bh * d.q_len + qb * p.bq) * d.head_dim);
  });
}

// T is the storage type of q, k, v, out, dout and the gradients.
template <typename T>
void Backward(const AttentionDims& dims, const T* q, const T* k, const T* v, const T* out,
              const float* lse, const T* dout_in, const float* dlse,
              const AttentionOptions& options, PrimitiveType dtype, T* dq, T* dk, T* dv) {
  constexpr bool kBf16 = std::is_same_v<T, bf16>;
  Problem p(dims, options, dtype, /*backward=*/true);
  const AttentionDims& d = p.d;
  ThreadPool& pool = ThreadPool::Global();

  // Packed operands (O(S * D) memory) and Delta.
  const int64_t q_rows_total = d.batch * d.q_heads * d.q_len;
  const int64_t k_rows_total = d.batch * d.kv_heads * d.kv_len;
  const int64_t q_heads = d.batch * d.q_heads;
  internal::WorkspaceBuffer<float> q_rows, do_rows, delta(q_rows_total), k_rows, vt;
  internal::WorkspaceBuffer<uint16_t> q_pairs, do_pairs, k_pairs, vt_pairs;
  Bf16Operands y(p);
  const float* dout = nullptr;
  if constexpr (kBf16) {
    p.PackKtPairs(q, k);
    const int64_t q_tiles = q_heads * p.nqb, k_tiles = d.batch * d.kv_heads * p.nkb;
    q_pairs.Resize(q_tiles * y.q_panel);
    do_pairs.Resize(q_tiles * y.do_panel);
    k_pairs.Resize(k_tiles * y.k_panel);
    vt_pairs.Resize(k_tiles * y.vt_panel);
    y.dout = internal::Bits(dout_in);
    y.q = q_pairs.data();
    y.dout_panels = do_pairs.data();
    y.k = k_pairs.data();
    y.vt = vt_pairs.data();
    pool.ParallelFor(q_tiles, [&](int64_t task, int) {
      const int64_t bh = task / p.nqb, qb = task % p.nqb;
      const int64_t row0 = bh * d.q_len + qb * p.bq, rows = p.QRows(qb);
      internal::PairPanel{y.q + task * y.q_panel, p.bq}.SetRows(q + row0 * d.head_dim, rows,
                                                                d.head_dim, d.head_dim, p.dp);
      internal::PairPanel{y.dout_panels + task * y.do_panel, p.bq}.SetRows(
          dout_in + row0 * d.value_dim, rows, d.value_dim, d.value_dim, p.dvp);
      float out_row[kMaxHeadDim], dout_row[kMaxHeadDim];
      for (int64_t r = row0; r < row0 + rows; ++r) {
        internal::ToFloats(p.simd, out + r * d.value_dim, out_row, d.value_dim);
        internal::ToFloats(p.simd, dout_in + r * d.value_dim, dout_row, d.value_dim);
        float dot = p.simd.dot(dout_row, out_row, d.value_dim);
        delta[r] = dot - (dlse != nullptr ? dlse[r] : 0.0f);
      }
    });
    pool.ParallelFor(k_tiles, [&](int64_t task, int) {
      const int64_t bkvh = task / p.nkb, kb = task % p.nkb;
      const int64_t row0 = bkvh * d.kv_len + kb * p.bk, rows = p.KRows(kb);
      internal::PairPanel{y.k + task * y.k_panel, p.bk}.SetRows(k + row0 * d.head_dim, rows,
                                                                d.head_dim, d.head_dim, p.dp);
      internal::PairPanel{y.vt + task * y.vt_panel, d.value_dim}.SetTransposed(
          v + row0 * d.value_dim, rows, d.value_dim, d.value_dim, p.bkp);
    });
  } else {
    p.ScaleQ(q);
    p.PackKt(k);
    q_rows.Resize(q_rows_total * p.dp);
    do_rows.Resize(q_rows_total * p.dvp);
    k_rows.Resize(k_rows_total * p.dp);
    vt.Resize(d.batch * d.kv_heads * p.nkb * d.value_dim * p.bkp);
    dout = dout_in;
    pool.ParallelFor(q_heads * p.nqb, [&](int64_t task, int) {
      const int64_t bh = task / p.nqb, qb = task % p.nqb;
      const int64_t row0 = bh * d.q_len + qb * p.bq, rows = p.QRows(qb);
      internal::Chunked{q_rows.data() + bh * d.q_len * p.dp, d.q_len}.SetRows(
          p.simd, qb * p.bq, q + row0 * d.head_dim, rows, d.head_dim, d.head_dim, p.dp);
      internal::Chunked{do_rows.data() + bh * d.q_len * p.dvp, d.q_len}.SetRows(
          p.simd, qb * p.bq, dout + row0 * d.value_dim, rows, d.value_dim, d.value_dim, p.dvp);
      for (int64_t r = row0; r < row0 + rows; ++r) {
        float dot = p.simd.dot(dout + r * d.value_dim, out + r * d.value_dim, d.value_dim);
        delta[r] = dot - (dlse != nullptr ? dlse[r] : 0.0f);
      }
    });
    pool.ParallelFor(d.batch * d.kv_heads * p.nkb, [&](int64_t task, int) {
      const int64_t bkvh = task / p.nkb, kb = task % p.nkb;
      const int64_t row0 = bkvh * d.kv_len + kb * p.bk, rows = p.KRows(kb);
      internal::Chunked{k_rows.data() + bkvh * d.kv_len * p.dp, d.kv_len}.SetRows(
          p.simd, kb * p.bk, k + row0 * d.head_dim, rows, d.head_dim, d.head_dim, p.dp);
      internal::Chunked{vt.data() + task * d.value_dim * p.bkp, d.value_dim}.SetTransposed(
          v + row0 * d.value_dim, rows, d.value_dim, d.value_dim, p.bkp);
    });
  }
  BackwardOperands x{lse,           dout,     delta.data(), q_rows.data(), do_rows.data(),
                     k_rows.data(), vt.data()};

  std::vector<BackwardScratch> scratch(pool.num_threads());

  // A forced configuration's split wins, then the option, then the tune cache's.
  BackwardSplit split = options.backward_split;
  if (options.config && options.config->split != BackwardSplit::kAuto) {
    split = options.config->split;
  }
  if (split == BackwardSplit::kAuto) split = p.chosen.split;
  if (UseFused(p, split, pool.num_threads())) {
    FusedBackward(p, x, y, scratch, dq, dk, dv);
  } else {
    SplitBackward(p, x, y, scratch, dq, dk, dv);
  }
}

}  // namespace

void FlexAttentionBackward(const AttentionDims& dims, const float* q, const float* k,
                           const float* v, const float* out, const float* lse, const float* dout,
                           const float* dlse, const AttentionOptions& options, float* dq, float* dk,
                           float* dv) {
  Backward(dims, q, k, v, out, lse, dout, dlse, options, PrimitiveType::kF32, dq, dk, dv);
}

void FlexAttentionBackwardBf16(const AttentionDims& dims, const bf16* q, const bf16* k,
                               const bf16* v, const bf16* out, const float* lse, const bf16* dout,
                               const float* dlse, const AttentionOptions& options, bf16* dq,
                               bf16* dk, bf16* dv) {
  Backward(dims, q, k, v, out, lse, dout, dlse, options, PrimitiveType::kBF16, dq, dk, dv);
}

}  // namespace weft::kernels
