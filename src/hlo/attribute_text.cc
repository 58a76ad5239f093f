// The text of attribute values (attribute_text.h).
#include "attribute_text.h"

#include <fmt/format.h>

#include <map>

#include "weft/base/error.h"

namespace weft::hlo {

// {[0:4], [2:8:2]}
void ParseSlice(TextCursor& cur, std::vector<SliceDim>& slice) {
  cur.Expect("{", "'{' to start the slice ranges");
  if (cur.TryConsume("}")) return;
  do {
    cur.Expect("[", "'[' to start a slice range [start:limit(:stride)]");
    SliceDim s;
    s.start = cur.ParseInt("a slice start");
    cur.Expect(":", "':' after the slice start");
    s.limit = cur.ParseInt("a slice limit");
    if (cur.TryConsume(":")) s.stride = cur.ParseInt("a slice stride");
    cur.Expect("]", "']' to end the slice range");
    slice.push_back(s);
  } while (cur.TryConsume(","));
  cur.Expect("}", "',' or '}' in the slice ranges");
}

// XLA's window={size=3x3 stride=2x1 pad=0_1x1_1 lhs_dilate=1x1
// rhs_dilate=2x1}; every part but size is optional, {} for rank 0.
std::vector<WindowDim> ParseWindow(TextCursor& cur) {
  const size_t at = cur.Mark();
  cur.Expect("{", "'{' to start the window");
  std::vector<WindowDim> window;
  std::map<std::string, size_t> seen;
  auto fill = [&](const std::string& key, size_t n, size_t key_at) {
    if (window.empty()) window.resize(n);
    if (window.size() != n) {
      cur.FailAt(key_at, fmt::format("window {} has {} dims but an earlier part has {}", key, n,
                                     window.size()));
    }
  };
  while (!cur.TryConsume("}")) {
    const size_t key_at = cur.Mark();
    const std::string key = cur.ParseWord(
        "a window part (size, stride, pad, lhs_dilate, "
        "rhs_dilate, rhs_reversal) or '}'");
    if (!seen.emplace(key, key_at).second) cur.FailAt(key_at, "window part given twice");
    cur.Expect("=", fmt::format("'=' after window {}", key));
    if (key == "pad") {
      std::vector<PadDim> pads;
      ParsePadding(cur, pads);
      fill(key, pads.size(), key_at);
      for (size_t d = 0; d < pads.size(); ++d) {
        if (pads[d].interior != 0) cur.FailAt(key_at, "window padding is low_high per dim");
        window[d].padding_low = pads[d].low;
        window[d].padding_high = pads[d].high;
      }
      continue;
    }
    if (key == "rhs_reversal") {
      const std::vector<int64_t> values = ParseTimesList(cur, key);
      fill(key, values.size(), key_at);
      for (size_t d = 0; d < values.size(); ++d) {
        if (values[d] != 0 && values[d] != 1) {
          cur.FailAt(key_at, "window rhs_reversal is 0 or 1 per dim (e.g. rhs_reversal=1x0)");
        }
        window[d].window_reversal = values[d] == 1;
      }
      continue;
    }
    int64_t WindowDim::*field = nullptr;
    if (key == "size") field = &WindowDim::size;
    if (key == "stride") field = &WindowDim::stride;
    if (key == "lhs_dilate") field = &WindowDim::base_dilation;
    if (key == "rhs_dilate") field = &WindowDim::window_dilation;
    if (field == nullptr) {
      cur.FailAt(key_at, fmt::format("unknown window part '{}'; weft reads size, stride, pad, "
                                     "lhs_dilate, rhs_dilate and rhs_reversal",
                                     key));
    }
    const std::vector<int64_t> values = ParseTimesList(cur, key);
    fill(key, values.size(), key_at);
    for (size_t d = 0; d < values.size(); ++d) window[d].*field = values[d];
  }
  if (!window.empty() && !seen.count("size")) cur.FailAt(at, "the window needs size=");
  return window;
}

// Integers joined by 'x': 3x3x1.
std::vector<int64_t> ParseTimesList(TextCursor& cur, std::string_view what) {
  std::vector<int64_t> values{cur.ParseInt(what)};
  while (cur.pos() < cur.text().size() && cur.text()[cur.pos()] == 'x') {
    cur.set_pos(cur.pos() + 1);
    values.push_back(cur.ParseInt(what));
  }
  return values;
}

// low_high[_interior] per dim, joined by 'x': 0_0x1_2_0.
void ParsePadding(TextCursor& cur, std::vector<PadDim>& padding) {
  auto next_is = [&](char c) {
    return cur.pos() < cur.text().size() && cur.text()[cur.pos()] == c;
  };
  while (true) {
    PadDim p;
    p.low = cur.ParseInt("the low padding (low_high[_interior])");
    cur.Expect("_", "'_' between low and high padding");
    p.high = cur.ParseInt("the high padding");
    if (next_is('_')) {
      cur.set_pos(cur.pos() + 1);
      p.interior = cur.ParseInt("the interior padding");
    }
    padding.push_back(p);
    if (!next_is('x')) return;
    cur.set_pos(cur.pos() + 1);  // 'x' starts the next dim
  }
}

std::vector<std::pair<int64_t, int64_t>> ParsePairs(TextCursor& cur) {
  std::vector<std::pair<int64_t, int64_t>> pairs;
  cur.Expect("{", "'{' to start source_target_pairs");
  if (cur.TryConsume("}")) return pairs;
  do {
    const size_t at = cur.Mark();
    std::vector<int64_t> pair = cur.ParseIntList("a {source,target} pair");
    if (pair.size() != 2) cur.FailAt(at, "expected a {source,target} pair of two ids");
    pairs.push_back({pair[0], pair[1]});
  } while (cur.TryConsume(","));
  cur.Expect("}", "',' or '}' in source_target_pairs");
  return pairs;
}

// Integer constants are read exactly (s64 and u64 values beyond 2^53
// included: a u64 value is kept as its bits, Literal::GetInt); an
// integer written as a float (2.0) goes through Literal's checks.
Literal ParseLiteral(TextCursor& cur, const Shape& shape) {
  const size_t at = cur.Mark();
  const PrimitiveType type = shape.element_type();
  const bool is_pred = type == PrimitiveType::kPred;
  const bool exact = IsInteger(type) || is_pred;
  const std::string what = fmt::format("a {} value", PrimitiveTypeName(type));
  std::vector<double> values;
  std::vector<int64_t> ints;
  auto element = [&] {
    cur.Skip();
    const size_t element_at = cur.Mark();
    if (is_pred && (cur.Peek() == 't' || cur.Peek() == 'f')) {
      ints.push_back(cur.ParseBool("true or false") ? 1 : 0);
    } else if (!exact) {
      values.push_back(cur.ParseNumber(what));
    } else if (const auto v = cur.TryParseExactInteger(what)) {
      const uint64_t kSignBit = uint64_t{1} << 63;
      const bool fits = type == PrimitiveType::kU64
                            ? !v->negative || v->magnitude == 0
                            : v->magnitude < kSignBit || (v->negative && v->magnitude == kSignBit);
      if (!fits) {
        cur.FailAt(element_at,
                   fmt::format("constant {}{} does not fit in {}", v->negative ? "-" : "",
                               v->magnitude, PrimitiveTypeName(type)));
      }
      ints.push_back(static_cast<int64_t>(v->negative ? 0 - v->magnitude : v->magnitude));
    } else {
      try {
        ints.push_back(Literal::Scalar(type, cur.ParseNumber(what)).GetInt(0));
      } catch (const Error& e) {
        cur.FailAt(element_at, e.what());
      }
    }
  };
  auto level = [&](auto&& self, int64_t dim) -> void {
    const size_t level_at = cur.Mark();
    cur.Expect("{", fmt::format("'{{' for dimension {} of {}", dim, shape.ToString()));
    int64_t count = 0;
    if (!cur.TryConsume("}")) {
      do {
        dim + 1 == shape.rank() ? element() : self(self, dim + 1);
        ++count;
      } while (cur.TryConsume(","));
      cur.Expect("}", "',' or '}' in the constant");
    }
    if (count != shape.dimensions(dim)) {
      cur.FailAt(level_at, fmt::format("constant has {} entries along dimension {} but {} "
                                       "says {}",
                                       count, dim, shape.ToString(), shape.dimensions(dim)));
    }
  };
  shape.rank() == 0 ? element() : level(level, 0);
  try {
    return exact ? Literal::FromInts(shape, std::move(ints)) : Literal(shape, values);
  } catch (const Error& e) {
    cur.FailAt(at, e.what());
  }
}

}  // namespace weft::hlo
