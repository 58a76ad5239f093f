// `weft run`'s pipeline through the real executor: propagate -> partition ->
// split inputs -> RunOnDevices -> join, against the Executor on the unsharded
// module. Inputs are padded with NaN, so padding that reaches a result shows.
#include "weft/runtime/run_command.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>
#include <thread>

#include "../hlo/hostile_hlo.h"
#include "error_of.h"
#include "partitioner_random.h"
#include "random_bits_reference.h"
#include "sharded_run_test_util.h"
#include "weft/base/error.h"
#include "weft/base/memory.h"
#include "weft/hlo/opcode.h"
#include "weft/hlo/parser.h"
#include "weft/runtime/config.h"
#include "weft/runtime/hybrid_mesh.h"
#include "weft/runtime/topology.h"

namespace weft::runtime {
namespace {

using weft::testing::Mentions;

using compiler::CompiledProgram;
using compiler::CompileForDevices;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

using weft::testing::ShardedVsUnsharded;

void ExpectClose(const std::vector<double>& errors, double tolerance, const std::string& what) {
  for (size_t i = 0; i < errors.size(); ++i) {
    EXPECT_LE(errors[i], tolerance) << what << ": output " << i;
  }
}

std::string Dims(const std::vector<int64_t>& d) { return fmt::format("{}", fmt::join(d, ",")); }

// A random chain of elementwise, dot, reduce, reshape, transpose, broadcast
// and slice ops; each instruction is annotated with a random sharding with
// probability 1/2 (propagation completes the rest).
std::string RandomChain(int64_t n, std::mt19937_64& rng) {
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  auto sharding = [&](int64_t rank) -> std::string {
    if (pick(0, 1) == 0) return "";
    return ", sharding=" + spmd_test::RandomSharding(n, rank, rng).ToString();
  };
  std::string body;
  int64_t params = 0, next = 0;
  std::vector<int64_t> dims;
  for (int64_t r = pick(1, 3); r > 0; --r) dims.push_back(pick(1, 7));
  body += fmt::format("  v0 = f32[{}] parameter({}){}\n", Dims(dims), params++,
                      sharding(static_cast<int64_t>(dims.size())));
  std::string cur = "v0";
  for (int step = 0, steps = static_cast<int>(pick(3, 6)); step < steps; ++step) {
    const std::string name = fmt::format("v{}", ++next);
    const int64_t rank = static_cast<int64_t>(dims.size());
    switch (pick(0, 6)) {
      case 0: {  // elementwise with a fresh parameter
        const std::string p = fmt::format("p{}", params);
        body += fmt::format("  {} = f32[{}] parameter({}){}\n", p, Dims(dims), params++,
                            sharding(rank));
        body += fmt::format("  {} = f32[{}] multiply({}, {}){}\n", name, Dims(dims), cur, p,
                            sharding(rank));
        break;
      }
      case 1: {  // dot contracting the last dim with a fresh [K, N] parameter
        const int64_t k = dims.back();
        const std::string p = fmt::format("p{}", params);
        dims.back() = pick(1, 6);
        body += fmt::format("  {} = f32[{},{}] parameter({}){}\n", p, k, dims.back(), params++,
                            sharding(2));
        body += fmt::format(
            "  {} = f32[{}] dot({}, {}), lhs_contracting_dims={{{}}}, "
            "rhs_contracting_dims={{0}}{}\n",
            name, Dims(dims), cur, p, rank - 1, sharding(rank));
        break;
      }
      case 2: {  // reduce one dim
        if (rank == 1) continue;
        const int64_t d = pick(0, rank - 1);
        dims.erase(dims.begin() + d);
        body += fmt::format("  {} = f32[{}] reduce({}, zero), dimensions={{{}}}, to_apply=add{}\n",
                            name, Dims(dims), cur, d, sharding(rank - 1));
        break;
      }
      case 3: {  // reshape: merge the first two dims, or split an even first dim
        if (rank >= 2 && pick(0, 1) == 0) {
          dims[0] *= dims[1];
          dims.erase(dims.begin() + 1);
        } else if (rank < 3 && dims[0] % 2 == 0) {
          dims[0] /= 2;
          dims.insert(dims.begin(), 2);
        } else {
          continue;
        }
        body += fmt::format("  {} = f32[{}] reshape({}){}\n", name, Dims(dims), cur,
                            sharding(static_cast<int64_t>(dims.size())));
        break;
      }
      case 4: {  // transpose
        std::vector<int64_t> perm(rank), out;
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), rng);
        for (int64_t d : perm) out.push_back(dims[d]);
        dims = out;
        body += fmt::format("  {} = f32[{}] transpose({}), dimensions={{{}}}{}\n", name, Dims(dims),
                            cur, Dims(perm), sharding(rank));
        break;
      }
      case 5: {  // broadcast a new leading dim
        if (rank == 3) continue;
        std::vector<int64_t> map(rank);
        std::iota(map.begin(), map.end(), 1);
        dims.insert(dims.begin(), pick(1, 3));
        body += fmt::format("  {} = f32[{}] broadcast({}), dimensions={{{}}}{}\n", name, Dims(dims),
                            cur, Dims(map), sharding(rank + 1));
        break;
      }
      default: {  // slice one dim
        const int64_t d = pick(0, rank - 1);
        const int64_t start = pick(0, dims[d] - 1), limit = pick(start + 1, dims[d]);
        std::string slice;
        for (int64_t i = 0; i < rank; ++i) {
          slice +=
              fmt::format("{}[{}:{}]", i ? ", " : "", i == d ? start : 0, i == d ? limit : dims[i]);
        }
        dims[d] = limit - start;
        body += fmt::format("  {} = f32[{}] slice({}), slice={{{}}}{}\n", name, Dims(dims), cur,
                            slice, sharding(rank));
        break;
      }
    }
    cur = name;
  }
  body += fmt::format("  ROOT out = f32[{}] negate({}){}\n", Dims(dims), cur,
                      sharding(static_cast<int64_t>(dims.size())));
  return fmt::format(
      "HloModule chain\n\nadd {{\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n"
      "  ROOT s = f32[] add(x, y)\n}}\n\nENTRY main {{\n  zero = f32[] constant(0)\n{}}}\n",
      body);
}

