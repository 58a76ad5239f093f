// The sharded embedding lookup (gather) and its gradient (scatter-add):
// partitioned programs run through the real executor on 2, 4 and 8 device
// threads (inputs padded with NaN, so padding that reaches a result shows)
// against a float64 reference computed here, with every vocabulary tile hit,
// repeated ids, uneven vocabulary and hidden sizes, and out-of-range ids.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <random>

#include "partitioner_random.h"
#include "sharded_run_test_util.h"
#include "weft/hlo/parser.h"
#include "weft/hlo/printer.h"
#include "weft/runtime/run_command.h"

namespace weft {
namespace {

using runtime::HostTensor;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Meshes written as XLA shardings. 4 devices = (fsdp=2, tensor=2), device
// f*2+t; 8 devices = (data=2, fsdp=2, tensor=2), device d*4+f*2+t.
constexpr const char* kTableTensorFsdp4 = "{devices=[2,2]<=[2,2]T(1,0)}";
constexpr const char* kBatchFsdp4 = "{devices=[2,1,2]<=[4] last_tile_dim_replicate}";
constexpr const char* kRowsBatchFsdp4 = "{devices=[2,1,1,2]<=[4] last_tile_dim_replicate}";
constexpr const char* kTableTensorFsdp8 =
    "{devices=[2,2,2]<=[2,2,2]T(2,1,0) last_tile_dim_replicate}";
constexpr const char* kBatchDataFsdp8 = "{devices=[4,1,2]<=[8] last_tile_dim_replicate}";
constexpr const char* kRowsBatchDataFsdp8 = "{devices=[4,1,1,2]<=[8] last_tile_dim_replicate}";

constexpr const char* kAdd = R"(add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
)";

std::string Sharding(const std::string& s) { return s.empty() ? "" : ", sharding=" + s; }

HostTensor RandomTable(int64_t rows, int64_t cols, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(0.1, 1.0);
  std::bernoulli_distribution sign(0.5);
  std::vector<double> v(rows * cols);
  for (double& x : v) x = sign(rng) ? u(rng) : -u(rng);
  return HostTensor::FromDoubles(Shape(PrimitiveType::kF32, {rows, cols}), v);
}

HostTensor RandomFloats(const std::vector<int64_t>& dims, std::mt19937_64& rng) {
  int64_t count = 1;
  for (int64_t d : dims) count *= d;
  HostTensor flat = RandomTable(count, 1, rng);
  return HostTensor::FromDoubles(Shape(PrimitiveType::kF32, dims), flat.ToDoubles());
}

// Token ids [B, S]: every id of [0, vocab) once (so every vocabulary tile is
// hit) while there is room, the rest random (repeats), shuffled; `extra` are
// written over the first positions (out-of-range ids).
HostTensor TokenIds(int64_t batch, int64_t seq, int64_t vocab, std::mt19937_64& rng,
                    const std::vector<int64_t>& extra = {}) {
  std::vector<double> ids;
  for (int64_t i = 0; i < batch * seq; ++i) {
    ids.push_back(static_cast<double>(i < vocab ? i : static_cast<int64_t>(rng() % vocab)));
  }
  std::shuffle(ids.begin(), ids.end(), rng);
  for (size_t i = 0; i < extra.size(); ++i) ids[i] = static_cast<double>(extra[i]);
  return HostTensor::FromDoubles(Shape(PrimitiveType::kS32, {batch, seq}), ids);
}

std::string LookupModule(int64_t vocab, int64_t hidden, int64_t batch, int64_t seq,
                         const std::string& table, const std::string& ids,
                         const std::string& rows) {
  return fmt::format(R"(HloModule lookup
ENTRY e {{
  table = f32[{0},{1}] parameter(0){4}
  ids = s32[{2},{3}] parameter(1){5}
  ROOT rows = f32[{2},{3},{1}] gather(table, ids), offset_dims={{2}}, collapsed_slice_dims={{0}}, start_index_map={{0}}, index_vector_dim=2, slice_sizes={{1,{1}}}{6}
}}
)",
                     vocab, hidden, batch, seq, Sharding(table), Sharding(ids), Sharding(rows));
}

// The gradient of the lookup: cotangent rows scatter-added into `init`
// (zeros, or a parameter when `init_param`).
std::string GradModule(int64_t vocab, int64_t hidden, int64_t batch, int64_t seq,
                       const std::string& ids, const std::string& grad, const std::string& table,
                       bool init_param = false) {
  const std::string init =
      init_param
          ? fmt::format("  init = f32[{},{}] parameter(2){}\n", vocab, hidden, Sharding(table))
          : fmt::format(
                "  zero = f32[] constant(0), sharding={{replicated}}\n"
                "  init = f32[{},{}] broadcast(zero), dimensions={{}}{}\n",
                vocab, hidden, Sharding(table));
  return fmt::format(R"(HloModule grad
{0}
ENTRY e {{
  ids = s32[{3},{4}] parameter(0){5}
  grad = f32[{3},{4},{2}] parameter(1){6}
{7}  ROOT dtable = f32[{1},{2}] scatter(init, ids, grad), update_window_dims={{2}}, inserted_window_dims={{0}}, scatter_dims_to_operand_dims={{0}}, index_vector_dim=2, to_apply=add{8}
}}
)",
                     kAdd, vocab, hidden, batch, seq, Sharding(ids), Sharding(grad), init,
                     Sharding(table));
}

