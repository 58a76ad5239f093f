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
  const float* dout;   // [B, Hq, Sq, Dv] as given
  const float* delta;  // [B, Hq, Sq]
  float* q_rows;       // per (b, q head): chunked [Sq x dp]
  float* do_rows;      // per (b, q head): chunked [Sq x dvp]
  float* k_rows;       // per (b, kv head): chunked [Skv x dp]
  float* vt;           // per (b, kv head, kv block): chunked [Dv x bkp]
};

struct BackwardScratch {
  AlignedBuffer<float> p, g, dp, pt, dst;
  AlignedBuffer<uint8_t> keep;
  AlignedBuffer<float> dk, dv;  // one kv block's accumulators [bk, dp], [bk, dvp]
  AlignedBuffer<float> dq;      // query accumulators [rows, dp]

  void Reserve(const Problem& p) {
    this->p.Resize(p.bq * p.bkp);
    g.Resize(p.bq * p.bkp);
    dp.Resize(p.bq * p.bkp);
    pt.Resize(p.bk * p.bq);
    dst.Resize(p.bk * p.bq);
    keep.Resize(p.bq * p.bkp);
    dk.Resize(p.bk * p.dp);
    dv.Resize(p.bk * p.dvp);
  }
};

// Adds the contributions of one (query block, kv block) tile: to dq (rows of
// the query block, leading dim p.dp) and to dk/dv (rows of the kv block);
// a null accumulator is skipped.
void TileBackward(const Problem& p, const BackwardOperands& x, BackwardScratch& w, int64_t b,
                  int64_t h, int64_t qb, int64_t kb, bool partial, float* dq, float* dk,
                  float* dv) {
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
  if (dv != nullptr) {
    internal::Transpose(P, nq, nk, p.bkp, w.pt.data(), p.bq);
    internal::BOperand dO =
        internal::Chunked{x.do_rows + bh * d.q_len * p.dvp, d.q_len}.Rows(qb * p.bq);
    p.simd.gemm(nk, p.dvp, nq, w.pt.data(), p.bq, dO.data, dO.ldb, dO.chunk_stride, dv, p.dvp,
                true);
  }
  float* dP = w.dp.data();
  internal::BOperand vt =
      internal::Chunked{x.vt + (bkvh * p.nkb + kb) * d.value_dim * p.bkp, d.value_dim}.Rows(0);
  p.simd.gemm(nq, p.bkp, d.value_dim, x.dout + row0 * d.value_dim, d.value_dim, vt.data, vt.ldb,
              vt.chunk_stride, dP, p.bkp, false);
  // dS overwrites dP.
  for (int64_t i = 0; i < nq; ++i) {
    p.simd.softmax_grad(P + i * p.bkp, dP + i * p.bkp, x.delta[row0 + i], p.scale,
                        dP + i * p.bkp, nk);
    if (G != nullptr) {
      float* ds = dP + i * p.bkp;
      const float* g = G + i * p.bkp;
      for (int64_t j = 0; j < nk; ++j) ds[j] = P[i * p.bkp + j] == 0.0f ? 0.0f : ds[j] * g[j];
    }
  }
  if (dk != nullptr) {
    internal::Transpose(dP, nq, nk, p.bkp, w.dst.data(), p.bq);
    internal::BOperand qr =
        internal::Chunked{x.q_rows + bh * d.q_len * p.dp, d.q_len}.Rows(qb * p.bq);
    p.simd.gemm(nk, p.dp, nq, w.dst.data(), p.bq, qr.data, qr.ldb, qr.chunk_stride, dk, p.dp,
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

// T is the storage type of q, k, v, out, dout and the gradients.
template <typename T>
void Backward(const AttentionDims& dims, const T* q, const T* k, const T* v, const T* out,
              const float* lse, const T* dout_in, const float* dlse,
              const AttentionOptions& options, AttentionDtype dtype, T* dq, T* dk, T* dv) {
  Problem p(dims, options, dtype, /*backward=*/true);
  const AttentionDims& d = p.d;
  ThreadPool& pool = ThreadPool::Global();
  p.ScaleQ(q);
  p.PackKt(k);

  // Packed operands (O(S * D) memory) and Delta.
  const int64_t q_rows_total = d.batch * d.q_heads * d.q_len;
  const int64_t k_rows_total = d.batch * d.kv_heads * d.kv_len;
  AlignedBuffer<float> q_rows(q_rows_total * p.dp), do_rows(q_rows_total * p.dvp),
      delta(q_rows_total), k_rows(k_rows_total * p.dp),
      vt(d.batch * d.kv_heads * p.nkb * d.value_dim * p.bkp);
  // dO is also a row-major GEMM A operand: bf16 needs a float32 copy.
  AlignedBuffer<float> dout_f;
  const float* dout = nullptr;
  if constexpr (std::is_same_v<T, float>) {
    dout = dout_in;
  } else {
    dout_f.Resize(q_rows_total * d.value_dim);
    dout = dout_f.data();
  }
  const int64_t q_heads = d.batch * d.q_heads;
  pool.ParallelFor(q_heads * p.nqb, [&](int64_t task, int) {
    const int64_t bh = task / p.nqb, qb = task % p.nqb;
    const int64_t row0 = bh * d.q_len + qb * p.bq, rows = p.QRows(qb);
    if constexpr (!std::is_same_v<T, float>) {
      internal::ToFloats(p.simd, dout_in + row0 * d.value_dim, dout_f.data() + row0 * d.value_dim,
                         rows * d.value_dim);
    }
    internal::Chunked{q_rows.data() + bh * d.q_len * p.dp, d.q_len}.SetRows(
        p.simd, qb * p.bq, q + row0 * d.head_dim, rows, d.head_dim, d.head_dim, p.dp);
    internal::Chunked{do_rows.data() + bh * d.q_len * p.dvp, d.q_len}.SetRows(
        p.simd, qb * p.bq, dout + row0 * d.value_dim, rows, d.value_dim, d.value_dim, p.dvp);
    float out_row[kMaxHeadDim];
    for (int64_t r = row0; r < row0 + rows; ++r) {
      const float* o = nullptr;
      if constexpr (std::is_same_v<T, float>) {
        o = out + r * d.value_dim;
      } else {
        internal::ToFloats(p.simd, out + r * d.value_dim, out_row, d.value_dim);
        o = out_row;
      }
      float dot = p.simd.dot(dout + r * d.value_dim, o, d.value_dim);
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
  BackwardOperands x{lse,         dout,          delta.data(), q_rows.data(),
                     do_rows.data(), k_rows.data(), vt.data()};

  std::vector<BackwardScratch> scratch(pool.num_threads());
  auto store_kv_block = [&](BackwardScratch& w, int64_t b, int64_t kvh, int64_t kb) {
    int64_t row0 = (b * d.kv_heads + kvh) * d.kv_len + kb * p.bk;
    StoreRows(p.simd, w.dk.data(), p.KRows(kb), d.head_dim, p.dp, dk + row0 * d.head_dim);
    StoreRows(p.simd, w.dv.data(), p.KRows(kb), d.value_dim, p.dvp, dv + row0 * d.value_dim);
  };

  // A forced configuration's split wins, then the option, then the tune cache's.
  BackwardSplit split = options.backward_split;
  if (options.config && options.config->split != BackwardSplit::kAuto) {
    split = options.config->split;
  }
  if (split == BackwardSplit::kAuto) split = p.chosen.split;
  if (UseFused(p, split, pool.num_threads())) {
    // One task per (b, kv head): kv blocks outer, the group's query heads and
    // their query blocks inner; dq of the whole group accumulates in scratch.
    pool.ParallelFor(d.batch * d.kv_heads, [&](int64_t task, int thread) {
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
            TileBackward(p, x, w, b, h, qb, kb, partial, dq_rows, w.dk.data(), w.dv.data());
          });
        }
        store_kv_block(w, b, kvh, kb);
      }
      for (int64_t g = 0; g < p.group; ++g) {
        const int64_t h = kvh * p.group + g;
        StoreRows(p.simd, w.dq.data() + g * d.q_len * p.dp, d.q_len, d.head_dim, p.dp,
                  dq + (b * d.q_heads + h) * d.q_len * d.head_dim);
      }
    });
    return;
  }

  // Split: dk/dv over (b, kv head, kv block), then dq over (b, q head, q block).
  pool.ParallelFor(d.batch * d.kv_heads * p.nkb, [&](int64_t task, int thread) {
    const int64_t kb = p.nkb - 1 - task % p.nkb, bkvh = task / p.nkb;
    const int64_t b = bkvh / d.kv_heads, kvh = bkvh % d.kv_heads;
    BackwardScratch& w = scratch[thread];
    w.Reserve(p);
    w.dk.Zero();
    w.dv.Zero();
    for (int64_t g = 0; g < p.group; ++g) {
      const int64_t h = kvh * p.group + g;
      internal::ForEachQTile(p, b, h, kb, [&](int64_t qb, bool partial) {
        TileBackward(p, x, w, b, h, qb, kb, partial, nullptr, w.dk.data(), w.dv.data());
      });
    }
    store_kv_block(w, b, kvh, kb);
  });
  pool.ParallelFor(q_heads * p.nqb, [&](int64_t task, int thread) {
    const int64_t qb = p.nqb - 1 - task / q_heads, bh = task % q_heads;
    const int64_t b = bh / d.q_heads, h = bh % d.q_heads;
    BackwardScratch& w = scratch[thread];
    w.Reserve(p);
    w.dq.Resize(p.bq * p.dp);
    w.dq.Zero();
    internal::ForEachKvTile(p, b, h, qb, [&](int64_t kb, bool partial) {
      TileBackward(p, x, w, b, h, qb, kb, partial, w.dq.data(), nullptr, nullptr);
    });
    StoreRows(p.simd, w.dq.data(), p.QRows(qb), d.head_dim, p.dp,
              dq + (bh * d.q_len + qb * p.bq) * d.head_dim);
  });
}

}  // namespace

void FlexAttentionBackward(const AttentionDims& dims, const float* q, const float* k,
                           const float* v, const float* out, const float* lse,
                           const float* dout, const float* dlse, const AttentionOptions& options,
                           float* dq, float* dk, float* dv) {
  Backward(dims, q, k, v, out, lse, dout, dlse, options, AttentionDtype::kFloat32, dq, dk, dv);
}

void FlexAttentionBackwardBf16(const AttentionDims& dims, const bf16* q, const bf16* k,
                               const bf16* v, const bf16* out, const float* lse,
                               const bf16* dout, const float* dlse,
                               const AttentionOptions& options, bf16* dq, bf16* dk, bf16* dv) {
  Backward(dims, q, k, v, out, lse, dout, dlse, options, AttentionDtype::kBfloat16, dq, dk, dv);
}

}  // namespace weft::kernels
