#include "weft/analysis/precision.h"

#include "weft/base/error.h"

namespace weft::analysis {

std::string_view PrecisionName(Precision precision) {
  return precision == Precision::kBf16 ? "bf16" : "f32";
}

Precision ParsePrecision(std::string_view text, std::string_view what) {
  if (text == "bf16") return Precision::kBf16;
  if (text == "f32") return Precision::kF32;
  Fail("{} '{}': expected bf16 or f32", what, text);
}

int64_t ElementBytes(PrimitiveType type, Precision precision) {
  if (precision == Precision::kBf16 && IsFloatingPoint(type)) return 2;
  return ByteWidth(type);
}

int64_t PlannedBytes(const Shape& shape, Precision precision) {
  if (shape.IsTuple()) {
    int64_t total = 0;
    for (const Shape& s : shape.tuple_shapes()) total += PlannedBytes(s, precision);
    return total;
  }
  return shape.ElementsCount() * ElementBytes(shape.element_type(), precision);
}

int64_t OptimizerBytesPerElement(Precision precision) {
  return precision == Precision::kBf16 ? 12 : 8;
}

}  // namespace weft::analysis
