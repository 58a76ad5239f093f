#include "weft/kernels/score_mod.h"

#include <fmt/format.h>

#include <cmath>
#include <utility>

#include "weft/base/error.h"
#include "weft/kernels/mod_expr.h"

namespace weft::kernels {
namespace {

// Each built-in computes with the same float operations, in the same order,
// as the expression its ToString() gives, so the two agree to the bit.

class SoftcapScoreMod final : public ScoreMod {
 public:
  explicit SoftcapScoreMod(float cap) : cap_(cap) {
    WEFT_CHECK(std::isfinite(cap) && cap > 0, "softcap: cap {} must be positive and finite", cap);
  }
  void Apply(int64_t b, int64_t h, int64_t q0, int64_t nq, int64_t k0, int64_t nk, float* scores,
             int64_t ld, float* grad) const override {
    for (int64_t i = 0; i < nq; ++i) {
      float* s = scores + i * ld;
      for (int64_t j = 0; j < nk; ++j) {
        const float t = std::tanh(s[j] / cap_);
        s[j] = cap_ * t;
        if (grad) grad[i * ld + j] = 1.0f - t * t;
      }
    }
  }
  std::string ToString() const override {
    return fmt::format("{0} * tanh(score / {0})", FormatFloatLiteral(cap_));
  }

 private:
  float cap_;
};

class AlibiScoreMod final : public ScoreMod {
 public:
  explicit AlibiScoreMod(std::vector<float> slopes) : slopes_(std::move(slopes)) {
    WEFT_CHECK(!slopes_.empty(), "alibi: slopes is empty; pass one slope per query head");
  }
  void Apply(int64_t b, int64_t h, int64_t q0, int64_t nq, int64_t k0, int64_t nk, float* scores,
             int64_t ld, float* grad) const override {
    WEFT_CHECK(h >= 0 && h < static_cast<int64_t>(slopes_.size()),
               "alibi: query head {} but only {} slopes; pass one slope per query head", h,
               slopes_.size());
    const float slope = slopes_[h];
    for (int64_t i = 0; i < nq; ++i) {
      float* s = scores + i * ld;
      for (int64_t j = 0; j < nk; ++j) {
        s[j] = s[j] + slope * static_cast<float>((k0 + j) - (q0 + i));
        if (grad) grad[i * ld + j] = 1.0f;
      }
    }
  }
  void Validate(int64_t batch, int64_t heads, int64_t q_len, int64_t kv_len) const override {
    WEFT_CHECK(static_cast<int64_t>(slopes_.size()) == heads,
               "alibi: {} slopes but the attention has {} query heads; pass one slope per query "
               "head",
               slopes_.size(), heads);
  }
  std::string ToString() const override { return "score + alibi_slopes[h] * (kv_idx - q_idx)"; }
  std::map<std::string, ValueTensor> Tensors() const override {
    return {{"alibi_slopes", ValueTensor{{static_cast<int64_t>(slopes_.size())}, slopes_}}};
  }

