// Vector-at-a-time evaluation of a parsed ModExpr over one tile.
//
// Each node computes all its values for the tile into a buffer before its
// parent runs, so the interpretation cost (a switch, a few allocations) is
// paid once per node and tile, not per element. Buffers are only as large as
// the node's shape needs (kRow: one value per query, kCol: one per key), and
// live on a bump arena released as soon as the parent has consumed them.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "mod_expr_program.h"
#include "weft/base/error.h"

namespace weft::kernels::mod_expr_internal {
namespace {

// Bump allocator for one evaluation. Chunks never move, so a pointer stays
// valid until the arena is released below it.
class Arena {
 public:
  explicit Arena(size_t first_chunk) : first_(std::max<size_t>(first_chunk, 4096)) {}

  struct Mark {
    size_t chunk, used;
  };
  Mark mark() const { return {current_, used_}; }
  void Release(Mark m) {
    current_ = m.chunk;
    used_ = m.used;
  }

  template <typename T>
  T* Alloc(int64_t count) {
    const size_t bytes = (static_cast<size_t>(count) * sizeof(T) + 63) & ~size_t{63};
    while (current_ < chunks_.size() && used_ + bytes > chunks_[current_].size) {
      ++current_;
      used_ = 0;
    }
    if (current_ == chunks_.size()) {
      const size_t size = std::max(bytes, chunks_.empty() ? first_ : chunks_.back().size * 2);
      chunks_.push_back({std::unique_ptr<std::byte[]>(new std::byte[size]), size});  // not zeroed
    }
    std::byte* p = chunks_[current_].data.get() + used_;
    used_ += bytes;
    return reinterpret_cast<T*>(p);
  }

