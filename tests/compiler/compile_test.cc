// CompileForDevices: the fused and the unfused per-device programs of the
// same module, run on the same random inputs through the executor (sharded
// over threads, outputs joined), give the same outputs; named modules and
// random elementwise programs on 1, 2 and 4 devices; and the refusals.
#include "weft/compiler/compile.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "weft/base/error.h"
#include "weft/hlo/parser.h"
#include "weft/runtime/run_command.h"

namespace weft::compiler {
namespace {

using runtime::HostTensor;

int64_t CountFusions(const HloModule& module) {
  int64_t n = 0;
  for (const HloComputation* c : module.computations()) {
    for (const HloInstruction* instr : c->instructions()) {
      n += instr->opcode() == HloOpcode::kFusion;
    }
  }
  return n;
}

// Compiles `text` twice for n devices (unfused, fused), runs both on the
// same seeded inputs and expects the same outputs (within 1e-6 relative).
// Returns the number of fusions made.
int64_t ExpectFusedMatchesUnfused(const std::string& text, int64_t n, uint64_t seed) {
  SCOPED_TRACE(fmt::format("{} devices, seed {}", n, seed));
  std::unique_ptr<HloModule> plain_module = ParseHloModule(text);
  std::unique_ptr<HloModule> fused_module = ParseHloModule(text);
  const CompiledProgram plain = CompileForDevices(*plain_module, {.num_devices = n});
  const CompiledProgram fused = CompileForDevices(*fused_module, {.num_devices = n, .fuse = true});
  EXPECT_EQ(plain.fusion.fusions, 0);
  EXPECT_EQ(CountFusions(*plain.program), 0);
  EXPECT_EQ(CountFusions(*fused.program), fused.fusion.fusions);
  EXPECT_EQ(fused.num_devices, n);
  EXPECT_EQ(fused.input_shapes.size(), plain.input_shapes.size());
  EXPECT_EQ(fused.local_output_shapes.size(), plain.local_output_shapes.size());

  const std::vector<HostTensor> inputs = runtime::RandomInputs(plain.input_shapes, seed);
  runtime::LocalCluster cluster_a(n), cluster_b(n);
  const std::vector<HostTensor> want = runtime::RunSharded(plain, inputs, cluster_a);
  const std::vector<HostTensor> got = runtime::RunSharded(fused, inputs, cluster_b);
  EXPECT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    EXPECT_LE(runtime::MaxRelativeError(got[i], want[i]), 1e-6) << "output " << i;
  }
  return fused.fusion.fusions;
}

const char* kMlp = R"(HloModule mlp
ENTRY main {
  x = f32[8,16] parameter(0), sharding={devices=[4,1]<=[4]}
  w = f32[16,32] parameter(1), sharding={replicated}
  b = f32[32] parameter(2), sharding={replicated}
  d = f32[8,32] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  bb = f32[8,32] broadcast(b), dimensions={1}
  a = f32[8,32] add(d, bb)
  t = f32[8,32] tanh(a)
  c = f32[] constant(0.5)
  cb = f32[8,32] broadcast(c), dimensions={}
  m = f32[8,32] multiply(t, cb)
  e = f32[8,32] exponential(m)
  s = f32[8,32] subtract(e, a)
  ROOT r = f32[8,32] maximum(s, t)
}
)";

const char* kSoftmax = R"(HloModule softmax
max_f {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}
add_f {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  x = f32[6,10] parameter(0), sharding={devices=[2,1]<=[2]}
  low = f32[] constant(-1e30)
  mx = f32[6] reduce(x, low), dimensions={1}, to_apply=max_f
  mb = f32[6,10] broadcast(mx), dimensions={0}
  sh = f32[6,10] subtract(x, mb)
  ex = f32[6,10] exponential(sh)
  zero = f32[] constant(0)
  sm = f32[6] reduce(ex, zero), dimensions={1}, to_apply=add_f
  sb = f32[6,10] broadcast(sm), dimensions={0}
  ROOT p = f32[6,10] divide(ex, sb)
}
)";

// No sharding at all: propagation replicates everything.
const char* kMixed = R"(HloModule mixed
ENTRY main {
  x = f32[4,8] parameter(0)
  y = f32[4,8] parameter(1)
  i = s32[4,8] iota(), iota_dimension=1
  f = f32[4,8] convert(i)
  g = pred[4,8] compare(x, y), direction=GT
  s = f32[4,8] select(g, x, f)
  n = f32[4,8] negate(s)
  ROOT t = (f32[4,8], f32[4,8]) tuple(n, s)
}
)";

