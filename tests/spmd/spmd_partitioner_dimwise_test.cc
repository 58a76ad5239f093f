// sort, topk, reduce-window, select-and-scatter, bitcast-convert, cholesky
// and triangular-solve partitioned: the dims they compute along are made whole, the others stay
// split. Each module is compiled for 2-8 devices (uneven dims, partial
// replication, odd device orders), run on device threads with NaN padding
// and compared with the unsharded module on one device (the executor's own
// tests check that against float64 references): bit for bit where the
// sharded program computes each value exactly as the unsharded one does.
// The per-device program is checked to keep the other dims split. The
// ops are annotated with the operand's sharding (which splits the dims
// they compute along too): a module's root is otherwise replicated, as
// XLA's propagation leaves outputs; op_sharding_rule_test.cc checks what
// propagation gives them.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <limits>

#include "sharded_run_test_util.h"
#include "weft/hlo/parser.h"

namespace weft {
namespace {

using runtime::HostTensor;
using testing::ExpectShardedMatches;

// The dims of operand `k` of the per-device program's first `opcode`.
std::vector<int64_t> LocalOperandDims(const compiler::CompiledProgram& program, HloOpcode opcode,
                                      int64_t k = 0) {
  for (const HloComputation* c : program.program->computations()) {
    for (const HloInstruction* i : c->instructions()) {
      if (i->opcode() == opcode) return i->operand(k)->shape().dimensions();
    }
  }
  ADD_FAILURE() << "no " << HloOpcodeString(opcode) << " in the program";
  return {};
}

struct Case {
  int64_t n;
  std::string sharding;
  int64_t rows_per_device;  // the split dim's local size
};

// f32[9,L] split along rows and along the dim the op computes along.
const std::vector<Case> kRowCases = {
    {2, "{devices=[1,2]<=[2]}", 9},                            // only the computed dim split
    {4, "{devices=[2,2]<=[4]}", 5},                            // 9 rows over 2: uneven
    {4, "{devices=[2,2]0,3,1,2}", 5},                          // odd device order
    {8, "{devices=[4,1,2]<=[8] last_tile_dim_replicate}", 3},  // partial replication
    {8, "{devices=[2,2,2]<=[2,2,2]T(2,0,1) last_tile_dim_replicate}", 5},
    {6, "{devices=[3,2]<=[6]}", 3},
};

TEST(SpmdDimwiseTest, SortKeepsRowsSplitAndSortsWholeRows) {
  for (const Case& c : kRowCases) {
    for (uint64_t seed : {1, 2, 3}) {
      SCOPED_TRACE(fmt::format("n={} {} seed {}", c.n, c.sharding, seed));
      const std::string text = fmt::format(R"(HloModule s
by_key {{
  k0 = s32[] parameter(0)
  k1 = s32[] parameter(1)
  v0 = f32[] parameter(2)
  v1 = f32[] parameter(3)
  ROOT lt = pred[] compare(k0, k1), direction=LT
}}
ENTRY e {{
  keys = s32[9,12] parameter(0), sharding={0}
  vals = f32[9,12] parameter(1), sharding={0}
  ROOT s = (s32[9,12], f32[9,12]) sort(keys, vals), dimensions={{1}}, is_stable=true, to_apply=by_key, sharding={{{0}, {0}}}
}}
)",
                                           c.sharding);
      const auto program = ExpectShardedMatches(text, c.n, seed);
      EXPECT_EQ(LocalOperandDims(program, HloOpcode::kSort),
                (std::vector<int64_t>{c.rows_per_device, 12}));
    }
  }
}

TEST(SpmdDimwiseTest, TopKKeepsRowsSplit) {
  for (const Case& c : kRowCases) {
    for (uint64_t seed : {4, 5}) {
      SCOPED_TRACE(fmt::format("n={} {} seed {}", c.n, c.sharding, seed));
      const std::string text = fmt::format(R"(HloModule t
ENTRY e {{
  x = f32[9,20] parameter(0), sharding={0}
  ROOT k = (f32[9,3], s32[9,3]) topk(x), k=3, largest=true, sharding={{{0}, {0}}}
}}
)",
                                           c.sharding);
      const auto program = ExpectShardedMatches(text, c.n, seed);
      EXPECT_EQ(LocalOperandDims(program, HloOpcode::kTopK),
                (std::vector<int64_t>{c.rows_per_device, 20}));
    }
  }
}

TEST(SpmdDimwiseTest, ReduceWindowKeepsTheDimsItDoesNotSlideAlongSplit) {
  const std::vector<Case> cases = {
      {2, "{devices=[2,1,1]<=[2]}", 5},
      {4, "{devices=[2,2,1]<=[4]}", 5},
      {8, "{devices=[2,2,2]<=[8]}", 5},
      {8, "{devices=[4,2,1]<=[2,4]T(1,0)}", 3},
      {8, "{devices=[2,1,2,2]<=[8] last_tile_dim_replicate}", 5},
  };
  for (const Case& c : cases) {
    for (uint64_t seed : {1, 2}) {
      SCOPED_TRACE(fmt::format("n={} {} seed {}", c.n, c.sharding, seed));
      const std::string text = fmt::format(R"(HloModule r
max {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}}
ENTRY e {{
  x = f32[9,12,6] parameter(0), sharding={0}
  lo = f32[] constant(-inf)
  ROOT r = f32[9,6,6] reduce-window(x, lo), window={{size=1x3x1 stride=1x2x1 pad=0_0x1_0x0_0}}, to_apply=max, sharding={0}
}}
)",
                                           c.sharding);
      const auto program = ExpectShardedMatches(text, c.n, seed);
      const std::vector<int64_t> local = LocalOperandDims(program, HloOpcode::kReduceWindow);
      ASSERT_EQ(local.size(), 3u);
      EXPECT_EQ(local[0], c.rows_per_device);
      EXPECT_EQ(local[1], 12);  // the window's dim is whole
    }
  }
}

