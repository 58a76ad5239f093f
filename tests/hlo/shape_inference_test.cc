#include "weft/hlo/shape_inference.h"

#include <gtest/gtest.h>

#include <tuple>

#include "error_of.h"
#include "weft/hlo/builder.h"
#include "weft/hlo/computation.h"
#include "weft/hlo/parser.h"

namespace weft {
namespace {

using weft::testing::Mentions;

// Parameters of the given shapes, and a way to infer an instruction over them.
class Infer {
 public:
  explicit Infer(std::vector<std::string> shapes) : comp_("c") {
    for (size_t i = 0; i < shapes.size(); ++i) {
      HloAttributes a;
      a.parameter_number = static_cast<int64_t>(i);
      params_.push_back(comp_.AddInstruction(HloInstruction::Create(
          HloOpcode::kParameter, ParseShape(shapes[i]), {}, a, {}, fmt::format("p{}", i))));
    }
  }
  // Shape string, or "error: <message>".
  std::string operator()(HloOpcode op, std::vector<int> operands, HloAttributes attrs = {},
                         std::string declared = "", std::vector<HloComputation*> called = {}) {
    std::vector<HloInstruction*> ops;
    for (int i : operands) ops.push_back(params_.at(i));
    auto instr = HloInstruction::Create(op, declared.empty() ? Shape() : ParseShape(declared), ops,
                                        std::move(attrs), std::move(called), "x");
    try {
      return InferHloShape(*instr).ToString();
    } catch (const Error& e) {
      return fmt::format("error: {}", e.what());
    }
  }

