// Block classification of a mask expression by interval analysis: over a
// block of (q_idx, kv_idx) at fixed (b, h), every integer node is bounded by
// an interval and every boolean node by {false}, {true} or {false, true}.
// When the root is {false} the block is empty, when it is {true} it is
// full; otherwise the caller evaluates the block element by element.
//
// The analysis answers only where evaluation could not fail: a node that
// may raise an error somewhere in the block (a tensor index that may be out
// of range, an integer division by a divisor that may be zero) or whose
// integer arithmetic may wrap has no bounds, and neither has any node above
// it, except where && / || / ?: decide without it — exactly where
// evaluation does not evaluate it either. Float nodes have no bounds.
//
// A tensor read is bounded by the minimum and maximum of the tensor over the
// box of its index intervals (scanned when the box has at most
// kMaxGatherScan elements), so `seg[b, q_idx] == seg[b, kv_idx]` is {true}
// where both index ranges lie inside one segment and {false} where their
// segment ids do not overlap.
#include <algorithm>
#include <limits>
#include <optional>
#include <vector>

#include "mod_expr_program.h"

namespace weft::kernels::mod_expr_internal {
namespace {

constexpr int64_t kMaxGatherScan = int64_t{1} << 16;

// [lo, hi], or no bounds. Booleans are 0 / 1.
struct Bounds {
  bool known = false;
  int64_t lo = 0, hi = 0;
  static Bounds Of(int64_t lo, int64_t hi) { return {true, lo, hi}; }
  static Bounds Bool(bool can_be_false, bool can_be_true) {
    return Of(can_be_false ? 0 : 1, can_be_true ? 1 : 0);
  }
  bool IsFalse() const { return known && hi == 0; }
  bool IsTrue() const { return known && lo == 1; }
};

Bounds Unknown() { return {}; }

// The interval of f over the corners of a x b; f must be monotone in each
// argument for the other fixed (so the extremes are at corners). No bounds
// when f overflows at a corner.
template <typename F>
Bounds Corners(const Bounds& a, const Bounds& b, F f) {
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
  for (int64_t x : {a.lo, a.hi}) {
    for (int64_t y : {b.lo, b.hi}) {
      std::optional<int64_t> v = f(x, y);
      if (!v) return Unknown();
      lo = std::min(lo, *v);
      hi = std::max(hi, *v);
    }
  }
  return Bounds::Of(lo, hi);
}

class Classifier {
 public:
  Classifier(const ModExpr::Impl& p, int64_t b, int64_t h, int64_t q0, int64_t q1, int64_t k0,
             int64_t k1)
      : p_(p), b_(b), h_(h), q0_(q0), q1_(q1), k0_(k0), k1_(k1) {}

  Bounds Of(int32_t index) {
    const Node& n = p_.nodes[index];
    if (n.type == Type::kFloat) return Unknown();
    switch (n.op) {
      case Op::kBoolLit:
      case Op::kIntLit:
        return Bounds::Of(n.int_value, n.int_value);
      case Op::kB:
        return Bounds::Of(b_, b_);
      case Op::kH:
        return Bounds::Of(h_, h_);
      case Op::kQ:
        return Bounds::Of(q0_, q1_ - 1);
      case Op::kKv:
        return Bounds::Of(k0_, k1_ - 1);
      case Op::kGather:
        return Gather(n);
      case Op::kAnd:
      case Op::kOr: {
        // The right operand matters only where the left does not decide.
        const bool is_and = n.op == Op::kAnd;
        const Bounds a = Of(n.args[0]);
        if (is_and ? a.IsFalse() : a.IsTrue()) return a;
        const Bounds c = Of(n.args[1]);
        if (!a.known || !c.known) return Unknown();
        if (is_and) return Bounds::Of(std::min(a.lo, c.lo), std::min(a.hi, c.hi));
        return Bounds::Of(std::max(a.lo, c.lo), std::max(a.hi, c.hi));
      }
      case Op::kSelect: {
        const Bounds c = Of(n.args[0]);
        if (c.IsTrue()) return Of(n.args[1]);
        if (c.IsFalse()) return Of(n.args[2]);
        const Bounds x = Of(n.args[1]), y = Of(n.args[2]);
        if (!c.known || !x.known || !y.known) return Unknown();
        return Bounds::Of(std::min(x.lo, y.lo), std::max(x.hi, y.hi));
      }
      default:
        break;
    }
    if (n.args.size() == 1) return Unary(n, Of(n.args[0]));
    const Bounds a = Of(n.args[0]), c = Of(n.args[1]);
    if (!a.known || !c.known) return Unknown();
    if (n.type == Type::kBool) {
      // Comparisons of int or bool operands (float operands have no bounds).
      switch (n.op) {
        case Op::kEq:
        case Op::kNe: {
          const bool can_eq = a.lo <= c.hi && c.lo <= a.hi;
          const bool always_eq = a.lo == a.hi && c.lo == c.hi && a.lo == c.lo;
          return n.op == Op::kEq ? Bounds::Bool(!always_eq, can_eq)
                                 : Bounds::Bool(can_eq, !always_eq);
        }
        case Op::kLt:
          return Bounds::Bool(a.hi >= c.lo, a.lo < c.hi);
        case Op::kLe:
          return Bounds::Bool(a.hi > c.lo, a.lo <= c.hi);
        case Op::kGt:
          return Bounds::Bool(a.lo <= c.hi, a.hi > c.lo);
        default:  // kGe
          return Bounds::Bool(a.lo < c.hi, a.hi >= c.lo);
      }
    }
    return Binary(n.op, a, c);
  }

