#include "text_cursor.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>

#include "weft/base/error.h"

namespace weft::hlo {
namespace {

bool IsNameStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool IsNameChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
}
bool IsWordChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
}

}  // namespace

TextCursor::TextCursor(std::string_view text, std::string source_name)
    : text_(text), source_name_(std::move(source_name)) {
  line_starts_.push_back(0);
  for (size_t i = 0; i < text_.size(); ++i) {
    if (text_[i] == '\n') line_starts_.push_back(i + 1);
  }
}

SourceLocation TextCursor::LocationOf(size_t offset) const {
  auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
  const size_t line = it - line_starts_.begin();
  return {static_cast<int64_t>(line), static_cast<int64_t>(offset - line_starts_[line - 1] + 1)};
}

std::string TextCursor::Where(size_t offset) const {
  SourceLocation loc = LocationOf(offset);
  if (source_name_.empty()) return fmt::format("{}:{}", loc.line, loc.col);
  return fmt::format("{}:{}:{}", source_name_, loc.line, loc.col);
}

void TextCursor::FailAt(size_t offset, std::string_view message) const {
  throw Error(fmt::format("{}: {}", Where(offset), message));
}

std::string TextCursor::NextTokenText(size_t offset) const {
  if (offset >= text_.size()) return "end of input";
  size_t end = offset;
  if (IsNameChar(text_[end]) || text_[end] == '%') {
    while (end < text_.size() && (IsNameChar(text_[end]) || text_[end] == '%') &&
           end - offset < 40) {
      ++end;
    }
  } else {
    end = offset + 1;
  }
  return fmt::format("'{}'", text_.substr(offset, end - offset));
}

void TextCursor::Expected(std::string_view what) const {
  FailAt(pos_, fmt::format("expected {}, found {}", what, NextTokenText(pos_)));
}

void TextCursor::Skip() {
  while (pos_ < text_.size()) {
    const char c = text_[pos_];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++pos_;
    } else if (text_.substr(pos_, 2) == "//") {
      while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
    } else if (text_.substr(pos_, 2) == "/*") {
      size_t end = text_.find("*/", pos_ + 2);
      if (end == std::string_view::npos) FailAt(pos_, "unterminated /* comment");
      pos_ = end + 2;
    } else {
      return;
    }
  }
}

bool TextCursor::AtEnd() {
  Skip();
  return pos_ >= text_.size();
}

char TextCursor::Peek() {
  Skip();
  return pos_ < text_.size() ? text_[pos_] : '\0';
}

bool TextCursor::TryConsume(std::string_view token) {
  Skip();
  if (text_.substr(pos_, token.size()) != token) return false;
  pos_ += token.size();
  return true;
}

void TextCursor::Expect(std::string_view token, std::string_view what) {
  if (!TryConsume(token)) Expected(what);
}

bool TextCursor::TryKeyword(std::string_view word) {
  Skip();
  if (text_.substr(pos_, word.size()) != word) return false;
  const size_t end = pos_ + word.size();
  if (end < text_.size() && IsNameChar(text_[end])) return false;
  pos_ = end;
  return true;
}

std::string TextCursor::ParseName(std::string_view what) {
  Skip();
  size_t start = pos_;
  if (start < text_.size() && text_[start] == '%') ++start;
  if (start >= text_.size() || !IsNameStart(text_[start])) Expected(what);
  size_t end = start;
  while (end < text_.size() && IsNameChar(text_[end])) ++end;
  pos_ = end;
  return std::string(text_.substr(start, end - start));
}

std::string TextCursor::ParseWord(std::string_view what) {
  Skip();
  size_t end = pos_;
  while (end < text_.size() && IsWordChar(text_[end])) ++end;
  if (end == pos_) Expected(what);
  std::string word(text_.substr(pos_, end - pos_));
  pos_ = end;
  return word;
}

int64_t TextCursor::ParseInt(std::string_view what) {
  Skip();
  size_t end = pos_;
  if (end < text_.size() && (text_[end] == '-' || text_[end] == '+')) ++end;
  const size_t digits = end;
  while (end < text_.size() && std::isdigit(static_cast<unsigned char>(text_[end]))) ++end;
  if (end == digits) Expected(what);
  int64_t value = 0;
  const char* first = text_.data() + pos_ + (text_[pos_] == '+' ? 1 : 0);
  auto [ptr, ec] = std::from_chars(first, text_.data() + end, value);
  if (ec != std::errc()) FailAt(pos_, fmt::format("{} does not fit in 64 bits", what));
  pos_ = end;
  return value;
}

double TextCursor::ParseNumber(std::string_view what) {
  Skip();
  size_t end = pos_;
  while (end < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[end])) ||
                                text_[end] == '.' || text_[end] == '-' || text_[end] == '+')) {
    ++end;
  }
  std::string_view token = text_.substr(pos_, end - pos_);
  const bool negative = !token.empty() && token[0] == '-';
  std::string_view body = negative || (!token.empty() && token[0] == '+') ? token.substr(1) : token;
  double value;
  if (body == "inf") {
    value = std::numeric_limits<double>::infinity();
  } else if (body == "nan") {
    value = std::numeric_limits<double>::quiet_NaN();
  } else {
    auto [ptr, ec] = std::from_chars(body.data(), body.data() + body.size(), value);
    if (body.empty() || ec != std::errc() || ptr != body.data() + body.size()) Expected(what);
  }
  pos_ = end;
  return negative ? -value : value;
}

