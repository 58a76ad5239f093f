// vjp rules of the elementwise ops (same-shape operands; XLA has no implicit
// broadcasting, so no reduction is needed here).
#include "vjp.h"
#include "weft/base/error.h"

namespace weft::autodiff {
namespace {

HloInstruction* X(VjpContext& c, const HloInstruction& f, int64_t i) {
  return c.Primal(f.operand(i));
}

void Add(VjpContext& c, const HloInstruction& f, std::span<HloInstruction* const> ct) {
  c.Accumulate(f.operand(0), ct[0]);
  c.Accumulate(f.operand(1), ct[0]);
}

void Subtract(VjpContext& c, const HloInstruction& f, std::span<HloInstruction* const> ct) {
  c.Accumulate(f.operand(0), ct[0]);
  if (c.NeedsGrad(f.operand(1))) c.Accumulate(f.operand(1), c.b().Unary(HloOpcode::kNegate, ct[0]));
}

void Multiply(VjpContext& c, const HloInstruction& f, std::span<HloInstruction* const> ct) {
  if (c.NeedsGrad(f.operand(0))) c.Accumulate(f.operand(0), c.b().Multiply(ct[0], X(c, f, 1)));
  if (c.NeedsGrad(f.operand(1))) c.Accumulate(f.operand(1), c.b().Multiply(ct[0], X(c, f, 0)));
}

// d(x/y) = dx/y - dy*x/y^2 = dx/y - dy*(x/y)/y.
void Divide(VjpContext& c, const HloInstruction& f, std::span<HloInstruction* const> ct) {
  HloInstruction* g = c.b().Divide(ct[0], X(c, f, 1));
  c.Accumulate(f.operand(0), g);
  if (c.NeedsGrad(f.operand(1))) {
    HloInstruction* q = c.Primal(&f);
    c.Accumulate(f.operand(1), c.b().Unary(HloOpcode::kNegate, c.b().Multiply(g, q)));
  }
}

// The gradient goes to the operand that won (to x on ties, as jax's
// reduce-max convention for two operands).
void MaxMin(VjpContext& c, const HloInstruction& f, std::span<HloInstruction* const> ct) {
  const ComparisonDirection dir =
      f.opcode() == HloOpcode::kMaximum ? ComparisonDirection::kGe : ComparisonDirection::kLe;
  HloInstruction* x_wins = c.b().Compare(X(c, f, 0), X(c, f, 1), dir);
  HloInstruction* zero = c.Zeros(ct[0]->shape());
  c.Accumulate(f.operand(0), c.b().Select(x_wins, ct[0], zero));
  if (c.NeedsGrad(f.operand(1))) c.Accumulate(f.operand(1), c.b().Select(x_wins, zero, ct[0]));
}

void Negate(VjpContext& c, const HloInstruction& f, std::span<HloInstruction* const> ct) {
  c.Accumulate(f.operand(0), c.b().Unary(HloOpcode::kNegate, ct[0]));
}

void Exp(VjpContext& c, const HloInstruction& f, std::span<HloInstruction* const> ct) {
  c.Accumulate(f.operand(0), c.b().Multiply(ct[0], c.Primal(&f)));
}

void Log(VjpContext& c, const HloInstruction& f, std::span<HloInstruction* const> ct) {
  c.Accumulate(f.operand(0), c.b().Divide(ct[0], X(c, f, 0)));
}

// d tanh = 1 - tanh^2.
void Tanh(VjpContext& c, const HloInstruction& f, std::span<HloInstruction* const> ct) {
  HloInstruction* y = c.Primal(&f);
  HloInstruction* one = c.ScalarLike(y->shape(), 1.0);
  c.Accumulate(f.operand(0), c.b().Multiply(ct[0], c.b().Subtract(one, c.b().Multiply(y, y))));
}

// d sigmoid = s (1 - s).
void Logistic(VjpContext& c, const HloInstruction& f, std::span<HloInstruction* const> ct) {
  HloInstruction* s = c.Primal(&f);
  HloInstruction* one = c.ScalarLike(s->shape(), 1.0);
  c.Accumulate(f.operand(0), c.b().Multiply(ct[0], c.b().Multiply(s, c.b().Subtract(one, s))));
}

// d x^-1/2 = -1/2 x^-3/2 = -1/2 y^3.
void Rsqrt(VjpContext& c, const HloInstruction& f, std::span<HloInstruction* const> ct) {
  HloInstruction* y = c.Primal(&f);
  HloInstruction* y3 = c.b().Multiply(y, c.b().Multiply(y, y));
  HloInstruction* g = c.b().Multiply(ct[0], c.b().Multiply(y3, c.ScalarLike(y->shape(), -0.5)));
  c.Accumulate(f.operand(0), g);
}

// d sqrt = 1 / (2 y).
void Sqrt(VjpContext& c, const HloInstruction& f, std::span<HloInstruction* const> ct) {
  HloInstruction* y = c.Primal(&f);
  HloInstruction* two_y = c.b().Multiply(y, c.ScalarLike(y->shape(), 2.0));
  c.Accumulate(f.operand(0), c.b().Divide(ct[0], two_y));
}

// d x^p = p x^(p-1) dx + log(x) x^p dp.
void Power(VjpContext& c, const HloInstruction& f, std::span<HloInstruction* const> ct) {
  HloInstruction* x = X(c, f, 0);
  HloInstruction* p = X(c, f, 1);
  if (c.NeedsGrad(f.operand(0))) {
    HloInstruction* pm1 = c.b().Subtract(p, c.ScalarLike(p->shape(), 1.0));
    HloInstruction* d = c.b().Multiply(p, c.b().Binary(HloOpcode::kPower, x, pm1));
    c.Accumulate(f.operand(0), c.b().Multiply(ct[0], d));
  }
  if (c.NeedsGrad(f.operand(1))) {
    HloInstruction* d = c.b().Multiply(c.b().Unary(HloOpcode::kLog, x), c.Primal(&f));
    c.Accumulate(f.operand(1), c.b().Multiply(ct[0], d));
  }
}

bool IsLayoutOp(const HloInstruction& x) {
  return x.opcode() == HloOpcode::kTranspose || x.opcode() == HloOpcode::kReshape ||
         x.opcode() == HloOpcode::kCopy;
}

// `ct` retyped to `to` when it is a backward dot's result, perhaps through
// layout ops into its operand's layout, that nothing else reads yet and that
// `to` widens (a bf16 dot, f32 wanted); else nullptr. The dot then
// accumulates into and returns the wider type directly.
HloInstruction* WidenedDot(HloInstruction* ct, PrimitiveType to) {
  if (!ct->users().empty()) return nullptr;
  std::vector<HloInstruction*> chain = {ct};
  while (IsLayoutOp(*chain.back())) {
    HloInstruction* next = chain.back()->operands()[0];
    if (next->users().size() != 1) return nullptr;
    chain.push_back(next);
  }
  const HloInstruction* dot = chain.back();
  const PrimitiveType from = dot->shape().element_type();
  if (dot->opcode() != HloOpcode::kDot || !IsFloatingPoint(from) || !IsFloatingPoint(to) ||
      ByteWidth(to) <= ByteWidth(from)) {
    return nullptr;
  }
  for (HloInstruction* x : chain) x->set_shape(x->shape().WithElementType(to));
  return ct;
}

// A narrowing cast's cotangent, cast back. Mixed precision: an f32 weight
// cast to bf16 where a dot reads it gets its cotangent from the backward
// dot's bf16 result; rounding that to bf16 would throw away the dot's f32
// accumulation, so the dot returns f32 instead (WidenedDot) and the weight
// gradient is accumulated, and reduced across devices, in f32.
void Convert(VjpContext& c, const HloInstruction& f, std::span<HloInstruction* const> ct) {
  const PrimitiveType to = f.operand(0)->shape().element_type();
  HloInstruction* widened = WidenedDot(ct[0], to);
  c.Accumulate(f.operand(0), widened ? widened : c.ConvertTo(ct[0], to));
}

void Copy(VjpContext& c, const HloInstruction& f, std::span<HloInstruction* const> ct) {
  c.Accumulate(f.operand(0), ct[0]);
}

// The predicate gets nothing; each branch gets the cotangent where chosen.
void Select(VjpContext& c, const HloInstruction& f, std::span<HloInstruction* const> ct) {
  HloInstruction* pred = X(c, f, 0);
  HloInstruction* zero = c.Zeros(ct[0]->shape());
  if (c.NeedsGrad(f.operand(1))) c.Accumulate(f.operand(1), c.b().Select(pred, ct[0], zero));
  if (c.NeedsGrad(f.operand(2))) c.Accumulate(f.operand(2), c.b().Select(pred, zero, ct[0]));
}

}  // namespace

void RegisterElementwiseVjps(VjpTable& t) {
  t.Register(HloOpcode::kAdd, Add);
  t.Register(HloOpcode::kSubtract, Subtract);
  t.Register(HloOpcode::kMultiply, Multiply);
  t.Register(HloOpcode::kDivide, Divide);
  t.Register(HloOpcode::kMaximum, MaxMin);
  t.Register(HloOpcode::kMinimum, MaxMin);
  t.Register(HloOpcode::kNegate, Negate);
  t.Register(HloOpcode::kExp, Exp);
  t.Register(HloOpcode::kLog, Log);
  t.Register(HloOpcode::kTanh, Tanh);
  t.Register(HloOpcode::kLogistic, Logistic);
  t.Register(HloOpcode::kRsqrt, Rsqrt);
  t.Register(HloOpcode::kSqrt, Sqrt);
  t.Register(HloOpcode::kPower, Power);
  t.Register(HloOpcode::kConvert, Convert);
  t.Register(HloOpcode::kCopy, Copy);
  t.Register(HloOpcode::kSelect, Select);
}

}  // namespace weft::autodiff
