#include "weft/runtime/hybrid_mesh.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "weft/base/algorithm.h"
#include "weft/base/error.h"

namespace weft::runtime {

std::vector<int64_t> HybridDeviceOrder(const Topology& topology, std::vector<int64_t> ici_shape,
                                       std::vector<int64_t> dcn_shape) {
  WEFT_CHECK(!ici_shape.empty() && ici_shape.size() == dcn_shape.size(),
             "hybrid mesh: ici shape [{}] and dcn shape [{}] must have the same number of axes "
             "(at least one); pad the shorter with 1s",
             fmt::join(ici_shape, ","), fmt::join(dcn_shape, ","));
  for (size_t i = 0; i < ici_shape.size(); ++i) {
    WEFT_CHECK(ici_shape[i] >= 1 && dcn_shape[i] >= 1,
               "hybrid mesh: axis {} has ici size {} and dcn size {}; sizes must be at least 1", i,
               ici_shape[i], dcn_shape[i]);
  }
  WEFT_CHECK(Product(ici_shape) == topology.devices_per_slice(),
             "hybrid mesh: ici shape [{}] has {} devices but each slice has {}; choose an ici "
             "shape whose product is the number of devices per slice",
             fmt::join(ici_shape, ","), Product(ici_shape), topology.devices_per_slice());
  WEFT_CHECK(Product(dcn_shape) == topology.num_slices(),
             "hybrid mesh: dcn shape [{}] has {} slices but the topology has {}; choose a dcn "
             "shape whose product is the number of slices",
             fmt::join(dcn_shape, ","), Product(dcn_shape), topology.num_slices());

  std::vector<std::vector<int64_t>> slice_devices(topology.num_slices());
  for (int64_t s = 0; s < topology.num_slices(); ++s) slice_devices[s] = topology.SliceDevices(s);

  const size_t rank = ici_shape.size();
  std::vector<int64_t> shape(rank);
  for (size_t i = 0; i < rank; ++i) shape[i] = ici_shape[i] * dcn_shape[i];
  std::vector<int64_t> order;
  order.reserve(topology.num_devices());
  std::vector<int64_t> coord(rank, 0);  // row-major odometer over `shape`
  for (int64_t n = 0; n < topology.num_devices(); ++n) {
    int64_t slice = 0, local = 0;
    for (size_t i = 0; i < rank; ++i) {
      slice = slice * dcn_shape[i] + coord[i] / ici_shape[i];
      local = local * ici_shape[i] + coord[i] % ici_shape[i];
    }
    order.push_back(slice_devices[slice][local]);
    for (size_t i = rank; i-- > 0;) {
      if (++coord[i] < shape[i]) break;
      coord[i] = 0;
    }
  }
  return order;
}

}  // namespace weft::runtime