TEST(SpmdDimwiseTest, SelectAndScatterKeepsRowsSplit) {
  for (const Case& c : kRowCases) {
    for (uint64_t seed : {1, 2}) {
      SCOPED_TRACE(fmt::format("n={} {} seed {}", c.n, c.sharding, seed));
      const std::string text = fmt::format(R"(HloModule s
ge {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = pred[] compare(a, b), direction=GE
}}
add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}
ENTRY e {{
  x = f32[9,12] parameter(0), sharding={0}
  src = f32[9,6] parameter(1)
  zero = f32[] constant(0)
  ROOT s = f32[9,12] select-and-scatter(x, src, zero), window={{size=1x3 stride=1x2 pad=0_0x1_0}}, select=ge, scatter=add, sharding={0}
}}
)",
                                           c.sharding);
      const auto program = ExpectShardedMatches(text, c.n, seed);
      EXPECT_EQ(LocalOperandDims(program, HloOpcode::kSelectAndScatter),
                (std::vector<int64_t>{c.rows_per_device, 12}));
    }
  }
}

TEST(SpmdDimwiseTest, BitcastConvertBetweenWidthsKeepsTheSharedDimsSplit) {
  const std::string text = R"(HloModule b
ENTRY e {
  x = f32[9,10] parameter(0), sharding={devices=[2,2]<=[4]}
  halves = u16[9,10,2] bitcast-convert(x)
  one = u16[] constant(1)
  ones = u16[9,10,2] broadcast(one), dimensions={}
  bumped = u16[9,10,2] add(halves, ones)
  ROOT y = f32[9,10] bitcast-convert(bumped), sharding={devices=[2,2]<=[4]}
}
)";
  for (uint64_t seed : {1, 2, 3}) {
    const auto program = ExpectShardedMatches(text, 4, seed);
    EXPECT_EQ(LocalOperandDims(program, HloOpcode::kBitcastConvert), (std::vector<int64_t>{5, 5}));
  }
}

// f32[9,6,6] batches of matrices split along the batch and a matrix dim.
const std::vector<Case> kMatrixCases = {
    {2, "{devices=[1,2,1]<=[2]}", 9},                            // only a matrix dim split
    {4, "{devices=[2,1,2]<=[4]}", 5},                            // 9 matrices over 2: uneven
    {4, "{devices=[2,2,1]0,3,1,2}", 5},                          // odd device order
    {8, "{devices=[4,1,1,2]<=[8] last_tile_dim_replicate}", 3},  // partial replication
    {6, "{devices=[3,1,2]<=[6]}", 3},
};

TEST(SpmdDimwiseTest, CholeskyKeepsTheBatchSplitAndFactorsWholeMatrices) {
  for (const Case& c : kMatrixCases) {
    for (const char* lower : {"true", "false"}) {
      SCOPED_TRACE(fmt::format("n={} {} lower={}", c.n, c.sharding, lower));
      // a = x x^T + 6 I: positive definite, so every factor is finite.
      const std::string text = fmt::format(R"(HloModule c
ENTRY e {{
  x = f32[9,6,6] parameter(0), sharding={0}
  xxt = f32[9,6,6] dot(x, x), lhs_batch_dims={{0}}, rhs_batch_dims={{0}}, lhs_contracting_dims={{2}}, rhs_contracting_dims={{2}}
  i = s32[6,6] iota(), iota_dimension=0
  j = s32[6,6] iota(), iota_dimension=1
  diag = pred[6,6] compare(i, j), direction=EQ
  eye = f32[6,6] convert(diag)
  six = f32[] constant(6)
  sixes = f32[6,6] broadcast(six), dimensions={{}}
  scaled = f32[6,6] multiply(eye, sixes)
  shift = f32[9,6,6] broadcast(scaled), dimensions={{1,2}}
  a = f32[9,6,6] add(xxt, shift), sharding={0}
  ROOT l = f32[9,6,6] cholesky(a), lower={1}, sharding={0}
}}
)",
                                           c.sharding, lower);
      // x x^T sums in another order where a matrix dim is split: not bit
      // for bit, so to a few float32 roundings.
      const auto program = ExpectShardedMatches(text, c.n, 1, 1e-6);
      EXPECT_EQ(LocalOperandDims(program, HloOpcode::kCholesky),
                (std::vector<int64_t>{c.rows_per_device, 6, 6}));
    }
  }
}

TEST(SpmdDimwiseTest, TriangularSolveKeepsTheBatchSplitAndSolvesWholeMatrices) {
  for (const Case& c : kMatrixCases) {
    for (const char* left : {"true", "false"}) {
      SCOPED_TRACE(fmt::format("n={} {} left_side={}", c.n, c.sharding, left));
      const std::string text = fmt::format(R"(HloModule t
ENTRY e {{
  a = f32[9,6,6] parameter(0), sharding={0}
  b = f32[9,6,6] parameter(1), sharding={0}
  ROOT x = f32[9,6,6] triangular-solve(a, b), left_side={1}, lower=true, unit_diagonal=true, transpose_a=TRANSPOSE, sharding={0}
}}
)",
                                           c.sharding, left);
      const auto program = ExpectShardedMatches(text, c.n, 2);
      EXPECT_EQ(LocalOperandDims(program, HloOpcode::kTriangularSolve, 1),
                (std::vector<int64_t>{c.rows_per_device, 6, 6}));
    }
  }
}

}  // namespace
}  // namespace weft