// float64 references (XLA semantics: gather clamps, scatter skips out-of-range ids).
std::vector<double> LookupReference(const HostTensor& table, const HostTensor& ids) {
  const int64_t vocab = table.dimensions()[0], hidden = table.dimensions()[1];
  const std::vector<double> t = table.ToDoubles(), i = ids.ToDoubles();
  std::vector<double> out;
  for (double id : i) {
    const int64_t row = std::clamp<int64_t>(static_cast<int64_t>(id), 0, vocab - 1);
    for (int64_t h = 0; h < hidden; ++h) out.push_back(t[row * hidden + h]);
  }
  return out;
}

std::vector<double> GradReference(const HostTensor& ids, const HostTensor& grad, int64_t vocab,
                                  std::vector<double> init) {
  const int64_t hidden = grad.dimensions().back();
  const std::vector<double> i = ids.ToDoubles(), g = grad.ToDoubles();
  for (size_t p = 0; p < i.size(); ++p) {
    const int64_t row = static_cast<int64_t>(i[p]);
    if (row < 0 || row >= vocab) continue;
    for (int64_t h = 0; h < hidden; ++h) init[row * hidden + h] += g[p * hidden + h];
  }
  return init;
}

// Partitions `text` for n devices, runs it on n threads (NaN padding) and the
// unsharded module on one, and checks both against `expected`.
compiler::CompiledProgram ExpectRuns(const std::string& text, int64_t n,
                                     const std::vector<HostTensor>& inputs,
                                     const std::vector<double>& expected) {
  std::unique_ptr<HloModule> module = ParseHloModule(text);
  compiler::CompiledProgram program = compiler::CompileForDevices(*module, {.num_devices = n});
  runtime::LocalCluster cluster(n);
  const std::vector<HostTensor> sharded =
      runtime::RunSharded(program, inputs, cluster, nullptr, {}, kNaN);
  runtime::Executor reference(*module);
  const std::vector<HostTensor> whole =
      reference.Run(std::vector<HostTensor>(inputs.begin(), inputs.end()));
  const std::vector<double> got = sharded.at(0).ToDoubles(), want = whole.at(0).ToDoubles();
  EXPECT_EQ(got.size(), expected.size());
  EXPECT_EQ(want.size(), expected.size());
  int failures = 0;
  for (size_t i = 0; i < std::min(got.size(), expected.size()) && failures < 5; ++i) {
    const double tol = 1e-5 * (1 + std::abs(expected[i]));
    if (!(std::abs(got[i] - expected[i]) <= tol) || !(std::abs(want[i] - expected[i]) <= tol)) {
      ADD_FAILURE() << "element " << i << ": expected " << expected[i] << ", sharded " << got[i]
                    << ", unsharded " << want[i];
      ++failures;
    }
  }
  if (::testing::Test::HasFailure()) ADD_FAILURE() << PrintModule(*program.program);
  return program;
}

std::vector<const HloInstruction*> FindAll(const HloModule& m, HloOpcode opcode) {
  std::vector<const HloInstruction*> found;
  for (const HloComputation* c : m.computations()) {
    for (const HloInstruction* i : c->instructions()) {
      if (i->opcode() == opcode) found.push_back(i);
    }
  }
  return found;
}

int64_t LargestArray(const HloModule& m) {
  int64_t largest = 0;
  for (const HloComputation* c : m.computations()) {
    for (const HloInstruction* i : c->instructions()) {
      if (i->shape().IsArray()) largest = std::max(largest, i->shape().ElementsCount());
    }
  }
  return largest;
}

// The longest dim of any array in the program: below the vocabulary size
// when no device ever holds the whole table (or its gradient).
int64_t LongestDim(const HloModule& m) {
  int64_t longest = 0;
  for (const HloComputation* c : m.computations()) {
    for (const HloInstruction* i : c->instructions()) {
      if (!i->shape().IsArray()) continue;
      for (int64_t d : i->shape().dimensions()) longest = std::max(longest, d);
    }
  }
  return longest;
}

struct Layout {
  int64_t n;
  std::string table, ids, rows;
};

// ---------------------------------------------------------------------------
// Lookup

TEST(SpmdGatherTest, LookupMatchesOnVocabSplitsWithUnevenTiles) {
  const std::vector<Layout> layouts = {
      {2, "{devices=[2,1]<=[2]}", "{replicated}", "{replicated}"},
      {4, "{devices=[4,1]<=[4]}", "{replicated}", "{devices=[4,1,1]<=[4]}"},
      {4, "{devices=[4,1]<=[4]}", "{devices=[4,1]<=[4]}", "{devices=[4,1,1]<=[4]}"},
      {4, kTableTensorFsdp4, kBatchFsdp4, kRowsBatchFsdp4},
      {4, kTableTensorFsdp4, kBatchFsdp4, "{devices=[1,1,2,2]<=[4] last_tile_dim_replicate}"},
      {8, kTableTensorFsdp8, kBatchDataFsdp8, kRowsBatchDataFsdp8},
      {8, "{devices=[8,1]<=[8]}", kBatchDataFsdp8, "{replicated}"},
  };
  std::mt19937_64 rng(7);
  for (const Layout& l : layouts) {
    for (auto [vocab, hidden] : {std::pair<int64_t, int64_t>{37, 5}, {40, 8}}) {
      SCOPED_TRACE(fmt::format("n={} table={} ids={} rows={} V={} D={}", l.n, l.table, l.ids,
                               l.rows, vocab, hidden));
      const HostTensor table = RandomTable(vocab, hidden, rng);
      const HostTensor ids = TokenIds(7, 9, vocab, rng);
      auto program = ExpectRuns(LookupModule(vocab, hidden, 7, 9, l.table, l.ids, l.rows), l.n,
                                {table, ids}, LookupReference(table, ids));
      // Looked-up rows are summed over the vocabulary split (all-reduce, or
      // reduce-scatter when the rows are wanted split); the table is never whole.
      EXPECT_EQ(FindAll(*program.program, HloOpcode::kAllReduce).size() +
                    FindAll(*program.program, HloOpcode::kReduceScatter).size(),
                1u);
      EXPECT_LT(LongestDim(*program.program), vocab);
    }
  }
}

