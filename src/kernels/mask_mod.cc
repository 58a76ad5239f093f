#include "weft/kernels/mask_mod.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "weft/base/error.h"
#include "weft/kernels/mod_expr.h"

namespace weft::kernels {
namespace {

// Bound on offsets and window sizes, so that q_idx + offset cannot overflow.
constexpr int64_t kMaxOffset = int64_t{1} << 40;

// "var", "var + k" or "var - k".
std::string Plus(const std::string& var, int64_t k) {
  if (k == 0) return var;
  return k > 0 ? fmt::format("{} + {}", var, k) : fmt::format("{} - {}", var, -k);
}

int64_t FloorDiv(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

// keep[j] = (lo <= k0 + j <= hi) for j < nk: every built-in mask keeps one
// contiguous range of keys per query.
void FillRange(uint8_t* keep, int64_t k0, int64_t nk, int64_t lo, int64_t hi) {
  const int64_t begin = std::clamp(lo - k0, int64_t{0}, nk);
  const int64_t end = std::clamp(hi - k0 + 1, begin, nk);
  std::memset(keep, 0, static_cast<size_t>(begin));
  std::memset(keep + begin, 1, static_cast<size_t>(end - begin));
  std::memset(keep + end, 0, static_cast<size_t>(nk - end));
}

// Keys before every tile: the lower bound of masks that have none.
constexpr int64_t kNoLowerBound = std::numeric_limits<int64_t>::min() / 4;

class CausalMaskMod final : public MaskMod {
 public:
  explicit CausalMaskMod(int64_t offset) : offset_(offset) {
    WEFT_CHECK(offset >= -kMaxOffset && offset <= kMaxOffset,
               "causal_mask: offset {} is out of range; use |offset| <= 2^40", offset);
  }
  void Evaluate(int64_t b, int64_t h, int64_t q0, int64_t nq, int64_t k0, int64_t nk, uint8_t* keep,
                int64_t ld) const override {
    for (int64_t i = 0; i < nq; ++i)
      FillRange(keep + i * ld, k0, nk, kNoLowerBound, q0 + i + offset_);
  }
  std::optional<BlockKind> Classify(int64_t b, int64_t h, int64_t q0, int64_t q1, int64_t k0,
                                    int64_t k1) const override {
    if (q1 <= q0 || k1 <= k0) return BlockKind::kEmpty;
    if (k1 - 1 <= q0 + offset_) return BlockKind::kFull;
    if (k0 > q1 - 1 + offset_) return BlockKind::kEmpty;
    return BlockKind::kPartial;
  }
  std::string ToString() const override { return Plus("q_idx", offset_) + " >= kv_idx"; }

 private:
  int64_t offset_;
};

class SlidingWindowMaskMod final : public MaskMod {
 public:
  SlidingWindowMaskMod(int64_t left, int64_t right) : left_(left), right_(right) {
    WEFT_CHECK(
        left >= -kMaxOffset && left <= kMaxOffset && right >= -kMaxOffset && right <= kMaxOffset,
        "sliding_window_mask: left {} / right {} out of range; use values within 2^40", left,
        right);
  }
  void Evaluate(int64_t b, int64_t h, int64_t q0, int64_t nq, int64_t k0, int64_t nk, uint8_t* keep,
                int64_t ld) const override {
    for (int64_t i = 0; i < nq; ++i) {
      FillRange(keep + i * ld, k0, nk, q0 + i - left_, q0 + i + right_);
    }
  }
  std::optional<BlockKind> Classify(int64_t b, int64_t h, int64_t q0, int64_t q1, int64_t k0,
                                    int64_t k1) const override {
    if (q1 <= q0 || k1 <= k0 || left_ + right_ < 0) return BlockKind::kEmpty;
    // kv_idx - q_idx takes every value in [d_min, d_max] on the block.
    const int64_t d_min = k0 - (q1 - 1), d_max = (k1 - 1) - q0;
    if (d_min >= -left_ && d_max <= right_) return BlockKind::kFull;
    if (d_max < -left_ || d_min > right_) return BlockKind::kEmpty;
    return BlockKind::kPartial;
  }
  std::string ToString() const override {
    return fmt::format("{} <= kv_idx && kv_idx <= {}", Plus("q_idx", -left_),
                       Plus("q_idx", right_));
  }

 private:
  int64_t left_, right_;
};

class PrefixLmMaskMod final : public MaskMod {
 public:
  explicit PrefixLmMaskMod(std::vector<int64_t> prefix) : prefix_(std::move(prefix)) {
    WEFT_CHECK(!prefix_.empty(), "prefix_lm_mask: prefix_lengths is empty; pass one per batch row");
    for (size_t b = 0; b < prefix_.size(); ++b) {
      WEFT_CHECK(prefix_[b] >= 0 && prefix_[b] <= kMaxOffset,
                 "prefix_lm_mask: prefix_lengths[{}] = {} must be in [0, 2^40]", b, prefix_[b]);
    }
  }
  void Evaluate(int64_t b, int64_t h, int64_t q0, int64_t nq, int64_t k0, int64_t nk, uint8_t* keep,
                int64_t ld) const override {
    const int64_t p = Prefix(b);
    for (int64_t i = 0; i < nq; ++i) {
      FillRange(keep + i * ld, k0, nk, kNoLowerBound, std::max(p - 1, q0 + i));
    }
  }
  std::optional<BlockKind> Classify(int64_t b, int64_t h, int64_t q0, int64_t q1, int64_t k0,
                                    int64_t k1) const override {
    if (q1 <= q0 || k1 <= k0) return BlockKind::kEmpty;
    if (!HasRow(b)) return std::nullopt;
    const int64_t p = Prefix(b);
    // A pair is dropped when kv_idx >= p and kv_idx > q_idx.
    if (!(k1 - 1 >= p && k1 - 1 > q0)) return BlockKind::kFull;
    if (k0 >= p && k0 > q1 - 1) return BlockKind::kEmpty;
    return BlockKind::kPartial;
  }
  void Validate(int64_t batch, int64_t heads, int64_t q_len, int64_t kv_len) const override {
    const int64_t n = static_cast<int64_t>(prefix_.size());
    WEFT_CHECK(n == batch || n == 1,
               "prefix_lm_mask: prefix_lengths has {} entries but the attention has batch {}; "
               "pass one prefix length per batch row (or one for all)",
               n, batch);
  }
  std::string ToString() const override {
    return fmt::format("kv_idx < prefix_lengths[{}] || q_idx >= kv_idx",
                       prefix_.size() == 1 ? "0" : "b");
  }
  std::map<std::string, IndexTensor> Tensors() const override {
    return {{"prefix_lengths", IndexTensor{{static_cast<int64_t>(prefix_.size())}, prefix_}}};
  }

 private:
  bool HasRow(int64_t b) const {
    return prefix_.size() == 1 || (b >= 0 && b < static_cast<int64_t>(prefix_.size()));
  }
  int64_t Prefix(int64_t b) const {
    WEFT_CHECK(HasRow(b), "prefix_lm_mask: batch row {} but prefix_lengths has {} entries", b,
               prefix_.size());
    return prefix_.size() == 1 ? prefix_[0] : prefix_[b];
  }
  std::vector<int64_t> prefix_;
};

class ChunkedCausalMaskMod final : public MaskMod {
 public:
  explicit ChunkedCausalMaskMod(int64_t chunk) : chunk_(chunk) {
    WEFT_CHECK(chunk > 0 && chunk <= kMaxOffset,
               "chunked_causal_mask: chunk {} must be positive (and at most 2^40)", chunk);
  }
  void Evaluate(int64_t b, int64_t h, int64_t q0, int64_t nq, int64_t k0, int64_t nk, uint8_t* keep,
                int64_t ld) const override {
    for (int64_t i = 0; i < nq; ++i) FillRange(keep + i * ld, k0, nk, Start(q0 + i), q0 + i);
  }
  std::optional<BlockKind> Classify(int64_t b, int64_t h, int64_t q0, int64_t q1, int64_t k0,
                                    int64_t k1) const override {
    if (q1 <= q0 || k1 <= k0) return BlockKind::kEmpty;
    // Query q keeps [Start(q), q]; both ends grow with q.
    if (Start(q1 - 1) <= k0 && k1 - 1 <= q0) return BlockKind::kFull;
    const int64_t q = std::max(q0, k0);  // the query whose range reaches lowest among q >= k0
    if (q > q1 - 1 || Start(q) > k1 - 1) return BlockKind::kEmpty;
    return BlockKind::kPartial;
  }
  std::string ToString() const override {
    return fmt::format("q_idx / {0} == kv_idx / {0} && q_idx >= kv_idx", chunk_);
  }

 private:
  int64_t Start(int64_t q) const { return FloorDiv(q, chunk_) * chunk_; }
  int64_t chunk_;
};

// Minimum and maximum of any range of each row of a [rows, n] tensor, from
// per-chunk extrema: O(n / kChunk) memory, O(range / kChunk + kChunk) time.
class RangeMinMax {
 public:
  static constexpr int64_t kChunk = 16;

  explicit RangeMinMax(const IndexTensor& t) : rows_(t.shape[0]), n_(t.shape[1]) {
    chunks_ = (n_ + kChunk - 1) / kChunk;
    min_.resize(rows_ * chunks_);
    max_.resize(rows_ * chunks_);
    for (int64_t r = 0; r < rows_; ++r) {
      for (int64_t c = 0; c < chunks_; ++c) {
        const int64_t* first = t.values.data() + r * n_ + c * kChunk;
        const auto [lo, hi] = std::minmax_element(first, first + std::min(kChunk, n_ - c * kChunk));
        min_[r * chunks_ + c] = *lo;
        max_[r * chunks_ + c] = *hi;
      }
    }
  }

  // Extrema of row r of t (the tensor this was built from) over [lo, hi);
  // requires 0 <= lo < hi <= n.
  std::pair<int64_t, int64_t> Query(const IndexTensor& t, int64_t r, int64_t lo, int64_t hi) const {
    const int64_t* row = t.values.data() + r * n_;
    int64_t mn = row[lo], mx = row[lo];
    int64_t i = lo;
    for (; i < hi && i % kChunk != 0; ++i) mn = std::min(mn, row[i]), mx = std::max(mx, row[i]);
    for (; i + kChunk <= hi; i += kChunk) {
      mn = std::min(mn, min_[r * chunks_ + i / kChunk]);
      mx = std::max(mx, max_[r * chunks_ + i / kChunk]);
    }
    for (; i < hi; ++i) mn = std::min(mn, row[i]), mx = std::max(mx, row[i]);
    return {mn, mx};
  }

 private:
  int64_t rows_, n_, chunks_ = 0;
  std::vector<int64_t> min_, max_;
};

void CheckSegmentIds(const IndexTensor& t, const char* name) {
  WEFT_CHECK(t.rank() == 2 && t.shape[0] >= 1 && t.shape[1] >= 0,
             "document_mask: {} has shape {}; pass segment ids of shape [B, S]", name,
             ShapeText(t.shape));
  WEFT_CHECK(static_cast<int64_t>(t.values.size()) == t.numel(),
             "document_mask: {} has {} values but its shape {} needs {}", name, t.values.size(),
             ShapeText(t.shape), t.numel());
}

class DocumentMaskMod final : public MaskMod {
 public:
  DocumentMaskMod(IndexTensor q_ids, IndexTensor kv_ids)
      : q_ids_((CheckSegmentIds(q_ids, "q_segment_ids"), std::move(q_ids))),
        kv_ids_((CheckSegmentIds(kv_ids, "kv_segment_ids"), std::move(kv_ids))),
        q_range_(q_ids_),
        kv_range_(kv_ids_) {}

  void Evaluate(int64_t b, int64_t h, int64_t q0, int64_t nq, int64_t k0, int64_t nk, uint8_t* keep,
                int64_t ld) const override {
    if (nq <= 0 || nk <= 0) return;
    const int64_t* q = Row(q_ids_, "q_segment_ids", b, q0, nq);
    const int64_t* kv = Row(kv_ids_, "kv_segment_ids", b, k0, nk);
    for (int64_t i = 0; i < nq; ++i) {
      const int64_t id = q[i];
      uint8_t* out = keep + i * ld;
      for (int64_t j = 0; j < nk; ++j) out[j] = kv[j] == id;
    }
  }
  std::optional<BlockKind> Classify(int64_t b, int64_t h, int64_t q0, int64_t q1, int64_t k0,
                                    int64_t k1) const override {
    if (q1 <= q0 || k1 <= k0) return BlockKind::kEmpty;
    if (!InRange(q_ids_, b, q0, q1) || !InRange(kv_ids_, b, k0, k1)) return std::nullopt;
    const auto [q_min, q_max] = q_range_.Query(q_ids_, RowIndex(q_ids_, b), q0, q1);
    const auto [k_min, k_max] = kv_range_.Query(kv_ids_, RowIndex(kv_ids_, b), k0, k1);
    if (q_min == q_max && k_min == k_max && q_min == k_min) return BlockKind::kFull;
    if (q_max < k_min || k_max < q_min) return BlockKind::kEmpty;
    return std::nullopt;  // unsorted ids can interleave without ever matching
  }
  void Validate(int64_t batch, int64_t heads, int64_t q_len, int64_t kv_len) const override {
    auto check = [&](const IndexTensor& t, const char* name, const char* len_name, int64_t len,
                     const char* s) {
      WEFT_CHECK((t.shape[0] == batch || t.shape[0] == 1) && t.shape[1] == len,
                 "document_mask: {} has shape {} but the attention has batch {} and {} {}; pass "
                 "segment ids of shape [B, {}] (or [1, {}] for every batch row)",
                 name, ShapeText(t.shape), batch, len_name, len, s, s);
    };
    check(q_ids_, "q_segment_ids", "q_len", q_len, "Sq");
    check(kv_ids_, "kv_segment_ids", "kv_len", kv_len, "Skv");
  }
  std::string ToString() const override {
    return fmt::format("q_segment_ids[{}, q_idx] == kv_segment_ids[{}, kv_idx]",
                       q_ids_.shape[0] == 1 ? "0" : "b", kv_ids_.shape[0] == 1 ? "0" : "b");
  }
  std::map<std::string, IndexTensor> Tensors() const override {
    return {{"q_segment_ids", q_ids_}, {"kv_segment_ids", kv_ids_}};
  }

 private:
  static int64_t RowIndex(const IndexTensor& t, int64_t b) { return t.shape[0] == 1 ? 0 : b; }
  static bool InRange(const IndexTensor& t, int64_t b, int64_t lo, int64_t hi) {
    return (t.shape[0] == 1 || (b >= 0 && b < t.shape[0])) && lo >= 0 && hi <= t.shape[1];
  }
  static const int64_t* Row(const IndexTensor& t, const char* name, int64_t b, int64_t start,
                            int64_t n) {
    WEFT_CHECK(InRange(t, b, start, start + n),
               "document_mask: batch row {}, positions [{}, {}) are outside {} of shape {}; "
               "pass segment ids covering the attention ([B, S])",
               b, start, start + n, name, ShapeText(t.shape));
    return t.values.data() + RowIndex(t, b) * t.shape[1] + start;
  }

  IndexTensor q_ids_, kv_ids_;
  RangeMinMax q_range_, kv_range_;
};

bool SameTensor(const IndexTensor& a, const IndexTensor& b) {
  return a.shape == b.shape && a.values == b.values;
}

// and_masks / or_masks. Sub-masks may name their tensors alike; clashing
// names of different tensors get a suffix in the combined expression.
class CombinedMaskMod final : public MaskMod {
 public:
  CombinedMaskMod(bool is_and, std::vector<MaskModPtr> masks)
      : is_and_(is_and), masks_(std::move(masks)) {
    const char* name = is_and_ ? "and_masks" : "or_masks";
    WEFT_CHECK(!masks_.empty(), "{}: needs at least one mask", name);
    for (size_t i = 0; i < masks_.size(); ++i) {
      WEFT_CHECK(masks_[i] != nullptr, "{}: mask {} is null", name, i);
    }
  }

  void Evaluate(int64_t b, int64_t h, int64_t q0, int64_t nq, int64_t k0, int64_t nk, uint8_t* keep,
                int64_t ld) const override {
    if (nq <= 0 || nk <= 0) return;
    // The identity of the combination (and: full, or: empty) decides nothing;
    // its opposite decides the whole tile.
    const BlockKind neutral = is_and_ ? BlockKind::kFull : BlockKind::kEmpty;
    const BlockKind absorbing = is_and_ ? BlockKind::kEmpty : BlockKind::kFull;
    std::vector<const MaskMod*> todo;
    for (const MaskModPtr& m : masks_) {
      const std::optional<BlockKind> kind = m->Classify(b, h, q0, q0 + nq, k0, k0 + nk);
      if (kind == absorbing) return Fill(keep, nq, nk, ld, !is_and_);
      if (kind != neutral) todo.push_back(m.get());
    }
    if (todo.empty()) return Fill(keep, nq, nk, ld, is_and_);
    todo[0]->Evaluate(b, h, q0, nq, k0, nk, keep, ld);
    std::vector<uint8_t> other(todo.size() > 1 ? nq * nk : 0);
    for (size_t m = 1; m < todo.size(); ++m) {
      todo[m]->Evaluate(b, h, q0, nq, k0, nk, other.data(), nk);
      for (int64_t i = 0; i < nq; ++i) {
        uint8_t* out = keep + i * ld;
        const uint8_t* in = other.data() + i * nk;
        if (is_and_) {
          for (int64_t j = 0; j < nk; ++j) out[j] &= in[j];
        } else {
          for (int64_t j = 0; j < nk; ++j) out[j] |= in[j];
        }
      }
    }
  }

  // Exact when it answers: a single partial sub-mask among neutral ones is
  // partial, but two partial ones may combine into anything.
  std::optional<BlockKind> Classify(int64_t b, int64_t h, int64_t q0, int64_t q1, int64_t k0,
                                    int64_t k1) const override {
    const BlockKind neutral = is_and_ ? BlockKind::kFull : BlockKind::kEmpty;
    const BlockKind absorbing = is_and_ ? BlockKind::kEmpty : BlockKind::kFull;
    bool unknown = false;
    int partial = 0;
    for (const MaskModPtr& m : masks_) {
      const std::optional<BlockKind> kind = m->Classify(b, h, q0, q1, k0, k1);
      if (kind == absorbing) return absorbing;
      if (!kind) unknown = true;
      if (kind == BlockKind::kPartial) ++partial;
    }
    if (unknown || partial > 1) return std::nullopt;
    return partial == 1 ? BlockKind::kPartial : neutral;
  }

  void Validate(int64_t batch, int64_t heads, int64_t q_len, int64_t kv_len) const override {
    for (const MaskModPtr& m : masks_) m->Validate(batch, heads, q_len, kv_len);
  }
  std::string ToString() const override { return Combine().first; }
  std::map<std::string, IndexTensor> Tensors() const override { return Combine().second; }

 private:
  static void Fill(uint8_t* keep, int64_t nq, int64_t nk, int64_t ld, bool value) {
    for (int64_t i = 0; i < nq; ++i) std::memset(keep + i * ld, value ? 1 : 0, nk);
  }

  std::pair<std::string, std::map<std::string, IndexTensor>> Combine() const {
    std::string text;
    std::map<std::string, IndexTensor> tensors;
    for (const MaskModPtr& m : masks_) {
      const std::map<std::string, IndexTensor> own = m->Tensors();
      std::map<std::string, std::string> renames;
      for (const auto& [name, tensor] : own) {
        auto it = tensors.find(name);
        if (it == tensors.end()) {
          tensors.emplace(name, tensor);
        } else if (!SameTensor(it->second, tensor)) {
          std::string fresh;
          for (int k = 2; fresh.empty() || tensors.count(fresh) || own.count(fresh); ++k) {
            fresh = fmt::format("{}_{}", name, k);
          }
          renames[name] = fresh;
          tensors.emplace(fresh, tensor);
        }
      }
      if (!text.empty()) text += is_and_ ? " && " : " || ";
      text += '(';
      text += RenameIdentifiers(m->ToString(), renames);
      text += ')';
    }
    return {text, tensors};
  }

  bool is_and_;
  std::vector<MaskModPtr> masks_;
};

class ExprMaskMod final : public MaskMod {
 public:
  explicit ExprMaskMod(ModExpr expr) : expr_(std::move(expr)) {}
  void Evaluate(int64_t b, int64_t h, int64_t q0, int64_t nq, int64_t k0, int64_t nk, uint8_t* keep,
                int64_t ld) const override {
    expr_.EvaluateMask(b, h, q0, nq, k0, nk, keep, ld);
  }
  std::optional<BlockKind> Classify(int64_t b, int64_t h, int64_t q0, int64_t q1, int64_t k0,
                                    int64_t k1) const override {
    if (q1 <= q0 || k1 <= k0) return BlockKind::kEmpty;
    const std::optional<bool> all = expr_.ClassifyMask(b, h, q0, q1, k0, k1);
    if (!all) return std::nullopt;
    return *all ? BlockKind::kFull : BlockKind::kEmpty;
  }
  std::string ToString() const override { return expr_.text(); }
  std::map<std::string, IndexTensor> Tensors() const override { return expr_.index_tensors(); }

 private:
  ModExpr expr_;
};

class LambdaMaskMod final : public MaskMod {
 public:
  using Fn = std::function<bool(int64_t, int64_t, int64_t, int64_t)>;
  LambdaMaskMod(Fn fn, std::string description)
      : fn_(std::move(fn)), description_(std::move(description)) {
    WEFT_CHECK(fn_ != nullptr, "lambda_mask: the function '{}' is empty", description_);
  }
  void Evaluate(int64_t b, int64_t h, int64_t q0, int64_t nq, int64_t k0, int64_t nk, uint8_t* keep,
                int64_t ld) const override {
    for (int64_t i = 0; i < nq; ++i) {
      for (int64_t j = 0; j < nk; ++j) keep[i * ld + j] = fn_(b, h, q0 + i, k0 + j) ? 1 : 0;
    }
  }
  // Not an expression: parsing it fails, which is the point.
  std::string ToString() const override { return "<lambda: " + description_ + ">"; }

 private:
  Fn fn_;
  std::string description_;
};

}  // namespace

MaskModPtr CausalMask(int64_t offset) { return std::make_shared<CausalMaskMod>(offset); }
MaskModPtr SlidingWindowMask(int64_t left, int64_t right) {
  return std::make_shared<SlidingWindowMaskMod>(left, right);
}
MaskModPtr PrefixLmMask(std::vector<int64_t> prefix_lengths) {
  return std::make_shared<PrefixLmMaskMod>(std::move(prefix_lengths));
}
MaskModPtr DocumentMask(IndexTensor q_segment_ids, IndexTensor kv_segment_ids) {
  return std::make_shared<DocumentMaskMod>(std::move(q_segment_ids), std::move(kv_segment_ids));
}
MaskModPtr ChunkedCausalMask(int64_t chunk) {
  return std::make_shared<ChunkedCausalMaskMod>(chunk);
}
MaskModPtr AndMasks(std::vector<MaskModPtr> masks) {
  return std::make_shared<CombinedMaskMod>(true, std::move(masks));
}
MaskModPtr OrMasks(std::vector<MaskModPtr> masks) {
  return std::make_shared<CombinedMaskMod>(false, std::move(masks));
}
MaskModPtr MaskExpr(const std::string& text, std::map<std::string, IndexTensor> tensors) {
  return std::make_shared<ExprMaskMod>(ModExpr::ParseMask(text, std::move(tensors)));
}
MaskModPtr LambdaMask(std::function<bool(int64_t, int64_t, int64_t, int64_t)> fn,
                      std::string description) {
  return std::make_shared<LambdaMaskMod>(std::move(fn), std::move(description));
}

}  // namespace weft::kernels
