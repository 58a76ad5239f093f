// TextCursor: the lexer of weft's text formats (HLO modules, shardings).
// Walks text, skips whitespace and comments, reads the small tokens those
// formats are made of, and throws TextError messages of the form
// "<source>:line:col: expected X, found 'Y'". The HLO parser adds shapes on
// top of it (src/hlo/hlo_text_cursor.h); the sharding parser uses it as is.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "weft/base/error.h"

namespace weft {

// A syntax error at `offset` bytes into a cursor's text. what() is the
// message with its place ("f.hlo:3:7: expected ..."); message() is the
// message alone, for callers that say where in their own words.
class TextError : public Error {
 public:
  TextError(size_t offset, std::string message, const std::string& located)
      : Error(located), offset_(offset), message_(std::move(message)) {}
  size_t offset() const { return offset_; }
  const std::string& message() const { return message_; }

 private:
  size_t offset_;
  std::string message_;
};

class TextCursor {
 public:
  // `source_name` prefixes messages ("model.hlo:3:7: ..."); may be empty.
  TextCursor(std::string_view text, std::string source_name);

  struct Location {
    int64_t line = 0, col = 0;  // both from 1
  };

  std::string_view text() const { return text_; }
  size_t pos() const { return pos_; }
  // Skips whitespace/comments and returns where the next token starts.
  size_t Mark() {
    Skip();
    return pos_;
  }
  void set_pos(size_t pos) { pos_ = pos; }
  // The lines are found on the first call, so a cursor that reads a piece of
  // a large text (a sharding inside a module) costs nothing until it fails.
  Location LocationOf(size_t offset) const;
  // "line:col" (with the source name when there is one).
  std::string Where(size_t offset) const;

  // Throws TextError(offset, message).
  [[noreturn]] void FailAt(size_t offset, std::string_view message) const;
  // "expected <what>, found '<token at offset>'".
  [[noreturn]] void ExpectedAt(size_t offset, std::string_view what) const;
  // ExpectedAt the current position.
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
  // {1,2,3} (possibly empty); `open` and `close` give other brackets: [2,2],
  // (1,0).
  std::vector<int64_t> ParseIntList(std::string_view what, char open = '{', char close = '}');
  // A value kept verbatim: a balanced {...}, a "quoted" string, or a bare
  // token up to ',' / whitespace / an unmatched '}' outside the brackets it
  // opens (outfeed_shape=(f32[4,8]{1,0}, s32[2]{0}) is one value). Returns
  // the exact text.
  std::string ParseRawValue(std::string_view what);
  // The end of the balanced {...} at `at` in `t` (quoted strings skipped),
  // or npos.
  static size_t BalancedBracesEnd(std::string_view t, size_t at);

 private:
  std::string NextTokenText(size_t offset) const;

  std::string_view text_;
  std::string source_name_;
  size_t pos_ = 0;
  mutable std::vector<size_t> line_starts_;  // empty until LocationOf
};

}  // namespace weft
