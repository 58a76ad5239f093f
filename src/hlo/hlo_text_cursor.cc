#include "hlo_text_cursor.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <optional>

#include "weft/base/error.h"

namespace weft::hlo {

size_t HloTextCursor::AlnumEnd(size_t at) const {
  const std::string_view t = text();
  while (at < t.size() && std::isalnum(static_cast<unsigned char>(t[at]))) ++at;
  return at;
}

bool HloTextCursor::AtShape() {
  Skip();
  if (Peek() == '(') return true;
  const size_t end = AlnumEnd(pos());
  return end < text().size() && text()[end] == '[' && end > pos();
}

Shape HloTextCursor::ParseShape() { return ParseShape(0); }

Shape HloTextCursor::ParseShape(int depth) {
  const size_t shape_at = Mark();
  if (TryConsume("(")) {
    if (depth >= kMaxTupleNesting) {
      FailAt(shape_at, fmt::format("tuple shapes nest more than {} deep; flatten the tuple",
                                   kMaxTupleNesting));
    }
    std::vector<Shape> elements;
    if (!TryConsume(")")) {
      do {
        elements.push_back(ParseShape(depth + 1));
      } while (TryConsume(","));
      Expect(")", "',' or ')' in a tuple shape");
    }
    try {
      return Shape::Tuple(std::move(elements));
    } catch (const Error& e) {
      FailAt(shape_at, e.what());
    }
  }
  const std::string_view t = text();
  const size_t type_at = pos();
  const size_t end = AlnumEnd(type_at);
  if (end == type_at) Expected("a shape such as f32[4,8]");
  const std::string_view type_name = t.substr(type_at, end - type_at);
  std::optional<PrimitiveType> type = PrimitiveTypeFromName(type_name);
  if (!type) {
    FailAt(type_at, fmt::format("unsupported element type '{}'; weft supports {}", type_name,
                                SupportedPrimitiveTypeNames()));
  }
  set_pos(end);
  if (end >= t.size() || t[end] != '[') Expected("'[' after the element type");
  set_pos(end + 1);
  std::vector<int64_t> dims;
  if (!TryConsume("]")) {
    do {
      const size_t dim_at = Mark();
      if (Peek() == '?' || t.substr(dim_at, 2) == "<=") {
        FailAt(dim_at, "dynamic dimensions are not supported; give every dimension a fixed size");
      }
      dims.push_back(ParseInt("a dimension size"));
      if (dims.back() < 0) FailAt(dim_at, "dimension sizes must be >= 0");
    } while (TryConsume(","));
    Expect("]", "',' or ']' in the dimensions");
  }
  // Before anything uses the sizes: an element count or byte size that
  // overflows int64 would wrap, and buffers would be allocated short.
  if (std::optional<std::string> problem = ArrayShapeProblem(*type, dims)) {
    FailAt(type_at, *problem);
  }
  // Optional layout, directly attached: {1,0}, {0,1}, {1,0:T(8,128)(2,1)S(1)}.
  // Values do not depend on the layout (only bitcast would see it: the
  // parser refuses one that changes it): a minor-to-major permutation of the
  // dims is accepted with whatever tiling or memory space follows its ':',
  // and kept only as last_layout().
  last_layout_.clear();
  if (pos() < t.size() && t[pos()] == '{') {
    const size_t layout_at = pos();
    set_pos(layout_at + 1);
    std::vector<int64_t> minor_to_major;
    while (std::isdigit(static_cast<unsigned char>(Peek()))) {
      minor_to_major.push_back(ParseInt("a layout dimension"));
      if (!TryConsume(",")) break;
    }
    Skip();
    const size_t close = t.find('}', pos());
    if (close == std::string_view::npos) FailAt(layout_at, "unterminated layout");
    const std::string_view layout = t.substr(layout_at, close + 1 - layout_at);
    std::vector<int64_t> sorted = minor_to_major;
    std::sort(sorted.begin(), sorted.end());
    bool permutation = minor_to_major.empty() || sorted.size() == dims.size();
    for (size_t d = 0; permutation && d < sorted.size(); ++d) {
      permutation = sorted[d] == static_cast<int64_t>(d);
    }
    if (!permutation || (Peek() != '}' && Peek() != ':')) {
      FailAt(layout_at,
             fmt::format("layout {} of {}[{}] is not a minor-to-major order of its {} "
                         "dims (e.g. {{{}}})",
                         layout, type_name, fmt::join(dims, ","), dims.size(),
                         fmt::join(std::vector<int64_t>(sorted.rbegin(), sorted.rend()), ",")));
    }
    set_pos(close + 1);
    last_layout_ = std::move(minor_to_major);
  }
  return Shape(*type, std::move(dims));
}

}  // namespace weft::hlo
