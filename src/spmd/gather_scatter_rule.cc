#include "gather_scatter_rule.h"

#include <algorithm>

#include "weft/base/algorithm.h"

namespace weft::spmd {
namespace {

using TensorFactors = OpShardingRule::TensorFactors;

// The dim along which `instr`'s value counts 0, 1, 2, … (XLA's
// GetDimensionForIota): an iota's dimension; for s32 values also a constant
// whose every element is its coordinate along a dim (the first such dim
// longer than 1) and a broadcast of an iota-like operand.
std::optional<int64_t> IotaDim(const HloInstruction* instr) {
  if (instr->opcode() == HloOpcode::kIota) return instr->attrs().iota_dimension;
  const Shape& shape = instr->shape();
  if (!shape.IsArray() || shape.element_type() != PrimitiveType::kS32) return std::nullopt;
  if (instr->opcode() == HloOpcode::kBroadcast) {
    const std::optional<int64_t> inner = IotaDim(instr->operand(0));
    if (!inner) return std::nullopt;
    return instr->dimensions().at(static_cast<size_t>(*inner));
  }
  if (instr->opcode() != HloOpcode::kConstant) return std::nullopt;
  const Literal& literal = instr->literal();
  const int64_t rank = shape.rank();
  if (literal.size() != shape.ElementsCount()) return std::nullopt;
  for (int64_t dim = 0; dim < rank; ++dim) {
    if (shape.dimensions(dim) <= 1) continue;
    // Row-major: the coordinate along `dim` of element i.
    int64_t inner = 1;
    for (int64_t d = dim + 1; d < rank; ++d) inner *= shape.dimensions(d);
    bool counts = true;
    for (int64_t i = 0; i < literal.size() && counts; ++i) {
      counts = literal.GetInt(i) == i / inner % shape.dimensions(dim);
    }
    if (counts) return dim;
  }
  return std::nullopt;
}

struct IndexRoles {
  const Shape* operand = nullptr;
  const HloInstruction* indices = nullptr;
  int64_t index_vector_dim = 0;
  std::vector<int64_t> index_map;         // index component -> operand dim
  std::vector<int64_t> slice_sizes;       // per operand dim
  std::vector<int64_t> indices_batching;  // explicit batching dims of the indices
};

// The k-th indices dim other than the index vector dim <-> the k-th dim of
// `out_rank` dims that is not in `window_dims` (offset dims, update window dims).
std::vector<int64_t> BatchOutDims(int64_t out_rank, const std::vector<int64_t>& window_dims) {
  std::vector<int64_t> out;
  for (int64_t d = 0; d < out_rank; ++d) {
    if (!Contains(window_dims, d)) out.push_back(d);
  }
  return out;
}

std::vector<ParallelDim> FindParallelDims(const IndexRoles& r) {
  const int64_t components = static_cast<int64_t>(r.index_map.size());
  std::vector<int64_t> along(static_cast<size_t>(components), -1);
  const int64_t ivd = r.index_vector_dim;
  // Copies are looked through only to a concatenate; otherwise the indices
  // themselves are matched.
  const HloInstruction* source = r.indices;
  while (source->opcode() == HloOpcode::kCopy) source = source->operand(0);
  if (source->opcode() != HloOpcode::kConcatenate) source = r.indices;
  auto fill = [&](const HloInstruction* piece, int64_t first) {
    const int64_t count = piece->shape().rank() > ivd ? piece->shape().dimensions(ivd) : 1;
    const std::optional<int64_t> dim = IotaDim(piece);
    if (dim && *dim != ivd) {
      for (int64_t k = first; k < std::min(components, first + count); ++k) along[k] = *dim;
    }
    return count;
  };
  if (source->opcode() == HloOpcode::kConcatenate && !source->dimensions().empty() &&
      source->dimensions()[0] == ivd) {
    int64_t first = 0;
    for (const HloInstruction* piece : source->operands()) first += fill(piece, first);
  } else {
    fill(source, 0);
  }
  const Shape& indices = source->shape();
  std::vector<ParallelDim> out;
  for (int64_t k = 0; k < components; ++k) {
    const int64_t d = along[k];
    if (d < 0 || d >= indices.rank()) continue;
    const int64_t p = r.index_map[k];
    if (std::any_of(out.begin(), out.end(),
                    [&](const ParallelDim& x) { return x.indices_dim == d; })) {
      return {};
    }
    if (r.slice_sizes.at(p) != 1 || Contains(r.indices_batching, d)) continue;
    if (r.operand->dimensions(p) != indices.dimensions(d)) return {};
    out.push_back({p, d});
  }
  return out;
}

// Per operand dim, its window dim (gather: the offset dim of the result;
// scatter: the update window dim), in order; -1 for the dims the slice drops
// (collapsed / inserted) and for batching dims.
std::vector<int64_t> WindowDimOf(int64_t rank, const std::vector<int64_t>& dropped,
                                 const std::vector<int64_t>& batching,
                                 const std::vector<int64_t>& window_dims) {
  std::vector<int64_t> out(static_cast<size_t>(rank), -1);
  size_t next = 0;
  for (int64_t d = 0; d < rank; ++d) {
    if (Contains(dropped, d) || Contains(batching, d)) continue;
    if (next < window_dims.size()) out[d] = window_dims[next++];
  }
  return out;
}

std::vector<int64_t> ScatterWindowDimOf(const HloInstruction& instr) {
  const ScatterDimensionNumbers& dn = instr.attrs().scatter;
  return WindowDimOf(instr.operand(0)->shape().rank(), dn.inserted_window_dims,
                     dn.input_batching_dims, dn.update_window_dims);
}

// Slice sizes of a scatter: the updates' window dims for the operand's window
// dims, 1 for inserted and batching dims.
std::vector<int64_t> ScatterSliceSizes(const HloInstruction& instr) {
  const ScatterDimensionNumbers& dn = instr.attrs().scatter;
  const int64_t n = (instr.operand_count() - 1) / 2;
  const Shape& operand = instr.operand(0)->shape();
  const Shape& update = instr.operand(n + 1)->shape();
  const std::vector<int64_t> window_of = ScatterWindowDimOf(instr);
  std::vector<int64_t> sizes;
  for (int64_t d = 0; d < operand.rank(); ++d) {
    const bool dropped =
        Contains(dn.inserted_window_dims, d) || Contains(dn.input_batching_dims, d);
    sizes.push_back(dropped             ? 1
                    : window_of[d] >= 0 ? update.dimensions(window_of[d])
                                        : operand.dimensions(d));
  }
  return sizes;
}

IndexRoles Roles(const HloInstruction& instr) {
  IndexRoles r;
  if (instr.opcode() == HloOpcode::kGather) {
    const GatherDimensionNumbers& dn = instr.attrs().gather;
    r.operand = &instr.operand(0)->shape();
    r.indices = instr.operand(1);
    r.index_vector_dim = dn.index_vector_dim;
    r.index_map = dn.start_index_map;
    r.slice_sizes = instr.attrs().gather_slice_sizes;
    r.indices_batching = dn.start_indices_batching_dims;
  } else {
    const ScatterDimensionNumbers& dn = instr.attrs().scatter;
    const int64_t n = (instr.operand_count() - 1) / 2;
    r.operand = &instr.operand(0)->shape();
    r.indices = instr.operand(n);
    r.index_vector_dim = dn.index_vector_dim;
    r.index_map = dn.scatter_dims_to_operand_dims;
    r.slice_sizes = ScatterSliceSizes(instr);
    r.indices_batching = dn.scatter_indices_batching_dims;
  }
  return r;
}

// The indices' factors: a pass-through factor per dim but the index vector
// dim (need-replication), shared with the result's (updates') batch dims.
TensorFactors IndexFactors(OpShardingRule& rule, const Shape& indices, int64_t ivd,
                           const std::vector<int64_t>& batch_out, TensorFactors& out) {
  TensorFactors idx(static_cast<size_t>(indices.rank()));
  size_t next = 0;
  for (int64_t d = 0; d < indices.rank(); ++d) {
    if (d == ivd) {
      idx[d] = {rule.AddFactor(indices.dimensions(d), FactorKind::kNeedReplication)};
      continue;
    }
    idx[d] = {rule.AddFactor(indices.dimensions(d))};
    if (next < batch_out.size()) out[batch_out[next++]] = idx[d];
  }
  return idx;
}

// The operand's factors for its batching and parallel dims: the indices dim's.
void LinkIndexedDims(const IndexRoles& r, const std::vector<int64_t>& operand_batching,
                     const std::vector<ParallelDim>& parallel, const TensorFactors& idx,
                     TensorFactors& op) {
  for (size_t k = 0; k < operand_batching.size() && k < r.indices_batching.size(); ++k) {
    const int64_t o = operand_batching[k], i = r.indices_batching[k];
    if (r.operand->dimensions(o) == r.indices->shape().dimensions(i)) op.at(o) = idx.at(i);
  }
  for (const ParallelDim& p : parallel) op.at(p.operand_dim) = idx.at(p.indices_dim);
}

}  // namespace

std::vector<ParallelDim> ParallelDims(const HloInstruction& instr) {
  if (instr.opcode() != HloOpcode::kGather && instr.opcode() != HloOpcode::kScatter) return {};
  const IndexRoles r = Roles(instr);
  if (static_cast<int64_t>(r.slice_sizes.size()) != r.operand->rank()) return {};
  for (int64_t p : r.index_map) {
    if (p < 0 || p >= r.operand->rank()) return {};
  }
  return FindParallelDims(r);
}

std::optional<OpShardingRule> GatherRule(const HloInstruction& instr) {
  const GatherDimensionNumbers& dn = instr.attrs().gather;
  const Shape& operand = instr.operand(0)->shape();
  const Shape& indices = instr.operand(1)->shape();
  const Shape& out = instr.shape();
  const std::vector<int64_t>& slice_sizes = instr.attrs().gather_slice_sizes;
  if (!out.IsArray() || static_cast<int64_t>(slice_sizes.size()) != operand.rank()) {
    return std::nullopt;
  }
  OpShardingRule rule;
  rule.name = "gather";
  TensorFactors op_f(static_cast<size_t>(operand.rank())), out_f(static_cast<size_t>(out.rank()));
  TensorFactors idx_f = IndexFactors(rule, indices, dn.index_vector_dim,
                                     BatchOutDims(out.rank(), dn.offset_dims), out_f);
  LinkIndexedDims(Roles(instr), dn.operand_batching_dims, ParallelDims(instr), idx_f, op_f);
  const std::vector<int64_t> window_of = WindowDimOf(operand.rank(), dn.collapsed_slice_dims,
                                                     dn.operand_batching_dims, dn.offset_dims);
  for (int64_t d = 0; d < operand.rank(); ++d) {
    const int64_t out_dim = window_of[d];
    if (!op_f[d].empty()) continue;  // batching or parallel
    if (out_dim >= 0 && slice_sizes[d] == operand.dimensions(d)) {
      const int64_t f = rule.AddFactor(operand.dimensions(d));
      op_f[d] = {f};
      out_f[out_dim] = {f};
    } else {
      op_f[d] = {rule.AddFactor(operand.dimensions(d), FactorKind::kNeedReplication)};
    }
  }
  for (int64_t d = 0; d < out.rank(); ++d) {
    if (out_f[d].empty()) out_f[d] = {rule.AddFactor(out.dimensions(d))};
  }
  rule.operands = {std::move(op_f), std::move(idx_f)};
  rule.results = {std::move(out_f)};
  return rule;
}

std::optional<OpShardingRule> ScatterRule(const HloInstruction& instr) {
  if (instr.operand_count() < 3 || instr.operand_count() % 2 == 0) return std::nullopt;
  const ScatterDimensionNumbers& dn = instr.attrs().scatter;
  const int64_t n = (instr.operand_count() - 1) / 2;
  const Shape& operand = instr.operand(0)->shape();
  const Shape& indices = instr.operand(n)->shape();
  const Shape& update = instr.operand(n + 1)->shape();
  OpShardingRule rule;
  rule.name = "scatter";
  TensorFactors op_f(static_cast<size_t>(operand.rank())), up_f(static_cast<size_t>(update.rank()));
  TensorFactors idx_f = IndexFactors(rule, indices, dn.index_vector_dim,
                                     BatchOutDims(update.rank(), dn.update_window_dims), up_f);
  LinkIndexedDims(Roles(instr), dn.input_batching_dims, ParallelDims(instr), idx_f, op_f);
  const std::vector<int64_t> window_of = ScatterWindowDimOf(instr);
  for (int64_t d = 0; d < operand.rank(); ++d) {
    const int64_t up_dim = window_of[d];
    if (!op_f[d].empty()) continue;  // batching or parallel
    // Every operand dim is its result dim (the operand is updated in place).
    op_f[d] = {rule.AddFactor(operand.dimensions(d))};
    if (up_dim >= 0 && update.dimensions(up_dim) == operand.dimensions(d)) up_f[up_dim] = op_f[d];
  }
  for (int64_t d = 0; d < update.rank(); ++d) {
    if (up_f[d].empty()) {
      up_f[d] = {rule.AddFactor(update.dimensions(d), FactorKind::kNeedReplication)};
    }
  }
  for (int64_t i = 0; i < n; ++i) rule.operands.push_back(op_f);
  rule.operands.push_back(std::move(idx_f));
  for (int64_t i = 0; i < n; ++i) rule.operands.push_back(up_f);
  for (int64_t i = 0; i < n; ++i) rule.results.push_back(op_f);
  return rule;
}

}  // namespace weft::spmd
