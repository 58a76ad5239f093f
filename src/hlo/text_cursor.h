// TextCursor: the lexing half of the HLO parser. Walks HLO text, skips
// whitespace and comments, reads the small tokens HLO is made of, and throws
// weft::Error messages of the form "<source>:line:col: expected X, found 'Y'".
// Internal to src/hlo (the parser and its tests).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "weft/hlo/instruction.h"
#include "weft/hlo/shape.h"

namespace weft::hlo {

class TextCursor {
 public:
  // `source_name` prefixes messages ("model.hlo:3:7: ..."); may be empty.
  TextCursor(std::string_view text, std::string source_name);

  std::string_view text() const { return text_; }
  size_t pos() const { return pos_; }
  // Skips whitespace/comments and returns where the next token starts.
  size_t Mark() {
    Skip();
    return pos_;
  }
  void set_pos(size_t pos) { pos_ = pos; }
  SourceLocation LocationOf(size_t offset) const;
  // "line:col" (with the source name when there is one).
  std::string Where(size_t offset) const;

  [[noreturn]] void FailAt(size_t offset, std::string_view message) const;
  // "expected <what>, found '<next token>'" at the current position.
  [[noreturn]] void Expected(std::string_view what) const;

  // Skips whitespace, // line comments and /* block */ comments.
  void Skip();
  bool AtEnd();
  char Peek();
  // Consumes `token` (after Skip) if it is next.
  bool TryConsume(std::string_view token);
  void Expect(std::string_view token, std::string_view what);
  // Consumes a whole word (not followed by a name character).
  bool TryKeyword(std::string_view word);
  // A name: optional '%', then [A-Za-z0-9_.-]+ starting with a letter or '_'.
  std::string ParseName(std::string_view what);
  // [A-Za-z0-9_-]+ (attribute keys, opcodes, enum values).
  std::string ParseWord(std::string_view what);
  int64_t ParseInt(std::string_view what);
  // Integer, decimal or exponent float, inf, -inf, nan.
  double ParseNumber(std::string_view what);
  // A decimal integer (an optional sign, then digits, as XLA prints integer
  // constants), read exactly: its sign and magnitude. nullopt, consuming
  // nothing, when the next token is not one (a float such as 2.0 or 1e3);
  // an error at the token when its magnitude exceeds 64 bits.
  struct ExactInteger {
    bool negative = false;
    uint64_t magnitude = 0;
  };
  std::optional<ExactInteger> TryParseExactInteger(std::string_view what);
  bool ParseBool(std::string_view what);
  // "..." with \" \\ \n \t escapes.
  std::string ParseQuoted(std::string_view what);
  // {1,2,3} (possibly empty).
  std::vector<int64_t> ParseIntList(std::string_view what);
  // A value kept verbatim: a balanced {...}, a "quoted" string, or a bare
  // token up to ',' / whitespace. Returns the exact text.
  std::string ParseRawValue(std::string_view what);
  // The end of the balanced {...} at `at` in `t` (quoted strings skipped),
  // or npos.
  static size_t BalancedBracesEnd(std::string_view t, size_t at);

  // f32[4,8]{1,0}, pred[], (f32[4], s32[]). A layout may be any
  // minor-to-major order of the dims (values do not depend on it).
  // Sizes that overflow int64 (ArrayShapeProblem) and tuples nested more
  // than kMaxTupleNesting deep are errors at the shape's line:col.
  Shape ParseShape();
  // The minor-to-major order the last array shape parsed gave, or empty
  // when it gave none (the default, {rank-1,...,0}).
  const std::vector<int64_t>& last_layout() const { return last_layout_; }
  static constexpr int kMaxTupleNesting = 64;
  // True if a shape starts here: '(' or a type name directly followed by '['.
  bool AtShape();

 private:
  Shape ParseShape(int depth);
  std::string NextTokenText(size_t offset) const;

  std::string_view text_;
  std::string source_name_;
  size_t pos_ = 0;
  std::vector<size_t> line_starts_;
  std::vector<int64_t> last_layout_;
};

}  // namespace weft::hlo