TEST(SpmdGatherTest, OutOfRangeIdsClampAsTheWholeGatherDoes) {
  std::mt19937_64 rng(3);
  const int64_t vocab = 37, hidden = 4;
  const HostTensor table = RandomTable(vocab, hidden, rng);
  const HostTensor ids = TokenIds(4, 12, vocab, rng, {-5, -1, 37, 38, 40, 1000});
  ExpectRuns(
      LookupModule(vocab, hidden, 4, 12, "{devices=[4,1]<=[4]}", "{replicated}", "{replicated}"), 4,
      {table, ids}, LookupReference(table, ids));
  ExpectRuns(LookupModule(vocab, hidden, 4, 12, kTableTensorFsdp4, kBatchFsdp4, kRowsBatchFsdp4), 4,
             {table, ids}, LookupReference(table, ids));
}

TEST(SpmdGatherTest, TheCollectiveIsAnAllReduceOfTheRowsOverTheVocabGroup) {
  std::mt19937_64 rng(5);
  const int64_t vocab = 64, hidden = 16, batch = 2, seq = 8;
  const HostTensor table = RandomTable(vocab, hidden, rng);
  const HostTensor ids = TokenIds(batch, seq, vocab, rng);
  // Vocabulary split over 2, ids and rows replicated: one all-reduce of the
  // [B, S, D] rows between the two vocabulary halves, nothing else moves.
  auto program = ExpectRuns(LookupModule(vocab, hidden, batch, seq, "{devices=[2,1]<=[2]}",
                                         "{replicated}", "{replicated}"),
                            2, {table, ids}, LookupReference(table, ids));
  const HloModule& m = *program.program;
  auto reduces = FindAll(m, HloOpcode::kAllReduce);
  ASSERT_EQ(reduces.size(), 1u) << PrintModule(m);
  EXPECT_EQ(reduces[0]->shape(), ParseShape("f32[2,8,16]"));
  EXPECT_EQ(reduces[0]->attrs().replica_groups, (std::vector<std::vector<int64_t>>{{0, 1}}));
  EXPECT_TRUE(FindAll(m, HloOpcode::kAllGather).empty()) << PrintModule(m);
  EXPECT_EQ(FindAll(m, HloOpcode::kGather)[0]->operand(0)->shape(), ParseShape("f32[32,16]"));

  // The micro model's layout: the table stays [V/tensor, D/fsdp] on every
  // device; what is summed over tensor is rows, never the table.
  const HostTensor more_ids = TokenIds(batch * 2, seq, vocab, rng);
  program = ExpectRuns(
      LookupModule(vocab, hidden, batch * 2, seq, kTableTensorFsdp4, kBatchFsdp4, kRowsBatchFsdp4),
      4, {table, more_ids}, LookupReference(table, more_ids));
  const HloModule& micro = *program.program;
  EXPECT_EQ(FindAll(micro, HloOpcode::kGather)[0]->operand(0)->shape(), ParseShape("f32[32,8]"));
  for (const HloInstruction* r : FindAll(micro, HloOpcode::kAllReduce)) {
    EXPECT_EQ(r->shape().rank(), 3) << PrintModule(micro);
  }
  EXPECT_LT(LargestArray(micro), vocab * hidden / 2) << PrintModule(micro);
}

