// Internal to the HLO text parser: the text of attribute values that need
// no parser state, read off a TextCursor (errors at their line:col).
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "weft/base/text_cursor.h"
#include "weft/hlo/instruction.h"
#include "weft/hlo/literal.h"

namespace weft::hlo {

// slice={[0:4], [2:8:2]}
void ParseSlice(TextCursor& cur, std::vector<SliceDim>& slice);
// XLA's window={size=3x3 stride=2x1 pad=0_1x1_1 lhs_dilate=1x1
// rhs_dilate=2x1 rhs_reversal=0x1}; every part but size is optional, {}
// for rank 0.
std::vector<WindowDim> ParseWindow(TextCursor& cur);
// Integers joined by 'x': 3x3x1.
std::vector<int64_t> ParseTimesList(TextCursor& cur, std::string_view what);
// padding=low_high[_interior] per dim, joined by 'x': 0_0x1_2_0.
void ParsePadding(TextCursor& cur, std::vector<PadDim>& padding);
// source_target_pairs={{0,1},{1,0}}
std::vector<std::pair<int64_t, int64_t>> ParsePairs(TextCursor& cur);
// A constant's value of `shape`: a scalar, or nested braces per dim.
// Integer constants are read exactly (s64 and u64 beyond 2^53 included).
Literal ParseLiteral(TextCursor& cur, const Shape& shape);

}  // namespace weft::hlo
