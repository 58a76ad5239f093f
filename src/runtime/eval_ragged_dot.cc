// ragged-dot (XLA's; hlo/ragged_dot.h): every result element is a sum over
// the contracting dims computed in double from the operands' values and
// rounded once into the result type. The group of an lhs element is found
// from the running sums of its group_sizes row (the prefix dims pick the
// row; a [g] group_sizes serves every row): in the non-contracting mode the
// row's group picks the rhs group, and rows past the groups' total give 0;
// in the contracting mode, result j sums the contracting positions of group
// j only; in the batch mode the groups do not matter. Negative sizes count
// as 0; a size past 2^62 (u64) as 2^62, more than any dim holds. Loops over the index space,
// without a GEMM: XLA's tests and MoE experiments sized to a CPU.
#include <algorithm>
#include <vector>

#include "executor_eval.h"
#include "weft/base/algorithm.h"
#include "weft/base/error.h"
#include "weft/hlo/ragged_dot.h"

namespace weft::runtime::exec {
void CheckRaggedDot(const HloInstruction& instr) {
  const PrimitiveType l = instr.operand(0)->shape().element_type();
  const PrimitiveType r = instr.operand(1)->shape().element_type();
  const PrimitiveType out = instr.shape().element_type();
  WEFT_CHECK(IsFloatingPoint(l) && IsFloatingPoint(r) && IsFloatingPoint(out) && !IsComplex(out),
             "ragged-dot of {} x {} -> {} is not supported (real floats only)",
             PrimitiveTypeName(l), PrimitiveTypeName(r), PrimitiveTypeName(out));
}

Value EvalRaggedDot(const HloInstruction& instr, EvalArgs& args) {
  const HostTensor& lhs_t = args.array(0);
  const HostTensor& rhs_t = args.array(1);
  const HostTensor& sizes_t = args.array(2);
  const HloAttributes& a = instr.attrs();
  const DotDimensionNumbers& dn = a.dot;
  const RaggedDotMode mode = RaggedDotModeOf(instr);
  const Shape& ls = lhs_t.shape();
  const Shape& rs = rhs_t.shape();
  const int64_t ragged = a.lhs_ragged_dims[0];
  const int64_t groups = sizes_t.shape().dimensions(sizes_t.shape().rank() - 1);
  const std::vector<int64_t> prefix =
      sizes_t.shape().rank() == 1 ? std::vector<int64_t>{} : RaggedDotPrefix(instr);
  const std::vector<double> lhs = lhs_t.ToDoubles(), rhs = rhs_t.ToDoubles(),
                            sizes = sizes_t.ToDoubles();
  const DimensionVector lstride = RowMajorStrides(ls.dimensions());
  const DimensionVector rstride = RowMajorStrides(rs.dimensions());

  // The group of lhs position `index` along the ragged dim (-1: past the total).
  auto group_of = [&](const std::vector<int64_t>& index) {
    int64_t row = 0;
    for (int64_t d : prefix) row = row * ls.dimensions(d) + index[d];
    int64_t end = 0;
    for (int64_t j = 0; j < groups; ++j) {
      // Clamped before the conversion: a u64 size past 2^63 is no int64.
      const double size = std::clamp(sizes[row * groups + j], 0.0, 0x1p62);
      end += static_cast<int64_t>(size);
      if (index[ragged] < end) return j;
    }
    return int64_t{-1};
  };

  // Result dims: [g (contracting mode)], batch, lhs free, rhs free.
  std::vector<int64_t> lhs_free, rhs_free;
  for (int64_t d = 0; d < ls.rank(); ++d) {
    if (!Contains(dn.lhs_batch_dims, d) && !Contains(dn.lhs_contracting_dims, d))
      lhs_free.push_back(d);
  }
  for (int64_t d = 0; d < rs.rank(); ++d) {
    if (!Contains(dn.rhs_batch_dims, d) && !Contains(dn.rhs_contracting_dims, d) &&
        !Contains(a.rhs_group_dims, d)) {
      rhs_free.push_back(d);
    }
  }
  int64_t contracted = 1;
  for (int64_t d : dn.lhs_contracting_dims) contracted *= ls.dimensions(d);

  HostTensor out = args.ctx().Allocate(instr.shape());
  const Shape& os = instr.shape();
  const int64_t lead = mode == RaggedDotMode::kContracting ? 1 : 0;
  std::vector<int64_t> oi(static_cast<size_t>(os.rank()), 0);
  std::vector<int64_t> li(static_cast<size_t>(ls.rank()), 0), ri(static_cast<size_t>(rs.rank()), 0);
  for (int64_t o = 0; o < os.ElementsCount(); ++o) {
    int64_t rest = o;
    for (int64_t d = os.rank() - 1; d >= 0; --d) {
      oi[d] = rest % os.dimensions(d);
      rest /= os.dimensions(d);
    }
    int64_t k = lead;
    for (size_t i = 0; i < dn.lhs_batch_dims.size(); ++i, ++k) {
      li[dn.lhs_batch_dims[i]] = oi[k];
      ri[dn.rhs_batch_dims[i]] = oi[k];
    }
    for (int64_t d : lhs_free) li[d] = oi[k++];
    for (int64_t d : rhs_free) ri[d] = oi[k++];
    double sum = 0;
    bool zero = false;
    if (mode == RaggedDotMode::kNonContracting) {
      const int64_t g = group_of(li);
      zero = g < 0;
      ri[a.rhs_group_dims[0]] = std::max<int64_t>(g, 0);
    }
    for (int64_t c = 0; c < contracted && !zero; ++c) {
      int64_t crest = c;
      for (int64_t i = static_cast<int64_t>(dn.lhs_contracting_dims.size()) - 1; i >= 0; --i) {
        const int64_t ld = dn.lhs_contracting_dims[i];
        li[ld] = crest % ls.dimensions(ld);
        ri[dn.rhs_contracting_dims[i]] = li[ld];
        crest /= ls.dimensions(ld);
      }
      if (mode == RaggedDotMode::kContracting && group_of(li) != oi[0]) continue;
      int64_t lf = 0, rf = 0;
      for (int64_t d = 0; d < ls.rank(); ++d) lf += li[d] * lstride[d];
      for (int64_t d = 0; d < rs.rank(); ++d) rf += ri[d] * rstride[d];
      sum += lhs[lf] * rhs[rf];
    }
    StoreDouble(os.element_type(), out.mutable_raw_data(), o, zero ? 0.0 : sum);
  }
  return Value{std::move(out)};
}

}  // namespace weft::runtime::exec