TEST(SpmdGatherTest, ExplicitIndexVectorDimAndTwoIndexedDims) {
  std::mt19937_64 rng(11);
  {  // ids [B, S, 1], index_vector_dim=2
    const int64_t vocab = 37, hidden = 6;
    const HostTensor table = RandomTable(vocab, hidden, rng);
    const HostTensor ids2 = TokenIds(4, 10, vocab, rng);
    const HostTensor ids =
        HostTensor::FromDoubles(Shape(PrimitiveType::kS32, {4, 10, 1}), ids2.ToDoubles());
    const std::string text = fmt::format(R"(HloModule lookup
ENTRY e {{
  table = f32[37,6] parameter(0), sharding={{devices=[4,1]<=[4]}}
  ids = s32[4,10,1] parameter(1), sharding={{devices=[2,1,1,2]<=[4] last_tile_dim_replicate}}
  ROOT rows = f32[4,10,6] gather(table, ids), offset_dims={{2}}, collapsed_slice_dims={{0}}, start_index_map={{0}}, index_vector_dim=2, slice_sizes={{1,6}}, sharding={{devices=[2,1,1,2]<=[4] last_tile_dim_replicate}}
}}
)");
    ExpectRuns(text, 4, {table, ids}, LookupReference(table, ids2));
  }
  {  // x[i, j, :] for index pairs (i, j), both indexed dims split (5 unevenly)
    const HostTensor x = RandomFloats({6, 5, 3}, rng);
    std::vector<double> pairs;
    for (int64_t i = 0; i < 6; ++i) {
      for (int64_t j = 0; j < 5; ++j)
        pairs.insert(pairs.end(), {double(i), double((j * 3 + i) % 5)});
    }
    pairs.insert(pairs.end(), {7, -2, 2, 9});  // clamped
    const HostTensor idx = HostTensor::FromDoubles(Shape(PrimitiveType::kS32, {32, 2}), pairs);
    std::vector<double> expected;
    const std::vector<double> xv = x.ToDoubles();
    for (size_t k = 0; k < pairs.size(); k += 2) {
      const int64_t i = std::clamp<int64_t>(static_cast<int64_t>(pairs[k]), 0, 5);
      const int64_t j = std::clamp<int64_t>(static_cast<int64_t>(pairs[k + 1]), 0, 4);
      for (int64_t h = 0; h < 3; ++h) expected.push_back(xv[(i * 5 + j) * 3 + h]);
    }
    for (const char* idx_sharding :
         {"{replicated}", "{devices=[2,1,2]<=[4] last_tile_dim_replicate}"}) {
      const std::string text = fmt::format(R"(HloModule pairs
ENTRY e {{
  x = f32[6,5,3] parameter(0), sharding={{devices=[2,2,1]<=[4]}}
  idx = s32[32,2] parameter(1), sharding={}
  ROOT y = f32[32,3] gather(x, idx), offset_dims={{1}}, collapsed_slice_dims={{0,1}}, start_index_map={{0,1}}, index_vector_dim=1, slice_sizes={{1,1,3}}, sharding={{devices=[4,1]<=[4]}}
}}
)",
                                           idx_sharding);
      auto program = ExpectRuns(text, 4, {x, idx}, expected);
      EXPECT_EQ(FindAll(*program.program, HloOpcode::kGather)[0]->operand(0)->shape(),
                ParseShape("f32[3,3,3]"));
    }
  }
}

TEST(SpmdGatherTest, WindowsAlongASplitDimRunOnWholeArrays) {
  std::mt19937_64 rng(13);
  const int64_t vocab = 37, hidden = 6;
  const HostTensor table = RandomTable(vocab, hidden, rng);
  const HostTensor ids = TokenIds(4, 10, vocab, rng);
  // Two-row windows (not a one-wide slice) along a split dim.
  const std::string text = R"(HloModule windows
ENTRY e {
  table = f32[37,6] parameter(0), sharding={devices=[2,1]<=[2]}
  ids = s32[4,10] parameter(1), sharding={replicated}
  ROOT rows = f32[4,10,2,6] gather(table, ids), offset_dims={2,3}, collapsed_slice_dims={}, start_index_map={0}, index_vector_dim=2, slice_sizes={2,6}, sharding={replicated}
}
)";
  std::vector<double> expected;
  const std::vector<double> t = table.ToDoubles(), i = ids.ToDoubles();
  for (double id : i) {
    const int64_t row = std::clamp<int64_t>(static_cast<int64_t>(id), 0, vocab - 2);
    for (int64_t r = 0; r < 2; ++r) {
      for (int64_t h = 0; h < hidden; ++h) expected.push_back(t[(row + r) * hidden + h]);
    }
  }
  auto program = ExpectRuns(text, 2, {table, ids}, expected);
  EXPECT_TRUE(FindAll(*program.program, HloOpcode::kAllReduce).empty());
}

// A dim the slice takes whole is passed through even where the indices
// index it: its start clamps to 0 whatever the index, so each device gathers
// from its own columns (uneven: 10 over 4) with the index left as it is,
// and the table is never gathered (XLA's passthrough dims).
TEST(SpmdGatherTest, AnIndexedDimTakenWholeStaysSplit) {
  std::mt19937_64 rng(41);
  const int64_t vocab = 37, hidden = 10;
  const HostTensor table = RandomTable(vocab, hidden, rng);
  const std::vector<double> starts = {3, 7, 36, 0, -4, 100, 40, 2, 11, -9};
  const HostTensor ids = HostTensor::FromDoubles(Shape(PrimitiveType::kS32, {5, 2}), starts);
  const std::string text = R"(HloModule whole
ENTRY e {
  table = f32[37,10] parameter(0), sharding={devices=[1,4]<=[4]}
  ids = s32[5,2] parameter(1), sharding={replicated}
  ROOT rows = f32[5,10] gather(table, ids), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0,1}, index_vector_dim=1, slice_sizes={1,10}, sharding={devices=[1,4]<=[4]}
}
)";
  std::vector<double> expected;
  const std::vector<double> t = table.ToDoubles();
  for (size_t k = 0; k < starts.size(); k += 2) {
    const int64_t row = std::clamp<int64_t>(static_cast<int64_t>(starts[k]), 0, vocab - 1);
    for (int64_t h = 0; h < hidden; ++h) expected.push_back(t[row * hidden + h]);
  }
  auto program = ExpectRuns(text, 4, {table, ids}, expected);
  const HloModule& m = *program.program;
  EXPECT_TRUE(FindAll(m, HloOpcode::kAllGather).empty()) << PrintModule(m);
  EXPECT_TRUE(FindAll(m, HloOpcode::kAllReduce).empty()) << PrintModule(m);
  EXPECT_EQ(FindAll(m, HloOpcode::kGather)[0]->shape(), ParseShape("f32[5,3]"));
}

