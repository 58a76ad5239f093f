// The expression language of masks and score mods: a mask or score mod
// written down as text (so it serializes into an HLO custom-call config) and
// evaluated a tile at a time.
//
// Grammar (C-like precedence, lowest first):
//   expr    := or ('?' expr ':' expr)?           right-associative ternary
//   or      := and ('||' and)*
//   and     := eq ('&&' eq)*
//   eq      := rel (('==' | '!=') rel)*
//   rel     := add (('<' | '<=' | '>' | '>=') add)*
//   add     := mul (('+' | '-') mul)*
//   mul     := unary (('*' | '/' | '%') unary)*
//   unary   := ('-' | '+' | '!') unary | primary
//   primary := int | float | 'true' | 'false' | '(' expr ')'
//            | variable | tensor '[' expr (',' expr)* ']' | func '(' expr (',' expr)* ')'
//
// Names: b, h, q_idx, kv_idx (integers) and, in score expressions only,
// score (float). Tensors are the named tensors passed with the text: integer
// tensors for masks, float tensors for score mods; a tensor must be indexed
// with exactly one integer per dimension.
// Functions: min(a, b, ...), max(a, b, ...), abs(a) keep the operand type;
// tanh, exp, log, sqrt, sigmoid take one number and give a float.
//
// Types are bool, int (int64) and float (float32, the kernels' precision).
// Arithmetic mixes int and float by converting the int to float. Following
// Python (and torch's `//` and `%` on integers, as FlexAttention code uses):
//   int / int is floor division (-7 / 2 == -4), and
//   a % b takes the sign of b (-7 % 2 == 1; also for floats).
// Integer arithmetic wraps on overflow; integer division by zero is an error.
// Booleans are not numbers: `(a < b) + 1` is a type error (use `?:`), and
// `a < b < c` is too. The result of a mask expression must be boolean; a
// score expression must be numeric (an int result is converted to float).
// Type errors, unknown names and wrong ranks are reported when parsing, with
// the column; out-of-range tensor indices and integer division by zero are
// reported when evaluating, naming the tensor, the index and the shape.
//
// `&&`, `||` and `?:` guard their right-hand / branch operands as in C: an
// index or a division that the condition rules out is never checked, so
// `q_idx < 8 && t[q_idx] > 0` is fine for a tensor t of 8 elements.
//
// Evaluation is vector-at-a-time: every node computes all its values for the
// tile before its parent runs. A node's values are stored as broadcast as its
// inputs allow (one value for the tile, one per query row, one per key
// column, or one per element), so `seg[b, q_idx]` costs nq lookups, not
// nq * nk. Score expressions can also give d(result)/d(score), by forward
// mode: each node that depends on score carries its derivative (at a kink of
// min, max, abs, `?:` or `%`, that of the side taken). A ModExpr is immutable
// and can be evaluated from many threads at once; scratch is per call.
// Nesting is limited (100 levels of parentheses, a tree 256 deep).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "weft/kernels/mod_tensor.h"

namespace weft::kernels {

class ModExpr {
 public:
  enum class Kind : uint8_t { kMask, kScore };

  // Parses and type-checks a mask expression (boolean result). Throws
  // weft::Error ("mask_expr: ... at column N in '...'") on bad text or
  // tensors (values.size() must equal the product of shape).
  static ModExpr ParseMask(std::string text, std::map<std::string, IndexTensor> tensors = {});
  // Parses and type-checks a score expression (numeric result, may use score).
  static ModExpr ParseScore(std::string text, std::map<std::string, ValueTensor> tensors = {});

  Kind kind() const;
  const std::string& text() const;
  const std::map<std::string, IndexTensor>& index_tensors() const;  // mask tensors
  const std::map<std::string, ValueTensor>& value_tensors() const;  // score tensors

  // Mask expressions: keep[i * ld + j] = expression at (b, h, q0 + i, k0 + j)
  // for i < nq, j < nk, as 0 or 1.
  void EvaluateMask(int64_t b, int64_t h, int64_t q0, int64_t nq, int64_t k0, int64_t nk,
                    uint8_t* keep, int64_t ld) const;
  // Mask expressions: whether the expression holds everywhere (true) or
  // nowhere (false) on the block q0 <= q_idx < q1, k0 <= kv_idx < k1 at
  // (b, h), when interval analysis can tell without evaluating it; nullopt
  // when it cannot (then evaluate the block). Never answers for a block where
  // evaluation would fail (an index out of range, a division by zero).
  std::optional<bool> ClassifyMask(int64_t b, int64_t h, int64_t q0, int64_t q1, int64_t k0,
                                   int64_t k1) const;
  // Score expressions: scores[i * ld + j] (the raw score) is replaced by the
  // expression's value; when grad is not null, grad[i * ld + j] receives
  // d(value)/d(score).
  void ApplyScore(int64_t b, int64_t h, int64_t q0, int64_t nq, int64_t k0, int64_t nk,
                  float* scores, int64_t ld, float* grad) const;

  struct Impl;  // the parsed program (mod_expr.cc)

 private:
  explicit ModExpr(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;  // immutable, so copies share it
};

// Replaces whole identifier tokens of an expression text (never parts of
// names or numbers), e.g. to give the tensors of combined masks distinct
// names: RenameIdentifiers("seg[b, q_idx]", {{"seg", "seg_2"}}).
std::string RenameIdentifiers(const std::string& text,
                              const std::map<std::string, std::string>& renames);

// Formats a float literal so that the parser reads back exactly the same
// float, and always as a float ("2.0", not "2").
std::string FormatFloatLiteral(float value);

}  // namespace weft::kernels