 private:
  HloComputation comp_;
  std::vector<HloInstruction*> params_;
};

TEST(ShapeInferenceTest, Elementwise) {
  Infer infer({"f32[4,8]", "f32[4,8]", "s32[4,8]", "pred[4,8]", "f32[8]", "pred[]"});
  EXPECT_EQ(infer(HloOpcode::kAdd, {0, 1}), "f32[4,8]");
  EXPECT_EQ(infer(HloOpcode::kTanh, {0}), "f32[4,8]");
  EXPECT_EQ(infer(HloOpcode::kNegate, {2}), "s32[4,8]");
  EXPECT_EQ(infer(HloOpcode::kAnd, {3, 3}), "pred[4,8]");
  EXPECT_EQ(infer(HloOpcode::kNot, {2}), "s32[4,8]");
  HloAttributes cmp;
  cmp.comparison_direction = ComparisonDirection::kGt;
  EXPECT_EQ(infer(HloOpcode::kCompare, {0, 1}, cmp), "pred[4,8]");
  // compare's type= must fit the operands, as XLA's Comparison::Type.
  for (const auto& [type, ok_float, ok_s32, ok_pred] :
       std::vector<std::tuple<std::string, bool, bool, bool>>{
           {"FLOAT", true, false, false},
           {"TOTALORDER", true, false, false},
           {"SIGNED", false, true, false},
           {"UNSIGNED", false, false, true},
           {"PARTIALORDER", false, false, false}}) {
    cmp.comparison_type = type;
    EXPECT_EQ(infer(HloOpcode::kCompare, {0, 1}, cmp) == "pred[4,8]", ok_float) << type;
    EXPECT_EQ(infer(HloOpcode::kCompare, {2, 2}, cmp) == "pred[4,8]", ok_s32) << type;
    EXPECT_EQ(infer(HloOpcode::kCompare, {3, 3}, cmp) == "pred[4,8]", ok_pred) << type;
  }
  cmp.comparison_type = "SIGNED";
  EXPECT_TRUE(Mentions(infer(HloOpcode::kCompare, {0, 1}, cmp),
                       "compare type=SIGNED does not fit f32 operands"));
  EXPECT_EQ(infer(HloOpcode::kSelect, {3, 0, 1}), "f32[4,8]");
  EXPECT_EQ(infer(HloOpcode::kSelect, {5, 0, 1}), "f32[4,8]");  // scalar predicate
  EXPECT_TRUE(Mentions(infer(HloOpcode::kAdd, {0, 4}), "same shape, got f32[4,8] and f32[8]"));
  EXPECT_TRUE(Mentions(infer(HloOpcode::kAdd, {0, 2}), "same shape"));
  EXPECT_TRUE(Mentions(infer(HloOpcode::kExp, {2}), "floating-point"));
  EXPECT_TRUE(Mentions(infer(HloOpcode::kAnd, {0, 1}), "pred or integers"));
  EXPECT_TRUE(Mentions(infer(HloOpcode::kMultiply, {3, 3}), "needs numbers"));
  EXPECT_TRUE(Mentions(infer(HloOpcode::kSelect, {0, 0, 1}), "predicate must be pred"));
  EXPECT_TRUE(Mentions(infer(HloOpcode::kAdd, {0}), "takes 2 operands, got 1"));
  EXPECT_EQ(infer(HloOpcode::kConvert, {0}, {}, "bf16[4,8]"), "bf16[4,8]");
  EXPECT_TRUE(Mentions(infer(HloOpcode::kConvert, {0}, {}, "bf16[4]"), "keep the dimensions"));
}

TEST(ShapeInferenceTest, ShiftsPopcntAndClzTakeIntegersOnly) {
  Infer infer({"u32[3,5]", "u32[3,5]", "f32[3,5]", "pred[3,5]", "s64[3,5]", "u32[5]"});
  for (HloOpcode op :
       {HloOpcode::kShiftLeft, HloOpcode::kShiftRightLogical, HloOpcode::kShiftRightArith}) {
    const std::string name(HloOpcodeString(op));
    EXPECT_EQ(infer(op, {0, 1}), "u32[3,5]") << name;
    EXPECT_EQ(infer(op, {4, 4}), "s64[3,5]") << name;
    EXPECT_TRUE(Mentions(infer(op, {2, 2}), name + " needs integers, got f32[3,5]"));
    EXPECT_TRUE(Mentions(infer(op, {3, 3}), name + " needs integers, got pred[3,5]"));
    EXPECT_TRUE(Mentions(infer(op, {0, 5}), "same shape"));
  }
  EXPECT_EQ(infer(HloOpcode::kPopcnt, {4}), "s64[3,5]");
  EXPECT_EQ(infer(HloOpcode::kClz, {0}), "u32[3,5]");
  EXPECT_TRUE(Mentions(infer(HloOpcode::kClz, {2}), "count-leading-zeros needs integers"));
  EXPECT_TRUE(Mentions(infer(HloOpcode::kPopcnt, {3}), "popcnt needs integers"));
}

TEST(ShapeInferenceTest, ShapeChanges) {
  Infer infer({"f32[4,8]", "f32[]", "f32[4,3]", "s32[]", "f32[2,2]"});
  HloAttributes dims;
  dims.dimensions = {1, 0};
  EXPECT_EQ(infer(HloOpcode::kTranspose, {0}, dims), "f32[8,4]");
  dims.dimensions = {0, 2};
  EXPECT_EQ(infer(HloOpcode::kBroadcast, {0}, dims, "f32[4,5,8]"), "f32[4,5,8]");
  EXPECT_TRUE(Mentions(infer(HloOpcode::kBroadcast, {0}, dims, "f32[4,5,9]"),
                       "maps operand dim 1 (size 8) to result dim 2 (size 9)"));
  dims.dimensions = {2, 0};
  EXPECT_TRUE(Mentions(infer(HloOpcode::kBroadcast, {0}, dims, "f32[8,5,4]"), "must be sorted"));
  EXPECT_EQ(infer(HloOpcode::kReshape, {0}, {}, "f32[32]"), "f32[32]");
  EXPECT_TRUE(Mentions(infer(HloOpcode::kReshape, {0}, {}, "f32[31]"), "element type and count"));
  HloAttributes cat;
  cat.dimensions = {1};
  EXPECT_EQ(infer(HloOpcode::kConcatenate, {0, 2}, cat), "f32[4,11]");
  cat.dimensions = {0};
  EXPECT_TRUE(Mentions(infer(HloOpcode::kConcatenate, {0, 2}, cat), "differ outside dimension 0"));
  HloAttributes sl;
  sl.slice = {{1, 4, 1}, {0, 8, 3}};
  EXPECT_EQ(infer(HloOpcode::kSlice, {0}, sl), "f32[3,3]");
  sl.slice = {{1, 5, 1}, {0, 8, 1}};
  EXPECT_TRUE(Mentions(infer(HloOpcode::kSlice, {0}, sl), "invalid for dim 0 of size 4"));
  HloAttributes ds;
  ds.dynamic_slice_sizes = {2, 8};
  EXPECT_EQ(infer(HloOpcode::kDynamicSlice, {0, 3, 3}, ds), "f32[2,8]");
  EXPECT_TRUE(Mentions(infer(HloOpcode::kDynamicSlice, {0, 3}, ds), "takes 3 operands"));
  EXPECT_TRUE(Mentions(infer(HloOpcode::kDynamicSlice, {0, 3, 1}, ds), "integer scalar"));
  EXPECT_EQ(infer(HloOpcode::kDynamicUpdateSlice, {0, 4, 3, 3}), "f32[4,8]");
  EXPECT_TRUE(Mentions(infer(HloOpcode::kDynamicUpdateSlice, {4, 0, 3, 3}), "larger than"));
  HloAttributes pad;
  pad.padding = {{1, 2, 0}, {-1, 0, 2}};
  EXPECT_EQ(infer(HloOpcode::kPad, {0, 1}, pad), "f32[7,21]");
  HloAttributes iota;
  iota.iota_dimension = 1;
  EXPECT_EQ(infer(HloOpcode::kIota, {}, iota, "s32[3,5]"), "s32[3,5]");
  iota.iota_dimension = 2;
  EXPECT_TRUE(Mentions(infer(HloOpcode::kIota, {}, iota, "s32[3,5]"), "out of range"));
}

TEST(ShapeInferenceTest, ReduceDotGatherScatter) {
  HloModule module("m");
  HloComputation* add =
      module.AddComputation(MakeScalarReduction("add", HloOpcode::kAdd, PrimitiveType::kF32));
  Infer infer({"f32[4,8,16]", "f32[]", "bf16[2,3,5,7]", "bf16[2,3,7,11]", "f32[100,64]", "s32[6,2]",
               "f32[6,64]", "s32[6]", "f32[6,64,2]", "bf16[100,64]", "bf16[6,64]", "s32[100,64]",
               "s32[6,64]"});
  HloAttributes r;
  r.dimensions = {0, 2};
  EXPECT_EQ(infer(HloOpcode::kReduce, {0, 1}, r, "", {add}), "f32[8]");
  EXPECT_TRUE(Mentions(infer(HloOpcode::kReduce, {0, 1}, r), "needs a to_apply"));
  r.dimensions = {0, 0};
  EXPECT_TRUE(Mentions(infer(HloOpcode::kReduce, {0, 1}, r, "", {add}), "repeats dim 0"));

  HloAttributes dot;
  dot.dot.lhs_batch_dims = {0, 1};
  dot.dot.rhs_batch_dims = {0, 1};
  dot.dot.lhs_contracting_dims = {3};
  dot.dot.rhs_contracting_dims = {2};
  EXPECT_EQ(infer(HloOpcode::kDot, {2, 3}, dot), "bf16[2,3,5,11]");
  EXPECT_EQ(infer(HloOpcode::kDot, {2, 3}, dot, "f32[2,3,5,11]"), "f32[2,3,5,11]");
  dot.dot.rhs_contracting_dims = {3};
  EXPECT_TRUE(Mentions(infer(HloOpcode::kDot, {2, 3}, dot),
                       "contracting dim sizes differ: lhs dim 3 is 7 but rhs dim 3 is 11"));

  // Embedding lookup: rows of a [100,64] table by [6] ids (implicit index dim).
  HloAttributes g;
  g.gather.offset_dims = {1};
  g.gather.collapsed_slice_dims = {0};
  g.gather.start_index_map = {0};
  g.gather.index_vector_dim = 1;
  g.gather_slice_sizes = {1, 64};
  EXPECT_EQ(infer(HloOpcode::kGather, {4, 7}, g), "f32[6,64]");
  // Explicit index vectors of 2 coordinates: a [1,8] window per index.
  HloAttributes g2;
  g2.gather.offset_dims = {1};
  g2.gather.collapsed_slice_dims = {0};
  g2.gather.start_index_map = {0, 1};
  g2.gather.index_vector_dim = 1;
  g2.gather_slice_sizes = {1, 8};
  EXPECT_EQ(infer(HloOpcode::kGather, {4, 5}, g2), "f32[6,8]");
  g2.gather_slice_sizes = {2, 8};
  EXPECT_TRUE(Mentions(infer(HloOpcode::kGather, {4, 5}, g2), "collapses dim 0"));
  // Batching dims: operand [6,64,2] gathered along dim 1 per batch row.
  HloAttributes g3;
  g3.gather.offset_dims = {};
  g3.gather.collapsed_slice_dims = {1};
  g3.gather.operand_batching_dims = {0};
  g3.gather.start_indices_batching_dims = {0};
  g3.gather.start_index_map = {1};
  g3.gather.index_vector_dim = 1;
  g3.gather_slice_sizes = {1, 1, 2};
  EXPECT_TRUE(Mentions(infer(HloOpcode::kGather, {8, 7}, g3), "offset_dims {} must have one"));
  g3.gather.offset_dims = {1};
  EXPECT_EQ(infer(HloOpcode::kGather, {8, 7}, g3), "f32[6,2]");

  HloAttributes s;
  s.scatter.update_window_dims = {1};
  s.scatter.inserted_window_dims = {0};
  s.scatter.scatter_dims_to_operand_dims = {0};
  s.scatter.index_vector_dim = 1;
  EXPECT_EQ(infer(HloOpcode::kScatter, {4, 7, 6}, s, "", {add}), "f32[100,64]");
  EXPECT_TRUE(Mentions(infer(HloOpcode::kScatter, {4, 7, 4}, s, "", {add}),
                       "updates dim 0 is 100 but the matching index batch dim is 6"));
  // As in XLA, a floating scatter may combine in another floating type (the
  // result keeps the operand's); integers may not, nor may a reduce.
  EXPECT_EQ(infer(HloOpcode::kScatter, {9, 7, 10}, s, "", {add}), "bf16[100,64]");
  EXPECT_TRUE(Mentions(infer(HloOpcode::kScatter, {11, 7, 12}, s, "", {add}),
                       "scatter computation 'add' parameter 0 must be s32[], got f32[]"));
  HloComputation* add_bf16 =
      module.AddComputation(MakeScalarReduction("add_bf16", HloOpcode::kAdd, PrimitiveType::kBF16));
  r.dimensions = {0, 2};
  EXPECT_TRUE(Mentions(infer(HloOpcode::kReduce, {0, 1}, r, "", {add_bf16}),
                       "reduce computation 'add_bf16' parameter 0 must be f32[], got bf16[]"));
  s.scatter.inserted_window_dims = {};
  EXPECT_TRUE(Mentions(infer(HloOpcode::kScatter, {4, 7, 6}, s, "", {add}), "must add up"));
}

TEST(ShapeInferenceTest, ControlFlowAndCollectives) {
  std::unique_ptr<HloModule> module = ParseHloModule(R"(HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
bad_cond {
  st = (s32[], f32[4]) parameter(0)
  ROOT i = s32[] get-tuple-element(st), index=0
}
body {
  st2 = (s32[], f32[4]) parameter(0)
  ROOT same = (s32[], f32[4]) copy(st2)
}
ENTRY main {
  x = f32[4] parameter(0)
  ROOT r = f32[4] negate(x)
}
)");
  HloComputation* add = module->GetComputation("add");
  HloComputation* bad_cond = module->GetComputation("bad_cond");
  HloComputation* body = module->GetComputation("body");
  Infer infer({"(s32[], f32[4])", "f32[8,4]", "f32[]"});
  EXPECT_TRUE(Mentions(infer(HloOpcode::kWhile, {0}, {}, "", {bad_cond, body}),
                       "condition 'bad_cond' must return pred[], returns s32[]"));
  EXPECT_TRUE(Mentions(infer(HloOpcode::kWhile, {1}, {}, "", {body, body}),
                       "must take one parameter of the loop state f32[8,4]"));
  HloAttributes gte;
  gte.tuple_index = 1;
  EXPECT_EQ(infer(HloOpcode::kGetTupleElement, {0}, gte), "f32[4]");
  gte.tuple_index = 2;
  EXPECT_TRUE(Mentions(infer(HloOpcode::kGetTupleElement, {0}, gte), "out of range"));
  EXPECT_EQ(infer(HloOpcode::kTuple, {1, 2}), "(f32[8,4], f32[])");
  EXPECT_TRUE(Mentions(infer(HloOpcode::kCall, {1}, {}, "", {add}), "passes 1 arguments"));

  HloAttributes ag;
  ag.dimensions = {0};
  ag.replica_groups = {{0, 1, 2}, {3, 4, 5}};
  EXPECT_EQ(infer(HloOpcode::kAllGather, {1}, ag), "f32[24,4]");
  EXPECT_TRUE(Mentions(infer(HloOpcode::kReduceScatter, {1}, ag, "", {add}),
                       "over 3 devices, which does not divide it"));
  ag.replica_groups = {};
  EXPECT_EQ(infer(HloOpcode::kAllGather, {1}, ag, "f32[32,4]"), "f32[32,4]");
  EXPECT_TRUE(Mentions(infer(HloOpcode::kAllGather, {1}, ag, "f32[32,5]"), "only scale dim 0"));
  ag.replica_groups = {{0, 1}, {1, 2}};
  EXPECT_TRUE(Mentions(infer(HloOpcode::kAllGather, {1}, ag), "device 1 appears in two"));
  HloAttributes ar;
  EXPECT_EQ(infer(HloOpcode::kAllReduce, {1}, ar, "", {add}), "f32[8,4]");
  HloAttributes cp;
  cp.source_target_pairs = {{0, 1}, {0, 2}};
  EXPECT_TRUE(Mentions(infer(HloOpcode::kCollectivePermute, {1}, cp), "sends from 0 twice"));
  EXPECT_EQ(infer(HloOpcode::kPartitionId, {}), "u32[]");
}

// Every rule that computes a size does so without overflowing: a result too
// large for int64 is a weft::Error naming the op (never a wrapped size).

// XLA's variadic all-gather and reduce-scatter (what a collective combiner
// makes): one result per operand, all along the same dimension.
TEST(ShapeInferenceTest, VariadicAllGatherAndReduceScatterGiveATupleOfResults) {
  Infer infer({"f32[6,4]", "bf16[3,2]", "f32[6,3]", "s32[]", "f32[5,4]"});
  HloAttributes ag;
  ag.dimensions = {0};
  ag.replica_groups = {{0, 2}, {1, 3}};
  EXPECT_EQ(infer(HloOpcode::kAllGather, {0, 1}), "error: all-gather takes one dimension, got {}");
  EXPECT_EQ(infer(HloOpcode::kAllGather, {0, 1}, ag), "(f32[12,4], bf16[6,2])");
  EXPECT_EQ(infer(HloOpcode::kAllGather, {0}, ag), "f32[12,4]");
  EXPECT_TRUE(Mentions(infer(HloOpcode::kAllGather, {0, 3}, ag), "out of range for s32[]"));
  ag.dimensions = {1};
  ag.replica_groups = {};
  EXPECT_EQ(infer(HloOpcode::kAllGather, {0, 2}, ag, "(f32[6,8], f32[6,6])"),
            "(f32[6,8], f32[6,6])");
  EXPECT_TRUE(Mentions(infer(HloOpcode::kAllGather, {0, 2}, ag, "f32[6,8]"),
                       "must declare a tuple of 2 arrays"));
  EXPECT_TRUE(Mentions(infer(HloOpcode::kAllGather, {0, 2}, ag, "(f32[6,8], f32[5,6])"),
                       "must only scale dim 1"));

  std::unique_ptr<HloModule> module = ParseHloModule(R"(HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  ROOT p = f32[] parameter(0)
})");
  HloComputation* add = module->GetComputation("add");
  HloAttributes rs;
  rs.dimensions = {0};
  rs.replica_groups = {{0, 1, 2}, {3, 4, 5}};
  EXPECT_EQ(infer(HloOpcode::kReduceScatter, {0, 2}, rs, "", {add}), "(f32[2,4], f32[2,3])");
  EXPECT_TRUE(Mentions(infer(HloOpcode::kReduceScatter, {0, 4}, rs, "", {add}),
                       "splits dim 0 of f32[5,4] over 3 devices"));
}
TEST(ShapeInferenceTest, ResultsWhoseSizeOverflowsAreErrors) {
  // 2^62 elements of pred fit (2^62 bytes); twice that does not.
  const std::string big = "pred[4611686018427387904]";
  Infer infer({big, big, "pred[]", "f32[2305843009213693951]", "f32[1,2305843009213693951]",
               "f32[4,4]", "s32[2,1]", "f32[65536,65536]", "f32[65536,65536]"});
  HloAttributes cat;
  cat.dimensions = {0};
  EXPECT_TRUE(Mentions(infer(HloOpcode::kConcatenate, {0, 1}, cat),
                       "concatenate dimension 0 adds up to a size that overflows int64"));
  HloAttributes pad;
  pad.padding = {{0, 4611686018427387904, 0}};
  EXPECT_TRUE(Mentions(infer(HloOpcode::kPad, {0, 2}, pad), "gives a size that overflows int64"));
  pad.padding = {{0, 0, 4}};  // interior padding multiplies
  EXPECT_TRUE(Mentions(infer(HloOpcode::kPad, {0, 2}, pad), "overflows int64"));
  pad.padding = {{0, 1, 0}};  // one more element still fits
  EXPECT_TRUE(Mentions(infer(HloOpcode::kPad, {0, 2}, pad), "pred[4611686018427387905]"));
  HloAttributes ag;
  ag.dimensions = {0};
  ag.replica_groups = {{0, 1}};
  EXPECT_TRUE(Mentions(infer(HloOpcode::kAllGather, {0}, ag), "gives a size that overflows int64"));
  ag.replica_groups = {{0, 1, 2, 3}};  // 2^63 - 4 elements fit; their bytes do not
  EXPECT_TRUE(Mentions(infer(HloOpcode::kAllGather, {3}, ag), "elements of 4 bytes overflow"));
  // A stride near INT64_MAX keeps one element (no wrap in ceil division).
  HloAttributes sl;
  sl.slice = {{0, 4, INT64_MAX}, {1, 4, INT64_MAX - 1}};
  EXPECT_EQ(infer(HloOpcode::kSlice, {5}, sl), "f32[1,1]");
  // dot: [65536,65536] x [65536,65536] keeps 2^32 elements, fine; the
  // outer product of two big vectors is not.
  HloAttributes dot;
  dot.dot.lhs_contracting_dims = {1};
  dot.dot.rhs_contracting_dims = {0};
  EXPECT_EQ(infer(HloOpcode::kDot, {7, 8}, dot), "f32[65536,65536]");
  HloAttributes outer;
  EXPECT_TRUE(Mentions(infer(HloOpcode::kDot, {4, 4}, outer),
                       "f32[1,2305843009213693951,1,2305843009213693951] is too large"));
  // A tuple of two arrays of 2^62 bytes each: 2^63 bytes in all.
  EXPECT_TRUE(Mentions(infer(HloOpcode::kTuple, {0, 1}), "tuple of 2 elements is too large"));
  // Broadcast/reshape/iota take the declared shape, which cannot be built
  // too large in the first place (ShapeTest), so they cannot overflow here.
  EXPECT_THROW(ParseShape("f32[4611686018427387904,2]"), Error);
  // Replica groups and permutation pairs name devices below kMaxDevices.
  HloAttributes groups;
  groups.dimensions = {0};
  groups.replica_groups = {{0, 1000000000}};
  EXPECT_TRUE(Mentions(infer(HloOpcode::kAllGather, {5}, groups), "not below 65536"));
  HloAttributes cp;
  cp.source_target_pairs = {{0, 1000000000}};
  EXPECT_TRUE(Mentions(infer(HloOpcode::kCollectivePermute, {5}, cp), "not below 65536"));
}

// The builder infers shapes too: an overflow is a weft::Error there as well.
TEST(ShapeInferenceTest, TheBuilderRefusesResultsThatOverflow) {
  HloComputationBuilder b("c");
  HloInstruction* x = b.Parameter(0, ParseShape("pred[4611686018427387904]"));
  EXPECT_THROW(b.Concatenate({x, x}, 0), Error);
  EXPECT_THROW(b.Parameter(1, Shape(PrimitiveType::kF32, {3, 6148914691236517206})), Error);
}

// The message of parsing (and verifying) `text`, or "" when it parses.
std::string ParseProblem(const std::string& text) {
  try {
    ParseHloModule(text);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

constexpr const char* kComparators = R"(HloModule m
lt {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = pred[] compare(a, b), direction=LT
}
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] add(a, b)
}
)";