// An FSDP table (the hidden dim split, the vocabulary whole) with ids split
// along the batch: every device looks up its own rows; no device holds the
// global batch's rows (the lookup once gathered them all, then sliced).
TEST(SpmdGatherTest, FsdpTableLooksUpTheDevicesOwnRows) {
  std::mt19937_64 rng(37);
  const int64_t vocab = 37, hidden = 8, batch = 16, seq = 16;
  const std::vector<Layout> layouts = {
      {2, "{devices=[1,2]<=[2]}", "{devices=[2,1]<=[2]}", "{devices=[2,1,1]<=[2]}"},
      {4, "{devices=[1,4]<=[4]}", "{devices=[4,1]<=[4]}", "{devices=[4,1,1]<=[4]}"},
      // (data=2, fsdp=2, tensor=2) with tensor=1 in the table: D over fsdp only.
      {8, "{devices=[1,2,4]<=[2,2,2]T(1,0,2) last_tile_dim_replicate}", kBatchDataFsdp8,
       kRowsBatchDataFsdp8},
  };
  for (const Layout& l : layouts) {
    SCOPED_TRACE(fmt::format("n={} table={} ids={} rows={}", l.n, l.table, l.ids, l.rows));
    const HostTensor table = RandomTable(vocab, hidden, rng);
    const HostTensor ids = TokenIds(batch, seq, vocab, rng);
    auto program = ExpectRuns(LookupModule(vocab, hidden, batch, seq, l.table, l.ids, l.rows), l.n,
                              {table, ids}, LookupReference(table, ids));
    const HloModule& m = *program.program;
    EXPECT_LT(LargestArray(m), batch * seq * hidden) << PrintModule(m);
    EXPECT_TRUE(FindAll(m, HloOpcode::kAllReduce).empty()) << PrintModule(m);
  }
}

// ---------------------------------------------------------------------------
// Gradient (scatter-add)

struct GradLayout {
  int64_t n;
  std::string ids, grad, table;
};

// The gradient of a [vocab, hidden] table from [batch, seq] ids, scattered
// into zeros and into a parameter, on each layout against the float64
// reference; `check` inspects each partitioned program.
void ExpectGradients(const std::vector<GradLayout>& layouts, int64_t vocab, int64_t hidden,
                     int64_t batch, int64_t seq, std::mt19937_64& rng,
                     const std::function<void(const HloModule&)>& check) {
  for (const GradLayout& l : layouts) {
    for (bool init_param : {false, true}) {
      SCOPED_TRACE(fmt::format("n={} ids={} grad={} table={} V={} D={} init_param={}", l.n, l.ids,
                               l.grad, l.table, vocab, hidden, init_param));
      const HostTensor ids = TokenIds(batch, seq, vocab, rng);
      const HostTensor grad = RandomFloats({batch, seq, hidden}, rng);
      std::vector<HostTensor> inputs = {ids, grad};
      std::vector<double> init(vocab * hidden, 0.0);
      if (init_param) {
        inputs.push_back(RandomTable(vocab, hidden, rng));
        init = inputs.back().ToDoubles();
      }
      auto program =
          ExpectRuns(GradModule(vocab, hidden, batch, seq, l.ids, l.grad, l.table, init_param), l.n,
                     inputs, GradReference(ids, grad, vocab, init));
      check(*program.program);
    }
  }
}

TEST(SpmdScatterTest, GradientMatchesOnVocabSplitsWithUnevenTiles) {
  const std::vector<GradLayout> layouts = {
      {2, "{replicated}", "{replicated}", "{devices=[2,1]<=[2]}"},
      {4, "{devices=[4,1]<=[4]}", "{devices=[4,1,1]<=[4]}", "{devices=[4,1]<=[4]}"},
      {4, kBatchFsdp4, kRowsBatchFsdp4, kTableTensorFsdp4},
      {4, kBatchFsdp4, kRowsBatchFsdp4, "{devices=[2,1,2]<=[2,2]T(1,0) last_tile_dim_replicate}"},
      {8, kBatchDataFsdp8, kRowsBatchDataFsdp8, kTableTensorFsdp8},
      {8, kBatchDataFsdp8, "{devices=[4,1,2]<=[8]}", "{devices=[8,1]<=[8]}"},
  };
  std::mt19937_64 rng(17);
  for (auto [vocab, hidden] : {std::pair<int64_t, int64_t>{37, 5}, {40, 8}}) {
    // 7 rows: the batch splits unevenly (padded ids must scatter nowhere).
    ExpectGradients(layouts, vocab, hidden, 7, 9, rng, [vocab = vocab](const HloModule& m) {
      EXPECT_LT(LongestDim(m), vocab) << PrintModule(m);
    });
  }
}

TEST(SpmdScatterTest, OutOfRangeIdsAreSkippedAsTheWholeScatterDoes) {
  std::mt19937_64 rng(19);
  const int64_t vocab = 37, hidden = 4;
  const HostTensor ids = TokenIds(4, 12, vocab, rng, {-5, -1, 37, 38, 40, 1000, 39});
  const HostTensor grad = RandomFloats({4, 12, hidden}, rng);
  const std::vector<double> expected =
      GradReference(ids, grad, vocab, std::vector<double>(vocab * hidden));
  ExpectRuns(
      GradModule(vocab, hidden, 4, 12, "{replicated}", "{replicated}", "{devices=[4,1]<=[4]}"), 4,
      {ids, grad}, expected);
  ExpectRuns(GradModule(vocab, hidden, 4, 12, kBatchFsdp4, kRowsBatchFsdp4, kTableTensorFsdp4), 4,
             {ids, grad}, expected);
}

