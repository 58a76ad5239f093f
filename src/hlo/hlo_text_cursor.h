// HloTextCursor: the HLO parser's lexer, weft::TextCursor (tokens, line:col
// errors) plus HLO shapes. Internal to src/hlo (the parser and its tests).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "weft/base/text_cursor.h"
#include "weft/hlo/instruction.h"
#include "weft/hlo/shape.h"

namespace weft::hlo {

class HloTextCursor : public TextCursor {
 public:
  using TextCursor::TextCursor;

  // Where `offset` is, as an instruction records it.
  SourceLocation SourceLocationOf(size_t offset) const {
    const Location loc = LocationOf(offset);
    return {loc.line, loc.col};
  }

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
  // The letters and digits from `at` on (an element type's name).
  size_t AlnumEnd(size_t at) const;

  std::vector<int64_t> last_layout_;
};

}  // namespace weft::hlo