TEST(CompileTest, FusedMlpMatchesUnfusedOnFourDevices) {
  for (uint64_t seed : {1, 2, 3}) EXPECT_GT(ExpectFusedMatchesUnfused(kMlp, 4, seed), 0);
}

TEST(CompileTest, FusedSoftmaxMatchesUnfusedOnTwoDevices) {
  for (uint64_t seed : {4, 5}) EXPECT_GT(ExpectFusedMatchesUnfused(kSoftmax, 2, seed), 0);
}

TEST(CompileTest, PropagatesThenFusesAnUnshardedModule) {
  for (int64_t n : {1, 2}) EXPECT_GT(ExpectFusedMatchesUnfused(kMixed, n, 6), 0);
  std::unique_ptr<HloModule> module = ParseHloModule(kMixed);
  const CompiledProgram p = CompileForDevices(*module, {.num_devices = 2, .fuse = true});
  EXPECT_TRUE(p.propagated);
  EXPECT_EQ(p.input_names, (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(p.output_names, (std::vector<std::string>{"t{0}", "t{1}"}));
}

// Random elementwise programs over f32[8,12] split in rows on `n` devices:
// unary and binary ops on earlier values, the last two values returned.
std::string RandomElementwiseProgram(std::mt19937& rng, int64_t n) {
  const char* unary[] = {"negate", "tanh", "abs", "exponential"};
  const char* binary[] = {"add", "multiply", "subtract", "maximum", "minimum"};
  std::string text = "HloModule random\nENTRY main {\n";
  const std::string sharding =
      n == 1 ? "sharding={replicated}" : fmt::format("sharding={{devices=[{},1]<=[{}]}}", n, n);
  std::vector<std::string> values;
  const int params = 2 + static_cast<int>(rng() % 3);
  for (int i = 0; i < params; ++i) {
    values.push_back(fmt::format("p{}", i));
    text += fmt::format("  p{} = f32[8,12] parameter({}), {}\n", i, i, sharding);
  }
  const int ops = 4 + static_cast<int>(rng() % 12);
  for (int i = 0; i < ops; ++i) {
    const std::string name = fmt::format("v{}", i);
    const std::string& a = values[rng() % values.size()];
    if (rng() % 3 == 0) {
      const char* op = unary[rng() % 4];
      // exponential of a bounded value only (tanh of it), so nothing overflows.
      if (std::string(op) == "exponential") {
        text += fmt::format("  {}t = f32[8,12] tanh({})\n", name, a);
        text += fmt::format("  {} = f32[8,12] exponential({}t)\n", name, name);
      } else {
        text += fmt::format("  {} = f32[8,12] {}({})\n", name, op, a);
      }
    } else {
      const std::string& b = values[rng() % values.size()];
      text += fmt::format("  {} = f32[8,12] {}({}, {})\n", name, binary[rng() % 5], a, b);
    }
    values.push_back(name);
  }
  text += fmt::format("  ROOT out = (f32[8,12], f32[8,12]) tuple({}, {})\n}}\n",
                      values[values.size() - 2], values.back());
  return text;
}

TEST(CompileTest, RandomElementwiseProgramsFusedMatchUnfused) {
  std::mt19937 rng(13);
  for (int trial = 0; trial < 12; ++trial) {
    const int64_t n = int64_t{1} << (trial % 3);  // 1, 2, 4 devices
    const std::string text = RandomElementwiseProgram(rng, n);
    SCOPED_TRACE(text);
    ExpectFusedMatchesUnfused(text, n, 100 + trial);
  }
}

TEST(CompileTest, RefusesAModuleShardedForAnotherDeviceCount) {
  std::unique_ptr<HloModule> module = ParseHloModule(kMlp);
  try {
    CompileForDevices(*module, {.num_devices = 2});
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sharded for 4 devices"), std::string::npos) << e.what();
  }
}

TEST(CompileTest, RefusesFewerThanOneDevice) {
  std::unique_ptr<HloModule> module = ParseHloModule(kMixed);
  EXPECT_THROW(CompileForDevices(*module, {.num_devices = 0}), Error);
}

TEST(CompileTest, ShardingDeviceCountReadsTheShardings) {
  EXPECT_EQ(ShardingDeviceCount(*ParseHloModule(kMlp)), 4);
  EXPECT_EQ(ShardingDeviceCount(*ParseHloModule(kSoftmax)), 2);
  EXPECT_EQ(ShardingDeviceCount(*ParseHloModule(kMixed)), 1);
}

}  // namespace
}  // namespace weft::compiler