TEST(SpmdScatterTest, UpdatesSplitAlongTheBatchSumOverIt) {
  std::mt19937_64 rng(23);
  const int64_t vocab = 40, hidden = 8;
  const HostTensor ids = TokenIds(8, 10, vocab, rng);
  const HostTensor grad = RandomFloats({8, 10, hidden}, rng);
  // Vocabulary split over 2 devices, the batch over the other 2: each device
  // scatters its rows into its vocabulary half, the halves are summed over
  // the batch pair; the [V, D] table never exists on a device.
  auto program = ExpectRuns(
      GradModule(vocab, hidden, 8, 10, "{devices=[2,1,2]<=[4] last_tile_dim_replicate}",
                 "{devices=[2,1,1,2]<=[4] last_tile_dim_replicate}",
                 "{devices=[2,1,2]<=[2,2]T(1,0) last_tile_dim_replicate}"),
      4, {ids, grad}, GradReference(ids, grad, vocab, std::vector<double>(vocab * hidden)));
  const HloModule& m = *program.program;
  auto reduces = FindAll(m, HloOpcode::kAllReduce);
  ASSERT_EQ(reduces.size(), 1u) << PrintModule(m);
  EXPECT_EQ(reduces[0]->shape(), ParseShape("f32[20,8]"));
  EXPECT_EQ(reduces[0]->attrs().replica_groups,
            (std::vector<std::vector<int64_t>>{{0, 2}, {1, 3}}));
  EXPECT_TRUE(FindAll(m, HloOpcode::kAllGather).empty()) << PrintModule(m);
}