std::optional<TextCursor::ExactInteger> TextCursor::TryParseExactInteger(std::string_view what) {
  Skip();
  size_t end = pos_;
  const bool negative = end < text_.size() && text_[end] == '-';
  if (end < text_.size() && (text_[end] == '-' || text_[end] == '+')) ++end;
  const size_t digits = end;
  while (end < text_.size() && std::isdigit(static_cast<unsigned char>(text_[end]))) ++end;
  if (end == digits) return std::nullopt;
  if (end < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[end])) ||
                             text_[end] == '.' || text_[end] == '_')) {
    return std::nullopt;  // 2.5, 1e3: a float
  }
  ExactInteger value{negative, 0};
  auto [ptr, ec] = std::from_chars(text_.data() + digits, text_.data() + end, value.magnitude);
  if (ec != std::errc()) {
    FailAt(pos_,
           fmt::format("{} {} does not fit in 64 bits", what, text_.substr(pos_, end - pos_)));
  }
  pos_ = end;
  return value;
}

bool TextCursor::ParseBool(std::string_view what) {
  if (TryKeyword("true")) return true;
  if (TryKeyword("false")) return false;
  Expected(what);
}

std::string TextCursor::ParseQuoted(std::string_view what) {
  Skip();
  if (Peek() != '"') Expected(what);
  const size_t start = pos_++;
  std::string out;
  while (pos_ < text_.size() && text_[pos_] != '"') {
    char c = text_[pos_++];
    if (c == '\\' && pos_ < text_.size()) {
      const char e = text_[pos_++];
      c = e == 'n' ? '\n' : e == 't' ? '\t' : e;
    }
    out += c;
  }
  if (pos_ >= text_.size()) FailAt(start, "unterminated string");
  ++pos_;
  return out;
}

std::vector<int64_t> TextCursor::ParseIntList(std::string_view what) {
  Expect("{", fmt::format("'{{' to start {}", what));
  std::vector<int64_t> values;
  if (TryConsume("}")) return values;
  do {
    values.push_back(ParseInt(fmt::format("an integer in {}", what)));
  } while (TryConsume(","));
  Expect("}", fmt::format("',' or '}}' in {}", what));
  return values;
}

size_t TextCursor::BalancedBracesEnd(std::string_view t, size_t at) {
  if (at >= t.size() || t[at] != '{') return std::string_view::npos;
  int64_t depth = 0;
  bool in_string = false;
  for (size_t i = at; i < t.size(); ++i) {
    const char c = t[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{') {
      ++depth;
    } else if (c == '}' && --depth == 0) {
      return i + 1;
    }
  }
  return std::string_view::npos;
}

std::string TextCursor::ParseRawValue(std::string_view what) {
  Skip();
  const size_t start = pos_;
  if (Peek() == '"') {
    ParseQuoted(what);
  } else if (Peek() == '{') {
    const size_t end = BalancedBracesEnd(text_, pos_);
    if (end == std::string_view::npos) FailAt(start, fmt::format("unbalanced braces in {}", what));
    pos_ = end;
  } else {
    while (pos_ < text_.size() && text_[pos_] != ',' && text_[pos_] != '}' &&
           !std::isspace(static_cast<unsigned char>(text_[pos_]))) {
      ++pos_;
    }
    if (pos_ == start) Expected(what);
  }
  return std::string(text_.substr(start, pos_ - start));
}

bool TextCursor::AtShape() {
  Skip();
  if (Peek() == '(') return true;
  size_t end = pos_;
  while (end < text_.size() && std::isalnum(static_cast<unsigned char>(text_[end]))) ++end;
  return end < text_.size() && text_[end] == '[' && end > pos_;
}

Shape TextCursor::ParseShape() { return ParseShape(0); }

Shape TextCursor::ParseShape(int depth) {
  Skip();
  const size_t shape_at = pos_;
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
  const size_t type_at = pos_;
  size_t end = pos_;
  while (end < text_.size() && std::isalnum(static_cast<unsigned char>(text_[end]))) ++end;
  if (end == pos_) Expected("a shape such as f32[4,8]");
  const std::string_view type_name = text_.substr(pos_, end - pos_);
  std::optional<PrimitiveType> type = PrimitiveTypeFromName(type_name);
  if (!type) {
    FailAt(type_at, fmt::format("unsupported element type '{}'; weft supports {}", type_name,
                                SupportedPrimitiveTypeNames()));
  }
  pos_ = end;
  if (pos_ >= text_.size() || text_[pos_] != '[') Expected("'[' after the element type");
  ++pos_;
  std::vector<int64_t> dims;
  if (!TryConsume("]")) {
    do {
      Skip();
      if (Peek() == '?' || text_.substr(pos_, 2) == "<=") {
        FailAt(pos_, "dynamic dimensions are not supported; give every dimension a fixed size");
      }
      const size_t dim_at = pos_;
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
  if (pos_ < text_.size() && text_[pos_] == '{') {
    const size_t layout_at = pos_;
    ++pos_;
    std::vector<int64_t> minor_to_major;
    Skip();
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
      minor_to_major.push_back(ParseInt("a layout dimension"));
      Skip();
      if (!TryConsume(",")) break;
      Skip();
    }
    const size_t close = text_.find('}', pos_);
    if (close == std::string_view::npos) FailAt(layout_at, "unterminated layout");
    const std::string_view layout = text_.substr(layout_at, close + 1 - layout_at);
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
    pos_ = close + 1;
    last_layout_ = std::move(minor_to_major);
  }
  return Shape(*type, std::move(dims));
}

}  // namespace weft::hlo
