// Collectives whose groups span slices (a multi-slice mesh, or MPI ranks on
// several hosts), decomposed into a level inside each slice and a level
// across slices, so the slow network (DCN) carries 1/m of the bytes a flat
// ring would (m = the group's members per slice):
//
//   all-reduce      reduce-scatter inside the slice, all-reduce across
//                   slices on the 1/m shard, all-gather inside the slice
//                   (arrays too small to split: all-reduce inside, then across)
//   all-gather      all-gather across slices (the device's shard), then
//                   inside the slice, then the chunks put back in group order
//   reduce-scatter  reduce-scatter inside the slice (chunks grouped by the
//                   member that keeps them), then across slices
//
// A group qualifies when it holds m >= 2 members in each of s >= 2 slices,
// listed slice by slice (member j*m + p is the p-th of the j-th slice), as
// the partitioner writes groups over a slice-major device order (an
// all-reduce's members are taken slice by slice first: their order is only
// the order of the sum). All-to-all
// and collective-permute stay flat. Device d is in slice d / (num_devices /
// slices), as runtime/hybrid_mesh.h and the planner number them.
//
// Reduction order: a sum is formed inside each slice (in member order), then
// across slices (in slice order) — ((a0 + a1) + (a2 + a3)) where the flat
// collective adds a0 + a1 + a2 + a3 left to right — so results may differ
// from the flat collective's in the last bits; every backend runs the same
// decomposed program, so threads and MPI still agree bit for bit.
#pragma once

#include <cstdint>

#include "weft/hlo/module.h"

namespace weft::compiler {

struct HierarchyStats {
  int64_t all_reduces = 0, all_gathers = 0, reduce_scatters = 0;  // decomposed
  int64_t total() const { return all_reduces + all_gathers + reduce_scatters; }
};

// Rewrites `module` (a per-device program for `num_devices` devices in
// `slices` equal slices) in place. slices <= 1 changes nothing.
HierarchyStats DecomposeCrossSliceCollectives(HloModule& module, int64_t num_devices,
                                              int64_t slices);

}  // namespace weft::compiler