std::string Entry(const std::string& body) {
  return std::string(kComparators) +
         "ENTRY e {\n  x = f32[6,8] parameter(0)\n  z = f32[] constant(0)\n" + body + "\n}\n";
}

TEST(ShapeInferenceTest, SortTopKAndWindows) {
  EXPECT_EQ(ParseProblem(Entry("  ROOT s = f32[6,8] sort(x), dimensions={0}, to_apply=lt")), "");
  EXPECT_EQ(ParseProblem(Entry("  ROOT k = topk(x), k=8")), "");  // the shape may be left out
  EXPECT_EQ(ParseProblem(Entry("  ROOT r = f32[3,6] reduce-window(x, z), window={size=2x3 "
                               "stride=2x1}, to_apply=add")),
            "");
  // Ops with called computations need their shape written.
  EXPECT_TRUE(Mentions(ParseProblem(Entry("  ROOT s = sort(x), dimensions={0}, to_apply=lt")),
                       "has no result shape"));
  EXPECT_TRUE(
      Mentions(ParseProblem(Entry("  ROOT s = f32[6,8] sort(x), dimensions={2}, to_apply=lt")),
               "out of range for rank 2"));
  EXPECT_TRUE(Mentions(
      ParseProblem(
          Entry("  i = s32[6,8] iota(), iota_dimension=0\n"
                "  ROOT s = (f32[6,8], s32[6,8]) sort(x, i), dimensions={0}, to_apply=lt")),
      "comparator 'lt' must take 4 scalar parameters"));
  EXPECT_TRUE(
      Mentions(ParseProblem(Entry("  ROOT s = f32[6,8] sort(x), dimensions={0}, to_apply=add")),
               "must return pred[]"));
  EXPECT_TRUE(Mentions(ParseProblem(Entry("  ROOT k = (f32[6,9], s32[6,9]) topk(x), k=9")),
                       "k=9 must be in [0, 8]"));
  EXPECT_TRUE(Mentions(ParseProblem(Entry("  ROOT r = f32[3,8] reduce-window(x, z), "
                                          "window={size=3x1}, to_apply=add")),
                       "result f32[3,8] does not match f32[4,8] inferred"));
  EXPECT_TRUE(Mentions(ParseProblem(Entry("  ROOT r = f32[6] reduce-window(x, z), window={size=2}, "
                                          "to_apply=add")),
                       "window has 1 dims but the operand f32[6,8] has 2"));
  EXPECT_TRUE(
      Mentions(ParseProblem(Entry("  ROOT r = f32[5,7] reduce-window(x, z), window={size=2x2 "
                                  "rhs_reversal=0x1}, to_apply=add")),
               "rhs_reversal applies to convolution only"));
  EXPECT_TRUE(Mentions(
      ParseProblem(
          Entry("  s = f32[3,8] parameter(1)\n  ROOT r = f32[6,8] select-and-scatter(x, s, z), "
                "window={size=2x2 stride=2x1}, select=lt, scatter=add")),
      "source f32[3,8] must be f32[3,7]"));
}

