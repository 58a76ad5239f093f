// rng and rng-bit-generator partitioned: each device draws only its tile of
// the value, at the tile's positions in the unsharded value, so a sharded
// run makes the unsharded numbers. rng-bit-generator's bits are compared
// with the independent reference of XLA's bits (tests/runtime's
// random_bits_reference.h) on 2-4 devices with uneven tiles and partial
// replication; rng (weft's own numbers) with the unsharded run, bit for bit.
// The per-device program is checked to draw local shapes only.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>

#include "../runtime/random_bits_reference.h"
#include "sharded_run_test_util.h"
#include "weft/base/error.h"
#include "weft/hlo/parser.h"
#include "weft/hlo/printer.h"

namespace weft {
namespace {

using runtime::HostTensor;

std::vector<uint64_t> Words(const HostTensor& t) {
  std::vector<uint64_t> out;
  for (int64_t i = 0; i < t.element_count(); ++i) {
    uint64_t v = 0;
    std::memcpy(&v, static_cast<const std::byte*>(t.raw_data()) + i * ByteWidth(t.element_type()),
                static_cast<size_t>(ByteWidth(t.element_type())));
    out.push_back(v);
  }
  return out;
}

// The shapes every instruction of `opcode` in the per-device program makes.
std::vector<Shape> ShapesOf(const compiler::CompiledProgram& program, HloOpcode opcode) {
  std::vector<Shape> shapes;
  for (const HloComputation* c : program.program->computations()) {
    for (const HloInstruction* i : c->instructions()) {
      if (i->opcode() == opcode) shapes.push_back(i->shape());
    }
  }
  return shapes;
}

// Runs `text` on n device threads (NaN padding) with `inputs`: the joined outputs.
std::vector<HostTensor> RunOn(const std::string& text, int64_t n,
                              const std::vector<HostTensor>& inputs,
                              compiler::CompiledProgram* compiled = nullptr) {
  std::unique_ptr<HloModule> module = ParseHloModule(text);
  compiler::CompiledProgram program = compiler::CompileForDevices(*module, {.num_devices = n});
  runtime::LocalCluster cluster(n);
  std::vector<HostTensor> out = runtime::RunSharded(program, inputs, cluster, nullptr, {},
                                                    std::numeric_limits<double>::quiet_NaN());
  if (compiled != nullptr) *compiled = std::move(program);
  return out;
}

struct BitsCase {
  std::string algorithm;
  int64_t words;  // state words
  std::string type;
  std::vector<int64_t> dims;
  std::string sharding;  // of the bits
  int64_t n;
  std::vector<int64_t> local;  // the tile each device draws
};

constexpr const char* kColumnsOverTwoOfFour = "{devices=[1,2,2]<=[4] last_tile_dim_replicate}";

TEST(SpmdRandomTest, RngBitGeneratorTilesAreTheUnshardedBits) {
  const std::vector<BitsCase> cases = {
      {"rng_philox", 2, "u32", {7, 6}, "{devices=[2,2]<=[4]}", 4, {4, 3}},
      {"rng_philox", 3, "u64", {9}, "{devices=[4]<=[4]}", 4, {3}},
      {"rng_default", 2, "s32", {5, 8}, kColumnsOverTwoOfFour, 4, {5, 4}},
      {"rng_philox", 3, "u16", {6, 5}, "{devices=[3,1]0,2,1}", 3, {2, 5}},
      // Three-fry splits 32-bit values in halves along the first even dim
      // (dim 1 here): a tile of it takes words of pairs other tiles share.
      {"rng_three_fry", 2, "u32", {7, 6}, "{devices=[1,4]<=[4]}", 4, {7, 2}},
      {"rng_three_fry", 2, "u32", {7, 6}, "{devices=[2,2]<=[2,2]T(1,0)}", 4, {4, 3}},
      {"rng_three_fry", 2, "u32", {5, 3}, "{devices=[2,1]<=[2]}", 2, {3, 3}},
      {"rng_three_fry", 2, "s64", {5, 3}, "{devices=[4,1]<=[4]}", 4, {2, 3}},
  };
  std::mt19937_64 rng(2026);
  for (const BitsCase& c : cases) {
    const std::string dims = fmt::format("{}", fmt::join(c.dims, ","));
    SCOPED_TRACE(fmt::format("{} {}[{}] {} on {}", c.algorithm, c.type, dims, c.sharding, c.n));
    const std::string text = fmt::format(R"(HloModule rbg, num_partitions={5}
ENTRY e {{
  s = u64[{0}] parameter(0), sharding={{replicated}}
  g = (u64[{0}], {1}[{2}]) rng-bit-generator(s), algorithm={3}, sharding={{{{replicated}}, {4}}}
  ns = u64[{0}] get-tuple-element(g), index=0
  bits = {1}[{2}] get-tuple-element(g), index=1
  ROOT r = (u64[{0}], {1}[{2}]) tuple(ns, bits), sharding={{{{replicated}}, {4}}}
}}
)",
                                         c.words, c.type, dims, c.algorithm, c.sharding, c.n);
    std::vector<uint64_t> state(c.words);
    for (uint64_t& w : state) w = rng();
    state[1] = ~uint64_t{0} - 5;  // the counter's low word wraps within the value
    compiler::CompiledProgram program;
    const std::vector<HostTensor> out =
        RunOn(text, c.n, {HostTensor::FromVector<uint64_t>(PrimitiveType::kU64, {c.words}, state)},
              &program);
    ASSERT_EQ(out.size(), 2u);
    int64_t count = 1;
    for (int64_t d : c.dims) count *= d;
    std::vector<uint64_t> want_state, want;
    const bool wide = c.type == "u64" || c.type == "s64";
    if (c.algorithm == "rng_three_fry" && !wide) {
      want = runtime::testing::RefThreeFryBits32(state, c.dims, &want_state);
    } else if (c.algorithm == "rng_three_fry") {
      const std::array<uint32_t, 2> key = {uint32_t(state[0]), uint32_t(state[0] >> 32)};
      for (int64_t i = 0; i < count; ++i) {
        const uint64_t counter = state[1] + static_cast<uint64_t>(i);
        const auto w =
            runtime::testing::RefThreeFry({uint32_t(counter), uint32_t(counter >> 32)}, key);
        want.push_back(w[0] | uint64_t{w[1]} << 32);
      }
      want_state = {state[0], state[1] + static_cast<uint64_t>(count)};
    } else {
      want = runtime::testing::RefPhiloxBits(state, count, wide, &want_state);
    }
    std::vector<uint64_t> got = Words(out[1]);
    if (c.type == "u16") {
      for (uint64_t& w : want) w &= 0xffff;
    } else if (!wide) {
      for (uint64_t& w : want) w &= 0xffffffff;
    }
    EXPECT_EQ(got, want);
    EXPECT_EQ(Words(out[0]), want_state);
    // Each device draws its tile, never the whole value.
    const std::vector<Shape> drawn = ShapesOf(program, HloOpcode::kRngBitGenerator);
    ASSERT_EQ(drawn.size(), 1u) << PrintModule(*program.program);
    EXPECT_EQ(drawn[0].tuple_shapes(1).dimensions(), c.local) << PrintModule(*program.program);
  }
}

// A rng-bit-generator that returns its bits alone (as XLA allows) is
// partitioned the same way: each device draws its tile of the unsharded bits.
TEST(SpmdRandomTest, BitsReturnedAloneAreTiledToo) {
  const std::string text = R"(HloModule rbg, num_partitions=4
ENTRY e {
  s = u64[2] parameter(0), sharding={replicated}
  alone = u32[8,6] rng-bit-generator(s), algorithm=rng_philox, sharding={devices=[2,2]<=[4]}
  g = (u64[2], u32[8,6]) rng-bit-generator(s), algorithm=rng_philox, sharding={{replicated}, {replicated}}
  bits = u32[8,6] get-tuple-element(g), index=1
  ROOT r = (u32[8,6], u32[8,6]) tuple(alone, bits), sharding={{devices=[2,2]<=[4]}, {replicated}}
}
)";
  const std::vector<uint64_t> state = {0xfeedfacecafebeefULL, ~uint64_t{0} - 3};
  compiler::CompiledProgram program;
  const std::vector<HostTensor> out =
      RunOn(text, 4, {HostTensor::FromVector<uint64_t>(PrimitiveType::kU64, {2}, state)}, &program);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(Words(out[0]), Words(out[1]));
  std::vector<uint64_t> ignored;
  std::vector<uint64_t> want = runtime::testing::RefPhiloxBits(state, 48, false, &ignored);
  for (uint64_t& w : want) w &= 0xffffffff;
  EXPECT_EQ(Words(out[0]), want);
  std::vector<std::vector<int64_t>> drawn;
  for (const Shape& shape : ShapesOf(program, HloOpcode::kRngBitGenerator)) {
    drawn.push_back(shape.IsTuple() ? shape.tuple_shapes(1).dimensions() : shape.dimensions());
  }
  std::sort(drawn.begin(), drawn.end());
  EXPECT_EQ(drawn, (std::vector<std::vector<int64_t>>{{4, 3}, {8, 6}}))
      << PrintModule(*program.program);
}

