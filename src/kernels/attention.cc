// Validation, operand packing and tile scoring shared by the attention
// forward (attention_forward.cc) and backward (attention_backward.cc).
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include "attention_internal.h"
#include "weft/base/error.h"
#include "weft/base/thread_pool.h"

namespace weft::kernels {

void ValidateAttention(const AttentionDims& d, const AttentionOptions& o) {
  WEFT_CHECK(d.batch >= 1 && d.q_heads >= 1 && d.kv_heads >= 1,
             "flex_attention: batch ({}), q heads ({}) and kv heads ({}) must be at least 1",
             d.batch, d.q_heads, d.kv_heads);
  WEFT_CHECK(d.q_len >= 1 && d.kv_len >= 1,
             "flex_attention: q length ({}) and kv length ({}) must be at least 1", d.q_len,
             d.kv_len);
  WEFT_CHECK(d.head_dim >= 1 && d.head_dim <= kMaxHeadDim,
             "flex_attention: head dim D = {} is out of range; D must be in [1, {}]", d.head_dim,
             kMaxHeadDim);
  WEFT_CHECK(d.value_dim >= 1 && d.value_dim <= kMaxHeadDim,
             "flex_attention: value dim Dv = {} is out of range; Dv must be in [1, {}]",
             d.value_dim, kMaxHeadDim);
  WEFT_CHECK(d.q_heads % d.kv_heads == 0,
             "flex_attention: q has {} heads and k/v have {}; the number of q heads must be a "
             "multiple of the number of kv heads",
             d.q_heads, d.kv_heads);
  WEFT_CHECK(d.q_heads == d.kv_heads || o.enable_gqa,
             "flex_attention: q has {} heads and k/v have {}; pass enable_gqa=True for grouped "
             "query attention",
             d.q_heads, d.kv_heads);
  if (o.scale) {
    WEFT_CHECK(std::isfinite(*o.scale), "flex_attention: scale must be finite, got {}", *o.scale);
  }
  if (o.block_mask != nullptr) {
    const BlockMask& m = *o.block_mask;
    WEFT_CHECK(m.q_len() == d.q_len && m.kv_len() == d.kv_len,
               "flex_attention: block_mask was created for Q_LEN={} KV_LEN={} but q has length "
               "{} and k {}; create the block mask with the attention's sizes",
               m.q_len(), m.kv_len(), d.q_len, d.kv_len);
    WEFT_CHECK(m.batch() == 1 || m.batch() == d.batch,
               "flex_attention: block_mask has B={} but the attention has batch {}; use B=1 "
               "(broadcast) or the batch size",
               m.batch(), d.batch);
    WEFT_CHECK(m.heads() == 1 || m.heads() == d.q_heads,
               "flex_attention: block_mask has H={} but q has {} heads; use H=1 (broadcast) or "
               "the number of q heads",
               m.heads(), d.q_heads);
  }
  if (o.score_mod != nullptr) o.score_mod->Validate(d.batch, d.q_heads, d.q_len, d.kv_len);
}

namespace internal {

namespace {

// The instruction set a call runs: the forced configuration's, else the
// thread's default for the dtype (WEFT_ISA, ScopedIsa, or the widest
// available; avx512bf16 only for bfloat16 calls).
const simd::Primitives& SelectPrimitives(const AttentionOptions& options, PrimitiveType dtype) {
  if (options.config && !options.config->isa.empty()) {
    const std::string& isa = options.config->isa;
    if (isa == "amx" || isa == "avx512bf16") simd::ScopedIsa check(isa.c_str());  // explains
    const simd::Primitives* p = simd::PrimitivesFor(isa.c_str());
    if (p == nullptr) {
      int n = 0;
      const char* const* names = simd::AvailableIsas(&n);
      std::string list;
      for (int i = 0; i < n; ++i) list += (i ? ", " : "") + std::string(names[i]);
      Fail("flex_attention: forced isa '{}' is not available on this CPU; use one of: {}", isa,
           list);
    }
    return *p;
  }
  return dtype == PrimitiveType::kBF16 ? simd::GetBf16Primitives() : simd::GetPrimitives();
}

}  // namespace

Problem::Problem(const AttentionDims& dims, const AttentionOptions& options, PrimitiveType dtype,
                 bool backward)
    : d(dims), simd(SelectPrimitives(options, dtype)), use_bf16(dtype == PrimitiveType::kBF16) {
  ValidateAttention(dims, options);
  scale = options.scale ? *options.scale : 1.0f / std::sqrt(static_cast<float>(d.head_dim));
  score_mod = options.score_mod;
  ConfigProblem cp = ConfigProblem::From(dims, options, dtype);
  cp.isa = simd.isa;
  chosen = ChooseTiles(cp, options, backward);
  bq = chosen.tiles.block_m;
  bk = chosen.tiles.block_n;
  if (options.block_mask != nullptr) {
    mask = options.block_mask;
  } else {
    dense.emplace(BlockMask::Dense(d.q_len, d.kv_len, bq, bk));
    mask = &*dense;
  }
  rq = mask->q_block() / bq;
  rk = mask->kv_block() / bk;
  group = d.q_heads / d.kv_heads;
  bkp = simd::PadN(bk);
  dp = simd::PadN(d.head_dim);
  dvp = simd::PadN(d.value_dim);
  nqb = (d.q_len + bq - 1) / bq;
  nkb = (d.kv_len + bk - 1) / bk;
}

int64_t Problem::QRows(int64_t qb) const { return std::min(bq, d.q_len - qb * bq); }
int64_t Problem::KRows(int64_t kb) const { return std::min(bk, d.kv_len - kb * bk); }

template <typename T>
void Problem::ScaleQ(const T* q) {
  const int64_t rows = d.batch * d.q_heads * d.q_len;
  q_scaled.Resize(static_cast<size_t>(rows * d.head_dim));
  const int64_t chunk = 256;
  ThreadPool::Global().ParallelFor((rows + chunk - 1) / chunk, [&](int64_t task, int) {
    const int64_t r0 = task * chunk, r1 = std::min(rows, r0 + chunk);
    if constexpr (std::is_same_v<T, float>) {
      for (int64_t i = r0 * d.head_dim; i < r1 * d.head_dim; ++i) q_scaled[i] = q[i] * scale;
    } else {
      float* dst = q_scaled.data() + r0 * d.head_dim;
      ToFloats(simd, q + r0 * d.head_dim, dst, (r1 - r0) * d.head_dim);
      for (int64_t i = 0; i < (r1 - r0) * d.head_dim; ++i) dst[i] *= scale;
    }
  });
}

template <typename T>
void Problem::PackKt(const T* k) {
  kt.Resize(static_cast<size_t>(d.batch * d.kv_heads * nkb * d.head_dim * bkp));
  ThreadPool::Global().ParallelFor(d.batch * d.kv_heads * nkb, [&](int64_t task, int) {
    int64_t kb = task % nkb, bh = task / nkb;
    const T* src = k + (bh * d.kv_len + kb * bk) * d.head_dim;
    KtPanel(*this, bh / d.kv_heads, bh % d.kv_heads, kb)
        .SetTransposed(src, KRows(kb), d.head_dim, d.head_dim, bkp);
  });
}

int64_t Problem::KtPairsPanelSize() const { return PairPanel::Size(d.head_dim, bkp); }

void Problem::PackKtPairs(const bf16* q, const bf16* k) {
  q_bf16 = q;
  const int64_t panel = KtPairsPanelSize();
  kt_pairs.Resize(static_cast<size_t>(d.batch * d.kv_heads * nkb * panel));
  ThreadPool::Global().ParallelFor(d.batch * d.kv_heads * nkb, [&](int64_t task, int) {
    int64_t kb = task % nkb, bh = task / nkb;
    PairPanel{kt_pairs.data() + task * panel, d.head_dim}.SetTransposed(
        k + (bh * d.kv_len + kb * bk) * d.head_dim, KRows(kb), d.head_dim, d.head_dim, bkp);
  });
}

void PairPanel::SetRows(const bf16* x, int64_t n, int64_t cols, int64_t ld,
                        int64_t padded_cols) const {
  constexpr int64_t C = simd::kPadN;
  const int64_t stride = ChunkStride(), even_rows = (rows + 1) / 2 * 2;
  for (int64_t c0 = 0; c0 < padded_cols; c0 += C) {
    uint16_t* chunk = data + (c0 / C) * stride;
    const int64_t width = std::max<int64_t>(0, std::min(C, cols - c0));
    for (int64_t r = 0; r < even_rows; ++r) {
      uint16_t* dst = chunk + (r / 2) * simd::kPairRow + r % 2;
      const uint16_t* src = Bits(x + r * ld + c0);
      const int64_t w = r < n ? width : 0;
      for (int64_t j = 0; j < w; ++j) dst[2 * j] = src[j];
      for (int64_t j = w; j < C; ++j) dst[2 * j] = 0;
    }
  }
}

void PairPanel::SetTransposed(const bf16* x, int64_t n, int64_t cols, int64_t ld,
                              int64_t padded_cols) const {
  constexpr int64_t C = simd::kPadN;
  const int64_t stride = ChunkStride(), even_rows = (rows + 1) / 2 * 2;
  for (int64_t c0 = 0; c0 < padded_cols; c0 += C) {
    uint16_t* chunk = data + (c0 / C) * stride;  // row r holds x[c0 .. c0 + C][r]
    const int64_t width = std::max<int64_t>(0, std::min(C, n - c0));
    for (int64_t r = 0; r < even_rows; ++r) {
      uint16_t* dst = chunk + (r / 2) * simd::kPairRow + r % 2;
      const int64_t w = r < cols ? width : 0;
      for (int64_t j = 0; j < w; ++j) dst[2 * j] = x[(c0 + j) * ld + r].bits;
      for (int64_t j = w; j < C; ++j) dst[2 * j] = 0;
    }
  }
}

template void Problem::ScaleQ(const float*);
template void Problem::ScaleQ(const bf16*);
template void Problem::PackKt(const float*);
template void Problem::PackKt(const bf16*);

template <typename T>
void Chunked::SetRows(const simd::Primitives& s, int64_t r0, const T* x, int64_t n, int64_t cols,
                      int64_t ld, int64_t padded_cols) const {
  constexpr int64_t C = simd::kPadN;
  for (int64_t c0 = 0; c0 < padded_cols; c0 += C) {
    float* chunk = data + c0 * rows + r0 * C;
    const int64_t width = std::max<int64_t>(0, std::min(C, cols - c0));
    for (int64_t r = 0; r < n; ++r) {
      if (width > 0) ToFloats(s, x + r * ld + c0, chunk + r * C, width);
      std::fill(chunk + r * C + width, chunk + (r + 1) * C, 0.0f);
    }
  }
}

template <typename T>
void Chunked::SetTransposed(const T* x, int64_t n, int64_t cols, int64_t ld,
                            int64_t padded_cols) const {
  constexpr int64_t C = simd::kPadN;
  for (int64_t c0 = 0; c0 < padded_cols; c0 += C) {
    float* chunk = data + c0 * rows;  // [cols][C]: row r holds x[c0 .. c0 + C][r]
    const int64_t width = std::max<int64_t>(0, std::min(C, n - c0));
    for (int64_t r = 0; r < cols; ++r) {
      for (int64_t j = 0; j < width; ++j) chunk[r * C + j] = ToFloat(x[(c0 + j) * ld + r]);
      for (int64_t j = width; j < C; ++j) chunk[r * C + j] = 0.0f;
    }
  }
}

template void Chunked::SetRows(const simd::Primitives&, int64_t, const float*, int64_t, int64_t,
                               int64_t, int64_t) const;
template void Chunked::SetRows(const simd::Primitives&, int64_t, const bf16*, int64_t, int64_t,
                               int64_t, int64_t) const;
template void Chunked::SetTransposed(const float*, int64_t, int64_t, int64_t, int64_t) const;
template void Chunked::SetTransposed(const bf16*, int64_t, int64_t, int64_t, int64_t) const;

void ScoreTile(const Problem& p, int64_t b, int64_t h, int64_t qb, int64_t kb, bool partial,
               float* s, float* grad, uint8_t* keep) {
  const int64_t nq = p.QRows(qb), nk = p.KRows(kb);
  const int64_t q0 = qb * p.bq, k0 = kb * p.bk;
  if (p.use_bf16) {
    // bf16 Q rows as given, times the pair-packed K^T panel, then the scale.
    const int64_t panel = ((b * p.d.kv_heads + h / p.group) * p.nkb + kb) * p.KtPairsPanelSize();
    const bf16* q = p.q_bf16 + ((b * p.d.q_heads + h) * p.d.q_len + q0) * p.d.head_dim;
    p.simd.gemm_bf16(nq, p.bkp, p.d.head_dim, Bits(q), p.d.head_dim, p.kt_pairs.data() + panel,
                     simd::PairChunkSize(p.d.head_dim), s, p.bkp, false);
    for (int64_t i = 0; i < nq; ++i) p.simd.scale(s + i * p.bkp, nk, p.scale);
  } else {
    BOperand kt = KtPanel(p, b, h / p.group, kb).Rows(0);
    p.simd.gemm(nq, p.bkp, p.d.head_dim, p.QScaledRows(b, h, qb), p.d.head_dim, kt.data, kt.ldb,
                kt.chunk_stride, s, p.bkp, false);
  }
  if (p.score_mod != nullptr) {
    p.score_mod->Apply(b, h, q0, nq, k0, nk, s, p.bkp, grad);
  } else if (grad != nullptr) {
    for (int64_t i = 0; i < nq; ++i) std::fill(grad + i * p.bkp, grad + i * p.bkp + nk, 1.0f);
  }
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  if (partial) {
    // The block's mask as the BlockMask kept it (this tile is a part of
    // it), else evaluated here.
    const int64_t mq = qb / p.rq, mk = kb / p.rk;
    const uint8_t* kept = p.mask->PartialKeep(b, h, mq, mk);
    int64_t ld = p.mask->kv_block();
    if (kept != nullptr) {
      kept += (q0 - mq * p.mask->q_block()) * ld + (k0 - mk * p.mask->kv_block());
    } else {
      p.mask->mask_mod()->Evaluate(b, h, q0, nq, k0, nk, keep, p.bkp);
      kept = keep;
      ld = p.bkp;
    }
    for (int64_t i = 0; i < nq; ++i) {
      float* row = s + i * p.bkp;
      const uint8_t* k = kept + i * ld;
      for (int64_t j = 0; j < nk; ++j) row[j] = k[j] ? row[j] : kNegInf;
    }
  }
  if (nk < p.bkp) {
    for (int64_t i = 0; i < nq; ++i) std::fill(s + i * p.bkp + nk, s + (i + 1) * p.bkp, kNegInf);
  }
}

}  // namespace internal
}  // namespace weft::kernels
