// Hybrid mesh device order against small cases worked out by hand from the
// definition (np.block of per-slice meshes placed at their DCN coordinates).
#include "weft/runtime/hybrid_mesh.h"

#include <gtest/gtest.h>

#include "weft/base/error.h"

namespace weft::runtime {
namespace {

using Ids = std::vector<int64_t>;

Topology Slices(int64_t devices, int64_t slices) {
  RuntimeConfig config;
  config.num_devices = devices;
  config.num_slices = slices;
  return Topology::FromConfig(config);
}

TEST(HybridMesh, OneSliceIsTheDevicesInOrder) {
  EXPECT_EQ(HybridDeviceOrder(Slices(4, 1), {2, 2}, {1, 1}), (Ids{0, 1, 2, 3}));
}

TEST(HybridMesh, SlicesStackAlongTheDcnAxis) {
  // 2 slices of 4 stacked along axis 0: [[0,1,2,3],[4,5,6,7]].
  EXPECT_EQ(HybridDeviceOrder(Slices(8, 2), {1, 4}, {2, 1}), (Ids{0, 1, 2, 3, 4, 5, 6, 7}));
  // Slices side by side along axis 1, each a 2x2 block:
  // [[0,1 | 4,5],
  //  [2,3 | 6,7]]
  EXPECT_EQ(HybridDeviceOrder(Slices(8, 2), {2, 2}, {1, 2}), (Ids{0, 1, 4, 5, 2, 3, 6, 7}));
}

TEST(HybridMesh, FourSlicesOnATwoByTwoDcnGrid) {
  // Slices of 2 devices as 2x1 columns; slice s at DCN coordinate (s/2, s%2):
  // [[0,2],
  //  [1,3],
  //  [4,6],
  //  [5,7]]
  EXPECT_EQ(HybridDeviceOrder(Slices(8, 4), {2, 1}, {2, 2}), (Ids{0, 2, 1, 3, 4, 6, 5, 7}));
}

TEST(HybridMesh, ThreeAxes) {
  // Shape [2,2,2]: element (a,b,c) is slice b, local index a*2 + c, so
  // device b*4 + a*2 + c.
  EXPECT_EQ(HybridDeviceOrder(Slices(8, 2), {2, 1, 2}, {1, 2, 1}), (Ids{0, 1, 4, 5, 2, 3, 6, 7}));
}

TEST(HybridMesh, UsesEachSlicesDevicesInLocalIndexOrder) {
  // MPI ranks placed round-robin on two hosts: slice 0 = {0,2}, slice 1 = {1,3}.
  const Topology t = Topology::FromProcesses({"a", "b", "a", "b"}, RuntimeConfig{});
  EXPECT_EQ(HybridDeviceOrder(t, {2}, {2}), (Ids{0, 2, 1, 3}));
  EXPECT_EQ(HybridDeviceOrder(t, {1, 2}, {2, 1}), (Ids{0, 2, 1, 3}));
}

TEST(HybridMesh, ShapesThatDoNotFitAreClearErrors) {
  const Topology t = Slices(8, 2);
  auto error_of = [&](Ids ici, Ids dcn) -> std::string {
    try {
      HybridDeviceOrder(t, ici, dcn);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error_of({2, 4}, {1, 1}).find("ici shape [2,4] has 8 devices but each slice has 4"),
            std::string::npos)
      << error_of({2, 4}, {1, 1});
  EXPECT_NE(error_of({2, 2}, {1, 1}).find("dcn shape [1,1] has 1 slices"), std::string::npos);
  EXPECT_NE(error_of({4}, {4}).find("dcn shape [4] has 4 slices but the topology has 2"),
            std::string::npos);
  EXPECT_NE(error_of({4}, {2, 1}).find("same number of axes"), std::string::npos);
  EXPECT_NE(error_of({4, 0}, {2, 1}).find("at least 1"), std::string::npos);
}

}  // namespace
}  // namespace weft::runtime