TEST(RunCommandTest, RandomChainsShardedEqualUnshardedThroughTheExecutor) {
  std::mt19937_64 rng(4242);
  for (int trial = 0; trial < 120; ++trial) {
    const int64_t n = std::uniform_int_distribution<int64_t>(1, 8)(rng);
    const std::string text = RandomChain(n, rng);
    SCOPED_TRACE(fmt::format("trial {} on {} devices:\n{}", trial, n, text));
    try {
      // Sums split over devices add in another order: a few ulps.
      ExpectClose(ShardedVsUnsharded(text, n, trial), 1e-5, "chain");
    } catch (const Error& e) {
      ADD_FAILURE() << e.what();
    }
    if (::testing::Test::HasFailure()) return;
  }
}

// ---------------------------------------------------------------------------
// Attention.

std::string AttentionModule(const std::string& dims, const std::string& qkv, const std::string& out,
                            const std::string& lse, const std::string& config) {
  // dims: B, Hq, Hkv, S, D.
  int64_t b, hq, hkv, s, d;
  std::sscanf(dims.c_str(), "%ld,%ld,%ld,%ld,%ld", &b, &hq, &hkv, &s, &d);
  return fmt::format(R"(HloModule attention
ENTRY main {{
  q = f32[{0},{1},{3},{4}] parameter(0), sharding={5}
  k = f32[{0},{2},{3},{4}] parameter(1), sharding={5}
  v = f32[{0},{2},{3},{4}] parameter(2), sharding={5}
  seg = s32[{0},{3}] parameter(3)
  ROOT fa = (f32[{0},{1},{3},{4}], f32[{0},{1},{3}]) custom-call(q, k, v, seg), custom_call_target="weft.flex_attention", backend_config={8}, sharding={{{6}, {7}}}
}}
)",
                     b, hq, hkv, s, d, qkv, out, lse, config);
}

const char* kPackedCausal =
    R"({"mask": "q_idx >= kv_idx && seg[b, q_idx] == seg[b, kv_idx]", "mask_tensors": ["seg"]})";

TEST(RunCommandTest, AttentionShardedOverBatchAndHeadsMatchesUnsharded) {
  CompiledProgram program;
  ExpectClose(ShardedVsUnsharded(AttentionModule("2,4,2,40,8", "{devices=[2,2,1,1]<=[4]}",
                                                 "{devices=[2,2,1,1]<=[4]}",
                                                 "{devices=[2,2,1]<=[4]}", kPackedCausal),
                                 4, 7, &program),
              1e-6, "batch x heads");
  // Runs locally: no collective in the program.
  for (const HloInstruction* instr : program.program->entry_computation()->instructions()) {
    EXPECT_FALSE(IsCollective(instr->opcode())) << instr->name();
  }
}

TEST(RunCommandTest, AttentionShardedOverQuerySequenceSeesGlobalPositions) {
  // S = 10 over 4 devices: tiles of 3, the last holds 1 row and 2 padding
  // rows (NaN inputs), which must be masked. Segment ids follow the sequence.
  for (const std::string& config :
       {std::string(kPackedCausal),
        std::string(
            R"j({"mask": "q_idx >= kv_idx && seg[b, q_idx] >= 0", "mask_tensors": ["seg"],
                 "score_mod": "score - 0.25 * (q_idx - kv_idx)"})j"),
        std::string(
            R"({"mask": "kv_idx < q_idx + 2 && seg[b, q_idx] != 3", "mask_tensors": ["seg"]})")}) {
    SCOPED_TRACE(config);
    CompiledProgram program;
    ExpectClose(ShardedVsUnsharded(
                    AttentionModule("2,2,1,10,8", "{devices=[1,1,4,1]<=[4]}",
                                    "{devices=[1,1,4,1]<=[4]}", "{devices=[1,1,4]<=[4]}", config),
                    4, 11, &program),
                1e-6, "query sequence");
    const HloInstruction* fa = program.program->entry_computation()->root_instruction();
    while (fa->opcode() != HloOpcode::kCustomCall) fa = fa->operand(0);
    EXPECT_NE(fa->attrs().backend_config.find("\"q_offset_operand\""), std::string::npos);
    EXPECT_NE(fa->attrs().backend_config.find("\"global_q_len\":10"), std::string::npos);
  }
}

TEST(RunCommandTest, AttentionShardedOverBatchAndQuerySequenceOnEightDevices) {
  ExpectClose(ShardedVsUnsharded(AttentionModule("2,4,2,70,16", "{devices=[2,2,2,1]<=[8]}",
                                                 "{devices=[2,2,2,1]<=[8]}",
                                                 "{devices=[2,2,2]<=[8]}", kPackedCausal),
                                 8, 3),
              1e-6, "batch x heads x sequence");
}

TEST(RunCommandTest, AttentionBackwardShardedOverQuerySequenceMatchesUnsharded) {
  // Sq = 9 over 2 devices (one padding row): dk and dv are reduce-scattered.
  const std::string text = fmt::format(R"(HloModule attention_backward
ENTRY main {{
  q = f32[2,2,9,4] parameter(0), sharding={{devices=[1,1,2,1]<=[2]}}
  k = f32[2,2,9,4] parameter(1), sharding={{devices=[1,1,2,1]<=[2]}}
  v = f32[2,2,9,4] parameter(2), sharding={{devices=[1,1,2,1]<=[2]}}
  seg = s32[2,9] parameter(3)
  dout = f32[2,2,9,4] parameter(4), sharding={{devices=[1,1,2,1]<=[2]}}
  fa = (f32[2,2,9,4], f32[2,2,9]) custom-call(q, k, v, seg), custom_call_target="weft.flex_attention", backend_config={0}
  out = f32[2,2,9,4] get-tuple-element(fa), index=0
  lse = f32[2,2,9] get-tuple-element(fa), index=1
  ROOT grads = (f32[2,2,9,4], f32[2,2,9,4], f32[2,2,9,4]) custom-call(q, k, v, out, lse, dout, seg), custom_call_target="weft.flex_attention_backward", backend_config={0}, sharding={{{{devices=[1,1,2,1]<=[2]}}, {{devices=[1,1,2,1]<=[2]}}, {{devices=[1,1,2,1]<=[2]}}}}
}}
)",
                                       kPackedCausal);
  ExpectClose(ShardedVsUnsharded(text, 2, 5), 1e-5, "backward");
}