TEST(ShapeInferenceTest, RaggedDotModes) {
  const std::string params =
      "  a = f32[2,6,4] parameter(1)\n  w = f32[3,2,4,5] parameter(2)\n"
      "  s = u32[2,3] parameter(3)\n  g = s32[3] parameter(4)\n  v = f32[2,4,5] parameter(5)\n"
      "  f = f32[2,6,4] parameter(6)\n";
  const std::string noncontracting =
      "lhs_batch_dims={0}, rhs_batch_dims={1}, lhs_contracting_dims={2}, "
      "rhs_contracting_dims={2}, lhs_ragged_dims={1}, rhs_group_dims={0}";
  const std::string batched =
      "lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={1}";
  EXPECT_EQ(
      ParseProblem(Entry(params + "  ROOT d = f32[2,6,5] ragged-dot(a, w, s), " + noncontracting)),
      "");
  EXPECT_EQ(
      ParseProblem(Entry(params + "  ROOT d = f32[2,6,5] ragged-dot(a, w, g), " + noncontracting)),
      "");
  // Contracting mode: the groups lead the result; sizes [b, g].
  EXPECT_EQ(ParseProblem(Entry(params + "  ROOT d = f32[3,2,6,5] ragged-dot(a, v, s), " + batched +
                               ", lhs_ragged_dims={2}")),
            "");
  // Batch mode: the dot's shape; sizes [g] (no batch dim comes before it).
  EXPECT_EQ(ParseProblem(Entry(params + "  ROOT d = f32[2,6,5] ragged-dot(a, v, g), " + batched +
                               ", lhs_ragged_dims={0}")),
            "");
  EXPECT_TRUE(Mentions(ParseProblem(Entry(params + "  ROOT d = f32[2,6,5] ragged-dot(a, v, g), " +
                                          batched + ", lhs_ragged_dims={0}, rhs_group_dims={1}")),
                       "takes no rhs group dims"));
  EXPECT_TRUE(Mentions(
      ParseProblem(Entry(params + "  ROOT d = f32[2,6,5] ragged-dot(a, w, f), " + noncontracting)),
      "group_sizes must be an integer array"));
  EXPECT_TRUE(Mentions(ParseProblem(Entry(params +
                                          "  s2 = u32[3,3] parameter(7)\n  ROOT d = f32[2,6,5] "
                                          "ragged-dot(a, w, s2), " +
                                          noncontracting)),
                       "group_sizes must be [3] or [2,3]"));
  EXPECT_TRUE(Mentions(ParseProblem(Entry(params +
                                          "  s4 = u32[2,4] parameter(7)\n  ROOT d = f32[2,6,5] "
                                          "ragged-dot(a, w, s4), " +
                                          noncontracting)),
                       "has 3 groups but group_sizes"));
  EXPECT_TRUE(Mentions(
      ParseProblem(Entry(params + "  ROOT d = f32[2,6,5] ragged-dot(a, w, s), " + batched)),
      "lhs_ragged_dims"));
}

