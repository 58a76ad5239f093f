// Private to the mod_expr sources: the parsed program of a ModExpr, shared
// by the parser (mod_expr.cc) and the tile evaluator (mod_expr_eval.cc).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "weft/kernels/mod_expr.h"

namespace weft::kernels {
namespace mod_expr_internal {

// Integer arithmetic as expressions define it: two's complement wrapping, and
// division and remainder rounded toward negative infinity (Python's // and %),
// INT64_MIN // -1 wrapping to INT64_MIN.
inline int64_t Wrap(uint64_t x) { return static_cast<int64_t>(x); }
inline int64_t FloorDiv(int64_t a, int64_t b) {
  if (b == -1) return Wrap(0 - static_cast<uint64_t>(a));
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
inline int64_t FloorMod(int64_t a, int64_t b) {
  if (b == -1) return 0;
  const int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

enum class Type : uint8_t { kBool, kInt, kFloat };

// Which tile axes a node's values vary along; the buffer holds
// (kRow ? nq : 1) x (kCol ? nk : 1) values.
constexpr uint8_t kRow = 1, kCol = 2, kFull = kRow | kCol;

// clang-format off
enum class Op : uint8_t {
  kBoolLit, kIntLit, kFloatLit,                         // literals
  kB, kH, kQ, kKv, kScore,                              // variables
  kGather,                                              // tensor[indices...]
  kToFloat, kNeg, kNot, kAbs, kTanh, kExp, kLog, kSqrt, kSigmoid,
  kAdd, kSub, kMul, kDiv, kMod, kMin, kMax,
  kEq, kNe, kLt, kLe, kGt, kGe, kAnd, kOr,
  kSelect,                                              // cond ? a : b
};
// clang-format on

struct Node {
  Node(Op op, Type type, int32_t column = 0, std::vector<int32_t> args = {})
      : op(op), type(type), column(column), args(std::move(args)) {}
  Op op;
  Type type;
  uint8_t shape = 0;
  bool uses_score = false;  // a float that depends on score: carries a derivative
  bool may_fail = false;    // contains a tensor index or an integer division by a variable
  int32_t depth = 1;
  int32_t column = 0;
  std::vector<int32_t> args;  // operands; for kGather the indices
  int64_t int_value = 0;      // kBoolLit, kIntLit
  float float_value = 0;      // kFloatLit
  int32_t tensor = -1;        // kGather: index into Impl::tensors
};

struct TensorInfo {
  std::string name;
  std::vector<int64_t> shape, strides;
  const int64_t* ints = nullptr;  // one of the two is set
  const float* floats = nullptr;
};

}  // namespace mod_expr_internal

struct ModExpr::Impl {
  Kind kind = Kind::kMask;
  std::string text;
  std::string what;  // "mask_expr" or "score_expr", the prefix of messages
  std::map<std::string, IndexTensor> index_tensors;
  std::map<std::string, ValueTensor> value_tensors;
  std::vector<mod_expr_internal::TensorInfo> tensors;  // points into the maps above
  std::vector<mod_expr_internal::Node> nodes;
  int32_t root = -1;
};

namespace mod_expr_internal {

// The tile evaluators behind ModExpr::EvaluateMask and ModExpr::ApplyScore.
void EvaluateMaskTile(const ModExpr::Impl& p, int64_t b, int64_t h, int64_t q0, int64_t nq,
                      int64_t k0, int64_t nk, uint8_t* keep, int64_t ld);
void ApplyScoreTile(const ModExpr::Impl& p, int64_t b, int64_t h, int64_t q0, int64_t nq,
                    int64_t k0, int64_t nk, float* scores, int64_t ld, float* grad);
// Behind ModExpr::ClassifyMask (mod_expr_classify.cc); a non-empty block.
std::optional<bool> ClassifyMaskBlock(const ModExpr::Impl& p, int64_t b, int64_t h, int64_t q0,
                                      int64_t q1, int64_t k0, int64_t k1);

}  // namespace mod_expr_internal
}  // namespace weft::kernels