// ---------------------------------------------------------------------------
// The steps.

TEST(RunCommandTest, ScatterOfAnOperandIntoItselfIsComputedFromTheOldValues) {
  // The updates are the operand: writing the result over the operand while
  // reading the updates would feed rows already updated back in.
  const std::string text = R"(HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[6,4] parameter(0)
  i = s32[6,1] parameter(1)
  ROOT sc = f32[6,4] scatter(x, i, x), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add
})";
  const std::unique_ptr<HloModule> module = ParseHloModule(text);
  const CompiledProgram program = CompileForDevices(*module, {.num_devices = 1});
  for (uint64_t seed = 0; seed < 5; ++seed) {
    const std::vector<HostTensor> inputs =
        RandomInputs(program.input_shapes, seed, InputIntegerRanges(*module));
    Executor executor(*module);
    const std::vector<double> got =
        executor.Run(std::vector<HostTensor>(inputs.begin(), inputs.end()))[0].ToDoubles();
    const std::vector<double> x = inputs[0].ToDoubles(), idx = inputs[1].ToDoubles();
    std::vector<double> want = x;  // float64, from the old values only
    for (int r = 0; r < 6; ++r) {
      const int64_t row = static_cast<int64_t>(idx[r]);
      if (row < 0 || row >= 6) continue;  // out of range: dropped
      for (int c = 0; c < 4; ++c) want[row * 4 + c] += x[r * 4 + c];
    }
    for (size_t k = 0; k < want.size(); ++k) EXPECT_NEAR(got[k], want[k], 1e-5) << seed << " " << k;
  }
  // And sharded against unsharded.
  for (int64_t n : {2, 3}) ExpectClose(ShardedVsUnsharded(text, n, 7), 1e-6, "scatter into itself");
}

// data/ops/threefry.hlo, written for 4 devices, rewritten for `n` (1: no
// shardings; 2: each split halved).
std::string ThreefryModuleFor(int64_t n) {
  std::ifstream file(std::string(WEFT_SOURCE_DIR) + "/tests/runtime/data/ops/threefry.hlo");
  std::stringstream read;
  read << file.rdbuf();
  std::string text = read.str();
  if (n == 4) return text;
  const std::vector<std::pair<std::string, std::string>> rewrites = {
      {"num_partitions=4", n == 1 ? "num_partitions=1" : "num_partitions=2"},
      {", sharding={devices=[2,2]<=[4]}", n == 1 ? "" : ", sharding={devices=[2,1]<=[2]}"},
      {", sharding={devices=[1,2,2]<=[4] last_tile_dim_replicate}",
       n == 1 ? "" : ", sharding={devices=[1,2]<=[2]}"},
      {", sharding={devices=[4,1]<=[4]}", n == 1 ? "" : ", sharding={devices=[2,1]<=[2]}"}};
  for (const auto& [from, to] : rewrites) {
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) text.replace(at, from.size(), to);
  }
  EXPECT_EQ(text.find("<=[4]"), std::string::npos) << text;
  return text;
}

// JAX's default PRNG as JAX lowers it, rotations written with shift-left
// and shift-right-logical (data/ops/threefry.hlo, whose counters are split
// unevenly): for fixed keys and counters, on 1, 2 and 4 devices, fused
// into loops and not, the words are threefry2x32's (Random123's known
// answers, and the reference for the rest) and the uniform floats are the
// words' top 23 bits over 2^23; `weft run --check` passes on 2 and 4.
TEST(RunCommandTest, ThreefryWrittenWithShiftsGivesThreefryWordsShardedOrNot) {
  struct Known {
    std::array<uint32_t, 2> key, counter, words;
  };
  // Random123's threefry2x32_20 known-answer vectors (zeros, ones, pi).
  const std::vector<Known> known = {
      {{0, 0}, {0, 0}, {0x6b200159u, 0x99ba4efeu}},
      {{0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu}, {0x1cb996fcu, 0xbb002be7u}},
      {{0x13198a2eu, 0x03707344u}, {0x243f6a88u, 0x85a308d3u}, {0xc4923a9cu, 0x483df7a0u}}};
  std::mt19937_64 rng(16);
  for (const Known& k : known) {
    const int64_t n = 7 * 6;
    std::vector<uint32_t> c0(n), c1(n);
    for (int64_t i = 0; i < n; ++i) c0[i] = static_cast<uint32_t>(rng()), c1[i] = rng() >> 32;
    c0[0] = k.counter[0];
    c1[0] = k.counter[1];
    const std::vector<HostTensor> inputs = {
        HostTensor::FromVector<uint32_t>(PrimitiveType::kU32, {}, {k.key[0]}),
        HostTensor::FromVector<uint32_t>(PrimitiveType::kU32, {}, {k.key[1]}),
        HostTensor::FromVector<uint32_t>(PrimitiveType::kU32, {7, 6}, c0),
        HostTensor::FromVector<uint32_t>(PrimitiveType::kU32, {7, 6}, c1)};
    for (const auto& [devices, fuse] : std::vector<std::pair<int64_t, bool>>{
             {1, false}, {1, true}, {2, false}, {4, false}, {4, true}}) {
      const std::unique_ptr<HloModule> module = ParseHloModule(ThreefryModuleFor(devices));
      const CompiledProgram program =
          CompileForDevices(*module, {.num_devices = devices, .fuse = fuse});
      LocalCluster cluster(devices);
      const std::vector<HostTensor> out = RunSharded(program, inputs, cluster, nullptr, {}, kNaN);
      ASSERT_EQ(out.size(), 3u);
      const std::string what =
          fmt::format("key {:#x} on {} devices{}", k.key[0], devices, fuse ? ", fused" : "");
      if (fuse) {
        EXPECT_NE(program.program->ToString().find("shift-left"), std::string::npos);
        EXPECT_NE(program.program->ToString().find("kind=kLoop"), std::string::npos) << what;
      }
      EXPECT_EQ(out[0].data<uint32_t>()[0], k.words[0]) << what;
      EXPECT_EQ(out[1].data<uint32_t>()[0], k.words[1]) << what;
      for (int64_t i = 0; i < n; ++i) {
        const std::array<uint32_t, 2> want = testing::RefThreeFry({c0[i], c1[i]}, k.key);
        EXPECT_EQ(out[0].data<uint32_t>()[i], want[0]) << what << ", element " << i;
        EXPECT_EQ(out[1].data<uint32_t>()[i], want[1]) << what << ", element " << i;
        EXPECT_EQ(out[2].data<float>()[i], std::ldexp(static_cast<double>(want[0] >> 9), -23))
            << what << ", element " << i;
      }
    }
  }
  for (int64_t devices : {2, 4}) {
    const std::string path = ::testing::TempDir() + fmt::format("/threefry{}.hlo", devices);
    std::ofstream(path) << ThreefryModuleFor(devices);
    for (uint64_t seed : {11, 12}) {
      std::ostringstream out;
      RunCommandOptions options;
      options.input = path;
      options.check = true;
      options.seed = seed;
      options.out = &out;
      EXPECT_EQ(RunRunCommand(options), 0) << out.str();
      EXPECT_NE(out.str().find(fmt::format("{} devices (threads)", devices)), std::string::npos)
          << out.str();
      EXPECT_NE(out.str().find("check passed"), std::string::npos) << out.str();
    }
  }
}

