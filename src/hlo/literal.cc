#include "weft/hlo/literal.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <limits>

#include "weft/base/error.h"

namespace weft {
namespace {

void CheckIntInRange(PrimitiveType type, int64_t v) {
  int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  switch (type) {
    case PrimitiveType::kPred:
      lo = 0, hi = 1;
      break;
    case PrimitiveType::kS32:
      lo = std::numeric_limits<int32_t>::min(), hi = std::numeric_limits<int32_t>::max();
      break;
    case PrimitiveType::kU16:
      lo = 0, hi = std::numeric_limits<uint16_t>::max();
      break;
    case PrimitiveType::kU32:
      lo = 0, hi = std::numeric_limits<uint32_t>::max();
      break;
    default:
      break;
  }
  WEFT_CHECK(v >= lo && v <= hi, "constant {} does not fit in {}", v, PrimitiveTypeName(type));
}

}  // namespace

Literal::Literal(Shape shape, const std::vector<double>& values) : shape_(std::move(shape)) {
  WEFT_CHECK(shape_.IsArray(), "a constant must have an array shape, not {}", shape_.ToString());
  WEFT_CHECK(static_cast<int64_t>(values.size()) == shape_.ElementsCount(),
             "constant of shape {} needs {} values, got {}", shape_.ToString(),
             shape_.ElementsCount(), values.size());
  const PrimitiveType type = shape_.element_type();
  WEFT_CHECK(!IsComplex(type) && type != PrimitiveType::kToken,
             "constants of {} are not supported; weft reads real and integer constants",
             PrimitiveTypeName(type));
  for (double v : values) {
    if (IsIntegral()) {
      WEFT_CHECK(std::isfinite(v) && std::trunc(v) == v,
                 "constant {} is not an integer; {} needs integers", v, PrimitiveTypeName(type));
      if (type == PrimitiveType::kU64) {  // kept as its bits
        WEFT_CHECK(v >= 0 && v < 0x1p64, "constant {} does not fit in u64", v);
        ints_.push_back(static_cast<int64_t>(static_cast<uint64_t>(v)));
        continue;
      }
      WEFT_CHECK(v >= -0x1p63 && v < 0x1p63, "constant {} does not fit in {}", v,
                 PrimitiveTypeName(type));
      ints_.push_back(static_cast<int64_t>(v));
      CheckIntInRange(type, ints_.back());
    } else {
      floats_.push_back(RoundToType(v, type));
    }
  }
}

Literal Literal::FromInts(Shape shape, std::vector<int64_t> values) {
  Literal lit;
  lit.shape_ = std::move(shape);
  WEFT_CHECK(lit.shape_.IsArray() && lit.IsIntegral(),
             "FromInts needs an integer or pred shape, got {}", lit.shape_.ToString());
  WEFT_CHECK(static_cast<int64_t>(values.size()) == lit.shape_.ElementsCount(),
             "constant of shape {} needs {} values, got {}", lit.shape_.ToString(),
             lit.shape_.ElementsCount(), values.size());
  for (int64_t v : values) CheckIntInRange(lit.shape_.element_type(), v);
  lit.ints_ = std::move(values);
  return lit;
}

Literal Literal::Scalar(PrimitiveType type, double value) {
  return Literal(Shape::Scalar(type), {value});
}

int64_t Literal::size() const {
  return static_cast<int64_t>(IsIntegral() ? ints_.size() : floats_.size());
}

double Literal::Get(int64_t i) const {
  if (shape_.element_type() == PrimitiveType::kU64) {
    return static_cast<double>(static_cast<uint64_t>(ints_.at(i)));
  }
  return IsIntegral() ? static_cast<double>(ints_.at(i)) : floats_.at(i);
}

int64_t Literal::GetInt(int64_t i) const {
  WEFT_CHECK(IsIntegral(), "GetInt on a {} constant", PrimitiveTypeName(shape_.element_type()));
  return ints_.at(i);
}

std::string Literal::ToString() const {
  auto element = [&](int64_t i) -> std::string {
    const PrimitiveType type = shape_.element_type();
    if (type == PrimitiveType::kPred) return ints_[i] ? "true" : "false";
    if (type == PrimitiveType::kU64) return fmt::format("{}", static_cast<uint64_t>(ints_[i]));
    if (IsIntegral()) return fmt::format("{}", ints_[i]);
    // Shortest text that reads back to the same value of this type.
    const double v = floats_[i];
    if (!std::isfinite(v) || type == PrimitiveType::kF32) {
      return fmt::format("{}", static_cast<float>(v));
    }
    if (type == PrimitiveType::kF64) return fmt::format("{}", v);  // shortest round trip
    for (int digits = 1; digits < 9; ++digits) {
      std::string text = fmt::format("{:.{}g}", v, digits);
      if (RoundToType(std::strtod(text.c_str(), nullptr), type) == v) return text;
    }
    return fmt::format("{}", static_cast<float>(v));
  };
  if (shape_.rank() == 0) return element(0);
  // Nested braces, one level per dim; XLA pads inner levels with spaces.
  std::string out;
  const int64_t rank = shape_.rank();
  int64_t index = 0;
  auto emit = [&](auto&& self, int64_t dim) -> void {
    const bool innermost = dim == rank - 1;
    const std::string_view pad = rank > 1 ? " " : "";
    out += "{";
    out += pad;
    for (int64_t i = 0; i < shape_.dimensions(dim); ++i) {
      if (i > 0) out += ", ";
      if (innermost) {
        out += element(index++);
      } else {
        self(self, dim + 1);
      }
    }
    out += pad;
    out += "}";
  };
  emit(emit, 0);
  return out;
}

}  // namespace weft