TEST(ShapeInferenceTest, CholeskyAndTriangularSolve) {
  const std::string params =
      "  a = f32[2,4,4] parameter(1)\n  b = f32[2,4,3] parameter(2)\n"
      "  br = f32[2,3,4] parameter(3)\n  i = s32[4,4] parameter(4)\n";
  EXPECT_EQ(ParseProblem(Entry(params + "  ROOT c = f32[2,4,4] cholesky(a), lower=true")), "");
  EXPECT_EQ(ParseProblem(Entry(params + "  ROOT t = f32[2,4,3] triangular-solve(a, b), "
                                        "left_side=true, lower=true, transpose_a=TRANSPOSE")),
            "");
  EXPECT_EQ(ParseProblem(Entry(params + "  ROOT t = f32[2,3,4] triangular-solve(a, br), "
                                        "left_side=false, unit_diagonal=true")),
            "");
  EXPECT_TRUE(
      Mentions(ParseProblem(Entry(params + "  ROOT c = f32[6,8] cholesky(x)")), "square matrices"));
  EXPECT_TRUE(Mentions(ParseProblem(Entry(params + "  ROOT c = s32[4,4] cholesky(i)")),
                       "cholesky of s32 is not supported"));
  EXPECT_TRUE(Mentions(ParseProblem(Entry(params + "  ROOT t = f32[2,4,3] triangular-solve(a, b), "
                                                   "left_side=false")),
                       "dim 2 of b f32[2,4,3] must be a's 4"));
  EXPECT_TRUE(Mentions(ParseProblem(Entry(params + "  ROOT t = f32[2,4,3] triangular-solve(a, b), "
                                                   "left_side=true, transpose_a=CONJUGATE")),
                       "transpose_a must be one of NO_TRANSPOSE, TRANSPOSE, ADJOINT"));
}