TEST(RunCommandTest, CheckToleranceFollowsTheNarrowestFloatComputedIn) {
  EXPECT_EQ(CheckTolerance(PrimitiveType::kF32), 1e-5);
  EXPECT_EQ(CheckTolerance(PrimitiveType::kF32, PrimitiveType::kBF16), 1e-2);
  EXPECT_EQ(CheckTolerance(PrimitiveType::kBF16), 1e-2);
  EXPECT_EQ(CheckTolerance(PrimitiveType::kS32, PrimitiveType::kBF16), 0);
  EXPECT_EQ(NarrowestFloat(*ParseHloModule(R"(HloModule m
ENTRY e {
  x = f32[8] parameter(0)
  b = bf16[8] convert(x)
  m = bf16[8] multiply(b, b)
  ROOT y = f32[8] convert(m)
})")),
            PrimitiveType::kBF16);
  EXPECT_EQ(
      NarrowestFloat(*ParseHloModule("HloModule m\nENTRY e {\n  ROOT x = f32[8] parameter(0)\n}")),
      PrimitiveType::kF32);
}

TEST(RunCommandTest, CheckToleranceGrowsWithTheSquareRootOfTheLongestSum) {
  // A dot contracting 128x56x56 = 401408 terms: the order of its sum alone
  // moves an f32 result by about 2e-5 of the largest value.
  const std::unique_ptr<HloModule> conv = ParseHloModule(R"(HloModule m
ENTRY e {
  lhs = f32[128,56,56,64] parameter(0)
  rhs = f32[128,56,56,256] parameter(1)
  ROOT conv = f32[1,1,64,256] convolution(lhs, rhs), window={size=56x56}, dim_labels=f01b_i01o->01bf
})");
  EXPECT_EQ(LongestSum(*conv), 56 * 56 * 128);
  EXPECT_EQ(LongestSum(*ParseHloModule(R"(HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[7,300,50] parameter(0)
  y = f32[50,9] parameter(1)
  d = f32[7,300,9] dot(x, y), lhs_contracting_dims={2}, rhs_contracting_dims={0}
  z = f32[] constant(0)
  ROOT r = f32[9] reduce(d, z), dimensions={0,1}, to_apply=add
})")),
            7 * 300);
  // Integer sums are exact in any order.
  EXPECT_EQ(LongestSum(*ParseHloModule(R"(HloModule m
ENTRY e {
  x = s32[8,100000] parameter(0)
  y = s32[100000] parameter(1)
  ROOT d = s32[8] dot(x, y), lhs_contracting_dims={1}, rhs_contracting_dims={0}
})")),
            1);
  EXPECT_EQ(CheckTolerance(PrimitiveType::kF32, PrimitiveType::kF32, 4096), 1e-5);
  EXPECT_EQ(CheckTolerance(PrimitiveType::kF32, PrimitiveType::kF32, 100), 1e-5);
  EXPECT_NEAR(CheckTolerance(PrimitiveType::kF32, PrimitiveType::kF32, 4 * 4096), 2e-5, 1e-18);
  EXPECT_NEAR(CheckTolerance(PrimitiveType::kBF16, PrimitiveType::kBF16, 16 * 4096), 4e-2, 1e-15);
  EXPECT_EQ(CheckTolerance(PrimitiveType::kS32, PrimitiveType::kF32, 16 * 4096), 0);
}

TEST(RunCommandTest, MaxRelativeErrorIsRelativeToTheLargestExpectedValue) {
  const auto f32 = [](std::vector<float> v) {
    return HostTensor::FromVector<float>(PrimitiveType::kF32, {static_cast<int64_t>(v.size())}, v);
  };
  EXPECT_DOUBLE_EQ(MaxRelativeError(f32({1, 2, 4}), f32({1, 2, 4})), 0);
  EXPECT_NEAR(MaxRelativeError(f32({1.5f, 2, 4}), f32({1, 2, 4})), 0.125, 1e-12);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_DOUBLE_EQ(MaxRelativeError(f32({nan, 2}), f32({nan, 2})), 0);
  EXPECT_TRUE(std::isinf(MaxRelativeError(f32({nan, 2}), f32({1, 2}))));
  EXPECT_TRUE(std::isinf(MaxRelativeError(f32({1, 0}), f32({0, 0}))));
  EXPECT_TRUE(std::isinf(MaxRelativeError(f32({1, 2}), f32({1, 2, 3}))));
  EXPECT_EQ(CheckTolerance(PrimitiveType::kF32), 1e-5);
  EXPECT_EQ(CheckTolerance(PrimitiveType::kS32), 0);
}

// ---------------------------------------------------------------------------
// The command.

std::string Example(const std::string& name) {
  return std::string(WEFT_SOURCE_DIR) + "/examples/" + name;
}

TEST(RunCommandTest, RunsTheExamplesAndPrintsMemoryCollectivesAndTheCheck) {
  for (const char* name : {"mlp_2d.hlo", "attention_packed.hlo"}) {
    std::ostringstream out;
    RunCommandOptions options;
    options.input = Example(name);
    options.check = true;
    options.seed = 3;
    options.out = &out;
    EXPECT_EQ(RunRunCommand(options), 0) << out.str();
    const std::string text = out.str();
    EXPECT_NE(text.find("4 devices (threads), seed 3"), std::string::npos) << text;
    EXPECT_NE(text.find("peak memory"), std::string::npos) << text;
    EXPECT_NE(text.find("collective bytes"), std::string::npos) << text;
    EXPECT_NE(text.find("output digest: "), std::string::npos) << text;
    EXPECT_NE(text.find("check passed"), std::string::npos) << text;
  }
}

TEST(RunCommandTest, ChecksAnXlaStyleModuleThatDeclaresItsPartitions) {
  // As XLA's SPMD tests write them: num_partitions in the header, a device
  // list broken across lines, a gather whose indices span the rows.
  const std::string path = ::testing::TempDir() + "/xla_style.hlo";
  std::ofstream(path) << R"(HloModule xla_style, num_partitions=4
ENTRY e {
  x = f32[16,8] parameter(0), sharding={devices=[4,1]0,1
,2,3}
  i = s32[6,1] parameter(1), sharding={replicated}
  g = f32[6,8] gather(x, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,8}, sharding={replicated}
  ROOT y = f32[6,8] add(g, g), sharding={replicated}
}
)";
  for (uint64_t seed = 0; seed < 4; ++seed) {
    std::ostringstream out;
    RunCommandOptions options;
    options.input = path;
    options.check = true;
    options.seed = seed;
    options.out = &out;
    EXPECT_EQ(RunRunCommand(options), 0) << out.str();
    EXPECT_NE(out.str().find("check passed"), std::string::npos) << out.str();
  }
}

// A jax.shard_map region (each device normalizes its rows by a psum of
// column sums) between automatic parts sharded otherwise than the region
// cuts: reshards into and out of the region, a dot after it.
constexpr const char* kShardMapModule = R"(HloModule shard_map, num_partitions=4
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  p = f32[8,6] parameter(0), sharding={devices=[1,4]<=[4]}
  w = f32[6,5] parameter(1), sharding={devices=[2,1,2]<=[4] last_tile_dim_replicate}
  q = f32[8,6] multiply(p, p)
  cut = f32[8,6] custom-call(q), custom_call_target="Sharding", sharding={devices=[4,1]<=[4]}
  m = f32[2,6] custom-call(cut), custom_call_target="SPMDFullToShardShape", sharding={manual}
  e = f32[2,6] exponential(m), sharding={manual}
  z = f32[] constant(0), sharding={manual}
  cs = f32[6] reduce(e, z), dimensions={0}, to_apply=add, sharding={manual}
  ps = f32[6] all-reduce(cs), channel_id=1, replica_groups={}, use_global_device_ids=true, to_apply=add, sharding={manual}
  pb = f32[2,6] broadcast(ps), dimensions={1}, sharding={manual}
  d = f32[2,6] divide(e, pb), sharding={manual}
  o = f32[2,6] custom-call(d), custom_call_target="Sharding", sharding={manual}
  f = f32[8,6] custom-call(o), custom_call_target="SPMDShardToFullShape", sharding={devices=[4,1]<=[4]}
  ROOT r = f32[8,5] dot(f, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={devices=[2,2]<=[4]}
}
)";

