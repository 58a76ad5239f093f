// Score modifications with FlexAttention's score_mod semantics: a function
// of (score, b, h, q_idx, kv_idx) applied to q.k * scale before the softmax.
// The backward differentiates through it with respect to the score.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "weft/kernels/mod_tensor.h"

namespace weft::kernels {

class ScoreMod {
 public:
  virtual ~ScoreMod() = default;

  // scores[i * ld + j] holds the raw score of query q0+i and key k0+j
  // (i < nq, j < nk) and is replaced by the modified score. When grad is not
  // null, grad[i * ld + j] receives d(modified)/d(raw) at that raw score.
  virtual void Apply(int64_t b, int64_t h, int64_t q0, int64_t nq, int64_t k0, int64_t nk,
                     float* scores, int64_t ld, float* grad) const = 0;

  // Throws weft::Error when the score mod cannot apply to attention of these
  // sizes (e.g. too few ALiBi slopes for the heads), naming the input.
  virtual void Validate(int64_t batch, int64_t heads, int64_t q_len, int64_t kv_len) const {}

  // The score mod in the expression language (mod_expr.h).
  virtual std::string ToString() const = 0;

  // The named float tensors the expression refers to.
  virtual std::map<std::string, ValueTensor> Tensors() const { return {}; }
};

using ScoreModPtr = std::shared_ptr<const ScoreMod>;

// cap * tanh(score / cap); cap > 0.
ScoreModPtr Softcap(float cap);
// score + slopes[h] * (kv_idx - q_idx); one slope per query head.
ScoreModPtr Alibi(std::vector<float> slopes);
// score + table[q_idx - kv_idx + kv_len - 1]; table has q_len + kv_len - 1 entries.
// Apply() does not see kv_len, so it is fixed when the mod is made: this form
// assumes q_len == kv_len (an odd table of 2 * S - 1 entries); for
// q_len != kv_len pass kv_len. Validate() checks both against the attention.
ScoreModPtr RelativeBias(std::vector<float> table);
ScoreModPtr RelativeBias(std::vector<float> table, int64_t kv_len);
// An expression over score, b, h, q_idx, kv_idx and the named float tensors,
// e.g. "score + bias[h, q_idx - kv_idx + 127]".
ScoreModPtr ScoreExpr(const std::string& text, std::map<std::string, ValueTensor> tensors = {});

}  // namespace weft::kernels
