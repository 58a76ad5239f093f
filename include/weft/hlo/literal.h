// Literal: the value of a constant instruction (an array of one element type).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weft/hlo/shape.h"

namespace weft {

class Literal {
 public:
  Literal() = default;
  // Row-major values, rounded to the element type (floats) or checked to be
  // integral and in range (integers, pred as 0/1).
  Literal(Shape shape, const std::vector<double>& values);
  // Exact 64-bit integers for integer/pred shapes (u64 values as their
  // bits: 2^64 - 1 is -1).
  static Literal FromInts(Shape shape, std::vector<int64_t> values);
  static Literal Scalar(PrimitiveType type, double value);

  const Shape& shape() const { return shape_; }
  int64_t size() const;
  double Get(int64_t i) const;  // rounded to double beyond 2^53
  // integer/pred literals only: exact (u64 values as their bits).
  int64_t GetInt(int64_t i) const;

  // XLA's constant syntax: "1.5", "true", "{1, 2, 3}", "{ { 1, 2 }, { 3, 4 } }".
  std::string ToString() const;
  bool operator==(const Literal& other) const = default;

 private:
  bool IsIntegral() const { return !IsFloatingPoint(shape_.element_type()); }

  Shape shape_;
  std::vector<double> floats_;  // float types
  std::vector<int64_t> ints_;   // integer and pred types
};

}  // namespace weft
