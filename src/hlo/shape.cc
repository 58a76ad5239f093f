#include "weft/hlo/shape.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "weft/base/algorithm.h"
#include "weft/base/error.h"
#include "weft/base/float8.h"

namespace weft {

std::optional<int64_t> CheckedAdd(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

std::optional<int64_t> CheckedMul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

std::optional<std::string> ArrayShapeProblem(PrimitiveType type, std::span<const int64_t> dims) {
  auto text = [&] { return fmt::format("{}[{}]", PrimitiveTypeName(type), fmt::join(dims, ",")); };
  for (int64_t d : dims) {
    if (d < 0) return fmt::format("shape {} has a negative dimension", text());
  }
  const bool has_zero = Contains(dims, 0);
  int64_t product = 1;  // of the non-zero dims: every row-major stride divides it
  for (int64_t d : dims) {
    if (d == 0) continue;
    std::optional<int64_t> next = CheckedMul(product, d);
    if (!next) {
      return fmt::format(
          "shape {} is too large: the product of its {}dimensions overflows int64 (more than "
          "{} elements)",
          text(), has_zero ? "non-zero " : "", std::numeric_limits<int64_t>::max());
    }
    product = *next;
  }
  if (type == PrimitiveType::kTuple || type == PrimitiveType::kInvalid) return std::nullopt;
  if (!CheckedMul(product, ByteWidth(type))) {
    return fmt::format(
        "shape {} is too large: {} elements of {} bytes overflow int64 (more than {} bytes)",
        text(), product, ByteWidth(type), std::numeric_limits<int64_t>::max());
  }
  return std::nullopt;
}

Shape::Shape(PrimitiveType type, DimensionVector dims) : type_(type), dims_(std::move(dims)) {
  WEFT_CHECK(type != PrimitiveType::kTuple, "use Shape::Tuple for tuple shapes");
  if (std::optional<std::string> problem = ArrayShapeProblem(type, dims_)) throw Error(*problem);
}

Shape Shape::Tuple(std::vector<Shape> elements) {
  int64_t bytes = 0;
  for (const Shape& e : elements) {
    if (!e.IsValid()) continue;  // "not yet known" elements have no size
    std::optional<int64_t> sum = CheckedAdd(bytes, e.ByteSize());
    if (!sum) {
      Fail(
          "tuple of {} elements is too large: its byte size overflows int64 (more than {} "
          "bytes)",
          elements.size(), std::numeric_limits<int64_t>::max());
    }
    bytes = *sum;
  }
  Shape s;
  s.type_ = PrimitiveType::kTuple;
  s.tuple_shapes_ = std::move(elements);
  return s;
}

int64_t Shape::ElementsCount() const {
  WEFT_CHECK(IsArray(), "ElementsCount of non-array shape {}", ToString());
  return Product(dims_);
}

int64_t Shape::ByteSize() const {
  if (IsTuple()) {
    int64_t total = 0;
    for (const Shape& s : tuple_shapes_) total += s.ByteSize();
    return total;
  }
  return ElementsCount() * ByteWidth(type_);
}

int64_t Shape::LeafCount() const {
  if (!IsTuple()) return 1;
  int64_t n = 0;
  for (const Shape& s : tuple_shapes_) n += s.LeafCount();
  return n;
}

std::vector<Shape> Shape::Leaves() const {
  if (!IsTuple()) return {*this};
  std::vector<Shape> leaves;
  for (const Shape& s : tuple_shapes_) {
    std::vector<Shape> sub = s.Leaves();
    leaves.insert(leaves.end(), sub.begin(), sub.end());
  }
  return leaves;
}

Shape Shape::WithElementType(PrimitiveType type) const {
  WEFT_CHECK(IsArray(), "cannot change the element type of {}", ToString());
  return Shape(type, dims_);
}

Shape Shape::WithDimensions(DimensionVector dims) const {
  WEFT_CHECK(IsArray(), "cannot change the dimensions of {}", ToString());
  return Shape(type_, std::move(dims));
}

std::string Shape::ToString(bool with_layout) const {
  if (IsTuple()) {
    std::vector<std::string> parts;
    for (const Shape& s : tuple_shapes_) parts.push_back(s.ToString(with_layout));
    return fmt::format("({})", fmt::join(parts, ", "));
  }
  std::string out = fmt::format("{}[{}]", PrimitiveTypeName(type_), fmt::join(dims_, ","));
  if (with_layout && !dims_.empty()) {
    std::vector<int64_t> minor_to_major;
    for (int64_t i = rank() - 1; i >= 0; --i) minor_to_major.push_back(i);
    out += fmt::format("{{{}}}", fmt::join(minor_to_major, ","));
  }
  return out;
}

namespace {

// Round-to-nearest-even of a float to its upper 16 bits (bfloat16).
float RoundToBf16(float f) {
  if (std::isnan(f)) return f;
  uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint32_t lsb = (bits >> 16) & 1u;
  bits += 0x7fffu + lsb;
  bits &= 0xffff0000u;
  return std::bit_cast<float>(bits);
}

// Round-to-nearest-even to IEEE half precision (10 mantissa bits, exponent
// range [-14, 15], subnormals down to 2^-24).
float RoundToF16(double v) {
  if (std::isnan(v) || std::isinf(v) || v == 0) return static_cast<float>(v);
  const double a = std::fabs(v);
  if (a >= 65520.0) return std::copysign(INFINITY, v);  // rounds past max 65504
  int exp;
  std::frexp(a, &exp);  // a = m * 2^exp, m in [0.5, 1)
  const int e = std::max(exp - 1, -14);
  const double quantum = std::ldexp(1.0, e - 10);
  return static_cast<float>(std::copysign(std::nearbyint(a / quantum) * quantum, v));
}

}  // namespace

double RoundToType(double value, PrimitiveType type) {
  switch (type) {
    case PrimitiveType::kF32:
      return static_cast<float>(value);
    case PrimitiveType::kBF16:
      // Via f32: can double-round in rare ties, harmless for constants.
      return RoundToBf16(static_cast<float>(value));
    case PrimitiveType::kF16:
      return RoundToF16(value);
    case PrimitiveType::kF64:
      return value;
    case PrimitiveType::kF8E4M3FN:
      return F8E4M3FNToDouble(DoubleToF8E4M3FN(value));
    case PrimitiveType::kF8E8M0FNU:
      return F8E8M0FNUToDouble(DoubleToF8E8M0FNU(value));
    default:
      return value;
  }
}

}  // namespace weft
