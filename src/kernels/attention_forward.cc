// Flash attention forward: for each query block, stream over its kv blocks
// with an online softmax, so no Sq x Skv buffer exists. One task per
// (batch row, query head, query block); tasks write disjoint outputs, so the
// result does not depend on scheduling.
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

struct ForwardScratch {
  AlignedBuffer<float> s, o, m, l;
  AlignedBuffer<uint8_t> keep;
  AlignedBuffer<float> v;          // one kv block of V, Dv padded
  AlignedBuffer<uint16_t> p_bf16;  // bf16 calls: P rounded to bf16, [bq x bkp]
};

// T is the storage type of q, k, v and out (float or bf16). float32 runs the
// float32 GEMMs; bf16 runs S = Q K^T and O += P V as bf16 GEMMs (P rounded
// to bf16, as FlashAttention does) with float32 accumulation. The softmax
// statistics and O are float32 in both.
template <typename T>
void Forward(const AttentionDims& dims, const T* q, const T* k, const T* v,
             const AttentionOptions& options, PrimitiveType dtype, T* out, float* lse) {
  constexpr bool kBf16 = std::is_same_v<T, bf16>;
  Problem p(dims, options, dtype, /*backward=*/false);
  if constexpr (kBf16) {
    p.PackKtPairs(q, k);
  } else {
    p.ScaleQ(q);
    p.PackKt(k);
  }
  const AttentionDims& d = p.d;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();

  // float32: V per (b, kv head) as a chunked [Skv x dvp] matrix.
  // bf16: V per (b, kv head, kv tile) as a pair-packed [bk x dvp] panel (a
  // tile may start at an odd key when the mask block is odd).
  internal::WorkspaceBuffer<float> vp;
  internal::WorkspaceBuffer<uint16_t> v_pairs;
  auto v_head = [&](int64_t bkvh) {
    return internal::Chunked{vp.data() + bkvh * d.kv_len * p.dvp, d.kv_len};
  };
  const int64_t v_panel = internal::PairPanel::Size(p.bk, p.dvp);
  if constexpr (kBf16) {
    v_pairs.Resize(static_cast<size_t>(d.batch * d.kv_heads * p.nkb * v_panel));
  } else {
    vp.Resize(static_cast<size_t>(d.batch * d.kv_heads * d.kv_len * p.dvp));
  }
  ThreadPool& pool = ThreadPool::Global();
  pool.ParallelFor(d.batch * d.kv_heads * p.nkb, [&](int64_t task, int) {
    int64_t kb = task % p.nkb, bh = task / p.nkb;
    const T* rows = v + (bh * d.kv_len + kb * p.bk) * d.value_dim;
    if constexpr (kBf16) {
      internal::PairPanel{v_pairs.data() + task * v_panel, p.bk}.SetRows(
          rows, p.KRows(kb), d.value_dim, d.value_dim, p.dvp);
    } else {
      v_head(bh).SetRows(p.simd, kb * p.bk, rows, p.KRows(kb), d.value_dim, d.value_dim, p.dvp);
    }
  });

  std::vector<ForwardScratch> scratch(pool.num_threads());
  const int64_t heads = d.batch * d.q_heads;
  // Tasks by descending query block: under a causal mask the last blocks are
  // the most work, so starting with them balances the threads.
  pool.ParallelFor(heads * p.nqb, [&](int64_t task, int thread) {
    const simd::AmxTileScope tiles(p.simd);
    const int64_t qb = p.nqb - 1 - task / heads;
    const int64_t bh = task % heads, b = bh / d.q_heads, h = bh % d.q_heads;
    const int64_t kvh = h / p.group;
    const int64_t nq = p.QRows(qb);
    ForwardScratch& w = scratch[thread];
    w.s.Resize(p.bq * p.bkp);
    w.o.Resize(p.bq * p.dvp);
    w.m.Resize(p.bq);
    w.l.Resize(p.bq);
    w.keep.Resize(p.bq * p.bkp);
    if constexpr (kBf16) w.p_bf16.Resize(p.bq * p.bkp);
    w.o.Zero();
    for (int64_t i = 0; i < nq; ++i) {
      w.m[i] = kNegInf;
      w.l[i] = 0;
    }
    const int64_t bkvh = b * d.kv_heads + kvh;

    internal::ForEachKvTile(p, b, h, qb, [&](int64_t kb, bool partial) {
      const int64_t nk = p.KRows(kb);
      float* s = w.s.data();
      internal::ScoreTile(p, b, h, qb, kb, partial, s, nullptr, w.keep.data());
      // Online softmax: rescale what was accumulated when a row's max grows.
      for (int64_t i = 0; i < nq; ++i) {
        float* row = s + i * p.bkp;
        const float row_max = p.simd.row_max(row, nk);
        float m_new = std::isnan(row_max) ? row_max : std::max(w.m[i], row_max);
        if (m_new == kNegInf) {  // every key so far masked: the row stays empty
          std::fill(row, row + p.bkp, 0.0f);
          continue;
        }
        float alpha = std::exp(w.m[i] - m_new);  // 0 when the old max was -inf
        float sum = p.simd.exp_shift_sum(row, p.bkp, m_new);
        if (alpha != 1.0f) p.simd.scale(w.o.data() + i * p.dvp, p.dvp, alpha);
        w.l[i] = w.l[i] * alpha + sum;
        w.m[i] = m_new;
      }
      if constexpr (kBf16) {
        uint16_t* pb = w.p_bf16.data();
        for (int64_t i = 0; i < nq; ++i) p.simd.f32_to_bf16(s + i * p.bkp, pb + i * p.bkp, nk);
        p.simd.gemm_bf16(nq, p.dvp, nk, pb, p.bkp, v_pairs.data() + (bkvh * p.nkb + kb) * v_panel,
                         simd::PairChunkSize(p.bk), w.o.data(), p.dvp, true);
      } else {
        internal::BOperand vb = v_head(bkvh).Rows(kb * p.bk);
        p.simd.gemm(nq, p.dvp, nk, s, p.bkp, vb.data, vb.ldb, vb.chunk_stride, w.o.data(), p.dvp,
                    true);
      }
    });

    T* out_rows = out + (bh * d.q_len + qb * p.bq) * d.value_dim;
    float* lse_rows = lse + bh * d.q_len + qb * p.bq;
    for (int64_t i = 0; i < nq; ++i) {
      T* dst = out_rows + i * d.value_dim;
      float* row = w.o.data() + i * p.dvp;  // normalized in place, then stored
      if (w.l[i] == 0.0f) {                 // fully masked row: out 0, lse -inf
        std::fill(row, row + d.value_dim, 0.0f);
        lse_rows[i] = kNegInf;
      } else {
        float inv = 1.0f / w.l[i];
        for (int64_t c = 0; c < d.value_dim; ++c) row[c] *= inv;
        lse_rows[i] = w.m[i] + std::log(w.l[i]);
      }
      internal::FromFloats(p.simd, row, dst, d.value_dim);
    }
  });
}

}  // namespace

void FlexAttentionForward(const AttentionDims& dims, const float* q, const float* k, const float* v,
                          const AttentionOptions& options, float* out, float* lse) {
  Forward(dims, q, k, v, options, PrimitiveType::kF32, out, lse);
}

void FlexAttentionForwardBf16(const AttentionDims& dims, const bf16* q, const bf16* k,
                              const bf16* v, const AttentionOptions& options, bf16* out,
                              float* lse) {
  Forward(dims, q, k, v, options, PrimitiveType::kBF16, out, lse);
}

}  // namespace weft::kernels