TEST(ShapeInferenceTest, BitcastConvertConditionalAndTokens) {
  EXPECT_EQ(ParseProblem(Entry("  ROOT b = u16[6,8,2] bitcast-convert(x)")), "");
  EXPECT_EQ(
      ParseProblem(Entry("  y = f32[6,4,2] reshape(x)\n  ROOT b = f64[6,4] bitcast-convert(y)")),
      "");
  EXPECT_TRUE(Mentions(ParseProblem(Entry("  ROOT b = f64[6,8] bitcast-convert(x)")),
                       "needs a last dim of 2"));
  EXPECT_TRUE(Mentions(ParseProblem(Entry("  ROOT b = pred[6,8,4] bitcast-convert(x)")),
                       "bitcast-convert of pred is not allowed"));
  const std::string branches = R"(HloModule m
one {
  a = f32[2] parameter(0)
  ROOT r = f32[2] negate(a)
}
two {
  a = s32[] parameter(0)
  one = f32[] constant(1)
  ROOT r = f32[2] broadcast(one), dimensions={}
}
)";
  EXPECT_TRUE(Mentions(ParseProblem(branches + R"(ENTRY e {
  p = pred[] parameter(0)
  v = f32[2] parameter(1)
  ROOT c = f32[2] conditional(p, v, v), true_computation=one, false_computation=two
})"),
                       "branch 1 'two' must take one parameter of its argument's shape f32[2]"));
  EXPECT_TRUE(Mentions(ParseProblem(branches + R"(ENTRY e {
  p = f32[] parameter(0)
  v = f32[2] parameter(1)
  ROOT c = f32[2] conditional(p, v), branch_computations={one}
})"),
                       "must be pred[] or s32[]"));
  EXPECT_EQ(ParseProblem(R"(HloModule m
ENTRY e {
  a = token[] after-all()
  b = token[] after-all(a, a)
  in = (f32[4], token[]) infeed(b)
  d = f32[4] get-tuple-element(in), index=0
  ROOT o = token[] outfeed(d, b), outfeed_shape=f32[4]
})"),
            "");
  // send / recv as XLA writes them (a channel, asynchronous pairs).
  const std::string transfers = R"(HloModule m