 private:
  struct Chunk {
    std::unique_ptr<std::byte[]> data;
    size_t size;
  };
  size_t first_;
  std::vector<Chunk> chunks_;
  size_t current_ = 0, used_ = 0;
};

// A node's values (bool as uint8_t, int as int64_t, float) and, for nodes
// that depend on score, d(value)/d(score).
struct Val {
  void* v = nullptr;
  float* d = nullptr;  // null means 0
  uint8_t shape = 0;
  template <typename T>
  T* as() const {
    return static_cast<T*>(v);
  }
};

float FloatMod(float a, float b) {
  const float r = std::fmod(a, b);
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

class Evaluator {
 public:
  Evaluator(const ModExpr::Impl& p, int64_t b, int64_t h, int64_t q0, int64_t nq, int64_t k0,
            int64_t nk, bool want_grad)
      : p_(p),
        b_(b),
        h_(h),
        q0_(q0),
        k0_(k0),
        nq_(nq),
        nk_(nk),
        want_grad_(want_grad),
        arena_(static_cast<size_t>(nq * nk) * 16) {}

  int64_t Rows(uint8_t s) const { return s & kRow ? nq_ : 1; }
  int64_t Cols(uint8_t s) const { return s & kCol ? nk_ : 1; }
  int64_t Size(uint8_t s) const { return Rows(s) * Cols(s); }
  // Offset of tile element (i, j) in a buffer of shape s.
  int64_t At(uint8_t s, int64_t i, int64_t j) const {
    return (s & kRow ? i * Cols(s) : 0) + (s & kCol ? j : 0);
  }
  Arena& arena() { return arena_; }
  void set_score(const float* score) { score_ = score; }

  // Evaluates node `index`. `active` (a bool value, or null for "all")
  // marks the tile elements whose value is used: a false guard of &&, ||
  // or ?: turns off the range and zero checks of what it guards.
  Val Eval(int32_t index, const Val* active) {
    const Node& n = p_.nodes[index];
    Val out;
    out.shape = n.shape;
    const int64_t size = Size(n.shape);
    if (n.type == Type::kBool) out.v = arena_.Alloc<uint8_t>(size);
    if (n.type == Type::kInt) out.v = arena_.Alloc<int64_t>(size);
    if (n.type == Type::kFloat) out.v = arena_.Alloc<float>(size);
    if (want_grad_ && n.uses_score) out.d = arena_.Alloc<float>(size);
    const Arena::Mark mark = arena_.mark();
    Compute(n, active, out);
    arena_.Release(mark);
    return out;
  }

 private:
  void Compute(const Node& n, const Val* active, const Val& out);
  void Unary(const Node& n, const Val& a, const Val& out);
  void BinaryFloat(const Node& n, const Val& a, const Val& b, const Val& out);
  void Gather(const Node& n, const Val* active, const Val& out);
  void Select(const Node& n, const Val* active, const Val& out);

  // out(i, j) = f(a(i, j), b(i, j)) with broadcasting. The inner loops are
  // specialised on which operands vary along the row, so they vectorize.
  template <typename R, typename A, typename B, typename F>
  void Map2(const Val& out, const Val& a, const Val& b, F f) {
    const int64_t rows = Rows(out.shape), cols = Cols(out.shape);
    const int64_t ars = a.shape & kRow ? Cols(a.shape) : 0;
    const int64_t brs = b.shape & kRow ? Cols(b.shape) : 0;
    const bool ac = a.shape & kCol, bc = b.shape & kCol;
    for (int64_t i = 0; i < rows; ++i) {
      const A* pa = a.as<A>() + i * ars;
      const B* pb = b.as<B>() + i * brs;
      R* po = out.as<R>() + i * cols;
      if (ac && bc) {
        for (int64_t j = 0; j < cols; ++j) po[j] = f(pa[j], pb[j]);
      } else if (ac) {
        const B y = pb[0];
        for (int64_t j = 0; j < cols; ++j) po[j] = f(pa[j], y);
      } else if (bc) {
        const A x = pa[0];
        for (int64_t j = 0; j < cols; ++j) po[j] = f(x, pb[j]);
      } else {
        po[0] = f(pa[0], pb[0]);
      }
    }
  }
  template <typename R, typename A, typename F>
  void Map1(const Val& out, const Val& a, F f) {
    const A* pa = a.as<A>();
    R* po = out.as<R>();
    for (int64_t k = 0, size = Size(out.shape); k < size; ++k) po[k] = f(pa[k]);
  }

  // out(i, j) = c(i, j) ? a(i, j) : b(i, j), with broadcasting.
  template <typename T>
  void Pick(const Val& out, const Val& c, const Val& a, const Val& b) {
    const int64_t rows = Rows(out.shape), cols = Cols(out.shape);
    const int64_t cs = c.shape & kCol ? 1 : 0, as = a.shape & kCol ? 1 : 0,
                  bs = b.shape & kCol ? 1 : 0;
    for (int64_t i = 0; i < rows; ++i) {
      const uint8_t* pc = c.as<uint8_t>() + At(c.shape, i, 0);
      const T* pa = a.as<T>() + At(a.shape, i, 0);
      const T* pb = b.as<T>() + At(b.shape, i, 0);
      T* po = out.as<T>() + i * cols;
      for (int64_t j = 0; j < cols; ++j) po[j] = pc[j * cs] ? pa[j * as] : pb[j * bs];
    }
  }

  // The values of a float node broadcast to the full tile.
  const float* FullF(const Val& a) {
    if (a.shape == kFull) return a.as<float>();
    float* f = arena_.Alloc<float>(nq_ * nk_);
    for (int64_t i = 0; i < nq_; ++i) {
      for (int64_t j = 0; j < nk_; ++j) f[i * nk_ + j] = a.as<float>()[At(a.shape, i, j)];
    }
    return f;
  }

  // active && cond, or active && !cond: where a guarded operand is used.
  Val Guard(const Val* active, const Val& cond, bool negate) {
    Val g;
    g.shape = cond.shape | (active ? active->shape : 0);
    g.v = arena_.Alloc<uint8_t>(Size(g.shape));
    const uint8_t flip = negate ? 1 : 0;
    if (active) {
      Map2<uint8_t, uint8_t, uint8_t>(
          g, *active, cond, [=](uint8_t a, uint8_t c) -> uint8_t { return a & (c ^ flip); });
    } else {
      Map1<uint8_t, uint8_t>(g, cond, [=](uint8_t c) -> uint8_t { return c ^ flip; });
    }
    return g;
  }

  // Which elements of a buffer of shape s are used: those that some active
  // tile element maps to. Null when all are.
  const uint8_t* Needed(const Val* active, uint8_t s) {
    if (active == nullptr) return nullptr;
    uint8_t* need = arena_.Alloc<uint8_t>(Size(s));
    std::fill_n(need, Size(s), uint8_t{0});
    const uint8_t u = s | active->shape;
    const uint8_t* a = active->as<uint8_t>();
    // Row strides (0 where a buffer has one row); the loops below are
    // specialised on which of the two vary along the row, so they vectorize.
    const int64_t a_row = active->shape & kRow ? Cols(active->shape) : 0;
    const int64_t n_row = s & kRow ? Cols(s) : 0;
    const bool a_col = active->shape & kCol, n_col = s & kCol;
    const int64_t cols = Cols(u);
    for (int64_t i = 0; i < Rows(u); ++i) {
      const uint8_t* ar = a + i * a_row;
      uint8_t* nr = need + i * n_row;
      if (n_col && a_col) {
        for (int64_t j = 0; j < cols; ++j) nr[j] |= ar[j];
      } else if (n_col) {
        if (ar[0]) std::fill_n(nr, cols, uint8_t{1});
      } else if (a_col) {
        uint8_t any = 0;
        for (int64_t j = 0; j < cols; ++j) any |= ar[j];
        nr[0] |= any;
      } else {
        nr[0] |= ar[0];
      }
    }
    return need;
  }

  [[noreturn]] void FailAt(const Node& n, int64_t i, int64_t j, const std::string& what) const {
    std::string at = fmt::format("b={}, h={}", b_, h_);
    if (n.shape & kRow) at += fmt::format(", q_idx={}", q0_ + i);
    if (n.shape & kCol) at += fmt::format(", kv_idx={}", k0_ + j);
    Fail("{}: {} (at column {} in '{}', evaluated at {})", p_.what, what, n.column, p_.text, at);
  }

  // Integer division or modulo by a divisor that may be zero somewhere.
  template <typename F>
  void IntDivide(const Node& n, const Val* active, const Val& out, const Val& a, const Val& b,
                 F f) {
    const int64_t* pb = b.as<int64_t>();
    const int64_t nb = Size(b.shape);
    if (std::find(pb, pb + nb, int64_t{0}) != pb + nb) {
      const uint8_t* need = Needed(active, n.shape);
      for (int64_t i = 0; i < Rows(n.shape); ++i) {
        for (int64_t j = 0; j < Cols(n.shape); ++j) {
          if (pb[At(b.shape, i, j)] == 0 && (need == nullptr || need[At(n.shape, i, j)])) {
            FailAt(n, i, j, "integer division by zero; keep the divisor nonzero, e.g. max(d, 1)");
          }
        }
      }
    }
    Map2<int64_t, int64_t, int64_t>(out, a, b,
                                    [=](int64_t x, int64_t y) { return y == 0 ? 0 : f(x, y); });
  }

  const ModExpr::Impl& p_;
  int64_t b_, h_, q0_, k0_, nq_, nk_;
  bool want_grad_;
  Arena arena_;
  const float* score_ = nullptr;  // the raw scores, nq x nk contiguous
};

void Evaluator::Compute(const Node& n, const Val* active, const Val& out) {
  switch (n.op) {
    case Op::kBoolLit:
      *out.as<uint8_t>() = static_cast<uint8_t>(n.int_value);
      return;
    case Op::kIntLit:
      *out.as<int64_t>() = n.int_value;
      return;
    case Op::kFloatLit:
      *out.as<float>() = n.float_value;
      return;
    case Op::kB:
      *out.as<int64_t>() = b_;
      return;
    case Op::kH:
      *out.as<int64_t>() = h_;
      return;
    case Op::kQ:
      for (int64_t i = 0; i < nq_; ++i) out.as<int64_t>()[i] = q0_ + i;
      return;
    case Op::kKv:
      for (int64_t j = 0; j < nk_; ++j) out.as<int64_t>()[j] = k0_ + j;
      return;
    case Op::kScore:
      std::copy_n(score_, nq_ * nk_, out.as<float>());
      if (out.d) std::fill_n(out.d, nq_ * nk_, 1.0f);
      return;
    case Op::kGather:
      return Gather(n, active, out);
    case Op::kSelect:
      return Select(n, active, out);
    case Op::kAnd:
    case Op::kOr: {
      // The right operand is used only where the left one does not decide.
      const Val a = Eval(n.args[0], active);
      const bool guarded = p_.nodes[n.args[1]].may_fail;
      Val guard;
      if (guarded) guard = Guard(active, a, n.op == Op::kOr);
      const Val b = Eval(n.args[1], guarded ? &guard : nullptr);
      if (n.op == Op::kAnd) {
        Map2<uint8_t, uint8_t, uint8_t>(out, a, b,
                                        [](uint8_t x, uint8_t y) -> uint8_t { return x & y; });
      } else {
        Map2<uint8_t, uint8_t, uint8_t>(out, a, b,
                                        [](uint8_t x, uint8_t y) -> uint8_t { return x | y; });
      }
      return;
    }
    default:
      break;
  }

  const Val a = Eval(n.args[0], active);
  if (n.args.size() == 1) return Unary(n, a, out);
  const Val b = Eval(n.args[1], active);
  const Type operands = p_.nodes[n.args[0]].type;
  auto compare = [&](auto tag) {
    using T = decltype(tag);
    switch (n.op) {
      case Op::kEq:
        return Map2<uint8_t, T, T>(out, a, b, [](T x, T y) -> uint8_t { return x == y; });
      case Op::kNe:
        return Map2<uint8_t, T, T>(out, a, b, [](T x, T y) -> uint8_t { return x != y; });
      case Op::kLt:
        return Map2<uint8_t, T, T>(out, a, b, [](T x, T y) -> uint8_t { return x < y; });
      case Op::kLe:
        return Map2<uint8_t, T, T>(out, a, b, [](T x, T y) -> uint8_t { return x <= y; });
      case Op::kGt:
        return Map2<uint8_t, T, T>(out, a, b, [](T x, T y) -> uint8_t { return x > y; });
      default:
        return Map2<uint8_t, T, T>(out, a, b, [](T x, T y) -> uint8_t { return x >= y; });
    }
  };
  if (n.type == Type::kBool) {
    if (operands == Type::kBool) return compare(uint8_t{});
    if (operands == Type::kInt) return compare(int64_t{});
    return compare(float{});
  }
  if (n.type == Type::kFloat) return BinaryFloat(n, a, b, out);
  using I = int64_t;
  using U = uint64_t;
  switch (n.op) {
    case Op::kAdd:
      return Map2<I, I, I>(out, a, b, [](I x, I y) { return Wrap(U(x) + U(y)); });
    case Op::kSub:
      return Map2<I, I, I>(out, a, b, [](I x, I y) { return Wrap(U(x) - U(y)); });
    case Op::kMul:
      return Map2<I, I, I>(out, a, b, [](I x, I y) { return Wrap(U(x) * U(y)); });
    case Op::kMin:
      return Map2<I, I, I>(out, a, b, [](I x, I y) { return y < x ? y : x; });
    case Op::kMax:
      return Map2<I, I, I>(out, a, b, [](I x, I y) { return y > x ? y : x; });
    case Op::kDiv:
      return IntDivide(n, active, out, a, b, FloorDiv);
    default:
      return IntDivide(n, active, out, a, b, FloorMod);
  }
}

void Evaluator::Unary(const Node& n, const Val& a, const Val& out) {
  const int64_t size = Size(n.shape);
  if (n.op == Op::kToFloat) {
    return Map1<float, int64_t>(out, a, [](int64_t x) { return static_cast<float>(x); });
  }
  if (n.op == Op::kNot) {
    return Map1<uint8_t, uint8_t>(out, a, [](uint8_t x) -> uint8_t { return x ^ 1; });
  }
  if (n.type == Type::kInt) {
    if (n.op == Op::kNeg) {
      return Map1<int64_t, int64_t>(out, a, [](int64_t x) { return Wrap(0 - uint64_t(x)); });
    }
    return Map1<int64_t, int64_t>(out, a,
                                  [](int64_t x) { return x < 0 ? Wrap(0 - uint64_t(x)) : x; });
  }
  // Float functions; d = f'(x) * dx, written with the result y where cheaper.
  const float* x = a.as<float>();
  const float* y = out.as<float>();
  const float* dx = a.d;
  float* d = out.d;
  switch (n.op) {
    case Op::kNeg:
      Map1<float, float>(out, a, [](float v) { return -v; });
      if (d)
        for (int64_t k = 0; k < size; ++k) d[k] = -dx[k];
      return;
    case Op::kAbs:
      Map1<float, float>(out, a, [](float v) { return std::fabs(v); });
      if (d)
        for (int64_t k = 0; k < size; ++k) d[k] = x[k] < 0 ? -dx[k] : dx[k];
      return;
    case Op::kTanh:
      Map1<float, float>(out, a, [](float v) { return std::tanh(v); });
      if (d)
        for (int64_t k = 0; k < size; ++k) d[k] = (1.0f - y[k] * y[k]) * dx[k];
      return;
    case Op::kExp:
      Map1<float, float>(out, a, [](float v) { return std::exp(v); });
      if (d)
        for (int64_t k = 0; k < size; ++k) d[k] = y[k] * dx[k];
      return;
    case Op::kLog:
      Map1<float, float>(out, a, [](float v) { return std::log(v); });
      if (d)
        for (int64_t k = 0; k < size; ++k) d[k] = dx[k] / x[k];
      return;
    case Op::kSqrt:
      Map1<float, float>(out, a, [](float v) { return std::sqrt(v); });
      if (d)
        for (int64_t k = 0; k < size; ++k) d[k] = 0.5f * dx[k] / y[k];
      return;
    default:  // kSigmoid
      Map1<float, float>(out, a, [](float v) { return 1.0f / (1.0f + std::exp(-v)); });
      if (d)
        for (int64_t k = 0; k < size; ++k) d[k] = y[k] * (1.0f - y[k]) * dx[k];
      return;
  }
}

void Evaluator::BinaryFloat(const Node& n, const Val& a, const Val& b, const Val& out) {
  using F = float;
  switch (n.op) {
    case Op::kAdd:
      Map2<F, F, F>(out, a, b, [](F x, F y) { return x + y; });
      break;
    case Op::kSub:
      Map2<F, F, F>(out, a, b, [](F x, F y) { return x - y; });
      break;
    case Op::kMul:
      Map2<F, F, F>(out, a, b, [](F x, F y) { return x * y; });
      break;
    case Op::kDiv:
      Map2<F, F, F>(out, a, b, [](F x, F y) { return x / y; });
      break;
    case Op::kMod:
      Map2<F, F, F>(out, a, b, FloatMod);
      break;
    case Op::kMin:
      Map2<F, F, F>(out, a, b, [](F x, F y) { return y < x ? y : x; });
      break;
    default:
      Map2<F, F, F>(out, a, b, [](F x, F y) { return y > x ? y : x; });
      break;
  }
  if (out.d == nullptr) return;
  // Forward mode. A node that depends on score covers the full tile, and so
  // do its operands' derivatives (null: the operand does not depend on score).
  const int64_t size = nq_ * nk_;
  float* d = out.d;
  const float *da = a.d, *db = b.d;
  const float *x = FullF(a), *y = FullF(b), *z = out.as<float>();
  if (da == nullptr || db == nullptr) {
    // One side is constant in score: treat its derivative as a zero tile.
    float* zero = arena_.Alloc<float>(size);
    std::fill_n(zero, size, 0.0f);
    if (da == nullptr) da = zero;
    if (db == nullptr) db = zero;
  }
  switch (n.op) {
    case Op::kAdd:
      for (int64_t k = 0; k < size; ++k) d[k] = da[k] + db[k];
      return;
    case Op::kSub:
      for (int64_t k = 0; k < size; ++k) d[k] = da[k] - db[k];
      return;
    case Op::kMul:
      for (int64_t k = 0; k < size; ++k) d[k] = da[k] * y[k] + x[k] * db[k];
      return;
    case Op::kDiv:  // (a/b)' = (a' - (a/b) b') / b
      for (int64_t k = 0; k < size; ++k) d[k] = (da[k] - z[k] * db[k]) / y[k];
      return;
    case Op::kMod:  // a - floor(a/b) b
      for (int64_t k = 0; k < size; ++k) d[k] = da[k] - std::floor(x[k] / y[k]) * db[k];
      return;
    case Op::kMin:
      for (int64_t k = 0; k < size; ++k) d[k] = y[k] < x[k] ? db[k] : da[k];
      return;
    default:
      for (int64_t k = 0; k < size; ++k) d[k] = y[k] > x[k] ? db[k] : da[k];
      return;
  }
}

void Evaluator::Gather(const Node& n, const Val* active, const Val& out) {
  const TensorInfo& t = p_.tensors[n.tensor];
  std::vector<Val> idx;
  for (int32_t a : n.args) idx.push_back(Eval(a, active));
  const uint8_t* need = Needed(active, n.shape);
  const size_t rank = idx.size();
  for (int64_t i = 0; i < Rows(n.shape); ++i) {
    for (int64_t j = 0; j < Cols(n.shape); ++j) {
      const int64_t o = At(n.shape, i, j);
      const bool used = need == nullptr || need[o];
      int64_t offset = 0;
      for (size_t k = 0; k < rank && used; ++k) {
        const int64_t x = idx[k].as<int64_t>()[At(idx[k].shape, i, j)];
        if (x < 0 || x >= t.shape[k]) {
          std::vector<int64_t> index;
          for (const Val& v : idx) index.push_back(v.as<int64_t>()[At(v.shape, i, j)]);
          FailAt(n, i, j,
                 fmt::format("index {} is out of range for tensor '{}' of shape {}; clamp the "
                             "index with min/max or guard it with a condition",
                             ShapeText(index), t.name, ShapeText(t.shape)));
        }
        offset += x * t.strides[k];
      }
      if (t.floats) {
        out.as<float>()[o] = used ? t.floats[offset] : 0.0f;
      } else {
        out.as<int64_t>()[o] = used ? t.ints[offset] : 0;
      }
    }
  }
}

void Evaluator::Select(const Node& n, const Val* active, const Val& out) {
  const Val c = Eval(n.args[0], active);
  const bool guard_a = p_.nodes[n.args[1]].may_fail, guard_b = p_.nodes[n.args[2]].may_fail;
  Val when_true, when_false;
  if (guard_a) when_true = Guard(active, c, false);
  if (guard_b) when_false = Guard(active, c, true);
  const Val a = Eval(n.args[1], guard_a ? &when_true : nullptr);
  const Val b = Eval(n.args[2], guard_b ? &when_false : nullptr);
  if (n.type == Type::kBool) Pick<uint8_t>(out, c, a, b);
  if (n.type == Type::kInt) Pick<int64_t>(out, c, a, b);
  if (n.type == Type::kFloat) Pick<float>(out, c, a, b);
  if (out.d) {
    // Operands that do not depend on score have derivative 0.
    const float* zero = nullptr;
    if (a.d == nullptr || b.d == nullptr) {
      float* z = arena_.Alloc<float>(nq_ * nk_);
      std::fill_n(z, nq_ * nk_, 0.0f);
      zero = z;
    }
    Val da{const_cast<float*>(a.d ? a.d : zero), nullptr, kFull};
    Val db{const_cast<float*>(b.d ? b.d : zero), nullptr, kFull};
    Pick<float>(Val{out.d, nullptr, kFull}, c, da, db);
  }
}

void CheckTile(const ModExpr::Impl& p, int64_t nq, int64_t nk, int64_t ld) {
  WEFT_CHECK(nq >= 0 && nk >= 0 && ld >= nk,
             "{}: bad tile nq={}, nk={}, ld={}; need nq, nk >= 0 and ld >= nk", p.what, nq, nk, ld);
}

}  // namespace

void EvaluateMaskTile(const ModExpr::Impl& p, int64_t b, int64_t h, int64_t q0, int64_t nq,
                      int64_t k0, int64_t nk, uint8_t* keep, int64_t ld) {
  CheckTile(p, nq, nk, ld);
  if (nq == 0 || nk == 0) return;
  Evaluator e(p, b, h, q0, nq, k0, nk, /*want_grad=*/false);
  const Val v = e.Eval(p.root, nullptr);
  for (int64_t i = 0; i < nq; ++i) {
    const uint8_t* src = v.as<uint8_t>() + e.At(v.shape, i, 0);
    if (v.shape & kCol) {
      std::memcpy(keep + i * ld, src, static_cast<size_t>(nk));
    } else {
      std::memset(keep + i * ld, src[0], static_cast<size_t>(nk));
    }
  }
}

void ApplyScoreTile(const ModExpr::Impl& p, int64_t b, int64_t h, int64_t q0, int64_t nq,
                    int64_t k0, int64_t nk, float* scores, int64_t ld, float* grad) {
  CheckTile(p, nq, nk, ld);
  if (nq == 0 || nk == 0) return;
  Evaluator e(p, b, h, q0, nq, k0, nk, /*want_grad=*/grad != nullptr);
  float* raw = e.arena().Alloc<float>(nq * nk);
  for (int64_t i = 0; i < nq; ++i) std::copy_n(scores + i * ld, nk, raw + i * nk);
  e.set_score(raw);
  const Val v = e.Eval(p.root, nullptr);
  for (int64_t i = 0; i < nq; ++i) {
    for (int64_t j = 0; j < nk; ++j) {
      const int64_t at = e.At(v.shape, i, j);
      scores[i * ld + j] = v.as<float>()[at];
      if (grad) grad[i * ld + j] = v.d ? v.d[at] : 0.0f;
    }
  }
}

}  // namespace weft::kernels::mod_expr_internal