// A manual region's values are per device, so the module has no unsharded
// run; --check compares it with the module whose automatic parts run
// replicated (the region as written in both), and passes.
TEST(RunCommandTest, ChecksAShardMapModuleAgainstItsAutomaticPartsReplicated) {
  const std::string path = ::testing::TempDir() + "/shard_map.hlo";
  std::ofstream(path) << kShardMapModule;
  for (uint64_t seed : {1, 2, 3}) {
    std::ostringstream out;
    RunCommandOptions options;
    options.input = path;
    options.check = true;
    options.seed = seed;
    options.out = &out;
    EXPECT_EQ(RunRunCommand(options), 0) << out.str();
    EXPECT_NE(out.str().find("check against the module with its automatic parts replicated"),
              std::string::npos)
        << out.str();
    EXPECT_NE(out.str().find("check passed"), std::string::npos) << out.str();
  }
}

// A cross-partition all-reduce (channel_id) sums what each device holds, so
// like a manual region it has no one-device run: --check runs the
// reference on the devices, and the sum of four whole copies agrees.
TEST(RunCommandTest, ACrossPartitionAllReduceIsCheckedOnItsDevices) {
  const std::string path = ::testing::TempDir() + "/cross_partition_all_reduce.hlo";
  std::ofstream(path) << R"(HloModule m
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}
ENTRY main {
  a = f32[4,6] parameter(0), sharding={devices=[2,2]<=[4]}
  e = f32[4,6] exponential(a), sharding={devices=[2,2]<=[4]}
  ROOT r = f32[4,6] all-reduce(e), to_apply=add, replica_groups={{0,1,2,3}}, use_global_device_ids=true, channel_id=1
}
)";
  std::ostringstream out;
  RunCommandOptions options;
  options.input = path;
  options.check = true;
  options.num_devices = 4;
  options.out = &out;
  EXPECT_EQ(RunRunCommand(options), 0) << out.str();
  EXPECT_NE(out.str().find("check against the module with its automatic parts replicated"),
            std::string::npos)
      << out.str();
  EXPECT_NE(out.str().find("check passed"), std::string::npos) << out.str();
}

