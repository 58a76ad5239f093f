// Shape: an element type with dimensions (an array), or a tuple of shapes.
// Layouts are always the default (row-major, printed {rank-1,...,0}). The
// element types (PrimitiveType, their names and widths) are base/primitive_type.h's.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "weft/base/primitive_type.h"
#include "weft/base/small_vector.h"

namespace weft {

// Why no array of `type` with `dims` can exist, or nullopt when it can. An
// array exists when every dimension is >= 0 and its sizes fit in int64: the
// product of its non-zero dimensions (so every row-major stride fits too)
// and that product times the byte width. Shape's constructor and the HLO
// parser (which adds line:col) both apply it, so no Shape ever holds a size
// whose element count or byte size overflows.
std::optional<std::string> ArrayShapeProblem(PrimitiveType type, std::span<const int64_t> dims);

// Checked int64 arithmetic for sizes (nullopt on overflow).
std::optional<int64_t> CheckedAdd(int64_t a, int64_t b);
std::optional<int64_t> CheckedMul(int64_t a, int64_t b);

// An array's dimensions, held inside the shape up to rank 6 (XLA's
// DimensionVector): copying a shape allocates nothing.
using DimensionVector = SmallVector<int64_t, 6>;

class Shape {
 public:
  // An invalid shape (element type kInvalid); used as "not yet known".
  Shape() = default;
  // Throws weft::Error with ArrayShapeProblem's reason (a negative dimension,
  // or an element count or byte size that overflows int64).
  Shape(PrimitiveType type, DimensionVector dims);
  static Shape Scalar(PrimitiveType type) { return Shape(type, {}); }
  // Throws weft::Error when the elements' total byte size overflows int64.
  static Shape Tuple(std::vector<Shape> elements);

  bool IsValid() const { return type_ != PrimitiveType::kInvalid; }
  bool IsArray() const { return IsValid() && type_ != PrimitiveType::kTuple; }
  bool IsTuple() const { return type_ == PrimitiveType::kTuple; }
  bool IsScalar() const { return IsArray() && dims_.empty(); }

  PrimitiveType element_type() const { return type_; }
  const DimensionVector& dimensions() const { return dims_; }
  int64_t dimensions(int64_t i) const { return dims_.at(i); }
  int64_t rank() const { return static_cast<int64_t>(dims_.size()); }
  const std::vector<Shape>& tuple_shapes() const { return tuple_shapes_; }
  const Shape& tuple_shapes(int64_t i) const { return tuple_shapes_.at(i); }

  // Arrays only. Never overflows (see the constructor).
  int64_t ElementsCount() const;
  // Sum over leaves for tuples. Never overflows (see the constructor, Tuple).
  int64_t ByteSize() const;
  // Number of array leaves (tuples flattened recursively).
  int64_t LeafCount() const;
  // Array leaves in order (a flat tuple's elements; the shape itself for arrays).
  std::vector<Shape> Leaves() const;

  Shape WithElementType(PrimitiveType type) const;
  Shape WithDimensions(DimensionVector dims) const;

  // "f32[4,8]", "(f32[4], s32[])"; with_layout adds "{1,0}" to arrays of rank >= 1.
  std::string ToString(bool with_layout = false) const;

  bool operator==(const Shape& other) const = default;

 private:
  PrimitiveType type_ = PrimitiveType::kInvalid;
  DimensionVector dims_;
  std::vector<Shape> tuple_shapes_;
};

// Rounds a value to what the element type can hold (f32/bf16/f16/f8 precision,
// integer wrap-around is not applied: integers are returned unchanged).
double RoundToType(double value, PrimitiveType type);

}  // namespace weft
