// Shape rules of the ops that work along chosen dims: bitcast-convert
// between widths, sort, topk, reduce-window and select-and-scatter.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "shape_inference_internal.h"
#include "weft/base/error.h"
#include "weft/hlo/computation.h"

namespace weft::hlo {

// bitcast-convert: the bytes reinterpreted. Equal widths keep the dims; a
// wider operand gains a last dim of width ratio, a narrower one loses its
// last dim, which must be the ratio (XLA's rule).
Shape InferBitcastConvert(const HloInstruction& instr) {
  ExpectOperandCount(instr, 1);
  const Shape& x = ArrayOperand(instr, 0);
  const Shape& declared = Declared(instr, "the element type to reinterpret as");
  WEFT_CHECK(declared.IsArray(), "bitcast-convert result {} must be an array", declared.ToString());
  const PrimitiveType from = x.element_type(), to = declared.element_type();
  for (PrimitiveType t : {from, to}) {
    WEFT_CHECK(t != PrimitiveType::kPred && t != PrimitiveType::kToken,
               "bitcast-convert of {} is not allowed; it reinterprets numbers' bytes",
               PrimitiveTypeName(t));
  }
  const int64_t wf = ByteWidth(from), wt = ByteWidth(to);
  Dims dims = x.dimensions();
  if (wf > wt) {
    dims.push_back(wf / wt);
  } else if (wf < wt) {
    WEFT_CHECK(!dims.empty() && dims.back() == wt / wf,
               "bitcast-convert from {} to {} needs a last dim of {} ({} / {} bytes), got {}",
               x.ToString(), PrimitiveTypeName(to), wt / wf, wt, wf, x.ToString());
    dims.pop_back();
  }
  return Shape(to, dims);
}

namespace {

// The comparator of sort / topk's custom call: 2n scalar parameters (two
// per operand, of its type) returning pred[].
void CheckComparator(const HloComputation* c, std::span<const PrimitiveType> types,
                     std::string_view what) {
  WEFT_CHECK(c != nullptr, "{} needs a comparator computation", what);
  const int64_t n = static_cast<int64_t>(types.size());
  WEFT_CHECK(c->num_parameters() == 2 * n,
             "{} comparator '{}' must take {} scalar parameters (two per operand), takes {}", what,
             c->name(), 2 * n, c->num_parameters());
  for (int64_t i = 0; i < 2 * n; ++i) {
    const HloInstruction* p = c->parameter_instruction(i);
    WEFT_CHECK(p != nullptr && p->shape() == Shape::Scalar(types[i / 2]),
               "{} comparator '{}' parameter {} must be {}[], got {}", what, c->name(), i,
               PrimitiveTypeName(types[i / 2]), p ? p->shape().ToString() : "nothing");
  }
  const Shape& root = c->root_instruction()->shape();
  WEFT_CHECK(root == Shape::Scalar(PrimitiveType::kPred),
             "{} comparator '{}' must return pred[], returns {}", what, c->name(), root.ToString());
}
}  // namespace

Shape InferSort(const HloInstruction& instr) {
  WEFT_CHECK(instr.operand_count() >= 1, "sort needs at least one operand");
  const Shape& first = ArrayOperand(instr, 0);
  WEFT_CHECK(instr.dimensions().size() == 1, "sort takes one dimension, got {}",
             DimsString(instr.dimensions()));
  CheckDims(instr.dimensions(), first.rank(), "sort dimensions");
  std::vector<Shape> results;
  std::vector<PrimitiveType> types;
  for (int64_t i = 0; i < instr.operand_count(); ++i) {
    const Shape& x = ArrayOperand(instr, i);
    WEFT_CHECK(x.dimensions() == first.dimensions(),
               "sort operands must have the same dimensions, got {} and {}", first.ToString(),
               x.ToString());
    results.push_back(x);
    types.push_back(x.element_type());
  }
  CheckComparator(instr.called_computations().empty() ? nullptr : instr.to_apply(), types, "sort");
  return results.size() == 1 ? results[0] : Shape::Tuple(results);
}

// topk(x), k=N: the N largest (or smallest) along the last dim, and their
// s32 indices.
Shape InferTopK(const HloInstruction& instr) {
  ExpectOperandCount(instr, 1);
  const Shape& x = ArrayOperand(instr, 0);
  WEFT_CHECK(x.rank() >= 1, "topk needs an operand of rank >= 1, got {}", x.ToString());
  const int64_t k = instr.attrs().k;
  WEFT_CHECK(k >= 0 && k <= x.dimensions().back(),
             "topk k={} must be in [0, {}], the last dim of {}", k, x.dimensions().back(),
             x.ToString());
  Dims dims = x.dimensions();
  dims.back() = k;
  return Shape::Tuple({Shape(x.element_type(), dims), Shape(PrimitiveType::kS32, dims)});
}

// cholesky(a): a batch of square float matrices [..., n, n] and their
// factors, of the same shape.
Shape InferCholesky(const HloInstruction& instr) {
  ExpectOperandCount(instr, 1);
  const Shape& a = ArrayOperand(instr, 0);
  WEFT_CHECK(a.rank() >= 2 && a.dimensions(a.rank() - 1) == a.dimensions(a.rank() - 2),
             "cholesky needs square matrices [..., n, n], got {}", a.ToString());
  WEFT_CHECK(IsFloatingPoint(a.element_type()) && a.element_type() != PrimitiveType::kC64,
             "cholesky of {} is not supported (real floats only)",
             PrimitiveTypeName(a.element_type()));
  return a;
}

// triangular-solve(a, b): a [..., m, m] triangular, b [..., m, n]
// (left_side: op(a) x = b) or [..., n, m] (x op(a) = b), the same batch
// dims and element type; the solutions x take b's shape.
Shape InferTriangularSolve(const HloInstruction& instr) {
  ExpectOperandCount(instr, 2);
  const Shape& a = ArrayOperand(instr, 0);
  const Shape& b = ArrayOperand(instr, 1);
  const int64_t r = a.rank();
  WEFT_CHECK(r >= 2 && a.dimensions(r - 1) == a.dimensions(r - 2),
             "triangular-solve needs square matrices a [..., m, m], got {}", a.ToString());
  WEFT_CHECK(b.rank() == r && a.element_type() == b.element_type(),
             "triangular-solve: b {} must have a's rank and element type ({})", b.ToString(),
             a.ToString());
  for (int64_t d = 0; d + 2 < r; ++d) {
    WEFT_CHECK(a.dimensions(d) == b.dimensions(d),
               "triangular-solve: batch dim {} of a {} and b {} differ", d, a.ToString(),
               b.ToString());
  }
  const int64_t m = a.dimensions(r - 1);
  const int64_t b_dim = instr.attrs().left_side ? r - 2 : r - 1;
  WEFT_CHECK(b.dimensions(b_dim) == m,
             "triangular-solve with left_side={}: dim {} of b {} must be a's {} ({})",
             instr.attrs().left_side, b_dim, b.ToString(), m, a.ToString());
  WEFT_CHECK(IsFloatingPoint(a.element_type()) && a.element_type() != PrimitiveType::kC64,
             "triangular-solve of {} is not supported (real floats only)",
             PrimitiveTypeName(a.element_type()));
  return b;
}

namespace {

// The dims of a window slid over `in` (XLA's reduce-window output shape).
Dims WindowedDims(const Shape& in, const std::vector<WindowDim>& window, std::string_view what) {
  WEFT_CHECK(static_cast<int64_t>(window.size()) == in.rank(),
             "{} window has {} dims but the operand {} has {}", what, window.size(), in.ToString(),
             in.rank());
  Dims out;
  for (int64_t d = 0; d < in.rank(); ++d) {
    const WindowDim& w = window[d];
    WEFT_CHECK(w.size >= 1 && w.stride >= 1 && w.base_dilation >= 1 && w.window_dilation >= 1,
               "{} window dim {}: size, stride and dilations must be >= 1", what, d);
    WEFT_CHECK(w.padding_low >= 0 && w.padding_high >= 0,
               "{} window dim {}: negative padding is not supported", what, d);
    WEFT_CHECK(!w.window_reversal, "{} window dim {}: rhs_reversal applies to convolution only",
               what, d);
    const int64_t base = in.dimensions(d) == 0 ? 0 : (in.dimensions(d) - 1) * w.base_dilation + 1;
    const int64_t span = (w.size - 1) * w.window_dilation + 1;
    const int64_t padded = base + w.padding_low + w.padding_high;
    out.push_back(padded < span ? 0 : (padded - span) / w.stride + 1);
  }
  return out;
}
}  // namespace

Shape InferReduceWindow(const HloInstruction& instr) {
  WEFT_CHECK(instr.operand_count() >= 2 && instr.operand_count() % 2 == 0,
             "reduce-window takes N inputs then N init values, got {} operands",
             instr.operand_count());
  const int64_t n = instr.operand_count() / 2;
  const Shape& first = ArrayOperand(instr, 0);
  const Dims out = WindowedDims(first, instr.attrs().window, "reduce-window");
  std::vector<PrimitiveType> types;
  std::vector<Shape> results;
  for (int64_t i = 0; i < n; ++i) {
    const Shape& input = ArrayOperand(instr, i);
    const Shape& init = ArrayOperand(instr, n + i);
    WEFT_CHECK(input.dimensions() == first.dimensions(),
               "reduce-window inputs must have the same dimensions, got {} and {}",
               first.ToString(), input.ToString());
    WEFT_CHECK(init.IsScalar() && init.element_type() == input.element_type(),
               "reduce-window init value {} must be a scalar of the input type {}", init.ToString(),
               PrimitiveTypeName(input.element_type()));
    types.push_back(input.element_type());
    results.push_back(Shape(input.element_type(), out));
  }
  CheckScalarComputation(instr.called_computations().empty() ? nullptr : instr.to_apply(), types,
                         "reduce-window");
  return n == 1 ? results[0] : Shape::Tuple(results);
}

// select-and-scatter(operand, source, init): source has the shape of the
// window slid over operand; select (T, T) -> pred, scatter (T, T) -> T.
Shape InferSelectAndScatter(const HloInstruction& instr) {
  ExpectOperandCount(instr, 3);
  const Shape& operand = ArrayOperand(instr, 0);
  const Shape& source = ArrayOperand(instr, 1);
  const Shape& init = ArrayOperand(instr, 2);
  const PrimitiveType t = operand.element_type();
  const Dims windows = WindowedDims(operand, instr.attrs().window, "select-and-scatter");
  WEFT_CHECK(source.element_type() == t && source.dimensions() == windows,
             "select-and-scatter source {} must be {}[{}], one value per window position",
             source.ToString(), PrimitiveTypeName(t), fmt::join(windows, ","));
  WEFT_CHECK(init.IsScalar() && init.element_type() == t,
             "select-and-scatter init value {} must be a {}[] scalar", init.ToString(),
             PrimitiveTypeName(t));
  WEFT_CHECK(instr.called_computations().size() == 2,
             "select-and-scatter needs select= and scatter= computations");
  const HloComputation* select = instr.called_computations()[0];
  WEFT_CHECK(select->num_parameters() == 2 &&
                 select->parameter_instruction(0)->shape() == Shape::Scalar(t) &&
                 select->parameter_instruction(1)->shape() == Shape::Scalar(t) &&
                 select->root_instruction()->shape() == Shape::Scalar(PrimitiveType::kPred),
             "select-and-scatter select '{}' must take ({}[], {}[]) and return pred[]",
             select->name(), PrimitiveTypeName(t), PrimitiveTypeName(t));
  CheckScalarComputation(instr.called_computations()[1], std::span(&t, 1),
                         "select-and-scatter scatter");
  return operand;
}

}  // namespace weft::hlo