TEST(SpmdRandomTest, RngTilesAreTheUnshardedNumbers) {
  // Uniform floats and integers and normal floats, sharded unevenly and
  // partially replicated, once propagated from a user: bit for bit the
  // unsharded run's numbers (weft's own generator, keyed by the unsharded
  // instruction's name).
  const std::string text = R"(HloModule rng
ENTRY e {
  x = f32[7,5] parameter(0), sharding={devices=[4,1]<=[4]}
  lo = f32[] constant(-1)
  hi = f32[] constant(3)
  u = f32[7,5] rng(lo, hi), distribution=rng_uniform, sharding={devices=[2,2]<=[4]}
  mu = f32[] constant(0.5)
  sd = f32[] constant(2)
  v = f32[7,5] rng(mu, sd), distribution=rng_normal
  w = f32[7,5] multiply(v, x), sharding={devices=[4,1]<=[4]}
  a = s32[] constant(-7)
  b = s32[] constant(1000)
  k = s32[9,3] rng(a, b), distribution=rng_uniform, sharding={devices=[2,1,2]<=[4] last_tile_dim_replicate}
  ROOT r = (f32[7,5], f32[7,5], s32[9,3]) tuple(u, w, k), sharding={{devices=[2,2]<=[4]}, {devices=[4,1]<=[4]}, {devices=[2,1,2]<=[4] last_tile_dim_replicate}}
})";
  for (uint64_t seed : {1, 2, 3}) {
    const compiler::CompiledProgram program =
        testing::ExpectShardedMatches(text, 4, seed, /*tolerance=*/0);
    // Propagation gives v its user's sharding: no device draws a whole value.
    for (const Shape& s : ShapesOf(program, HloOpcode::kRng)) {
      EXPECT_LT(s.ElementsCount(), 20) << s.ToString() << "\n" << PrintModule(*program.program);
    }
  }
}

