// Device order for a hybrid (multi-slice) mesh, as JAX's
// mesh_utils.create_hybrid_device_mesh builds it: slice-major.
#pragma once

#include <cstdint>
#include <vector>

#include "weft/runtime/topology.h"

namespace weft::runtime {

// The device ids of a mesh whose axis i has ici_shape[i] * dcn_shape[i]
// devices, flattened row-major. ici_shape is the mesh within one slice (its
// product must equal devices per slice), dcn_shape the mesh of slices (its
// product must equal the number of slices). Slice s, at row-major coordinate
// s of dcn_shape, fills the block at that coordinate: the element at
// coordinate c has slice coordinate c[i] / ici_shape[i] and, within that
// slice, local coordinate c[i] % ici_shape[i], whose row-major index is the
// device's local index. Throws weft::Error when the shapes do not fit.
std::vector<int64_t> HybridDeviceOrder(const Topology& topology, std::vector<int64_t> ici_shape,
                                       std::vector<int64_t> dcn_shape);

}  // namespace weft::runtime
