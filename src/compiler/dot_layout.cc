// Which dot operands the executor packs (include/weft/compiler/dot_layout.h).
#include "weft/compiler/dot_layout.h"

#include <algorithm>
#include <utility>

#include "weft/base/algorithm.h"

namespace weft::compiler {
namespace {

std::vector<int64_t> RowMajorStrides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> strides(dims.size(), 1);
  for (int64_t i = static_cast<int64_t>(dims.size()) - 2; i >= 0; --i) {
    strides[i] = strides[i + 1] * dims[i + 1];
  }
  return strides;
}

// One group of dims merged into one strided dim: its extent and stride in
// elements; nullopt when the dims, read in the group's order, do not step
// through memory as one dim.
std::optional<std::pair<int64_t, int64_t>> MergeGroup(const std::vector<int64_t>& group,
                                                      const std::vector<int64_t>& dims,
                                                      const std::vector<int64_t>& strides) {
  int64_t size = 1, stride = 0;
  bool any = false;
  // From the innermost dim of the group outwards; size-1 dims are skipped.
  for (auto it = group.rbegin(); it != group.rend(); ++it) {
    const int64_t d = *it;
    if (dims[d] == 1) continue;
    if (!any) {
      stride = strides[d];
      any = true;
    } else if (strides[d] != stride * size) {
      return std::nullopt;
    }
    size *= dims[d];
  }
  return std::make_pair(size, stride);
}

}  // namespace

bool IsInOrder(const std::vector<int64_t>& order, const std::vector<int64_t>& dims) {
  int64_t last = -1;
  for (int64_t d : order) {
    if (dims[d] == 1) continue;
    if (d < last) return false;
    last = d;
  }
  return true;
}

bool MatrixView::IsDense() const {
  if (batch > 1 && batch_stride != rows * cols) return false;
  const bool row_major = col_stride == 1 && (rows == 1 || row_stride == cols);
  const bool transposed = row_stride == 1 && (cols == 1 || col_stride == rows);
  return row_major || transposed;
}

std::optional<MatrixView> ViewAsMatrices(const std::vector<int64_t>& dims,
                                         const std::vector<int64_t>& batch,
                                         const std::vector<int64_t>& rows,
                                         const std::vector<int64_t>& cols) {
  const std::vector<int64_t> strides = RowMajorStrides(dims);
  auto b = MergeGroup(batch, dims, strides);
  auto r = MergeGroup(rows, dims, strides);
  auto c = MergeGroup(cols, dims, strides);
  if (!b || !r || !c) return std::nullopt;
  auto [bn, bs] = *b;
  auto [rn, rs] = *r;
  auto [cn, cs] = *c;
  // A vector (rows or cols of size 1) fits either layout; its size-1 dim
  // gets the stride that makes the layout plain (leading dim >= extent).
  if (rn == 1 && cn == 1) {
    rs = cs = 1;
  } else if (rn == 1) {
    rs = cs == 1 ? cn : 1;  // row-major, or column-major with leading dim cs
  } else if (cn == 1) {
    cs = rs == 1 ? rn : 1;  // column-major, or row-major with leading dim rs
  } else if (cs == 1) {
    if (rs < cn) return std::nullopt;
  } else if (rs == 1) {
    if (cs < rn) return std::nullopt;
  } else {
    return std::nullopt;  // neither matrix stride is 1
  }
  if (bn == 1) bs = std::max(rs * rn, cs * cn);
  return MatrixView{bn, rn, cn, bs, rs, cs};
}

MatrixView PackedMatrices(int64_t batch, int64_t rows, int64_t cols) {
  return MatrixView{batch, rows, cols, rows * cols, cols, 1};
}

DotGroups GroupsOf(const DotDimensionNumbers& dn, const std::vector<int64_t>& lhs_dims,
                   const std::vector<int64_t>& rhs_dims) {
  DotGroups g;
  for (int64_t d = 0; d < static_cast<int64_t>(lhs_dims.size()); ++d) {
    if (!Contains(dn.lhs_batch_dims, d) && !Contains(dn.lhs_contracting_dims, d)) {
      g.lhs_free.push_back(d);
    }
  }
  for (int64_t d = 0; d < static_cast<int64_t>(rhs_dims.size()); ++d) {
    if (!Contains(dn.rhs_batch_dims, d) && !Contains(dn.rhs_contracting_dims, d)) {
      g.rhs_free.push_back(d);
    }
  }
  g.batch = Product(lhs_dims, dn.lhs_batch_dims);
  g.m = Product(lhs_dims, g.lhs_free);
  g.k = Product(lhs_dims, dn.lhs_contracting_dims);
  g.n = Product(rhs_dims, g.rhs_free);
  return g;
}

bool IsBf16Gemm(PrimitiveType lhs, PrimitiveType rhs, PrimitiveType out) {
  return lhs == PrimitiveType::kBF16 && rhs == PrimitiveType::kBF16 &&
         (out == PrimitiveType::kBF16 || out == PrimitiveType::kF32);
}

DotLayout PlanDotLayout(const DotDimensionNumbers& dn, const std::vector<int64_t>& lhs_dims,
                        const std::vector<int64_t>& rhs_dims) {
  DotLayout layout;
  layout.groups = GroupsOf(dn, lhs_dims, rhs_dims);
  const DotGroups& g = layout.groups;
  layout.lhs = ViewAsMatrices(lhs_dims, dn.lhs_batch_dims, g.lhs_free, dn.lhs_contracting_dims);
  layout.rhs = ViewAsMatrices(rhs_dims, dn.rhs_batch_dims, dn.rhs_contracting_dims, g.rhs_free);
  layout.may_pack_both =
      (layout.lhs && !layout.lhs->IsDense()) || (layout.rhs && !layout.rhs->IsDense());
  return layout;
}

}  // namespace weft::compiler
