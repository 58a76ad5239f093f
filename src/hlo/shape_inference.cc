#include "weft/hlo/shape_inference.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <optional>
#include <set>

#include "shape_inference_internal.h"
#include "weft/base/algorithm.h"
#include "weft/base/error.h"
#include "weft/hlo/computation.h"
#include "weft/hlo/ragged_dot.h"

namespace weft::hlo {

std::string DimsString(std::span<const int64_t> dims) {
  return fmt::format("{{{}}}", fmt::join(dims, ","));
}

void ExpectOperandCount(const HloInstruction& instr, int64_t n) {
  WEFT_CHECK(instr.operand_count() == n, "{} takes {} operand{}, got {}",
             HloOpcodeString(instr.opcode()), n, n == 1 ? "" : "s", instr.operand_count());
}

const Shape& ArrayOperand(const HloInstruction& instr, int64_t i) {
  const Shape& s = instr.operand(i)->shape();
  WEFT_CHECK(s.IsArray(), "operand {} of {} must be an array, got {}", i,
             HloOpcodeString(instr.opcode()), s.ToString());
  return s;
}

// `dims` are distinct and in [0, rank); `sorted` also requires increasing.
void CheckDims(std::span<const int64_t> dims, int64_t rank, std::string_view what, bool sorted) {
  std::set<int64_t> seen;
  for (size_t i = 0; i < dims.size(); ++i) {
    WEFT_CHECK(dims[i] >= 0 && dims[i] < rank, "{} {} has {} out of range for rank {}", what,
               DimsString(dims), dims[i], rank);
    WEFT_CHECK(seen.insert(dims[i]).second, "{} {} repeats dim {}", what, DimsString(dims),
               dims[i]);
    WEFT_CHECK(!sorted || i == 0 || dims[i] > dims[i - 1], "{} {} must be sorted", what,
               DimsString(dims));
  }
}

const Shape& Declared(const HloInstruction& instr, std::string_view what) {
  WEFT_CHECK(instr.shape().IsValid(), "{} needs its result shape given ({})",
             HloOpcodeString(instr.opcode()), what);
  return instr.shape();
}

void CheckScalarInt(const Shape& s, std::string_view what) {
  WEFT_CHECK(s.IsScalar() && IsInteger(s.element_type()), "{} must be an integer scalar, got {}",
             what, s.ToString());
}

void CheckScalarComputation(const HloComputation* c, std::span<const PrimitiveType> accumulators,
                            std::string_view what, ReducerPrecision precision) {
  WEFT_CHECK(c != nullptr, "{} needs a to_apply computation", what);
  const int64_t n = static_cast<int64_t>(accumulators.size());
  // The type `c` uses for accumulator i: its own parameter's, where that may
  // differ.
  auto type_of = [&](int64_t i) {
    const HloInstruction* p = c->parameter_instruction(i);
    const PrimitiveType t = accumulators[i % n];
    if (precision == ReducerPrecision::kAnyFloat && p != nullptr && p->shape().IsScalar() &&
        IsFloatingPoint(t) && IsFloatingPoint(p->shape().element_type())) {
      return p->shape().element_type();
    }
    return t;
  };
  WEFT_CHECK(c->num_parameters() == 2 * n,
             "{} computation '{}' must take {} scalar parameters, takes {}", what, c->name(), 2 * n,
             c->num_parameters());
  for (int64_t i = 0; i < 2 * n; ++i) {
    const HloInstruction* p = c->parameter_instruction(i);
    WEFT_CHECK(p != nullptr, "{} computation '{}' lacks parameter {}", what, c->name(), i);
    WEFT_CHECK(p->shape() == Shape::Scalar(type_of(i)),
               "{} computation '{}' parameter {} must be {}[], got {}", what, c->name(), i,
               PrimitiveTypeName(type_of(i)), p->shape().ToString());
  }
  std::vector<Shape> expected;
  for (int64_t i = 0; i < n; ++i) expected.push_back(Shape::Scalar(type_of(i)));
  const Shape result = n == 1 ? expected[0] : Shape::Tuple(expected);
  const HloInstruction* root = c->root_instruction();
  WEFT_CHECK(root != nullptr && root->shape() == result,
             "{} computation '{}' must return {}, returns {}", what, c->name(), result.ToString(),
             root ? root->shape().ToString() : "nothing");
}

namespace {

Shape InferElementwise(const HloInstruction& instr) {
  const HloOpcode op = instr.opcode();
  const std::string_view name = HloOpcodeString(op);
  if (IsElementwiseUnary(op)) {
    ExpectOperandCount(instr, 1);
    const Shape& x = ArrayOperand(instr, 0);
    const PrimitiveType t = x.element_type();
    switch (op) {
      case HloOpcode::kNot:
        WEFT_CHECK(t == PrimitiveType::kPred || IsInteger(t), "not needs pred or integers, got {}",
                   x.ToString());
        break;
      case HloOpcode::kAbs:
      case HloOpcode::kNegate:
      case HloOpcode::kSign:
        WEFT_CHECK(t != PrimitiveType::kPred, "{} needs numbers, got {}", name, x.ToString());
        break;
      case HloOpcode::kPopcnt:
      case HloOpcode::kClz:
        WEFT_CHECK(IsInteger(t), "{} needs integers, got {}", name, x.ToString());
        break;
      default:
        WEFT_CHECK(IsFloatingPoint(t) || IsComplex(t),
                   "{} needs a floating-point or complex operand, got {}", name, x.ToString());
    }
    return x;
  }
  ExpectOperandCount(instr, 2);
  const Shape& a = ArrayOperand(instr, 0);
  const Shape& b = ArrayOperand(instr, 1);
  WEFT_CHECK(a == b, "{} operands must have the same shape, got {} and {}", name, a.ToString(),
             b.ToString());
  const PrimitiveType t = a.element_type();
  switch (op) {
    case HloOpcode::kCompare: {
      // XLA's Comparison::Type: FLOAT or TOTALORDER on floats, SIGNED on
      // signed integers, UNSIGNED on unsigned integers and pred.
      const std::string& type = instr.attrs().comparison_type;
      const bool fits =
          type.empty() || (IsFloatingPoint(t)   ? type == "FLOAT" || type == "TOTALORDER"
                           : IsSignedInteger(t) ? type == "SIGNED"
                                                : type == "UNSIGNED");
      WEFT_CHECK(fits,
                 "compare type={} does not fit {} operands; XLA's types are FLOAT or "
                 "TOTALORDER for floats, SIGNED for signed integers, UNSIGNED for unsigned "
                 "integers and pred",
                 type, PrimitiveTypeName(t));
      return a.WithElementType(PrimitiveType::kPred);
    }
    case HloOpcode::kAnd:
    case HloOpcode::kOr:
    case HloOpcode::kXor:
      WEFT_CHECK(t == PrimitiveType::kPred || IsInteger(t), "{} needs pred or integers, got {}",
                 name, a.ToString());
      return a;
    case HloOpcode::kPower:
      WEFT_CHECK(t != PrimitiveType::kPred, "power needs numbers, got {}", a.ToString());
      return a;
    case HloOpcode::kShiftLeft:
    case HloOpcode::kShiftRightArith:
    case HloOpcode::kShiftRightLogical:
      WEFT_CHECK(IsInteger(t), "{} needs integers, got {}", name, a.ToString());
      return a;
    default:
      WEFT_CHECK(
          t != PrimitiveType::kPred || op == HloOpcode::kMaximum || op == HloOpcode::kMinimum,
          "{} needs numbers, got {}", name, a.ToString());
      return a;
  }
}

Shape InferSelectOrClamp(const HloInstruction& instr) {
  ExpectOperandCount(instr, 3);
  const Shape& a = ArrayOperand(instr, 0);
  const Shape& b = ArrayOperand(instr, 1);
  const Shape& c = ArrayOperand(instr, 2);
  if (instr.opcode() == HloOpcode::kSelect) {
    WEFT_CHECK(a.element_type() == PrimitiveType::kPred, "select predicate must be pred, got {}",
               a.ToString());
    WEFT_CHECK(b == c, "select branches must have the same shape, got {} and {}", b.ToString(),
               c.ToString());
    WEFT_CHECK(a.IsScalar() || a.dimensions() == b.dimensions(),
               "select predicate {} must be a scalar or match the branches {}", a.ToString(),
               b.ToString());
    return b;
  }
  // clamp(min, x, max): bounds are scalars or shaped like x.
  for (const Shape* bound : {&a, &c}) {
    WEFT_CHECK(bound->element_type() == b.element_type() && (bound->IsScalar() || *bound == b),
               "clamp bound {} must be a scalar or match the operand {}", bound->ToString(),
               b.ToString());
  }
  return b;
}
Shape InferReduce(const HloInstruction& instr) {
  WEFT_CHECK(instr.operand_count() >= 2 && instr.operand_count() % 2 == 0,
             "reduce takes N inputs then N init values, got {} operands", instr.operand_count());
  const int64_t n = instr.operand_count() / 2;
  const Shape& first = ArrayOperand(instr, 0);
  const Dims& dims = instr.dimensions();
  CheckDims(dims, first.rank(), "reduce dimensions");
  std::vector<PrimitiveType> types;
  std::vector<Shape> results;
  Dims kept;
  for (int64_t d = 0; d < first.rank(); ++d) {
    if (!Contains(dims, d)) kept.push_back(first.dimensions(d));
  }
  for (int64_t i = 0; i < n; ++i) {
    const Shape& input = ArrayOperand(instr, i);
    const Shape& init = ArrayOperand(instr, n + i);
    WEFT_CHECK(input.dimensions() == first.dimensions(),
               "reduce inputs must have the same dimensions, got {} and {}", first.ToString(),
               input.ToString());
    WEFT_CHECK(init.IsScalar() && init.element_type() == input.element_type(),
               "reduce init value {} must be a scalar of the input type {}", init.ToString(),
               PrimitiveTypeName(input.element_type()));
    types.push_back(input.element_type());
    results.push_back(Shape(input.element_type(), kept));
  }
  CheckScalarComputation(instr.called_computations().empty() ? nullptr : instr.to_apply(), types,
                         "reduce");
  return n == 1 ? results[0] : Shape::Tuple(results);
}

// The dot of lhs and rhs by the instruction's dimension numbers; the rhs
// dims `rhs_dropped` (a ragged-dot's group dims) are not in the result.
Shape InferDotOf(const HloInstruction& instr, const Shape& lhs, const Shape& rhs,
                 const Dims& rhs_dropped) {
  const DotDimensionNumbers& dn = instr.attrs().dot;
  WEFT_CHECK(lhs.element_type() == rhs.element_type(),
             "dot operands must have the same element type, got {} and {}", lhs.ToString(),
             rhs.ToString());
  WEFT_CHECK(dn.lhs_batch_dims.size() == dn.rhs_batch_dims.size(),
             "dot has {} lhs batch dims but {} rhs batch dims", dn.lhs_batch_dims.size(),
             dn.rhs_batch_dims.size());
  WEFT_CHECK(dn.lhs_contracting_dims.size() == dn.rhs_contracting_dims.size(),
             "dot has {} lhs contracting dims but {} rhs contracting dims",
             dn.lhs_contracting_dims.size(), dn.rhs_contracting_dims.size());
  auto check_side = [](const Shape& s, const Dims& batch, const Dims& contracting,
                       std::string_view side) {
    Dims all = batch;
    all.insert(all.end(), contracting.begin(), contracting.end());
    CheckDims(all, s.rank(), fmt::format("dot {} batch+contracting dims", side));
  };
  check_side(lhs, dn.lhs_batch_dims, dn.lhs_contracting_dims, "lhs");
  check_side(rhs, dn.rhs_batch_dims, dn.rhs_contracting_dims, "rhs");
  for (size_t i = 0; i < dn.lhs_batch_dims.size(); ++i) {
    WEFT_CHECK(lhs.dimensions(dn.lhs_batch_dims[i]) == rhs.dimensions(dn.rhs_batch_dims[i]),
               "dot batch dim sizes differ: lhs dim {} is {} but rhs dim {} is {} ({} x {})",
               dn.lhs_batch_dims[i], lhs.dimensions(dn.lhs_batch_dims[i]), dn.rhs_batch_dims[i],
               rhs.dimensions(dn.rhs_batch_dims[i]), lhs.ToString(), rhs.ToString());
  }
  for (size_t i = 0; i < dn.lhs_contracting_dims.size(); ++i) {
    WEFT_CHECK(
        lhs.dimensions(dn.lhs_contracting_dims[i]) == rhs.dimensions(dn.rhs_contracting_dims[i]),
        "dot contracting dim sizes differ: lhs dim {} is {} but rhs dim {} is {} ({} x {})",
        dn.lhs_contracting_dims[i], lhs.dimensions(dn.lhs_contracting_dims[i]),
        dn.rhs_contracting_dims[i], rhs.dimensions(dn.rhs_contracting_dims[i]), lhs.ToString(),
        rhs.ToString());
  }
  Dims out;
  for (int64_t d : dn.lhs_batch_dims) out.push_back(lhs.dimensions(d));
  for (int64_t d = 0; d < lhs.rank(); ++d) {
    if (!Contains(dn.lhs_batch_dims, d) && !Contains(dn.lhs_contracting_dims, d)) {
      out.push_back(lhs.dimensions(d));
    }
  }
  for (int64_t d = 0; d < rhs.rank(); ++d) {
    if (!Contains(dn.rhs_batch_dims, d) && !Contains(dn.rhs_contracting_dims, d) &&
        !Contains(rhs_dropped, d)) {
      out.push_back(rhs.dimensions(d));
    }
  }
  // The result element type may differ (e.g. bf16 x bf16 -> f32).
  PrimitiveType type = lhs.element_type();
  if (instr.shape().IsArray()) type = instr.shape().element_type();
  return Shape(type, out);
}

Shape InferDot(const HloInstruction& instr) {
  ExpectOperandCount(instr, 2);
  return InferDotOf(instr, ArrayOperand(instr, 0), ArrayOperand(instr, 1), {});
}

// XLA's ragged-dot (hlo/ragged_dot.h, XLA's InferRaggedDotOpShape).
Shape InferRaggedDot(const HloInstruction& instr) {
  ExpectOperandCount(instr, 3);
  const Shape& lhs = ArrayOperand(instr, 0);
  const Shape& rhs = ArrayOperand(instr, 1);
  const Shape& sizes = ArrayOperand(instr, 2);
  const HloAttributes& a = instr.attrs();
  WEFT_CHECK(a.lhs_ragged_dims.size() == 1, "ragged-dot needs exactly one lhs ragged dim, got {}",
             a.lhs_ragged_dims.size());
  CheckDims(a.lhs_ragged_dims, lhs.rank(), "ragged-dot lhs_ragged_dims");
  WEFT_CHECK(IsInteger(sizes.element_type()) && sizes.rank() >= 1,
             "ragged-dot group_sizes must be an integer array, got {}", sizes.ToString());
  const RaggedDotMode mode = RaggedDotModeOf(instr);
  const int64_t groups = sizes.dimensions(sizes.rank() - 1);
  if (mode == RaggedDotMode::kNonContracting) {
    WEFT_CHECK(a.rhs_group_dims.size() == 1,
               "ragged-dot with a non-contracting ragged dim needs one rhs group dim, got {}",
               a.rhs_group_dims.size());
    CheckDims(a.rhs_group_dims, rhs.rank(), "ragged-dot rhs_group_dims");
    const int64_t g = a.rhs_group_dims[0];
    WEFT_CHECK(!Contains(a.dot.rhs_batch_dims, g) && !Contains(a.dot.rhs_contracting_dims, g),
               "ragged-dot rhs group dim {} cannot be a batch or contracting dim", g);
    WEFT_CHECK(rhs.dimensions(g) == groups,
               "ragged-dot rhs group dim {} has {} groups but group_sizes {} has {}", g,
               rhs.dimensions(g), sizes.ToString(), groups);
  } else {
    WEFT_CHECK(a.rhs_group_dims.empty(),
               "ragged-dot with a {} ragged dim takes no rhs group dims, got {}",
               mode == RaggedDotMode::kBatch ? "batch" : "contracting", a.rhs_group_dims.size());
  }
  if (sizes.rank() != 1) {
    Dims want;
    for (int64_t d : RaggedDotPrefix(instr)) want.push_back(lhs.dimensions(d));
    want.push_back(groups);
    WEFT_CHECK(Dims(sizes.dimensions().begin(), sizes.dimensions().end()) == want,
               "ragged-dot group_sizes must be [{}] or [{}], got {}", groups, fmt::join(want, ","),
               sizes.ToString());
  }
  Shape out = InferDotOf(instr, lhs, rhs, a.rhs_group_dims);
  if (mode != RaggedDotMode::kContracting) return out;
  Dims dims = {groups};
  dims.insert(dims.end(), out.dimensions().begin(), out.dimensions().end());
  return Shape(out.element_type(), dims);
}
Shape InferSlicing(const HloInstruction& instr) {
  const HloAttributes& a = instr.attrs();
  switch (instr.opcode()) {
    case HloOpcode::kSlice: {
      ExpectOperandCount(instr, 1);
      const Shape& x = ArrayOperand(instr, 0);
      WEFT_CHECK(static_cast<int64_t>(a.slice.size()) == x.rank(),
                 "slice has {} ranges for an operand of rank {}", a.slice.size(), x.rank());
      Dims out;
      for (int64_t d = 0; d < x.rank(); ++d) {
        const SliceDim& s = a.slice[d];
        WEFT_CHECK(
            s.stride >= 1 && 0 <= s.start && s.start <= s.limit && s.limit <= x.dimensions(d),
            "slice range [{}:{}:{}] invalid for dim {} of size {}", s.start, s.limit, s.stride, d,
            x.dimensions(d));
        // ceil((limit - start) / stride) without overflowing on a huge stride.
        const int64_t span = s.limit - s.start;
        out.push_back(span == 0 ? 0 : 1 + (span - 1) / s.stride);
      }
      return x.WithDimensions(out);
    }
    case HloOpcode::kDynamicSlice: {
      WEFT_CHECK(instr.operand_count() >= 1, "dynamic-slice needs an operand");
      const Shape& x = ArrayOperand(instr, 0);
      ExpectOperandCount(instr, 1 + x.rank());
      for (int64_t i = 1; i < instr.operand_count(); ++i) {
        CheckScalarInt(instr.operand(i)->shape(), fmt::format("dynamic-slice start index {}", i));
      }
      WEFT_CHECK(static_cast<int64_t>(a.dynamic_slice_sizes.size()) == x.rank(),
                 "dynamic_slice_sizes {} must have one entry per operand dim ({})",
                 DimsString(a.dynamic_slice_sizes), x.rank());
      for (int64_t d = 0; d < x.rank(); ++d) {
        WEFT_CHECK(a.dynamic_slice_sizes[d] >= 0 && a.dynamic_slice_sizes[d] <= x.dimensions(d),
                   "dynamic_slice_sizes[{}] = {} exceeds operand dim {}", d,
                   a.dynamic_slice_sizes[d], x.dimensions(d));
      }
      return x.WithDimensions(a.dynamic_slice_sizes);
    }
    case HloOpcode::kDynamicUpdateSlice: {
      WEFT_CHECK(instr.operand_count() >= 2, "dynamic-update-slice needs an operand and update");
      const Shape& x = ArrayOperand(instr, 0);
      const Shape& u = ArrayOperand(instr, 1);
      ExpectOperandCount(instr, 2 + x.rank());
      WEFT_CHECK(u.element_type() == x.element_type() && u.rank() == x.rank(),
                 "dynamic-update-slice update {} must match the operand's type and rank ({})",
                 u.ToString(), x.ToString());
      for (int64_t d = 0; d < x.rank(); ++d) {
        WEFT_CHECK(u.dimensions(d) <= x.dimensions(d),
                   "dynamic-update-slice update {} is larger than operand {} in dim {}",
                   u.ToString(), x.ToString(), d);
      }
      for (int64_t i = 2; i < instr.operand_count(); ++i) {
        CheckScalarInt(instr.operand(i)->shape(),
                       fmt::format("dynamic-update-slice start index {}", i - 1));
      }
      return x;
    }
    default: {  // kPad
      ExpectOperandCount(instr, 2);
      const Shape& x = ArrayOperand(instr, 0);
      const Shape& v = ArrayOperand(instr, 1);
      WEFT_CHECK(v.IsScalar() && v.element_type() == x.element_type(),
                 "pad value {} must be a scalar of the operand type", v.ToString());
      WEFT_CHECK(static_cast<int64_t>(a.padding.size()) == x.rank(),
                 "padding has {} entries for an operand of rank {}", a.padding.size(), x.rank());
      Dims out;
      for (int64_t d = 0; d < x.rank(); ++d) {
        const PadDim& p = a.padding[d];
        WEFT_CHECK(p.interior >= 0, "pad interior padding {} is negative", p.interior);
        const int64_t n = x.dimensions(d);
        std::optional<int64_t> size = CheckedMul(std::max<int64_t>(n - 1, 0), p.interior);
        for (int64_t term : {n, p.low, p.high}) {
          if (size) size = CheckedAdd(*size, term);
        }
        WEFT_CHECK(size.has_value(),
                   "padding {}_{}_{} of dim {} (size {}) gives a size that overflows int64", p.low,
                   p.high, p.interior, d, n);
        WEFT_CHECK(*size >= 0, "padding {}_{}_{} leaves dim {} with negative size", p.low, p.high,
                   p.interior, d);
        out.push_back(*size);
      }
      return x.WithDimensions(out);
    }
  }
}

Shape InferLayoutOp(const HloInstruction& instr) {
  const HloAttributes& a = instr.attrs();
  switch (instr.opcode()) {
    case HloOpcode::kBroadcast: {
      ExpectOperandCount(instr, 1);
      const Shape& x = ArrayOperand(instr, 0);
      const Shape& out = Declared(instr, "the broadcast target shape");
      WEFT_CHECK(out.IsArray() && out.element_type() == x.element_type(),
                 "broadcast result {} must be an array of the operand type {}", out.ToString(),
                 PrimitiveTypeName(x.element_type()));
      WEFT_CHECK(static_cast<int64_t>(a.dimensions.size()) == x.rank(),
                 "broadcast dimensions {} must map each of the operand's {} dims",
                 DimsString(a.dimensions), x.rank());
      CheckDims(a.dimensions, out.rank(), "broadcast dimensions", true);
      for (int64_t i = 0; i < x.rank(); ++i) {
        WEFT_CHECK(x.dimensions(i) == out.dimensions(a.dimensions[i]),
                   "broadcast maps operand dim {} (size {}) to result dim {} (size {})", i,
                   x.dimensions(i), a.dimensions[i], out.dimensions(a.dimensions[i]));
      }
      return out;
    }
    case HloOpcode::kReshape: {
      ExpectOperandCount(instr, 1);
      const Shape& x = ArrayOperand(instr, 0);
      const Shape& out = Declared(instr, "the reshape target shape");
      WEFT_CHECK(out.IsArray() && out.element_type() == x.element_type() &&
                     out.ElementsCount() == x.ElementsCount(),
                 "reshape from {} to {} must keep the element type and count", x.ToString(),
                 out.ToString());
      return out;
    }
    case HloOpcode::kTranspose: {
      ExpectOperandCount(instr, 1);
      const Shape& x = ArrayOperand(instr, 0);
      WEFT_CHECK(static_cast<int64_t>(a.dimensions.size()) == x.rank(),
                 "transpose dimensions {} must be a permutation of the operand's {} dims",
                 DimsString(a.dimensions), x.rank());
      CheckDims(a.dimensions, x.rank(), "transpose dimensions");
      Dims out;
      for (int64_t d : a.dimensions) out.push_back(x.dimensions(d));
      return x.WithDimensions(out);
    }
    case HloOpcode::kReverse: {
      ExpectOperandCount(instr, 1);
      const Shape& x = ArrayOperand(instr, 0);
      CheckDims(a.dimensions, x.rank(), "reverse dimensions");
      return x;
    }
    case HloOpcode::kConvert: {
      ExpectOperandCount(instr, 1);
      const Shape& x = ArrayOperand(instr, 0);
      const Shape& out = Declared(instr, "the target element type");
      WEFT_CHECK(out.IsArray() && out.dimensions() == x.dimensions(),
                 "convert from {} to {} must keep the dimensions", x.ToString(), out.ToString());
      return out;
    }
    default: {  // kConcatenate
      WEFT_CHECK(instr.operand_count() >= 1, "concatenate needs at least one operand");
      const Shape& first = ArrayOperand(instr, 0);
      WEFT_CHECK(a.dimensions.size() == 1, "concatenate takes one dimension, got {}",
                 DimsString(a.dimensions));
      const int64_t cd = a.dimensions[0];
      WEFT_CHECK(cd >= 0 && cd < first.rank(), "concatenate dimension {} out of range for {}", cd,
                 first.ToString());
      Dims out = first.dimensions();
      for (int64_t i = 1; i < instr.operand_count(); ++i) {
        const Shape& s = ArrayOperand(instr, i);
        bool ok = s.element_type() == first.element_type() && s.rank() == first.rank();
        for (int64_t d = 0; ok && d < s.rank(); ++d) {
          ok = d == cd || s.dimensions(d) == first.dimensions(d);
        }
        WEFT_CHECK(ok, "concatenate operands {} and {} differ outside dimension {}",
                   first.ToString(), s.ToString(), cd);
        const std::optional<int64_t> sum = CheckedAdd(out[cd], s.dimensions(cd));
        WEFT_CHECK(sum.has_value(),
                   "concatenate dimension {} adds up to a size that overflows int64 (at operand "
                   "{}, {})",
                   cd, i, s.ToString());
        out[cd] = *sum;
      }
      return first.WithDimensions(out);
    }
  }
}

Shape InferControlFlow(const HloInstruction& instr) {
  switch (instr.opcode()) {
    case HloOpcode::kTuple: {
      std::vector<Shape> elements;
      for (const HloInstruction* op : instr.operands()) elements.push_back(op->shape());
      return Shape::Tuple(elements);
    }
    case HloOpcode::kGetTupleElement: {
      ExpectOperandCount(instr, 1);
      const Shape& t = instr.operand(0)->shape();
      WEFT_CHECK(t.IsTuple(), "get-tuple-element needs a tuple operand, got {}", t.ToString());
      WEFT_CHECK(instr.tuple_index() >= 0 &&
                     instr.tuple_index() < static_cast<int64_t>(t.tuple_shapes().size()),
                 "get-tuple-element index {} out of range for {}", instr.tuple_index(),
                 t.ToString());
      return t.tuple_shapes(instr.tuple_index());
    }
    case HloOpcode::kWhile: {
      ExpectOperandCount(instr, 1);
      const Shape& state = instr.operand(0)->shape();
      WEFT_CHECK(instr.called_computations().size() == 2, "while needs condition and body");
      const HloComputation* cond = instr.while_condition();
      const HloComputation* body = instr.while_body();
      for (const HloComputation* c : {cond, body}) {
        WEFT_CHECK(c->num_parameters() == 1 && c->parameter_instruction(0) != nullptr &&
                       c->parameter_instruction(0)->shape() == state,
                   "while {} '{}' must take one parameter of the loop state {}",
                   c == cond ? "condition" : "body", c->name(), state.ToString());
      }
      WEFT_CHECK(cond->root_instruction()->shape() == Shape::Scalar(PrimitiveType::kPred),
                 "while condition '{}' must return pred[], returns {}", cond->name(),
                 cond->root_instruction()->shape().ToString());
      WEFT_CHECK(body->root_instruction()->shape() == state,
                 "while body '{}' must return the loop state {}, returns {}", body->name(),
                 state.ToString(), body->root_instruction()->shape().ToString());
      return state;
    }
    case HloOpcode::kCallDone: {
      // call-done(start) -> the call's result.
      ExpectOperandCount(instr, 1);
      const HloInstruction* start = instr.operand(0);
      WEFT_CHECK(start->opcode() == HloOpcode::kCallStart,
                 "call-done operand must be a call-start, got {}",
                 HloOpcodeString(start->opcode()));
      return start->shape().tuple_shapes(1);
    }
    case HloOpcode::kCallStart: {
      // An asynchronous call (XLA's scheduler writes them):
      // ((arguments...), result, context) with the context a scalar.
      const Shape& declared = Declared(instr, "call-start's context is written, not inferred");
      std::vector<Shape> arguments;
      for (const HloInstruction* op : instr.operands()) arguments.push_back(op->shape());
      const HloComputation* c = instr.to_apply();
      WEFT_CHECK(declared.IsTuple() && declared.tuple_shapes().size() == 3 &&
                     declared.tuple_shapes(0) == Shape::Tuple(arguments) &&
                     declared.tuple_shapes(1) == c->root_instruction()->shape() &&
                     declared.tuple_shapes(2).IsArray() && declared.tuple_shapes(2).rank() == 0,
                 "call-start result {} must be ((arguments), '{}''s result {}, context[])",
                 declared.ToString(), c->name(), c->root_instruction()->shape().ToString());
      [[fallthrough]];
    }
    default: {  // kCall
      WEFT_CHECK(instr.called_computations().size() == 1, "call needs to_apply");
      const HloComputation* c = instr.to_apply();
      WEFT_CHECK(c->num_parameters() == instr.operand_count(),
                 "call passes {} arguments to '{}' which takes {}", instr.operand_count(),
                 c->name(), c->num_parameters());
      for (int64_t i = 0; i < instr.operand_count(); ++i) {
        const Shape& want = c->parameter_instruction(i)->shape();
        WEFT_CHECK(instr.operand(i)->shape() == want, "call argument {} is {} but '{}' takes {}", i,
                   instr.operand(i)->shape().ToString(), c->name(), want.ToString());
      }
      return instr.opcode() == HloOpcode::kCallStart ? instr.shape()
                                                     : c->root_instruction()->shape();
    }
  }
}

// fusion: one operand per parameter of the fused computation, shapes
// equal; the result is the fused root's; a fused computation holds no
// control flow, collective or side effect.
Shape InferFusion(const HloInstruction& instr) {
  WEFT_CHECK(instr.called_computations().size() == 1, "fusion needs calls=");
  const HloComputation* c = instr.fused_computation();
  WEFT_CHECK(c->num_parameters() == instr.operand_count(),
             "fusion passes {} operands to fused computation '{}' which takes {}",
             instr.operand_count(), c->name(), c->num_parameters());
  for (int64_t i = 0; i < instr.operand_count(); ++i) {
    const HloInstruction* param = c->parameter_instruction(i);
    WEFT_CHECK(param != nullptr, "fused computation '{}' has no parameter {}", c->name(), i);
    WEFT_CHECK(instr.operand(i)->shape() == param->shape(),
               "fusion operand {} is {} but parameter {} of '{}' is {}", i,
               instr.operand(i)->shape().ToString(), i, c->name(), param->shape().ToString());
  }
  for (const HloInstruction* fused : c->instructions()) {
    const HloOpcode op = fused->opcode();
    const bool side_effect =
        op == HloOpcode::kCustomCall && fused->attrs().custom_call_has_side_effect;
    WEFT_CHECK(!IsCollective(op) && op != HloOpcode::kWhile && op != HloOpcode::kCall &&
                   op != HloOpcode::kFusion && !side_effect,
               "fused computation '{}' holds {} ({}); a fusion has no control flow, collective "
               "or side effect",
               c->name(), fused->name(), HloOpcodeString(op));
  }
  return c->root_instruction()->shape();
}
// conditional(pred, true_arg, false_arg) or conditional(index, arg0, ...):
// branch i takes argument i; every branch returns the result's shape.
Shape InferConditional(const HloInstruction& instr) {
  WEFT_CHECK(instr.operand_count() >= 1, "conditional needs a predicate or branch index");
  const Shape& selector = ArrayOperand(instr, 0);
  const std::vector<HloComputation*>& branches = instr.called_computations();
  const bool is_pred = selector.element_type() == PrimitiveType::kPred;
  WEFT_CHECK(selector.IsScalar() && (is_pred || selector.element_type() == PrimitiveType::kS32),
             "conditional's first operand must be pred[] or s32[], got {}", selector.ToString());
  WEFT_CHECK(!branches.empty() && (!is_pred || branches.size() == 2),
             "conditional on {} needs {}, got {} computations", selector.ToString(),
             is_pred ? "true_computation and false_computation" : "branch_computations",
             branches.size());
  WEFT_CHECK(instr.operand_count() == static_cast<int64_t>(branches.size()) + 1,
             "conditional has {} branches, so it takes {} branch arguments after the selector, "
             "got {}",
             branches.size(), branches.size(), instr.operand_count() - 1);
  const Shape& result = branches[0]->root_instruction()->shape();
  for (size_t i = 0; i < branches.size(); ++i) {
    const HloComputation* c = branches[i];
    const Shape& arg = instr.operand(i + 1)->shape();
    WEFT_CHECK(c->num_parameters() == 1 && c->parameter_instruction(0) != nullptr &&
                   c->parameter_instruction(0)->shape() == arg,
               "conditional branch {} '{}' must take one parameter of its argument's shape {}", i,
               c->name(), arg.ToString());
    WEFT_CHECK(c->root_instruction()->shape() == result,
               "conditional branches must return the same shape: '{}' returns {}, '{}' {}",
               branches[0]->name(), result.ToString(), c->name(),
               c->root_instruction()->shape().ToString());
  }
  return result;
}

bool IsToken(const Shape& s) { return s.IsArray() && s.element_type() == PrimitiveType::kToken; }

// after-all(tokens...) -> token[]; infeed(token) -> (data, token[]);
// outfeed(data, token) -> token[].
Shape InferTokenOp(const HloInstruction& instr) {
  const Shape token = Shape::Scalar(PrimitiveType::kToken);
  const std::string_view name = HloOpcodeString(instr.opcode());
  const int64_t first_token = instr.opcode() == HloOpcode::kOutfeed ? 1 : 0;
  if (instr.opcode() != HloOpcode::kAfterAll) ExpectOperandCount(instr, first_token + 1);
  for (int64_t i = first_token; i < instr.operand_count(); ++i) {
    WEFT_CHECK(IsToken(instr.operand(i)->shape()), "{} operand {} must be token[], got {}", name, i,
               instr.operand(i)->shape().ToString());
  }
  if (instr.opcode() != HloOpcode::kInfeed) return token;
  const Shape& declared = Declared(instr, "the data the infeed reads");
  WEFT_CHECK(declared.IsTuple() && declared.tuple_shapes().size() == 2 &&
                 declared.tuple_shapes(1) == token,
             "infeed result {} must be (data, token[])", declared.ToString());
  return declared;
}
// Point-to-point transfers (XLA's send/recv, asynchronous pairs):
// send(data, token) -> (data, u32[] context, token[]); send-done(send) ->
// token[]; recv(token) -> (data, u32[], token[]) with the data's shape
// written; recv-done(recv) -> (data, token[]).
Shape InferSendRecv(const HloInstruction& instr) {
  const Shape token = Shape::Scalar(PrimitiveType::kToken);
  const Shape context = Shape::Scalar(PrimitiveType::kU32);
  const std::string_view name = HloOpcodeString(instr.opcode());
  auto started = [&](HloOpcode start) {
    ExpectOperandCount(instr, 1);
    const HloInstruction* s = instr.operand(0);
    WEFT_CHECK(s->opcode() == start, "{} operand must be a {}, got {}", name,
               HloOpcodeString(start), HloOpcodeString(s->opcode()));
    return s->shape().tuple_shapes(0);
  };
  switch (instr.opcode()) {
    case HloOpcode::kSend: {
      ExpectOperandCount(instr, 2);
      const Shape& data = instr.operand(0)->shape();
      WEFT_CHECK(IsToken(instr.operand(1)->shape()), "send operand 1 must be token[], got {}",
                 instr.operand(1)->shape().ToString());
      return Shape::Tuple({data, context, token});
    }
    case HloOpcode::kRecv: {
      ExpectOperandCount(instr, 1);
      WEFT_CHECK(IsToken(instr.operand(0)->shape()), "recv operand must be token[], got {}",
                 instr.operand(0)->shape().ToString());
      const Shape& declared = Declared(instr, "the data the recv receives");
      WEFT_CHECK(declared.IsTuple() && declared.tuple_shapes().size() == 3 &&
                     declared.tuple_shapes(1) == context && declared.tuple_shapes(2) == token,
                 "recv result {} must be (data, u32[], token[])", declared.ToString());
      return declared;
    }
    case HloOpcode::kSendDone:
      started(HloOpcode::kSend);
      return token;
    default:  // recv-done
      return Shape::Tuple({started(HloOpcode::kRecv), token});
  }
}
}  // namespace
}  // namespace weft::hlo