 private:
  static Bounds Unary(const Node& n, const Bounds& a) {
    if (!a.known) return Unknown();
    constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
    switch (n.op) {
      case Op::kNot:
        return Bounds::Of(1 - a.hi, 1 - a.lo);
      case Op::kNeg:
        if (a.lo == kMin) return Unknown();  // wraps
        return Bounds::Of(-a.hi, -a.lo);
      case Op::kAbs:
        if (a.lo == kMin) return Unknown();
        if (a.lo >= 0) return a;
        if (a.hi <= 0) return Bounds::Of(-a.hi, -a.lo);
        return Bounds::Of(0, std::max(-a.lo, a.hi));
      default:
        return Unknown();
    }
  }

  static Bounds Binary(Op op, const Bounds& a, const Bounds& c) {
    switch (op) {
      case Op::kAdd:
        return Corners(a, c, [](int64_t x, int64_t y) -> std::optional<int64_t> {
          int64_t r;
          if (__builtin_add_overflow(x, y, &r)) return std::nullopt;
          return r;
        });
      case Op::kSub:
        return Corners(a, c, [](int64_t x, int64_t y) -> std::optional<int64_t> {
          int64_t r;
          if (__builtin_sub_overflow(x, y, &r)) return std::nullopt;
          return r;
        });
      case Op::kMul:
        return Corners(a, c, [](int64_t x, int64_t y) -> std::optional<int64_t> {
          int64_t r;
          if (__builtin_mul_overflow(x, y, &r)) return std::nullopt;
          return r;
        });
      case Op::kMin:
        return Bounds::Of(std::min(a.lo, c.lo), std::min(a.hi, c.hi));
      case Op::kMax:
        return Bounds::Of(std::max(a.lo, c.lo), std::max(a.hi, c.hi));
      case Op::kDiv:
        // A divisor of one sign (never 0, never -1 of the minimum: no wrap).
        if (c.lo <= 0 && c.hi >= 0) return Unknown();
        if (c.lo <= -1 && c.hi >= -1 && a.lo == std::numeric_limits<int64_t>::min()) {
          return Unknown();
        }
        return Corners(
            a, c, [](int64_t x, int64_t y) -> std::optional<int64_t> { return FloorDiv(x, y); });
      default: {  // kMod, by a positive divisor
        if (c.lo <= 0) return Unknown();
        if (c.lo == c.hi && FloorDiv(a.lo, c.lo) == FloorDiv(a.hi, c.lo)) {
          return Bounds::Of(FloorMod(a.lo, c.lo), FloorMod(a.hi, c.lo));
        }
        return Bounds::Of(0, c.hi - 1);
      }
    }
  }

  // The tensor's minimum and maximum over the box of the index intervals.
  Bounds Gather(const Node& n) {
    const TensorInfo& t = p_.tensors[n.tensor];
    if (t.ints == nullptr) return Unknown();
    std::vector<Bounds> box;
    int64_t count = 1;
    for (int32_t a : n.args) {
      const Bounds i = Of(a);
      // An index that may be out of range fails in evaluation: no answer.
      const int64_t k = static_cast<int64_t>(box.size());
      if (!i.known || i.lo < 0 || i.hi >= t.shape[k]) return Unknown();
      count *= i.hi - i.lo + 1;
      if (count > kMaxGatherScan) return Unknown();
      box.push_back(i);
    }
    int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
    std::vector<int64_t> at(box.size());
    for (size_t k = 0; k < box.size(); ++k) at[k] = box[k].lo;
    for (int64_t visited = 0; visited < count; ++visited) {
      int64_t offset = 0;
      for (size_t k = 0; k < box.size(); ++k) offset += at[k] * t.strides[k];
      lo = std::min(lo, t.ints[offset]);
      hi = std::max(hi, t.ints[offset]);
      for (size_t k = box.size(); k-- > 0;) {  // next index, last dim fastest
        if (++at[k] <= box[k].hi) break;
        at[k] = box[k].lo;
      }
    }
    return Bounds::Of(lo, hi);
  }

  const ModExpr::Impl& p_;
  int64_t b_, h_, q0_, q1_, k0_, k1_;
};

}  // namespace

std::optional<bool> ClassifyMaskBlock(const ModExpr::Impl& p, int64_t b, int64_t h, int64_t q0,
                                      int64_t q1, int64_t k0, int64_t k1) {
  const Bounds root = Classifier(p, b, h, q0, q1, k0, k1).Of(p.root);
  if (root.IsFalse()) return false;
  if (root.IsTrue()) return true;
  return std::nullopt;
}

}  // namespace weft::kernels::mod_expr_internal