TEST(RunCommandTest, TheReplicatedReferenceKeepsTheRegionAndWhereItCuts) {
  std::unique_ptr<HloModule> module = ParseHloModule(kShardMapModule);
  EXPECT_TRUE(HasManualRegions(*module));
  EXPECT_FALSE(HasManualRegions(*ParseHloModule(
      "HloModule m\nENTRY e {\n  ROOT x = f32[2] parameter(0), sharding={devices=[2]<=[2]}\n}\n")));
  CompileForDevices(*module, {.num_devices = 4});  // propagates in place
  ReplicateOutsideManualRegions(*module);
  const HloComputation* entry = module->entry_computation();
  auto sharding_of = [&](const char* name) -> std::string {
    const HloInstruction* instr = entry->GetInstruction(name);
    if (instr == nullptr) return "no instruction";
    return instr->has_sharding() ? instr->sharding()->ToString() : "none";
  };
  for (const char* name : {"p", "w", "q", "r"})
    EXPECT_EQ(sharding_of(name), "{replicated}") << name;
  EXPECT_EQ(sharding_of("cut"), "{devices=[4,1]<=[4]}");  // cuts the region's pieces
  EXPECT_EQ(sharding_of("f"), "{devices=[4,1]<=[4]}");    // joins them
  for (const char* name : {"m", "e", "ps", "d", "o"}) EXPECT_EQ(sharding_of(name), "{manual}");
  // The reference still runs: the region on the same pieces, the rest whole.
  const CompiledProgram program = CompileForDevices(*module, {.num_devices = 4});
  EXPECT_EQ(program.input_shardings[0].ToString(), "{replicated}");
}

// A {manual} entry parameter or result holds each device's own value: its
// global value is the devices' values stacked along a new leading dim.
TEST(RunCommandTest, ManualEntryValuesAreEachDevicesOwnStacked) {
  std::unique_ptr<HloModule> module = ParseHloModule(R"(HloModule m
ENTRY e {
  x = f32[3,2] parameter(0), sharding={manual}
  id = u32[] partition-id(), sharding={manual}
  f = f32[] convert(id), sharding={manual}
  b = f32[3,2] broadcast(f), dimensions={}, sharding={manual}
  y = f32[3,2] add(x, b), sharding={manual}
  ROOT t = (f32[3,2], u32[]) tuple(y, id), sharding={{manual}, {manual}}
})");
  EXPECT_TRUE(HasManualRegions(*module));
  const int64_t n = 4;
  const CompiledProgram program = CompileForDevices(*module, {.num_devices = n});
  ASSERT_EQ(program.input_shapes.size(), 1u);
  EXPECT_EQ(program.input_shapes[0].ToString(), "f32[4,3,2]");
  EXPECT_EQ(program.local_input_shapes[0].ToString(), "f32[3,2]");
  EXPECT_EQ(program.output_shapes[1].ToString(), "u32[4]");
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> normal;
  std::vector<float> x(n * 6);
  for (float& v : x) v = normal(rng);
  const HostTensor input = HostTensor::FromVector<float>(PrimitiveType::kF32, {n, 3, 2}, x);
  LocalCluster cluster(n);
  const std::vector<HostTensor> out =
      RunSharded(program, std::vector<HostTensor>{input}, cluster, nullptr, {}, kNaN);
  ASSERT_EQ(out.size(), 2u);
  for (int64_t d = 0; d < n; ++d) {
    EXPECT_EQ(out[1].data<uint32_t>()[d], static_cast<uint32_t>(d));
    for (int64_t i = 0; i < 6; ++i) {
      EXPECT_EQ(out[0].data<float>()[d * 6 + i], x[d * 6 + i] + static_cast<float>(d));
    }
  }
}

// Under a partly manual sharding an entry value is each manual group's own,
// tiled within the group: stacked along a new leading dim, one per group.
TEST(RunCommandTest, PartlyManualEntryValuesAreEachGroupsOwnStacked) {
  // Manual dim last (2 groups: devices {0,2} and {1,3}); rows split in two
  // within each group.
  std::unique_ptr<HloModule> module = ParseHloModule(R"(HloModule m
ENTRY e {
  p = f32[4,6] parameter(0), sharding={devices=[2,1,2]<=[4] last_tile_dims={manual}}
  ROOT n = f32[4,6] negate(p), sharding={devices=[2,1,2]<=[4] last_tile_dims={manual}}
})");
  EXPECT_TRUE(HasManualRegions(*module));
  const CompiledProgram program = CompileForDevices(*module, {.num_devices = 4});
  EXPECT_EQ(program.input_shapes[0].ToString(), "f32[2,4,6]");
  EXPECT_EQ(program.local_input_shapes[0].ToString(), "f32[2,6]");
  EXPECT_EQ(program.output_shapes[0].ToString(), "f32[2,4,6]");
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> normal;
  std::vector<float> x(48);
  for (float& v : x) v = normal(rng);
  const HostTensor input = HostTensor::FromVector<float>(PrimitiveType::kF32, {2, 4, 6}, x);
  // Device 3 (group 1, rows 2-3) holds entry 1's rows 2 and 3.
  const std::vector<std::vector<HostTensor>> pieces = ShardInputs(program, {&input, 1});
  for (int64_t i = 0; i < 12; ++i) {
    EXPECT_EQ(pieces[3][0].data<float>()[i], x[24 + 12 + i]);
    EXPECT_EQ(pieces[0][0].data<float>()[i], x[i]);
  }
  LocalCluster cluster(4);
  const std::vector<HostTensor> out =
      RunSharded(program, std::vector<HostTensor>{input}, cluster, nullptr, {}, kNaN);
  for (int64_t i = 0; i < 48; ++i) EXPECT_EQ(out[0].data<float>()[i], -x[i]) << i;
}

TEST(RunCommandTest, CheckExitsThreeWhenTheShardedResultDiffers) {
  const std::string path = std::string(WEFT_SOURCE_DIR) + "/tests/runtime/data/cancelling_sum.hlo";
  std::ostringstream out;
  RunCommandOptions options;
  options.input = path;
  options.check = true;
  options.out = &out;
  EXPECT_EQ(RunRunCommand(options), kCheckFailedExitCode) << out.str();
  EXPECT_NE(out.str().find("FAILED"), std::string::npos) << out.str();
}