ENTRY e {
  a = token[] after-all()
  x = f32[3,2] parameter(0)
  s = (f32[3,2], u32[], token[]) send(x, a), channel_id=1, is_host_transfer=true
  sd = token[] send-done(s), channel_id=1, is_host_transfer=true
  r = (f32[5], u32[], token[]) recv(a), channel_id=2
  ROOT rd = (f32[5], token[]) recv-done(r), channel_id=2
})";
  EXPECT_EQ(ParseProblem(transfers), "");
  auto module = ParseHloModule(transfers);
  EXPECT_EQ(module->entry_computation()->GetInstruction("rd")->shape().ToString(),
            "(f32[5], token[])");
  EXPECT_NE(module->ToString().find("send(x, a), channel_id=1, is_host_transfer=true"),
            std::string::npos)
      << module->ToString();
  EXPECT_TRUE(Mentions(ParseProblem(R"(HloModule m
ENTRY e {
  a = token[] after-all()
  r = (f32[5], token[]) recv(a), channel_id=2
  ROOT rd = (f32[5], token[]) recv-done(r), channel_id=2
})"),
                       "recv result (f32[5], token[]) must be (data, u32[], token[])"));
  EXPECT_TRUE(Mentions(ParseProblem(R"(HloModule m
ENTRY e {
  a = token[] after-all()
  ROOT sd = token[] send-done(a), channel_id=1
})"),
                       "send-done operand must be a send"));
  // An asynchronous call as XLA's scheduler writes it.
  const std::string async_call = R"(HloModule m
