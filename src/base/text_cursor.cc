#include "weft/base/text_cursor.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <limits>

#include "weft/base/error.h"

namespace weft {
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
    : text_(text), source_name_(std::move(source_name)) {}

TextCursor::Location TextCursor::LocationOf(size_t offset) const {
  if (line_starts_.empty()) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < text_.size(); ++i) {
      if (text_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }
  auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
  const size_t line = it - line_starts_.begin();
  return {static_cast<int64_t>(line), static_cast<int64_t>(offset - line_starts_[line - 1] + 1)};
}

std::string TextCursor::Where(size_t offset) const {
  const Location loc = LocationOf(offset);
  if (source_name_.empty()) return fmt::format("{}:{}", loc.line, loc.col);
  return fmt::format("{}:{}:{}", source_name_, loc.line, loc.col);
}

void TextCursor::FailAt(size_t offset, std::string_view message) const {
  throw TextError(offset, std::string(message), fmt::format("{}: {}", Where(offset), message));
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

void TextCursor::ExpectedAt(size_t offset, std::string_view what) const {
  FailAt(offset, fmt::format("expected {}, found {}", what, NextTokenText(offset)));
}

void TextCursor::Expected(std::string_view what) const { ExpectedAt(pos_, what); }

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

std::vector<int64_t> TextCursor::ParseIntList(std::string_view what, char open, char close) {
  const std::string_view open_token(&open, 1), close_token(&close, 1);
  Expect(open_token, fmt::format("'{}' to start {}", open, what));
  std::vector<int64_t> values;
  if (TryConsume(close_token)) return values;
  do {
    values.push_back(ParseInt(fmt::format("an integer in {}", what)));
  } while (TryConsume(","));
  Expect(close_token, fmt::format("',' or '{}' in {}", close, what));
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
    // Inside the (...), [...] and {...} the token opens, anything goes.
    std::string closers;
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == '(' || c == '[' || c == '{') {
        closers.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
      } else if (!closers.empty() && c == closers.back()) {
        closers.pop_back();
      } else if (closers.empty() && (c == ',' || c == '}' || c == ')' || c == ']' ||
                                     std::isspace(static_cast<unsigned char>(c)))) {
        break;
      } else if (c == ')' || c == ']' || c == '}') {
        FailAt(pos_, fmt::format("'{}' where '{}' was expected in {}", c, closers.back(), what));
      }
      ++pos_;
    }
    if (!closers.empty()) {
      FailAt(start, fmt::format("'{}' is missing at the end of {}", closers.back(), what));
    }
    if (pos_ == start) Expected(what);
  }
  return std::string(text_.substr(start, pos_ - start));
}

}  // namespace weft