 private:
  std::vector<float> slopes_;
};

// The table index is q_idx - kv_idx + kv_len - 1, so kv_len is part of the
// mod: Apply() sees only tile coordinates.
class RelativeBiasScoreMod final : public ScoreMod {
 public:
  RelativeBiasScoreMod(std::vector<float> table, int64_t kv_len)
      : table_(std::move(table)), kv_len_(kv_len) {
    const int64_t n = static_cast<int64_t>(table_.size());
    WEFT_CHECK(kv_len >= 1 && kv_len <= n,
               "relative_bias: kv_len {} does not fit a table of {} entries (q_len + kv_len - 1)",
               kv_len, n);
  }
  void Apply(int64_t b, int64_t h, int64_t q0, int64_t nq, int64_t k0, int64_t nk, float* scores,
             int64_t ld, float* grad) const override {
    if (nq <= 0 || nk <= 0) return;
    const int64_t offset = kv_len_ - 1;
    const int64_t lo = q0 - (k0 + nk - 1) + offset, hi = (q0 + nq - 1) - k0 + offset;
    WEFT_CHECK(lo >= 0 && hi < static_cast<int64_t>(table_.size()),
               "relative_bias: queries [{}, {}) and keys [{}, {}) need table entries [{}, {}] but "
               "the table has {}; build it for q_len + kv_len - 1 positions",
               q0, q0 + nq, k0, k0 + nk, lo, hi, table_.size());
    for (int64_t i = 0; i < nq; ++i) {
      float* s = scores + i * ld;
      const float* bias = table_.data() + (q0 + i - k0 + offset);  // bias[-j] is key k0 + j
      for (int64_t j = 0; j < nk; ++j) {
        s[j] = s[j] + bias[-j];
        if (grad) grad[i * ld + j] = 1.0f;
      }
    }
  }
  void Validate(int64_t batch, int64_t heads, int64_t q_len, int64_t kv_len) const override {
    const int64_t n = static_cast<int64_t>(table_.size());
    WEFT_CHECK(n == q_len + kv_len - 1,
               "relative_bias: the table has {} entries but the attention (q_len {}, kv_len {}) "
               "needs q_len + kv_len - 1 = {}",
               n, q_len, kv_len, q_len + kv_len - 1);
    WEFT_CHECK(
        kv_len == kv_len_,
        "relative_bias: the mod was made for kv_len {} but the attention has kv_len {}; "
        "pass kv_len (Python: relative_bias(table, kv_len=...); C++: RelativeBias(table, kv_len))",
        kv_len_, kv_len);
  }
  std::string ToString() const override {
    const int64_t offset = kv_len_ - 1;
    return offset == 0 ? "score + relative_bias[q_idx - kv_idx]"
                       : fmt::format("score + relative_bias[q_idx - kv_idx + {}]", offset);
  }
  std::map<std::string, ValueTensor> Tensors() const override {
    return {{"relative_bias", ValueTensor{{static_cast<int64_t>(table_.size())}, table_}}};
  }

 private:
  std::vector<float> table_;
  int64_t kv_len_;
};

class ExprScoreMod final : public ScoreMod {
 public:
  explicit ExprScoreMod(ModExpr expr) : expr_(std::move(expr)) {}
  void Apply(int64_t b, int64_t h, int64_t q0, int64_t nq, int64_t k0, int64_t nk, float* scores,
             int64_t ld, float* grad) const override {
    expr_.ApplyScore(b, h, q0, nq, k0, nk, scores, ld, grad);
  }
  std::string ToString() const override { return expr_.text(); }
  std::map<std::string, ValueTensor> Tensors() const override { return expr_.value_tensors(); }

 private:
  ModExpr expr_;
};

}  // namespace

ScoreModPtr Softcap(float cap) { return std::make_shared<SoftcapScoreMod>(cap); }
ScoreModPtr Alibi(std::vector<float> slopes) {
  return std::make_shared<AlibiScoreMod>(std::move(slopes));
}
ScoreModPtr RelativeBias(std::vector<float> table) {
  const int64_t n = static_cast<int64_t>(table.size());
  WEFT_CHECK(n % 2 == 1,
             "relative_bias: a table of {} entries cannot serve q_len == kv_len (it needs "
             "2 * S - 1 entries); for q_len != kv_len pass kv_len (Python: relative_bias(table, "
             "kv_len=...); C++: "
             "RelativeBias(table, kv_len))",
             n);
  return std::make_shared<RelativeBiasScoreMod>(std::move(table), (n + 1) / 2);
}
ScoreModPtr RelativeBias(std::vector<float> table, int64_t kv_len) {
  return std::make_shared<RelativeBiasScoreMod>(std::move(table), kv_len);
}
ScoreModPtr ScoreExpr(const std::string& text, std::map<std::string, ValueTensor> tensors) {
  return std::make_shared<ExprScoreMod>(ModExpr::ParseScore(text, std::move(tensors)));
}

}  // namespace weft::kernels
