// vjp of gather (an embedding lookup, or any gather): the cotangent rows are
// scatter-added back to the rows they came from, so repeated indices sum.
#include "vjp.h"
#include "weft/base/error.h"

namespace weft::autodiff {
namespace {

void Gather(VjpContext& c, const HloInstruction& f, std::span<HloInstruction* const> ct) {
  const GatherDimensionNumbers& g = f.attrs().gather;
  ScatterDimensionNumbers s;
  s.update_window_dims = g.offset_dims;
  s.inserted_window_dims = g.collapsed_slice_dims;
  s.scatter_dims_to_operand_dims = g.start_index_map;
  s.input_batching_dims = g.operand_batching_dims;
  s.scatter_indices_batching_dims = g.start_indices_batching_dims;
  s.index_vector_dim = g.index_vector_dim;
  const PrimitiveType type = ct[0]->shape().element_type();
  HloInstruction* zeros = c.Zeros(f.operand(0)->shape().WithElementType(type));
  HloInstruction* scattered =
      c.b().Scatter(zeros, c.Primal(f.operand(1)), ct[0], s, c.emitter().AddReducer(type));
  c.Accumulate(f.operand(0), scattered);
}

}  // namespace

void RegisterGatherVjps(VjpTable& t) { t.Register(HloOpcode::kGather, Gather); }

}  // namespace weft::autodiff
