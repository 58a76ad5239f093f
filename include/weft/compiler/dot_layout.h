// How a dot's operands are read by the executor's GEMM (runtime/eval_dot.cc):
// the one decision of which operands are read in place as strided batches
// of matrices and which are first transposed into a packed copy. The
// compiler's buffer assignment reserves scratch for the packed copies
// (InstructionScratch) from the same decision, so the two never disagree.
//
// Each operand is viewed as [batch, rows, cols] (lhs: batch, free,
// contracting dims; rhs: batch, contracting, free dims), each group of dims
// merged into one strided dim. An operand is read in place when every group
// merges (its dims, in the order the dot numbers them, step through memory
// as one dim; size-1 dims anywhere) and its matrices have a unit stride in
// one direction with a leading dimension at least the other extent (what
// oneDNN's matmul accepts); otherwise it is packed into row-major
// [batch, rows, cols] order.
//
// Operands are read in their own element type when both are bf16 and the
// result is bf16 or f32 (IsBf16Gemm: oneDNN's bf16 matmul, f32
// accumulation), so packed copies are 2 bytes an element; other float dots
// read f32 copies (converted in their own layout first).
//
// oneDNN decides at run time whether it has a kernel for the strides it is
// given; where it has none, the executor packs both operands. This pure
// function cannot ask oneDNN (the compiler does not link it), so it rules
// that fallback out only where both operands' views are dense row-major or
// dense transposed batches of matrices (batch stride = rows x cols: every
// matmul implementation reads those); for any other strided view
// (DotLayout::may_pack_both) the compiler reserves scratch for packing
// both operands, conservatively.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "weft/hlo/instruction.h"
#include "weft/hlo/shape.h"

namespace weft::compiler {

// True when reading `dims`' indices in `order` visits a row-major buffer
// of `dims` in memory order (size-1 dims may sit anywhere).
bool IsInOrder(const std::vector<int64_t>& order, const std::vector<int64_t>& dims);

// A batch of matrices as a strided 3-D view of an operand's own buffer
// (extents and strides in elements).
struct MatrixView {
  int64_t batch = 1, rows = 1, cols = 1;
  int64_t batch_stride = 0, row_stride = 0, col_stride = 0;
  // Dense row-major ([batch, rows, cols] in memory order) or dense
  // transposed ([batch, cols, rows]).
  bool IsDense() const;
};

// The view of a row-major buffer of `dims` as [batch, rows, cols] (each a
// list of its dims), or nullopt when it must be packed (see the file comment).
std::optional<MatrixView> ViewAsMatrices(const std::vector<int64_t>& dims,
                                         const std::vector<int64_t>& batch,
                                         const std::vector<int64_t>& rows,
                                         const std::vector<int64_t>& cols);

// A packed row-major [batch, rows, cols] copy.
MatrixView PackedMatrices(int64_t batch, int64_t rows, int64_t cols);

// A dot's dims by role and its GEMM sizes: [batch, m, k] x [batch, k, n].
struct DotGroups {
  std::vector<int64_t> lhs_free, rhs_free;  // in dimension order
  int64_t batch = 1, m = 1, k = 1, n = 1;
};
DotGroups GroupsOf(const DotDimensionNumbers& dn, const std::vector<int64_t>& lhs_dims,
                   const std::vector<int64_t>& rhs_dims);

// Whether the executor's GEMM reads a dot of these element types as bf16,
// in place of f32 copies: both operands bf16, the result bf16 or f32. Where
// oneDNN has no bf16 kernel at run time, or WEFT_ISA / a ScopedIsa forces an
// instruction set without bf16 instructions, the executor widens to f32
// after all; the compiler reserves no scratch for that (it would make the
// schedule depend on the machine), so those copies are the executor's
// unplanned scratch.
bool IsBf16Gemm(PrimitiveType lhs, PrimitiveType rhs, PrimitiveType out);

// The decision for one dot.
struct DotLayout {
  DotGroups groups;
  // The in-place views; nullopt: that operand is packed.
  std::optional<MatrixView> lhs, rhs;
  bool pack_lhs() const { return !lhs; }
  bool pack_rhs() const { return !rhs; }
  // oneDNN might refuse the views' strides (an in-place view that is not
  // dense), in which case the executor packs both operands.
  bool may_pack_both = false;
};
DotLayout PlanDotLayout(const DotDimensionNumbers& dn, const std::vector<int64_t>& lhs_dims,
                        const std::vector<int64_t>& rhs_dims);

}  // namespace weft::compiler
