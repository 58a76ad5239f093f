// vjp of dot with general dimension numbers. The result is laid out
// [batch..., lhs free..., rhs free...]; each operand's cotangent is another
// dot of the cotangent with the other operand, transposed back to the
// operand's layout when the dot's natural result order differs.
#include <algorithm>

#include "vjp.h"
#include "weft/base/algorithm.h"
#include "weft/base/error.h"

namespace weft::autodiff {
namespace {

// Dims of an operand of `rank` that are neither batch nor contracting, in order.
std::vector<int64_t> FreeDims(int64_t rank, const std::vector<int64_t>& batch,
                              const std::vector<int64_t>& contracting) {
  std::vector<int64_t> free;
  for (int64_t d = 0; d < rank; ++d) {
    if (!Contains(batch, d) && !Contains(contracting, d)) {
      free.push_back(d);
    }
  }
  return free;
}

std::vector<int64_t> Iota(int64_t begin, int64_t n) {
  std::vector<int64_t> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = begin + i;
  return v;
}

// Transposes `g`, whose dim p holds target dim target_of[p], into target order.
HloInstruction* ToLayout(VjpContext& c, HloInstruction* g, const std::vector<int64_t>& target_of) {
  std::vector<int64_t> perm(target_of.size());
  bool identity = true;
  for (size_t p = 0; p < target_of.size(); ++p) {
    perm[target_of[p]] = static_cast<int64_t>(p);
    identity &= target_of[p] == static_cast<int64_t>(p);
  }
  return identity ? g : c.b().Transpose(g, perm);
}

void Dot(VjpContext& c, const HloInstruction& f, std::span<HloInstruction* const> ct) {
  const DotDimensionNumbers& dn = f.attrs().dot;
  const HloInstruction* lhs = f.operand(0);
  const HloInstruction* rhs = f.operand(1);
  const int64_t nb = static_cast<int64_t>(dn.lhs_batch_dims.size());
  const std::vector<int64_t> lhs_free =
      FreeDims(lhs->shape().rank(), dn.lhs_batch_dims, dn.lhs_contracting_dims);
  const std::vector<int64_t> rhs_free =
      FreeDims(rhs->shape().rank(), dn.rhs_batch_dims, dn.rhs_contracting_dims);
  const int64_t nl = static_cast<int64_t>(lhs_free.size());
  const int64_t nr = static_cast<int64_t>(rhs_free.size());
  const std::vector<int64_t> ct_batch = Iota(0, nb);
  const std::vector<int64_t> ct_lhs_free = Iota(nb, nl);
  const std::vector<int64_t> ct_rhs_free = Iota(nb + nl, nr);
  // A dot of two operands of one floating type returning another (bf16
  // operands, an f32 result: mixed precision) has its cotangent dots in the
  // operands' type, the cotangent cast as the forward's operands were;
  // otherwise the operands are cast to the cotangent's type.
  HloInstruction* dy = ct[0];
  const PrimitiveType operand_type = lhs->shape().element_type();
  if (operand_type == rhs->shape().element_type() && IsFloatingPoint(operand_type) &&
      IsFloatingPoint(f.shape().element_type())) {
    dy = c.ConvertTo(dy, operand_type);
  }

  if (c.NeedsGrad(lhs)) {
    // dlhs = dot(ct, rhs): [batch, lhs free, rhs contracting dims (ascending)].
    HloInstruction* r = c.ConvertTo(c.Primal(rhs), dy->shape().element_type());
    DotDimensionNumbers d{ct_batch, ct_rhs_free, dn.rhs_batch_dims, rhs_free};
    HloInstruction* g = c.b().Dot(dy, r, d);
    std::vector<int64_t> target_of = dn.lhs_batch_dims;
    target_of.insert(target_of.end(), lhs_free.begin(), lhs_free.end());
    std::vector<int64_t> rhs_contract_sorted = dn.rhs_contracting_dims;
    std::sort(rhs_contract_sorted.begin(), rhs_contract_sorted.end());
    for (int64_t rd : rhs_contract_sorted) {
      const auto k = std::find(dn.rhs_contracting_dims.begin(), dn.rhs_contracting_dims.end(), rd) -
                     dn.rhs_contracting_dims.begin();
      target_of.push_back(dn.lhs_contracting_dims[k]);
    }
    c.Accumulate(lhs, ToLayout(c, g, target_of));
  }
  if (c.NeedsGrad(rhs)) {
    // drhs = dot(lhs, ct): [batch, lhs contracting dims (ascending), rhs free]
    // (for x[in] . w[in, out] this is x^T dy without a transpose).
    HloInstruction* l = c.ConvertTo(c.Primal(lhs), dy->shape().element_type());
    DotDimensionNumbers d{dn.lhs_batch_dims, lhs_free, ct_batch, ct_lhs_free};
    HloInstruction* g = c.b().Dot(l, dy, d);
    std::vector<int64_t> target_of = dn.rhs_batch_dims;
    std::vector<int64_t> lhs_contract_sorted = dn.lhs_contracting_dims;
    std::sort(lhs_contract_sorted.begin(), lhs_contract_sorted.end());
    for (int64_t ld : lhs_contract_sorted) {
      const auto k = std::find(dn.lhs_contracting_dims.begin(), dn.lhs_contracting_dims.end(), ld) -
                     dn.lhs_contracting_dims.begin();
      target_of.push_back(dn.rhs_contracting_dims[k]);
    }
    target_of.insert(target_of.end(), rhs_free.begin(), rhs_free.end());
    c.Accumulate(rhs, ToLayout(c, g, target_of));
  }
}

}  // namespace

void RegisterDotVjps(VjpTable& t) { t.Register(HloOpcode::kDot, Dot); }

}  // namespace weft::autodiff