TEST(SpmdScatterTest, FsdpGradientReduceScattersOverFsdpThenAllReducesOverData) {
  std::mt19937_64 rng(31);
  // (data=2, fsdp=2, tensor=2): each device scatters its batch rows into
  // its vocabulary half [V/2, D], reduce-scatters D over fsdp and sums the
  // [V/2, D/2] tiles over data, as FSDP reduces any weight's gradient.
  ExpectGradients({{8, kBatchDataFsdp8, kRowsBatchDataFsdp8, kTableTensorFsdp8}}, 40, 16, 16, 8,
                  rng, [](const HloModule& m) {
                    auto scatters = FindAll(m, HloOpcode::kReduceScatter);
                    auto reduces = FindAll(m, HloOpcode::kAllReduce);
                    ASSERT_EQ(scatters.size(), 1u) << PrintModule(m);
                    ASSERT_EQ(reduces.size(), 1u) << PrintModule(m);
                    EXPECT_EQ(scatters[0]->operand(0)->shape(), ParseShape("f32[20,16]"));
                    EXPECT_EQ(scatters[0]->attrs().replica_groups,
                              (std::vector<std::vector<int64_t>>{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
                    EXPECT_EQ(reduces[0]->shape(), ParseShape("f32[20,8]"));
                    EXPECT_EQ(reduces[0]->attrs().replica_groups,
                              (std::vector<std::vector<int64_t>>{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
                  });
}

// The FSDP table's gradient: each device scatters its own batch rows; no
// device holds the global batch's cotangent rows (they were all-gathered).
TEST(SpmdScatterTest, FsdpTableGradientScattersTheDevicesOwnRows) {
  std::mt19937_64 rng(41);
  // More rows than table entries, as in training: moving rows costs more.
  const int64_t vocab = 37, hidden = 8, batch = 16, seq = 16;
  const std::vector<GradLayout> layouts = {
      {2, "{devices=[2,1]<=[2]}", "{devices=[2,1,1]<=[2]}", "{devices=[1,2]<=[2]}"},
      {4, "{devices=[4,1]<=[4]}", "{devices=[4,1,1]<=[4]}", "{devices=[1,4]<=[4]}"},
      {8, kBatchDataFsdp8, kRowsBatchDataFsdp8,
       "{devices=[1,2,4]<=[2,2,2]T(1,0,2) last_tile_dim_replicate}"},
  };
  ExpectGradients(layouts, vocab, hidden, batch, seq, rng, [&](const HloModule& m) {
    EXPECT_LT(LargestArray(m), batch * seq * hidden) << PrintModule(m);
  });
}

// ---------------------------------------------------------------------------
// Scatters combining by other than add: a variadic scatter (an argmax that
// carries each value's position) and a single one that replaces. The
// indices stay whole; each device applies, in order, the updates landing in
// its tile, so the result is the reference's whatever the split.

std::string ArgmaxScatterModule(int64_t rows, int64_t cols, int64_t batch,
                                const std::string& result, const std::string& updates) {
  return fmt::format(R"(HloModule argmax_scatter
argmax {{
  v0 = f32[] parameter(0)
  i0 = s32[] parameter(1)
  v1 = f32[] parameter(2)
  i1 = s32[] parameter(3)
  gt = pred[] compare(v1, v0), direction=GT
  v = f32[] select(gt, v1, v0)
  i = s32[] select(gt, i1, i0)
  ROOT r = (f32[], s32[]) tuple(v, i)
}}
ENTRY e {{
  vals = f32[{0},{1}] parameter(0){3}
  pos = s32[{0},{1}] parameter(1){3}
  idx = s32[{2},1] parameter(2)
  uv = f32[{2},{1}] parameter(3){4}
  up = s32[{2},{1}] parameter(4){4}
  ROOT s = (f32[{0},{1}], s32[{0},{1}]) scatter(vals, pos, idx, uv, up), update_window_dims={{1}}, inserted_window_dims={{0}}, scatter_dims_to_operand_dims={{0}}, index_vector_dim=1, to_apply=argmax, sharding={{{5}, {5}}}
}}
)",
                     rows, cols, batch, Sharding(result), Sharding(updates), result);
}

TEST(SpmdScatterTest, VariadicScatterSplitsItsOperandsAlikeAndMatchesTheReference) {
  const int64_t rows = 9, cols = 5, batch = 14;
  struct Split {
    int64_t n;
    std::string result, updates;
    std::vector<int64_t> local;  // each device's operand tile
  };
  const std::vector<Split> splits = {
      {4, "{devices=[4,1]<=[4]}", "{devices=[4,1]<=[4]}", {3, 5}},
      {4, "{devices=[2,2]<=[4]}", "{devices=[1,4]<=[4]}", {5, 3}},
      {4, "{devices=[1,2,2]<=[4] last_tile_dim_replicate}", "", {9, 3}},
      {2, "{devices=[2,1]<=[2]}", "{devices=[1,2]<=[2]}", {5, 5}},
      {3, "{devices=[1,3]0,2,1}", "{devices=[3,1]<=[3]}", {9, 2}},
  };
  std::mt19937_64 rng(37);
  for (const Split& split : splits) {
    SCOPED_TRACE(fmt::format("{} on {}", split.result, split.n));
    const HostTensor vals = RandomTable(rows, cols, rng);
    const HostTensor uv = RandomTable(batch, cols, rng);
    std::vector<double> pos(rows * cols), up(batch * cols), idx(batch);
    for (double& p : pos) p = static_cast<double>(rng() % 1000);
    for (double& p : up) p = static_cast<double>(rng() % 1000);
    // Every row, repeats, and rows out of range (skipped).
    for (int64_t b = 0; b < batch; ++b) idx[b] = static_cast<double>(b < rows ? b : rng() % rows);
    std::shuffle(idx.begin(), idx.end(), rng);
    idx[0] = -1, idx[1] = rows, idx[2] = rows + 2;
    const std::vector<HostTensor> inputs = {
        vals, HostTensor::FromDoubles(Shape(PrimitiveType::kS32, {rows, cols}), pos),
        HostTensor::FromDoubles(Shape(PrimitiveType::kS32, {batch, 1}), idx), uv,
        HostTensor::FromDoubles(Shape(PrimitiveType::kS32, {batch, cols}), up)};
    std::vector<double> want_v = vals.ToDoubles(), want_p = pos;
    const std::vector<double> u = uv.ToDoubles();
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t r = static_cast<int64_t>(idx[b]);
      if (r < 0 || r >= rows) continue;
      for (int64_t c = 0; c < cols; ++c) {
        if (u[b * cols + c] > want_v[r * cols + c]) {
          want_v[r * cols + c] = u[b * cols + c];
          want_p[r * cols + c] = up[b * cols + c];
        }
      }
    }
    std::unique_ptr<HloModule> module =
        ParseHloModule(ArgmaxScatterModule(rows, cols, batch, split.result, split.updates));
    const compiler::CompiledProgram program =
        compiler::CompileForDevices(*module, {.num_devices = split.n});
    runtime::LocalCluster cluster(split.n);
    const std::vector<HostTensor> out =
        runtime::RunSharded(program, inputs, cluster, nullptr, {}, kNaN);
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(out[0].ToDoubles(), want_v);
    EXPECT_EQ(out[1].ToDoubles(), want_p);
    const std::vector<const HloInstruction*> scatters =
        FindAll(*program.program, HloOpcode::kScatter);
    ASSERT_EQ(scatters.size(), 1u) << PrintModule(*program.program);
    EXPECT_EQ(scatters[0]->operand(0)->shape().dimensions(), split.local)
        << PrintModule(*program.program);
    EXPECT_EQ(scatters[0]->operand(1)->shape().dimensions(), split.local);
  }
}

// What propagation now gives iota-indexed (parallel) lookups and updates,
// and a variadic scatter whose elements are split differently, runs with
// the unsharded numbers (`weft run --check`).
TEST(SpmdGatherTest, ParallelLookupsAndUpdatesAsPropagatedMatchTheReference) {
  const std::string rows_cols = R"(
  rows = s32[1,6,4] iota(), iota_dimension=1
  cols = s32[1,6,4] iota(), iota_dimension=2
  idx = s32[2,6,4] concatenate(rows, cols), dimensions={0}
)";
  const std::string gather =
      std::string("HloModule g\n\nENTRY main {\n") +
      "  p = f32[6,4,3] parameter(0), sharding={devices=[2,2,1]0,2,1,3}\n" + rows_cols +
      R"(  g = f32[6,4,3] gather(p, idx), offset_dims={2}, collapsed_slice_dims={0,1}, start_index_map={0,1}, index_vector_dim=0, slice_sizes={1,1,3}
  ROOT r = f32[6,4,3] negate(g)
}
)";
  for (double e : weft::testing::ShardedVsUnsharded(gather, 4, 3)) EXPECT_EQ(e, 0.0);
  const std::string scatter = std::string("HloModule s\n\n") + weft::testing::kAdd +
                              "\nENTRY main {\n  p = f32[6,4,3] parameter(0)\n" + rows_cols +
                              R"(  u = f32[6,4,3] parameter(1), sharding={devices=[4,1,1]<=[4]}
  s = f32[6,4,3] scatter(p, idx, u), update_window_dims={2}, inserted_window_dims={0,1}, scatter_dims_to_operand_dims={0,1}, index_vector_dim=0, to_apply=add
  ROOT r = f32[6,4,3] negate(s)
}
)";
  for (double e : weft::testing::ShardedVsUnsharded(scatter, 4, 5)) EXPECT_LE(e, 1e-6);
  const std::string variadic = R"(HloModule v

