// vjp rules of the ops that move data without arithmetic: broadcast,
// reshape, transpose, reverse, slices, concatenate, tuples.
#include <algorithm>

#include "vjp.h"
#include "weft/base/algorithm.h"
#include "weft/base/error.h"

namespace weft::autodiff {
namespace {

std::vector<HloInstruction*> PrimalIndices(VjpContext& c, const HloInstruction& f, int64_t first) {
  std::vector<HloInstruction*> idx;
  for (int64_t i = first; i < f.operand_count(); ++i) idx.push_back(c.Primal(f.operand(i)));
  return idx;
}

// Sum over the dims the broadcast added, then put the kept dims in operand order.
void Broadcast(VjpContext& c, const HloInstruction& f, std::span<HloInstruction* const> ct) {
  const std::vector<int64_t>& kept = f.dimensions();
  std::vector<int64_t> summed;
  for (int64_t d = 0; d < f.shape().rank(); ++d) {
    if (!Contains(kept, d)) summed.push_back(d);
  }
  HloInstruction* g = c.Sum(ct[0], summed);
  std::vector<int64_t> sorted = kept;
  std::sort(sorted.begin(), sorted.end());
  if (sorted != kept) {
    std::vector<int64_t> perm;
    for (int64_t d : kept)
      perm.push_back(std::find(sorted.begin(), sorted.end(), d) - sorted.begin());
    g = c.b().Transpose(g, perm);
  }
  c.Accumulate(f.operand(0), g);
}

void Reshape(VjpContext& c, const HloInstruction& f, std::span<HloInstruction* const> ct) {
  c.Accumulate(f.operand(0), c.b().Reshape(ct[0], f.operand(0)->shape().dimensions()));
}

void Transpose(VjpContext& c, const HloInstruction& f, std::span<HloInstruction* const> ct) {
  const std::vector<int64_t>& perm = f.dimensions();
  std::vector<int64_t> inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = static_cast<int64_t>(i);
  c.Accumulate(f.operand(0), c.b().Transpose(ct[0], inverse));
}

void Reverse(VjpContext& c, const HloInstruction& f, std::span<HloInstruction* const> ct) {
  c.Accumulate(f.operand(0), c.b().Reverse(ct[0], f.dimensions()));
}

// Zero-pad the cotangent back to the operand: strides become interior padding.
void Slice(VjpContext& c, const HloInstruction& f, std::span<HloInstruction* const> ct) {
  const Shape& in = f.operand(0)->shape();
  std::vector<PadDim> pad;
  for (int64_t d = 0; d < in.rank(); ++d) {
    const SliceDim& s = f.attrs().slice.at(d);
    const int64_t n = f.shape().dimensions(d);
    WEFT_CHECK(n > 0, "autodiff: {} has an empty dim; nothing to differentiate", f.Describe());
    const int64_t last = s.start + (n - 1) * s.stride;
    pad.push_back({s.start, in.dimensions(d) - last - 1, s.stride - 1});
  }
  HloInstruction* zero = c.Scalar(ct[0]->shape().element_type(), 0.0);
  c.Accumulate(f.operand(0), c.b().Pad(ct[0], zero, pad));
}

void DynamicSlice(VjpContext& c, const HloInstruction& f, std::span<HloInstruction* const> ct) {
  HloInstruction* zeros =
      c.Zeros(f.operand(0)->shape().WithElementType(ct[0]->shape().element_type()));
  c.Accumulate(f.operand(0), c.b().DynamicUpdateSlice(zeros, ct[0], PrimalIndices(c, f, 1)));
}

void DynamicUpdateSlice(VjpContext& c, const HloInstruction& f,
                        std::span<HloInstruction* const> ct) {
  std::vector<HloInstruction*> idx = PrimalIndices(c, f, 2);
  const Shape& update = f.operand(1)->shape();
  if (c.NeedsGrad(f.operand(0))) {
    HloInstruction* zeros = c.Zeros(update.WithElementType(ct[0]->shape().element_type()));
    c.Accumulate(f.operand(0), c.b().DynamicUpdateSlice(ct[0], zeros, idx));
  }
  if (c.NeedsGrad(f.operand(1))) {
    c.Accumulate(f.operand(1), c.b().DynamicSlice(ct[0], idx, update.dimensions()));
  }
}

void Concatenate(VjpContext& c, const HloInstruction& f, std::span<HloInstruction* const> ct) {
  const int64_t dim = f.dimensions().at(0);
  std::vector<int64_t> start(f.shape().rank(), 0);
  std::vector<int64_t> limit = f.shape().dimensions();
  int64_t offset = 0;
  for (const HloInstruction* op : f.operands()) {
    const int64_t n = op->shape().dimensions(dim);
    if (c.NeedsGrad(op)) {
      start[dim] = offset;
      limit[dim] = offset + n;
      c.Accumulate(op, c.b().Slice(ct[0], start, limit));
    }
    offset += n;
  }
}

void Tuple(VjpContext& c, const HloInstruction& f, std::span<HloInstruction* const> ct) {
  for (int64_t k = 0; k < f.operand_count(); ++k) c.Accumulate(f.operand(k), ct[k]);
}

void GetTupleElement(VjpContext& c, const HloInstruction& f, std::span<HloInstruction* const> ct) {
  c.Accumulate(f.operand(0), ct[0], f.tuple_index());
}

}  // namespace

void RegisterShapeOpVjps(VjpTable& t) {
  t.Register(HloOpcode::kBroadcast, Broadcast);
  t.Register(HloOpcode::kReshape, Reshape);
  t.Register(HloOpcode::kTranspose, Transpose);
  t.Register(HloOpcode::kReverse, Reverse);
  t.Register(HloOpcode::kSlice, Slice);
  t.Register(HloOpcode::kDynamicSlice, DynamicSlice);
  t.Register(HloOpcode::kDynamicUpdateSlice, DynamicUpdateSlice);
  t.Register(HloOpcode::kConcatenate, Concatenate);
  t.Register(HloOpcode::kTuple, Tuple);
  t.Register(HloOpcode::kGetTupleElement, GetTupleElement);
}

}  // namespace weft::autodiff