TEST(RunCommandTest, ErrorsNameTheInputAndTheFix) {
  RunCommandOptions options;
  options.input = "/nonexistent/model.hlo";
  try {
    RunRunCommand(options);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot read '/nonexistent/model.hlo'"), std::string::npos)
        << e.what();
  }
  options.input = Example("mlp_2d.hlo");
  options.num_devices = 2;
  try {
    RunRunCommand(options);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is sharded for 4 devices but would run on 2"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("--num-devices 4"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------------------
// Hostile input: never a crash, an allocation weft did not size, or a hang.
// (Every test sets --num-devices: Topology::Global() is left to the
// discovery test below.)

std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

std::string RunError(RunCommandOptions options) {
  std::ostringstream out;
  options.out = &out;
  try {
    const int code = RunRunCommand(options);
    return fmt::format("exit {}: {}", code, out.str());
  } catch (const Error& e) {
    return e.what();
  }
}

// Shapes whose element count or byte size overflows int64 used to reach the
// executor with a wrapped size (iota, transpose and dot wrote out of bounds).
TEST(RunCommandTest, OverflowingShapesAreParseErrors) {
  const char* kModules[] = {
      "HloModule m\nENTRY e {\n  ROOT i = s32[3,6148914691236517206] iota(), iota_dimension=0\n}",
      "HloModule m\nENTRY e {\n  p = s32[3,6148914691236517206] parameter(0)\n"
      "  ROOT t = s32[6148914691236517206,3] transpose(p), dimensions={1,0}\n}",
      "HloModule m\nENTRY e {\n  a = f32[4,3074457345618258603] parameter(0)\n"
      "  b = f32[3074457345618258603,4] parameter(1)\n"
      "  ROOT d = f32[4,4] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}"};
  for (const char* text : kModules) {
    RunCommandOptions options;
    options.input = WriteTemp("weft_run_overflow.hlo", text);
    options.num_devices = 2;
    const std::string error = RunError(options);
    EXPECT_TRUE(Mentions(error, "weft_run_overflow.hlo:3:")) << error;
    EXPECT_TRUE(Mentions(error, "is too large: the product of its dimensions overflows int64"))
        << error;
  }
}

TEST(RunCommandTest, RecursionAndOverDeepCallChainsAreRefused) {
  for (const hostile_hlo::RecursiveModule& m : hostile_hlo::RecursiveModules()) {
    RunCommandOptions options;
    options.input = WriteTemp("weft_run_recursive.hlo", m.text);
    options.num_devices = 2;
    const std::string error = RunError(options);
    EXPECT_TRUE(Mentions(error, "calls itself")) << m.name << ": " << error;
    EXPECT_TRUE(Mentions(error, m.cycle)) << m.name << ": " << error;
  }
  for (hostile_hlo::ChainKind kind :
       {hostile_hlo::ChainKind::kCall, hostile_hlo::ChainKind::kWhile}) {
    RunCommandOptions options;
    const int64_t depth = hostile_hlo::OverDeepChain(kind);
    options.input = WriteTemp("weft_run_chain.hlo", hostile_hlo::CallChainModule(depth, kind));
    options.num_devices = 2;
    const std::string error = RunError(options);
    EXPECT_TRUE(Mentions(
        error, fmt::format("weft_run_chain.hlo: calls nest {} deep from computation 'e'", depth)))
        << error;
    // The deepest chain allowed runs, on every device.
    options.input =
        WriteTemp("weft_run_chain.hlo", hostile_hlo::CallChainModule(kMaxCallDepth, kind));
    options.check = true;
    std::ostringstream out;
    options.out = &out;
    EXPECT_EQ(RunRunCommand(options), 0) << out.str();
    EXPECT_TRUE(Mentions(out.str(), "check passed")) << out.str();
  }
}

TEST(RunCommandTest, GiantDeviceCountsAreRefusedAtOnce) {
  const auto start = std::chrono::steady_clock::now();
  RunCommandOptions options;
  options.input = WriteTemp("weft_run_devices.hlo",
                            "HloModule m\nENTRY e {\n  ROOT p = f32[8] parameter(0), "
                            "sharding={devices=[1000000000]<=[1000000000]}\n}");
  options.num_devices = 2;
  EXPECT_TRUE(Mentions(RunError(options), "spans more than 65536 devices")) << RunError(options);
  options.input = WriteTemp("weft_run_devices.hlo",
                            "HloModule m\nENTRY e {\n  ROOT p = f32[8] parameter(0), "
                            "sharding={maximal device=100000000}\n}");
  EXPECT_TRUE(Mentions(RunError(options), "device 100000000 is not below 65536"))
      << RunError(options);
  options.input = Example("mlp_2d.hlo");
  // 0 read as "the default" while negatives were refused: all are refused
  // (leaving the flag out is the default).
  for (int64_t n : {int64_t{1000000000}, int64_t{0}, int64_t{-1}}) {
    options.num_devices = n;
    EXPECT_TRUE(Mentions(RunError(options), "--num-devices must be between 1 and 65536"))
        << RunError(options);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

// WEFT_NUM_DEVICES=abc was accepted where the module's shardings decide the
// device count (the variable was never read).
TEST(RunCommandTest, AMalformedDeviceCountInTheEnvironmentIsRefused) {
  RunCommandOptions options;
  options.input = Example("mlp_2d.hlo");  // sharded for 4 devices
  for (const char* value : {"abc", "0", "-3"}) {
    setenv("WEFT_NUM_DEVICES", value, 1);
    const std::string error = RunError(options);
    EXPECT_TRUE(Mentions(error, "environment variable WEFT_NUM_DEVICES")) << value << ": " << error;
  }
  unsetenv("WEFT_NUM_DEVICES");
}

// A loop that never ends stops at --max-iterations with the loop's name.
TEST(RunCommandTest, MaxIterationsStopsALoopThatNeverEnds) {
  RunCommandOptions options;
  options.input = WriteTemp("weft_run_forever.hlo", R"(HloModule m
cond {
  s = s32[] parameter(0)
  ROOT t = pred[] constant(true)
}
body {
  s = s32[] parameter(0)
  one = s32[] constant(1)
  ROOT a = s32[] add(s, one)
}
ENTRY e {
  p = s32[] parameter(0)
  ROOT forever = s32[] while(p), condition=cond, body=body
})");
  options.num_devices = 2;
  options.max_iterations = 2000;
  const std::string error = RunError(options);
  EXPECT_TRUE(Mentions(error, "'forever' (while): while loop 'forever' ran 2000 iterations"))
      << error;
  EXPECT_TRUE(Mentions(error, "raise the limit with --max-iterations N")) << error;
  options.max_iterations = 0;
  EXPECT_TRUE(Mentions(RunError(options), "--max-iterations must be at least 1"))
      << RunError(options);
}

// A run that needs more memory than the machine has is refused before
// anything is allocated, with the figures: here valid shapes of terabytes
// (a parameter, a broadcast, and one inside a loop the memory plan cannot
// follow, where the estimate is the largest buffer, a lower bound).
TEST(RunCommandTest, RunsThatCannotFitInMemoryAreRefusedBeforeAllocating) {
  const char* kHuge[] = {
      R"(HloModule big_param
ENTRY e {
  p = f32[1000000,1000000] parameter(0)
  ROOT n = f32[1000000,1000000] negate(p)
})",
      R"(HloModule big_broadcast
ENTRY e {
  p = f32[] parameter(0)
  ROOT b = f32[1000000,1000000] broadcast(p), dimensions={}
})",
      R"(HloModule big_in_loop
cond {
  s = s32[] parameter(0)
  ROOT t = pred[] compare(s, s), direction=EQ
}
body {
  s = s32[] parameter(0)
  z = f32[] constant(0)
  big = f32[1000000,1000000] broadcast(z), dimensions={}
  r = f32[] reduce(big, z), dimensions={0,1}, to_apply=add
  ROOT c = s32[] convert(r)
}
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  p = s32[] parameter(0)
  ROOT w = s32[] while(p), condition=cond, body=body
})"};
  for (const char* text : kHuge) {
    RunCommandOptions options;
    options.input = WriteTemp("weft_run_huge.hlo", text);
    options.num_devices = 2;
    const auto start = std::chrono::steady_clock::now();
    const std::string error = RunError(options);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
    EXPECT_TRUE(Mentions(error, "weft run " + options.input + ": the run needs")) << error;
    EXPECT_TRUE(Mentions(error, "TiB")) << error;
    EXPECT_TRUE(Mentions(error, "of physical memory")) << error;
    EXPECT_TRUE(Mentions(error, "f32[1000000,1000000]")) << error;
    EXPECT_TRUE(Mentions(error, "Nothing was allocated")) << error;
    EXPECT_TRUE(Mentions(error, "Make the largest buffers smaller")) << error;
    if (Mentions(text, "big_in_loop")) {
      EXPECT_TRUE(Mentions(error, "the run needs at least")) << error;
      EXPECT_TRUE(Mentions(error, "the memory plan could not follow the program")) << error;
    } else {
      EXPECT_TRUE(Mentions(error, "the run needs about")) << error;
    }
  }
}

// ---------------------------------------------------------------------------
// Topology discovery: no other test of this program calls Topology::Global().

TEST(RunCommandDiscoveryTest, ThreadsCompilingAndRunningAttentionOnTwoSlicesDiscoverOnce) {
  ASSERT_EQ(Topology::DiscoveryCount(), 0);
  const std::string before = CurrentConfig().ToString();
  {
    ScopedConfigOverride devices(ConfigKey::kNumDevices, 4);
    ScopedConfigOverride slices(ConfigKey::kNumSlices, 2);
    {
      ScopedConfigOverride nested(ConfigKey::kNumSlices, 4);
      ScopedConfigOverride nested_again(ConfigKey::kNumSlices, 1);
      EXPECT_EQ(CurrentConfig().num_slices, 1);
    }
    EXPECT_EQ(CurrentConfig().num_slices, 2);
    EXPECT_EQ(Topology::DiscoveryCount(), 0) << "reading the configuration discovers nothing";

    constexpr int kThreads = 4;
    std::vector<std::string> failures(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([t, &failures] {
        try {
          const Topology& topology = Topology::Global();
          // Batch over the slices (dcn), heads within a slice (ici).
          const std::vector<int64_t> order = HybridDeviceOrder(topology, {1, 2}, {2, 1});
          const std::string qkv = fmt::format("{{devices=[2,2,1,1]{}}}", fmt::join(order, ","));
          const std::string lse = fmt::format("{{devices=[2,2,1]{}}}", fmt::join(order, ","));
          std::unique_ptr<HloModule> module =
              ParseHloModule(AttentionModule("2,4,2,24,8", qkv, qkv, lse, kPackedCausal));
          const CompiledProgram program =
              CompileForDevices(*module, {.num_devices = topology.num_devices()});
          const std::vector<HostTensor> inputs = RandomInputs(program.input_shapes, t);
          LocalCluster cluster(topology);
          const std::vector<HostTensor> got = RunSharded(program, inputs, cluster);
          Executor reference(*module);
          const std::vector<HostTensor> want =
              reference.Run(std::vector<HostTensor>(inputs.begin(), inputs.end()));
          for (size_t i = 0; i < want.size(); ++i) {
            if (MaxRelativeError(got[i], want[i]) > 1e-6) failures[t] += "output differs; ";
          }
        } catch (const std::exception& e) {
          failures[t] = e.what();
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
    for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], "") << "thread " << t;
    EXPECT_EQ(Topology::DiscoveryCount(), 1);
    EXPECT_EQ(Topology::Global().num_slices(), 2);
    EXPECT_EQ(Topology::Global().num_devices(), 4);
  }
  EXPECT_EQ(CurrentConfig().ToString(), before);
  EXPECT_EQ(Topology::DiscoveryCount(), 1);
}

}  // namespace
}  // namespace weft::runtime