sum {
  a = s32[8] parameter(0)
  b = s32[8] parameter(1)
  ROOT s = s32[8] add(a, b)
}, execution_thread="side"

ENTRY e {
  x = s32[8] parameter(0)
  y = s32[8] parameter(1)
  start = ((s32[8], s32[8]), s32[8], u32[]) call-start(x, y), async_execution_thread="side", to_apply=sum
  ROOT done = s32[8] call-done(start)
})";
  EXPECT_EQ(ParseProblem(async_call), "");
  EXPECT_NE(ParseHloModule(async_call)->ToString().find("call-start(x, y), to_apply=sum"),
            std::string::npos);
  std::string wrong = async_call;
  wrong.replace(wrong.find("((s32[8], s32[8]), s32[8]"), 25, "((s32[8], s32[8]), s32[4]");
  EXPECT_TRUE(Mentions(ParseProblem(wrong), "call-start result"));
}

TEST(ReplicaGroupSizeTest, SizesAndErrors) {
  EXPECT_EQ(ReplicaGroupSize({}), 0);
  EXPECT_EQ(ReplicaGroupSize({{0, 1}, {2, 3}}), 2);
  EXPECT_THROW(ReplicaGroupSize({{0, 1}, {2}}), Error);
  EXPECT_THROW(ReplicaGroupSize({{0, -1}}), Error);
}

}  // namespace
}  // namespace weft
