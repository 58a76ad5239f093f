// Named host tensors captured by masks and score mods (segment ids, bias
// tables, slopes). Row-major, owned, immutable once built.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace weft::kernels {

template <typename T>
struct ModTensor {
  std::vector<int64_t> shape;
  std::vector<T> values;  // row-major, size == product of shape

  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

using IndexTensor = ModTensor<int64_t>;  // integer tensors for masks
using ValueTensor = ModTensor<float>;    // float tensors for score mods

// A tensor shape as messages print it: "[2, 128]".
std::string ShapeText(const std::vector<int64_t>& shape);

}  // namespace weft::kernels
