// Internal to the executor's fusion evaluator (eval_fusion.cc): runs a
// FusionPlan (fusion_plan.h) a tile of kTile elements at a time.
//
// Within a tile, the plan's nodes are walked in post order:
//  - a parameter (or constant) with the output's dimensions is read in
//    place (pointer + offset; bf16/f16 are widened to f32 into scratch,
//    except a bf16 one only unary and binary nodes read: its tile stays
//    bf16 bits, which their kernels widen as they read, Node::raw_bf16);
//    a rank-0 one used elementwise is splatted over the tile;
//  - a broadcast gathers its operand's elements for the tile's indices
//    (fast paths: a scalar, a repeated row — the operand is a suffix of the
//    output's dimensions —, a repeated element per row — a prefix —);
//  - iota writes the tile's coordinates along its dimension;
//  - a reshape (row-major: the same linear indices) passes its operand's
//    tile on; an index map read at the tile's own indices (transpose, slice,
//    reverse, concatenate, pad, or a broadcast of one) gathers its tile
//    through the chain of index maps below it down to the parameters and
//    constants: each level maps the tile's linear indices to its operand's
//    (an affine map — transpose, slice, reverse, broadcast — computed a row
//    of the innermost dimension at a time; pad and concatenate split the
//    elements among their operands and the padding value), and the sources
//    are read at the composed indices (a plain copy where they are
//    contiguous);
//  - elementwise ops (unary, binary, compare, select, clamp, convert) call the
//    span kernels of elementwise_kernels.h, the same ones eval_elementwise.cc
//    runs. bf16 and f16 are computed in f32 and every result is rounded to
//    its element type, as the unfused program stores it (a bf16 unary or
//    binary node in the pass that computes it): fused and unfused give the
//    same bits.
// The root's tile is computed straight into the output buffer (or converted
// into it for bf16/f16).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "fusion_plan.h"

namespace weft::runtime::exec::fusion {

// A thread's scratch: the plan's slots, each a tile of the widest element,
// plus a storage tile for half broadcasts and an index tile for iota. Kept
// per thread across calls (fusions run a tile at a time, often).
struct Scratch {
  std::vector<uint64_t> slots;
  std::vector<uint16_t> half = std::vector<uint16_t>(kTile);
  std::vector<int64_t> ints = std::vector<int64_t>(kTile);
  // Per level of a gathered chain: operand indices, positions, a value tile.
  std::vector<int64_t> levels;
  // Per plan node: where its values for the current tile are.
  std::vector<const void*> ptrs;
  void Reserve(int32_t num_slots, int32_t max_depth, size_t num_nodes) {
    if (ptrs.size() < num_nodes) ptrs.resize(num_nodes);
    const size_t need = static_cast<size_t>(num_slots) * kTile;
    if (slots.size() < need) slots.resize(need);
    const size_t need_levels = static_cast<size_t>(max_depth) * 3 * kTile;
    if (levels.size() < need_levels) levels.resize(need_levels);
    // Sized here, never in coord(): a deeper level must not move the
    // multi-index a shallower one is still using.
    if (coords.size() < static_cast<size_t>(max_depth)) coords.resize(max_depth);
  }
  // Multi-indices, per level and one for broadcasts: kept, so that a tile
  // allocates nothing.
  std::vector<std::vector<int64_t>> coords;
  std::vector<int64_t> broadcast_coord;
  std::vector<int64_t>& coord(int32_t l, size_t rank) {
    std::vector<int64_t>& c = coords.at(static_cast<size_t>(l));
    c.assign(rank, 0);
    return c;
  }
  void* slot(int32_t s) { return slots.data() + static_cast<size_t>(s) * kTile; }
  int64_t* level(int32_t l, int k) {
    return levels.data() + (static_cast<size_t>(l) * 3 + k) * kTile;
  }
};

// The calling thread's scratch, large enough for `plan`.
Scratch& ThreadScratch(const FusionPlan& plan);

class TileRunner {
 public:
  // `sources`: per fusion operand, then per fused convolution, its data.
  // `sources` must outlive the runner (it is not copied).
  TileRunner(const FusionPlan& plan, std::span<const void* const> sources, void* out)
      : plan_(plan), sources_(sources), out_(out) {}

  // Element `origin` of the computed value goes to out[0] (an input
  // fusion's row buffer holds one row); 0 by default.
  void set_origin(int64_t origin) { origin_ = origin; }

  // Computes elements [b, b + n) of the value (n <= kTile).
  void Run(Scratch& scratch, int64_t b, int64_t n);

 private:
  // Node i's tile of elements [b, b + n): computed into `dst` (its slot, or
  // the output for the root), or where it is read in place; returns where.
  void* ComputeNode(Scratch& scratch, int32_t i, int64_t b, int64_t n, void* dst) const;
  // The storage elements of node `id` (gathered: a source, reshape, broadcast
  // or index map) at its linear indices idx[0..n) — or base, base + 1, ...
  // when idx is null — into dst. Composes the index maps down to the sources.
  void GatherTree(Scratch& scratch, int32_t id, const int64_t* idx, int64_t base, int64_t n,
                  void* dst, int32_t level) const;
  const void* Source(const Node& node) const {
    return node.fusion_operand >= 0 ? sources_[node.fusion_operand]
                                    : plan_.constants[node.constant].raw_data();
  }

  const FusionPlan& plan_;
  std::span<const void* const> sources_;  // per fusion operand, then per fused convolution
  void* out_;
  int64_t origin_ = 0;
};

}  // namespace weft::runtime::exec::fusion