namespace weft {

Shape InferHloShape(const HloInstruction& instr) {
  const HloOpcode op = instr.opcode();
  if (IsElementwiseUnary(op) || IsElementwiseBinary(op)) return hlo::InferElementwise(instr);
  switch (op) {
    case HloOpcode::kSelect:
    case HloOpcode::kClamp:
      return hlo::InferSelectOrClamp(instr);
    case HloOpcode::kParameter:
      hlo::ExpectOperandCount(instr, 0);
      return hlo::Declared(instr, "parameters have no operands");
    case HloOpcode::kConstant: {
      hlo::ExpectOperandCount(instr, 0);
      const Shape& lit = instr.literal().shape();
      WEFT_CHECK(lit.IsArray(), "constant has no value");
      WEFT_CHECK(!instr.shape().IsValid() || instr.shape() == lit,
                 "constant value has shape {} but the instruction says {}", lit.ToString(),
                 instr.shape().ToString());
      return lit;
    }
    case HloOpcode::kIota: {
      hlo::ExpectOperandCount(instr, 0);
      const Shape& out = hlo::Declared(instr, "the iota shape");
      WEFT_CHECK(out.IsArray() && out.rank() >= 1, "iota shape {} must be an array of rank >= 1",
                 out.ToString());
      WEFT_CHECK(out.element_type() != PrimitiveType::kPred, "iota of pred is not allowed");
      WEFT_CHECK(instr.attrs().iota_dimension >= 0 && instr.attrs().iota_dimension < out.rank(),
                 "iota_dimension {} out of range for {}", instr.attrs().iota_dimension,
                 out.ToString());
      return out;
    }
    case HloOpcode::kCopy:
      hlo::ExpectOperandCount(instr, 1);
      return instr.operand(0)->shape();
    case HloOpcode::kBroadcast:
    case HloOpcode::kReshape:
    case HloOpcode::kTranspose:
    case HloOpcode::kReverse:
    case HloOpcode::kConvert:
    case HloOpcode::kConcatenate:
      return hlo::InferLayoutOp(instr);
    case HloOpcode::kSlice:
    case HloOpcode::kDynamicSlice:
    case HloOpcode::kDynamicUpdateSlice:
    case HloOpcode::kPad:
      return hlo::InferSlicing(instr);
    case HloOpcode::kReduce:
      return hlo::InferReduce(instr);
    case HloOpcode::kDot:
      return hlo::InferDot(instr);
    case HloOpcode::kRaggedDot:
      return hlo::InferRaggedDot(instr);
    case HloOpcode::kGather:
      return hlo::InferGather(instr);
    case HloOpcode::kScatter:
      return hlo::InferScatter(instr);
    case HloOpcode::kTuple:
    case HloOpcode::kGetTupleElement:
    case HloOpcode::kWhile:
    case HloOpcode::kCall:
    case HloOpcode::kCallStart:
    case HloOpcode::kCallDone:
      return hlo::InferControlFlow(instr);
    case HloOpcode::kFusion:
      return hlo::InferFusion(instr);
    case HloOpcode::kBitcastConvert:
      return hlo::InferBitcastConvert(instr);
    case HloOpcode::kSort:
      return hlo::InferSort(instr);
    case HloOpcode::kTopK:
      return hlo::InferTopK(instr);
    case HloOpcode::kCholesky:
      return hlo::InferCholesky(instr);
    case HloOpcode::kTriangularSolve:
      return hlo::InferTriangularSolve(instr);
    case HloOpcode::kReduceWindow:
      return hlo::InferReduceWindow(instr);
    case HloOpcode::kSelectAndScatter:
      return hlo::InferSelectAndScatter(instr);
    case HloOpcode::kConditional:
      return hlo::InferConditional(instr);
    case HloOpcode::kAfterAll:
    case HloOpcode::kInfeed:
    case HloOpcode::kOutfeed:
      return hlo::InferTokenOp(instr);
    case HloOpcode::kSend:
    case HloOpcode::kSendDone:
    case HloOpcode::kRecv:
    case HloOpcode::kRecvDone:
      return hlo::InferSendRecv(instr);
    case HloOpcode::kCustomCall:
      return hlo::Declared(instr, "custom-call results are opaque");
    case HloOpcode::kRng:
      return hlo::InferRng(instr);
    case HloOpcode::kRngBitGenerator:
      return hlo::InferRngBitGenerator(instr);
    case HloOpcode::kConvolution:
      return hlo::InferConvolution(instr);
    case HloOpcode::kPartitionId:
    case HloOpcode::kReplicaId:
      hlo::ExpectOperandCount(instr, 0);
      return Shape::Scalar(PrimitiveType::kU32);
    case HloOpcode::kAllReduce:
    case HloOpcode::kAllGather:
    case HloOpcode::kReduceScatter:
    case HloOpcode::kAllToAll:
    case HloOpcode::kCollectivePermute:
      return hlo::InferCollective(instr);
    default:
      Fail("no shape rule for {}", HloOpcodeString(op));
  }
}

}  // namespace weft