pair {
  a0 = f32[] parameter(0)
  a1 = f32[] parameter(1)
  b0 = f32[] parameter(2)
  b1 = f32[] parameter(3)
  s0 = f32[] add(a0, b0)
  s1 = f32[] add(a1, b1)
  ROOT t = (f32[], f32[]) tuple(s0, s1)
}

ENTRY main {
  a = f32[6,8] parameter(0), sharding={devices=[1,4]<=[4]}
  b = f32[6,8] parameter(1), sharding={devices=[2,1,2]<=[4] last_tile_dim_replicate}
  q = s32[3] parameter(2)
  lo = s32[] constant(0)
  hi = s32[] constant(5)
  idx = s32[3] clamp(lo, q, hi)
  u0 = f32[3,8] parameter(3)
  u1 = f32[3,8] parameter(4)
  s = (f32[6,8], f32[6,8]) scatter(a, b, idx, u0, u1), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=pair
  g0 = f32[6,8] get-tuple-element(s), index=0
  g1 = f32[6,8] get-tuple-element(s), index=1
  ROOT r = f32[6,8] add(g0, g1)
}
)";
  for (double e : weft::testing::ShardedVsUnsharded(variadic, 4, 7)) EXPECT_LE(e, 1e-6);
}

TEST(SpmdScatterTest, AScatterThatReplacesSplitsAlongTheScatteredRows) {
  // The last update to land on a row wins, on whichever device holds it.
  const std::string text = R"(HloModule replace
second {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT r = s32[] copy(b)
}
ENTRY e {
  x = s32[11,3] parameter(0), sharding={devices=[4,1]<=[4]}
  idx = s32[20,1] parameter(1), sharding={devices=[4,1]<=[4]}
  u = s32[20,3] parameter(2), sharding={devices=[2,2]<=[4]}
  ROOT s = s32[11,3] scatter(x, idx, u), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=second, sharding={devices=[4,1]<=[4]}
})";
  std::mt19937_64 rng(41);
  std::vector<double> x(33), idx(20), u(60);
  for (double& v : x) v = static_cast<double>(rng() % 100);
  for (double& v : u) v = static_cast<double>(rng() % 100) + 100;
  for (double& v : idx) v = static_cast<double>(static_cast<int64_t>(rng() % 15) - 2);
  std::vector<double> want = x;
  for (int64_t b = 0; b < 20; ++b) {
    const int64_t r = static_cast<int64_t>(idx[b]);
    if (r < 0 || r >= 11) continue;
    for (int64_t c = 0; c < 3; ++c) want[r * 3 + c] = u[b * 3 + c];
  }
  std::unique_ptr<HloModule> module = ParseHloModule(text);
  const compiler::CompiledProgram program =
      compiler::CompileForDevices(*module, {.num_devices = 4});
  runtime::LocalCluster cluster(4);
  const std::vector<HostTensor> inputs = {
      HostTensor::FromDoubles(Shape(PrimitiveType::kS32, {11, 3}), x),
      HostTensor::FromDoubles(Shape(PrimitiveType::kS32, {20, 1}), idx),
      HostTensor::FromDoubles(Shape(PrimitiveType::kS32, {20, 3}), u)};
  const std::vector<HostTensor> out =
      runtime::RunSharded(program, inputs, cluster, nullptr, {}, kNaN);
  EXPECT_EQ(out.at(0).ToDoubles(), want);
  const std::vector<const HloInstruction*> scatters =
      FindAll(*program.program, HloOpcode::kScatter);
  ASSERT_EQ(scatters.size(), 1u);
  EXPECT_EQ(scatters[0]->shape(), ParseShape("s32[3,3]")) << PrintModule(*program.program);
}

// ---------------------------------------------------------------------------
// Random shardings of table, ids and result.

TEST(SpmdGatherTest, RandomShardingsMatch) {
  std::mt19937_64 rng(29);
  for (int64_t n : {2, 4, 8}) {
    for (int trial = 0; trial < 12; ++trial) {
      const int64_t vocab = 37, hidden = 6, batch = 5, seq = 6;
      const std::string table = spmd_test::RandomSharding(n, 2, rng).ToString();
      const std::string ids = spmd_test::RandomSharding(n, 2, rng).ToString();
      const std::string rows = spmd_test::RandomSharding(n, 3, rng).ToString();
      const std::string grad = spmd_test::RandomSharding(n, 3, rng).ToString();
      const std::string dtable = spmd_test::RandomSharding(n, 2, rng).ToString();
      SCOPED_TRACE(fmt::format("n={} table={} ids={} rows={} grad={} dtable={}", n, table, ids,
                               rows, grad, dtable));
      const HostTensor t = RandomTable(vocab, hidden, rng);
      const HostTensor i = TokenIds(batch, seq, vocab, rng);
      const HostTensor g = RandomFloats({batch, seq, hidden}, rng);
      ExpectRuns(LookupModule(vocab, hidden, batch, seq, table, ids, rows), n, {t, i},
                 LookupReference(t, i));
      ExpectRuns(GradModule(vocab, hidden, batch, seq, ids, grad, dtable, true), n, {i, g, t},
                 GradReference(i, g, vocab, t.ToDoubles()));
    }
  }
}

}  // namespace
}  // namespace weft
