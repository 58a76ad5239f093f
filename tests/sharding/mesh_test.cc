#include "weft/sharding/mesh.h"

#include <gtest/gtest.h>

#include <numeric>
#include <random>

namespace weft {
namespace {

using Dims = std::vector<int64_t>;

TEST(MeshTest, AxesAndDevices) {
  Mesh mesh({"data", "model"}, {2, 4});
  EXPECT_EQ(mesh.num_devices(), 8);
  EXPECT_EQ(mesh.num_axes(), 2);
  EXPECT_EQ(mesh.axis_index("model"), 1);
  EXPECT_EQ(mesh.axis_size("data"), 2);
  EXPECT_EQ(mesh.device(Dims{1, 2}), 6);
  EXPECT_EQ(mesh.IndexOf(5), (Dims{1, 1}));
  EXPECT_FALSE(mesh.is_hybrid());
  EXPECT_EQ(mesh.SliceOf(7), 0);
  EXPECT_EQ(mesh.ToString(), "Mesh('data': 2, 'model': 4)");
  try {
    mesh.axis_index("tensor");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no axis 'tensor'; its axes are data, model"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(Mesh({"x", "x"}, {2, 2}), Error);
  EXPECT_THROW(Mesh({"x"}, {2, 2}), Error);
  EXPECT_THROW(Mesh({"x"}, {0}), Error);
  EXPECT_THROW(Mesh({"x"}, {4}, {0, 1, 2}), Error);
  EXPECT_THROW(Mesh({"x"}, {2}, {1, 1}), Error);

  Mesh custom({"x"}, {4}, {3, 2, 1, 0});
  EXPECT_EQ(custom.ToString(), "Mesh('x': 4, device_ids=[3,2,1,0])");
  EXPECT_EQ(custom.IndexOf(3), (Dims{0}));
}

// jax's create_hybrid_device_mesh, written out literally: an array of
// per-slice meshes (slice s = devices s*n..s*n+n-1, row-major over ICI) laid
// out over the DCN shape and joined with np.block.
std::vector<int64_t> NaiveHybrid(const Dims& ici, const Dims& dcn) {
  const size_t rank = ici.size();
  const int64_t n_ici = std::accumulate(ici.begin(), ici.end(), int64_t{1}, std::multiplies<>());
  Dims shape(rank);
  for (size_t i = 0; i < rank; ++i) shape[i] = ici[i] * dcn[i];
  const int64_t total =
      std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
  std::vector<int64_t> out(total);
  Dims slice(rank, 0);
  int64_t slice_id = 0;
  while (true) {
    // Copy block `slice_id` to its place.
    for (int64_t local = 0; local < n_ici; ++local) {
      Dims li(rank);
      int64_t rest = local;
      for (int64_t i = rank - 1; i >= 0; --i) {
        li[i] = rest % ici[i];
        rest /= ici[i];
      }
      int64_t flat = 0;
      for (size_t i = 0; i < rank; ++i) flat = flat * shape[i] + slice[i] * ici[i] + li[i];
      out[flat] = slice_id * n_ici + local;
    }
    ++slice_id;
    int64_t i = rank - 1;
    for (; i >= 0; --i) {
      if (++slice[i] < dcn[i]) break;
      slice[i] = 0;
    }
    if (i < 0) return out;
  }
}

TEST(MeshTest, HybridMeshIsSliceMajor) {
  Mesh mesh = Mesh::Hybrid({"data", "fsdp"}, {1, 4}, {2, 1});
  EXPECT_EQ(mesh.axis_sizes(), (Dims{2, 4}));
  // Slice 0 is row 0, slice 1 is row 1.
  EXPECT_EQ(mesh.devices().devices(), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(mesh.SliceOf(5), 1);
  EXPECT_EQ(mesh.SliceOf(3), 0);

  // Slices tiled along the minor axis: slice 1 sits right of slice 0.
  Mesh wide = Mesh::Hybrid({"x", "y"}, {2, 2}, {1, 2});
  EXPECT_EQ(wide.devices().devices(), (std::vector<int64_t>{0, 1, 4, 5, 2, 3, 6, 7}));
  EXPECT_TRUE(wide.devices().is_iota());
  EXPECT_EQ(wide.ToString(), "Mesh('x': 2, 'y': 4, ici=[2,2], dcn=[1,2])");

  std::mt19937 rng(17);
  for (int trial = 0; trial < 100; ++trial) {
    const int rank = 1 + rng() % 3;
    Dims ici(rank), dcn(rank);
    std::vector<std::string> names;
    for (int i = 0; i < rank; ++i) {
      ici[i] = 1 + rng() % 3;
      dcn[i] = 1 + rng() % 3;
      names.push_back("a" + std::to_string(i));
    }
    Mesh m = Mesh::Hybrid(names, ici, dcn);
    ASSERT_EQ(m.devices().devices(), NaiveHybrid(ici, dcn));
    const int64_t n_ici = std::accumulate(ici.begin(), ici.end(), int64_t{1}, std::multiplies<>());
    for (int64_t d = 0; d < m.num_devices(); ++d) {
      // The slice of a device is its DCN coordinate, row-major.
      Dims index = m.IndexOf(d);
      int64_t slice = 0;
      for (int i = 0; i < rank; ++i) slice = slice * dcn[i] + index[i] / ici[i];
      ASSERT_EQ(m.SliceOf(d), slice);
      ASSERT_EQ(slice, d / n_ici);
    }
  }
  EXPECT_THROW(Mesh::Hybrid({"x"}, {2, 2}, {1}), Error);
}

TEST(PartitionSpecTest, ToStringAndParse) {
  PartitionSpec spec{"data", std::nullopt, {"fsdp", "tensor"}};
  EXPECT_EQ(spec.ToString(), "PartitionSpec('data', None, ('fsdp', 'tensor'))");
  EXPECT_EQ(PartitionSpec::Parse(spec.ToString()), spec);
  EXPECT_EQ(PartitionSpec::Parse("P(data, None, (fsdp, tensor),)"), spec);
  EXPECT_EQ(PartitionSpec::Parse("(\"data\", None, ('fsdp', 'tensor'))"), spec);
  EXPECT_EQ(PartitionSpec::Parse("PartitionSpec()"), PartitionSpec());
  EXPECT_EQ(PartitionSpec().ToString(), "PartitionSpec()");
  try {
    PartitionSpec::Parse("P('x' 'y')");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("column 7: expected ',' or ')'"), std::string::npos)
        << e.what();
  }
}

TEST(ToHloShardingTest, OneDimensionalMesh) {
  Mesh mesh({"x"}, {4});
  EXPECT_EQ(ToHloSharding(mesh, {"x"}, 1).ToString(), "{devices=[4]<=[4]}");
  EXPECT_EQ(ToHloSharding(mesh, {"x"}, 2).ToString(), "{devices=[4,1]<=[4]}");
  EXPECT_EQ(ToHloSharding(mesh, {std::nullopt, "x"}, 2).ToString(), "{devices=[1,4]<=[4]}");
  EXPECT_EQ(ToHloSharding(mesh, {}, 3), HloSharding::Replicate());
  EXPECT_EQ(ToHloSharding(mesh, {std::nullopt}, 0 + 1), HloSharding::Replicate());
  // Explicit device order is kept.
  Mesh custom({"x"}, {4}, {2, 0, 3, 1});
  EXPECT_EQ(ToHloSharding(custom, {"x"}, 1).ToString(), "{devices=[4]2,0,3,1}");
}

TEST(ToHloShardingTest, TwoDimensionalMesh) {
  Mesh mesh({"x", "y"}, {2, 4});
  EXPECT_EQ(ToHloSharding(mesh, {"x", "y"}, 2).ToString(), "{devices=[2,4]<=[8]}");
  EXPECT_EQ(ToHloSharding(mesh, {"y", "x"}, 2).ToString(), "{devices=[4,2]<=[2,4]T(1,0)}");
  EXPECT_EQ(ToHloSharding(mesh, {{"x", "y"}}, 1).ToString(), "{devices=[8]<=[8]}");
  EXPECT_EQ(ToHloSharding(mesh, {{"y", "x"}}, 1).ToString(), "{devices=[8]<=[2,4]T(1,0)}");
  // Unmentioned axes replicate.
  EXPECT_EQ(ToHloSharding(mesh, {"x"}, 2).ToString(),
            "{devices=[2,1,4]<=[8] last_tile_dim_replicate}");
  EXPECT_EQ(ToHloSharding(mesh, {std::nullopt, "y"}, 2).ToString(),
            "{devices=[1,4,2]<=[2,4]T(1,0) last_tile_dim_replicate}");
  // shard_map: manual axes become a manual subgroup.
  std::vector<std::string> manual{"y"};
  EXPECT_EQ(ToHloSharding(mesh, {"x"}, 1, manual).ToString(),
            "{devices=[2,4]<=[8] last_tile_dims={manual}}");
  EXPECT_EQ(ToHloSharding(mesh, {}, 1, manual).ToString(),
            "{devices=[1,4,2]<=[2,4]T(1,0) last_tile_dims={manual, replicated}}");

  EXPECT_THROW(ToHloSharding(mesh, {"x", "x"}, 2), Error);
  EXPECT_THROW(ToHloSharding(mesh, {"z"}, 1), Error);
  EXPECT_THROW(ToHloSharding(mesh, {"x", "y"}, 1), Error);
  EXPECT_THROW(ToHloSharding(mesh, {"y"}, 1, manual), Error);
}

// JAX semantics, checked device by device: along dim d, the shard index of
// the device at mesh coordinates c is the mixed-radix number formed by c over
// the axes of spec[d] (major first).
void CheckAgainstDefinition(const Mesh& mesh, const PartitionSpec& spec, int64_t rank) {
  HloSharding s = ToHloSharding(mesh, spec, rank);
  SCOPED_TRACE(spec.ToString() + " on " + mesh.ToString() + " = " + s.ToString());
  for (int64_t device = 0; device < mesh.num_devices(); ++device) {
    Dims coords = mesh.IndexOf(device);
    Dims expected(rank, 0);
    for (int64_t d = 0; d < spec.size(); ++d) {
      for (const std::string& axis : spec.dims()[d].axes()) {
        const int64_t a = mesh.axis_index(axis);
        expected[d] = expected[d] * mesh.axis_sizes()[a] + coords[a];
      }
    }
    if (s.IsReplicated()) {
      ASSERT_EQ(expected, Dims(rank, 0));
    } else {
      ASSERT_EQ(s.TileIndexForDevice(device), expected) << "device " << device;
    }
  }
}

TEST(ToHloShardingTest, RandomSpecsMatchJaxDefinition) {
  std::mt19937 rng(23);
  const std::vector<Mesh> meshes = {
      Mesh({"a", "b", "c"}, {2, 3, 2}),
      Mesh({"a", "b"}, {4, 2}, {7, 6, 5, 4, 3, 2, 1, 0}),
      Mesh::Hybrid({"a", "b", "c"}, {1, 2, 2}, {2, 1, 2}),
      Mesh::Hybrid({"a", "b"}, {2, 2}, {2, 2}),
  };
  for (const Mesh& mesh : meshes) {
    for (int trial = 0; trial < 60; ++trial) {
      const int64_t rank = 1 + rng() % 3;
      std::vector<std::vector<std::string>> entries(rng() % (rank + 1));
      std::vector<std::string> axes = mesh.axis_names();
      std::shuffle(axes.begin(), axes.end(), rng);
      for (const std::string& axis : axes) {
        if (entries.empty() || rng() % 4 == 0) continue;  // leave this axis unused
        entries[rng() % entries.size()].push_back(axis);
      }
      std::vector<AxisSpec> dims;
      for (auto& e : entries) dims.emplace_back(std::move(e));
      CheckAgainstDefinition(mesh, PartitionSpec(dims), rank);
    }
  }
}

TEST(ToHloShardingTest, HybridMeshDataParallelAcrossSlices) {
  // Two slices of four: 'data' crosses slices (DCN), 'fsdp' stays inside.
  Mesh mesh = Mesh::Hybrid({"data", "fsdp"}, {1, 4}, {2, 1});
  EXPECT_EQ(ToHloSharding(mesh, {"data", "fsdp"}, 2).ToString(), "{devices=[2,4]<=[8]}");
  EXPECT_EQ(ToHloSharding(mesh, {"fsdp"}, 2).ToString(),
            "{devices=[4,1,2]<=[2,4]T(1,0) last_tile_dim_replicate}");
  // Replication groups for 'fsdp'-sharded weights span both slices.
  HloSharding s = ToHloSharding(mesh, {"fsdp"}, 2);
  EXPECT_EQ(s.TileIndexForDevice(1), s.TileIndexForDevice(5));
  EXPECT_NE(mesh.SliceOf(1), mesh.SliceOf(5));
}

// A mesh holds at most kMaxDevices devices (the bound weft run and weft plan
// share); sizes whose product overflows int64 are refused, not wrapped.
TEST(MeshTest, DeviceCountsAreBounded) {
  EXPECT_EQ(Mesh({"data", "model"}, {256, 256}).num_devices(), 65536);
  EXPECT_THROW(Mesh({"data", "model"}, {256, 257}), Error);
  EXPECT_THROW(Mesh({"a", "b"}, {4294967296, 4294967296}), Error);
  try {
    Mesh({"fsdp"}, {1000000000});
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("more than 65536 devices"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Mesh::Hybrid({"data"}, {4294967296}, {4294967296}), Error);
  EXPECT_THROW(Mesh::Hybrid({"data", "model"}, {256, 2}, {2, 256}), Error);
}

}  // namespace
}  // namespace weft
