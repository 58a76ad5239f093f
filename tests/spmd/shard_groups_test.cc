// Sharding groups: shard_as unifies, shard_like hints, user conflicts are
// errors; and the scan whose weight gradient keeps the weight's sharding only
// because of shard_as.
#include <gtest/gtest.h>

#include "weft/hlo/parser.h"
#include "weft/spmd/sharding_propagation.h"

namespace weft {
namespace {

const HloInstruction* Find(const HloModule& m, std::string_view name) {
  for (const HloComputation* c : m.computations()) {
    if (const HloInstruction* i = c->GetInstruction(name)) return i;
  }
  return nullptr;
}

HloSharding ShardingOf(const HloModule& m, std::string_view name) {
  const HloInstruction* i = Find(m, name);
  EXPECT_NE(i, nullptr) << name;
  EXPECT_TRUE(i && i->has_sharding()) << name << " has no sharding";
  return i && i->has_sharding() ? *i->sharding() : HloSharding::Unknown();
}

std::unique_ptr<HloModule> Propagated(const std::string& body) {
  auto m = ParseHloModule("HloModule m, num_partitions=4\n\nENTRY main {\n" + body + "}\n");
  PropagateShardings(*m);
  return m;
}

TEST(ShardGroupsTest, ShardAsMembersEndIdentical) {
  auto m = Propagated(R"(
  p0 = f32[8,16] parameter(0), sharding={devices=[4,1]<=[4]}
  p1 = f32[8,16] parameter(1)
  a = f32[8,16] exponential(p0), sharding={unknown shard_as 0}
  b = f32[8,16] exponential(p1), sharding={unknown shard_as 0}
  ROOT t = (f32[8,16], f32[8,16]) tuple(a, b)
)");
  EXPECT_EQ(ShardingOf(*m, "b"), HloSharding::Parse("{devices=[4,1]<=[4]}"));
  EXPECT_EQ(ShardingOf(*m, "a"), ShardingOf(*m, "b"));
}

TEST(ShardGroupsTest, ShardAsMergesCompatiblePartialUserShardings) {
  auto m = Propagated(R"(
  p0 = f32[8,16] parameter(0)
  p1 = f32[8,16] parameter(1)
  a = f32[8,16] exponential(p0), sharding={devices=[2,1,2]<=[4] last_tile_dim_replicate shard_as 3}
  b = f32[8,16] exponential(p1), sharding={devices=[1,2,2]<=[2,2]T(1,0) last_tile_dim_replicate shard_as 3}
  ROOT t = (f32[8,16], f32[8,16]) tuple(a, b)
)");
  EXPECT_EQ(ShardingOf(*m, "a"), HloSharding::Parse("{devices=[2,2]<=[4]}"));
  EXPECT_EQ(ShardingOf(*m, "b"), HloSharding::Parse("{devices=[2,2]<=[4]}"));
}

TEST(ShardGroupsTest, ShardLikeIsOnlyAHint) {
  auto m = Propagated(R"(
  p0 = f32[8,16] parameter(0), sharding={devices=[4,1]<=[4]}
  p1 = f32[8,16] parameter(1), sharding={devices=[1,4]<=[4]}
  p2 = f32[8,16] parameter(2)
  a = f32[8,16] exponential(p0), sharding={unknown shard_like 1}
  b = f32[8,16] exponential(p1), sharding={unknown shard_like 1}
  c = f32[8,16] exponential(p2), sharding={unknown shard_like 1}
  ROOT t = (f32[8,16], f32[8,16], f32[8,16]) tuple(a, b, c)
)");
  EXPECT_EQ(ShardingOf(*m, "a"), HloSharding::Parse("{devices=[4,1]<=[4]}"));
  EXPECT_EQ(ShardingOf(*m, "b"), HloSharding::Parse("{devices=[1,4]<=[4]}"));
  // c has no sharding of its own: it takes a member's.
  EXPECT_EQ(ShardingOf(*m, "c").NumTiles(), 4);
}

TEST(ShardGroupsTest, ConflictingUserShardingsNameGroupAndMembers) {
  try {
    Propagated(R"(
  p0 = f32[8,16] parameter(0)
  p1 = f32[8,16] parameter(1)
  left = f32[8,16] exponential(p0), sharding={devices=[4,1]<=[4] shard_as 2}
  right = f32[8,16] exponential(p1), sharding={devices=[1,4]<=[4] shard_as 2}
  ROOT t = (f32[8,16], f32[8,16]) tuple(left, right)
)");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("shard_as group 2"), std::string::npos) << what;
    EXPECT_NE(what.find("left"), std::string::npos) << what;
    EXPECT_NE(what.find("right"), std::string::npos) << what;
  }
}

// A backward scan over stacked weights W [L, d, f] (fsdp on d, tensor on f):
// each step computes the layer's weight gradient and writes it into the
// carried dW buffer with dynamic-update-slice. Activations x are split on
// batch over the fsdp devices, so the layer gradient dot(x, dy) contracts the
// fsdp split away and is only split on f; nothing else ties dW to W.
std::string ScanModule(bool shard_as) {
  const std::string group = shard_as ? " shard_as 0" : "";
  const std::string w_sharding = "{devices=[1,2,2]<=[4]" + group + "}";
  const std::string carry = shard_as ? ", sharding={unknown shard_as 0}" : "";
  return R"(HloModule scan_backward, num_partitions=4

cond {
  c_state = (s32[], f32[4,8,16], f32[4,8,16], f32[2,8]) parameter(0)
  c_i = s32[] get-tuple-element(c_state), index=0
  c_n = s32[] constant(4)
  ROOT c_lt = pred[] compare(c_i, c_n), direction=LT
}

body {
  b_state = (s32[], f32[4,8,16], f32[4,8,16], f32[2,8]) parameter(0)
  b_i = s32[] get-tuple-element(b_state), index=0
  b_w = f32[4,8,16] get-tuple-element(b_state), index=1
  b_dw = f32[4,8,16] get-tuple-element(b_state), index=2
  b_x = f32[2,8] get-tuple-element(b_state), index=3
  b_zero = s32[] constant(0)
  w_slice = f32[1,8,16] dynamic-slice(b_w, b_i, b_zero, b_zero), dynamic_slice_sizes={1,8,16}
  w = f32[8,16] reshape(w_slice)
  dy = f32[2,16] dot(b_x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  g = f32[8,16] dot(b_x, dy), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  g3 = f32[1,8,16] reshape(g)
  new_dw = f32[4,8,16] dynamic-update-slice(b_dw, g3, b_i, b_zero, b_zero))" +
         carry + R"(
  b_one = s32[] constant(1)
  b_next = s32[] add(b_i, b_one)
  ROOT b_out = (s32[], f32[4,8,16], f32[4,8,16], f32[2,8]) tuple(b_next, b_w, new_dw, b_x)
}

ENTRY main {
  weights = f32[4,8,16] parameter(0), sharding=)" +
         w_sharding + R"(
  x = f32[2,8] parameter(1), sharding={devices=[2,1,2]<=[4] last_tile_dim_replicate}
  zero = f32[] constant(0)
  dw_init = f32[4,8,16] broadcast(zero), dimensions={})" +
         carry + R"(
  start = s32[] constant(0)
  init = (s32[], f32[4,8,16], f32[4,8,16], f32[2,8]) tuple(start, weights, dw_init, x)
  loop = (s32[], f32[4,8,16], f32[4,8,16], f32[2,8]) while(init), condition=cond, body=body
  dw = f32[4,8,16] get-tuple-element(loop), index=2
  ROOT out = f32[4,8,16] negate(dw)
}
)";
}

TEST(ShardGroupsTest, ScanWeightGradientKeepsWeightShardingOnlyWithShardAs) {
  auto without = ParseHloModule(ScanModule(false));
  PropagateShardings(*without);
  const HloSharding w = HloSharding::Parse("{devices=[1,2,2]<=[4]}");
  const HloSharding dw_plain = ShardingOf(*without, "dw");
  EXPECT_NE(dw_plain, w) << dw_plain.ToString();
  ASSERT_TRUE(dw_plain.IsTiled()) << dw_plain.ToString();
  EXPECT_EQ(dw_plain.tile_assignment().dim(1), 1)
      << "dW is not fsdp-split on d: " << dw_plain.ToString();

  auto with = ParseHloModule(ScanModule(true));
  PropagateShardings(*with);
  for (const char* name : {"dw", "new_dw", "b_dw", "dw_init"}) {
    EXPECT_EQ(ShardingOf(*with, name), w) << name << ": " << ShardingOf(*with, name).ToString();
  }
  EXPECT_EQ(ShardingOf(*with, "loop").tuple_elements().at(2), w);
}

}  // namespace
}  // namespace weft