TEST(SpmdRandomTest, RngInALoopDrawsFreshTilesEachTrip) {
  const std::string text = R"(HloModule loop
cond {
  c = (s32[], f32[6,4]) parameter(0)
  i = s32[] get-tuple-element(c), index=0
  three = s32[] constant(3)
  ROOT lt = pred[] compare(i, three), direction=LT
}
body {
  p = (s32[], f32[6,4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  acc = f32[6,4] get-tuple-element(p), index=1
  lo = f32[] constant(0)
  hi = f32[] constant(1)
  r = f32[6,4] rng(lo, hi), distribution=rng_uniform, sharding={devices=[2,2]<=[4]}
  m = f32[6,4] multiply(acc, r), sharding={devices=[2,2]<=[4]}
  sum = f32[6,4] add(m, r), sharding={devices=[2,2]<=[4]}
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT t = (s32[], f32[6,4]) tuple(j, sum)
}
ENTRY e {
  x = f32[6,4] parameter(0), sharding={devices=[2,2]<=[4]}
  zero = s32[] constant(0)
  init = (s32[], f32[6,4]) tuple(zero, x)
  w = (s32[], f32[6,4]) while(init), condition=cond, body=body
  ROOT y = f32[6,4] get-tuple-element(w), index=1
})";
  testing::ExpectShardedMatches(text, 4, 3, /*tolerance=*/0);
}

TEST(SpmdRandomTest, AnAlreadyPartitionedTileIsRefused) {
  const std::string text = R"(HloModule m
ENTRY e {
  lo = f32[] constant(0)
  hi = f32[] constant(1)
  z = s64[] constant(2)
  ROOT r = f32[2,4] rng(lo, hi, z, z), distribution=rng_uniform, backend_config="rng_stream=r;rng_tile_of=8,4"
})";
  std::unique_ptr<HloModule> module = ParseHloModule(text);
  try {
    compiler::CompileForDevices(*module, {.num_devices = 2});
    FAIL() << "partitioned a tile again";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("already partitioned"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace weft
