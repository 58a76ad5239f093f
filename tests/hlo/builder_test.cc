#include "weft/hlo/builder.h"

#include <gtest/gtest.h>

#include <set>

#include "weft/hlo/module.h"
#include "weft/hlo/parser.h"
#include "weft/hlo/printer.h"
#include "weft/hlo/verifier.h"

namespace weft {
namespace {

constexpr PrimitiveType F32 = PrimitiveType::kF32;
constexpr PrimitiveType S32 = PrimitiveType::kS32;

// The scan over stacked weights, built in C++: the loop state is
// (i, h, weights); the body slices layer i and applies it.
std::unique_ptr<HloModule> BuildScan() {
  auto module = std::make_unique<HloModule>("scan");
  HloComputation* add = module->AddComputation(MakeScalarReduction("add", HloOpcode::kAdd, F32));
  const Shape state =
      Shape::Tuple({Shape::Scalar(S32), Shape(F32, {8, 16}), Shape(F32, {4, 16, 16})});

  HloComputationBuilder cond("cond");
  {
    HloInstruction* s = cond.Parameter(0, state, "c_state");
    HloInstruction* i = cond.GetTupleElement(s, 0);
    HloInstruction* n = cond.ConstantScalar(S32, 4);
    cond.Compare(i, n, ComparisonDirection::kLt);
  }
  HloComputation* cond_c = module->AddComputation(cond.Build());

  HloComputationBuilder body("body");
  {
    HloInstruction* s = body.Parameter(0, state, "b_state");
    HloInstruction* i = body.GetTupleElement(s, 0);
    HloInstruction* h = body.GetTupleElement(s, 1);
    HloInstruction* ws = body.GetTupleElement(s, 2);
    HloInstruction* zero = body.ConstantScalar(S32, 0);
    HloInstruction* w = body.DynamicSlice(ws, {i, zero, zero}, {1, 16, 16});
    w = body.Reshape(w, {16, 16});
    DotDimensionNumbers dn;
    dn.lhs_contracting_dims = {1};
    dn.rhs_contracting_dims = {0};
    HloInstruction* mm = body.Dot(h, w, dn);
    HloInstruction* act = body.Unary(HloOpcode::kTanh, mm);
    HloInstruction* next = body.Add(i, body.ConstantScalar(S32, 1));
    body.Tuple({next, act, ws});
  }
  HloComputation* body_c = module->AddComputation(body.Build());

  HloComputationBuilder b("main");
  HloInstruction* x = b.Parameter(0, Shape(F32, {8, 16}), "x");
  x->set_sharding(HloSharding::Parse("{devices=[4,1]<=[4]}"));
  HloInstruction* weights = b.Parameter(1, Shape(F32, {4, 16, 16}), "weights");
  HloInstruction* init = b.Tuple({b.ConstantScalar(S32, 0), x, weights});
  HloInstruction* loop = b.While(init, cond_c, body_c);
  HloInstruction* h = b.GetTupleElement(loop, 1);
  b.Reduce(h, b.ConstantScalar(F32, 0), {1}, add);
  module->AddEntryComputation(b.Build());
  module->set_num_partitions(4);
  return module;
}

TEST(BuilderTest, ScanModuleHasInferredShapesAndVerifies) {
  std::unique_ptr<HloModule> module = BuildScan();
  EXPECT_NO_THROW(VerifyHloModule(*module));
  HloComputation* body = module->GetComputation("body");
  ASSERT_NE(body, nullptr);
  HloInstruction* slice = body->GetInstruction("dynamic-slice");
  ASSERT_NE(slice, nullptr) << PrintModule(*module);
  EXPECT_EQ(slice->shape().ToString(), "f32[1,16,16]");
  EXPECT_EQ(body->GetInstruction("dot")->shape().ToString(), "f32[8,16]");
  EXPECT_EQ(body->root_instruction()->shape().ToString(), "(s32[], f32[8,16], f32[4,16,16])");
  HloInstruction* root = module->entry_computation()->root_instruction();
  EXPECT_EQ(root->opcode(), HloOpcode::kReduce);
  EXPECT_EQ(root->shape().ToString(), "f32[8]");
  EXPECT_EQ(root->to_apply()->name(), "add");
}

TEST(BuilderTest, PrintsTextThatParsesBackIdentically) {
  std::unique_ptr<HloModule> module = BuildScan();
  const std::string text = PrintModule(*module);
  EXPECT_EQ(PrintModule(*ParseHloModule(text)), text);
  // Spot-check the syntax the builder produced.
  EXPECT_NE(text.find("dynamic-slice = f32[1,16,16] dynamic-slice(get-tuple-element.3, "
                      "get-tuple-element.1, constant.1, constant.1), "
                      "dynamic_slice_sizes={1,16,16}"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("while = (s32[], f32[8,16], f32[4,16,16]) while(tuple.1), "
                      "condition=cond, body=body"),
            std::string::npos)
      << text;
}

TEST(BuilderTest, NamesAreUniqueAcrossTheModule) {
  std::unique_ptr<HloModule> module = BuildScan();
  std::set<std::string> names;
  for (HloComputation* c : module->computations()) {
    for (HloInstruction* instr : c->instructions()) {
      EXPECT_TRUE(names.insert(instr->name()).second) << instr->name();
    }
  }
}

TEST(BuilderTest, NamePrefixNamesUnnamedInstructions) {
  HloComputationBuilder b("main");
  HloInstruction* x = b.Parameter(0, Shape(F32, {4}), "x");
  b.set_name_prefix("dot.3");
  HloInstruction* neg = b.Unary(HloOpcode::kNegate, x);
  HloInstruction* named = b.Add(neg, x);
  HloInstruction* given = b.AddInstruction(HloOpcode::kCopy, {named}, {}, Shape(), {}, "kept");
  b.set_name_prefix("");
  HloInstruction* plain = b.Multiply(given, x);
  EXPECT_EQ(neg->name(), "dot.3.negate");
  EXPECT_EQ(named->name(), "dot.3.add");
  EXPECT_EQ(given->name(), "kept");
  EXPECT_EQ(plain->name(), "multiply");
}

TEST(BuilderTest, EveryOpKind) {
  HloModule module("ops");
  HloComputation* add = module.AddComputation(MakeScalarReduction("add", HloOpcode::kAdd, F32));
  HloComputationBuilder b("main");
  HloInstruction* p = b.Parameter(0, Shape(F32, {4, 6}));
  HloInstruction* zero = b.ConstantScalar(F32, 0);
  EXPECT_EQ(b.Iota(Shape(S32, {4, 6}), 1)->shape().ToString(), "s32[4,6]");
  EXPECT_EQ(b.Broadcast(zero, {4, 6}, {})->shape().ToString(), "f32[4,6]");
  EXPECT_EQ(b.Transpose(p, {1, 0})->shape().ToString(), "f32[6,4]");
  HloInstruction* reversed = b.Reverse(p, {1});
  EXPECT_EQ(reversed->shape().ToString(), "f32[4,6]");
  EXPECT_EQ(reversed->dimensions(), std::vector<int64_t>{1});
  EXPECT_EQ(b.Slice(p, {0, 1}, {4, 6}, {2, 2})->shape().ToString(), "f32[2,3]");
  EXPECT_EQ(b.Concatenate({p, p}, 0)->shape().ToString(), "f32[8,6]");
  EXPECT_EQ(b.Pad(p, zero, {{1, 1, 0}, {0, 2, 1}})->shape().ToString(), "f32[6,13]");
  EXPECT_EQ(b.Convert(p, PrimitiveType::kBF16)->shape().ToString(), "bf16[4,6]");
  EXPECT_EQ(b.Copy(p)->shape().ToString(), "f32[4,6]");
  HloInstruction* lt = b.Compare(p, p, ComparisonDirection::kLt);
  EXPECT_EQ(lt->shape().ToString(), "pred[4,6]");
  EXPECT_EQ(b.Select(lt, p, p)->shape().ToString(), "f32[4,6]");
  HloInstruction* i0 = b.ConstantScalar(S32, 0);
  HloInstruction* upd = b.Slice(p, {0, 0}, {2, 2});
  EXPECT_EQ(b.DynamicUpdateSlice(p, upd, {i0, i0})->shape().ToString(), "f32[4,6]");
  EXPECT_EQ(b.Reduce(p, zero, {0, 1}, add)->shape().ToString(), "f32[]");
  DotDimensionNumbers dn;
  dn.lhs_contracting_dims = {1};
  dn.rhs_contracting_dims = {1};
  EXPECT_EQ(b.Dot(p, p, dn, PrimitiveType::kF32)->shape().ToString(), "f32[4,4]");
  EXPECT_EQ(b.AllReduce(p, add, {{0, 1}, {2, 3}}, 1)->shape().ToString(), "f32[4,6]");
  EXPECT_EQ(b.AllGather(p, 1, {{0, 1}, {2, 3}})->shape().ToString(), "f32[4,12]");
  EXPECT_EQ(b.ReduceScatter(p, 0, {{0, 1}, {2, 3}}, add)->shape().ToString(), "f32[2,6]");
  EXPECT_EQ(b.AllToAll(p, 0, {{0, 1}})->shape().ToString(), "f32[4,6]");
  EXPECT_EQ(b.CollectivePermute(p, {{0, 1}, {1, 0}})->shape().ToString(), "f32[4,6]");
  EXPECT_EQ(b.PartitionId()->shape().ToString(), "u32[]");
  EXPECT_EQ(b.CustomCall({p}, Shape(F32, {4}), "weft.rowsum", "{}")->shape().ToString(), "f32[4]");

  HloInstruction* table = b.Parameter(1, Shape(F32, {100, 8}));
  HloInstruction* ids = b.Parameter(2, Shape(S32, {5}));
  GatherDimensionNumbers g;
  g.offset_dims = {1};
  g.collapsed_slice_dims = {0};
  g.start_index_map = {0};
  g.index_vector_dim = 1;
  HloInstruction* rows = b.Gather(table, ids, g, {1, 8});
  EXPECT_EQ(rows->shape().ToString(), "f32[5,8]");
  ScatterDimensionNumbers s;
  s.update_window_dims = {1};
  s.inserted_window_dims = {0};
  s.scatter_dims_to_operand_dims = {0};
  s.index_vector_dim = 1;
  EXPECT_EQ(b.Scatter(table, ids, rows, s, add)->shape().ToString(), "f32[100,8]");
  module.AddEntryComputation(b.Build());
  EXPECT_NO_THROW(VerifyHloModule(module));
  const std::string text = PrintModule(module);
  EXPECT_EQ(PrintModule(*ParseHloModule(text)), text);
}

TEST(BuilderTest, BadShapesThrowNamingTheOp) {
  HloComputationBuilder b("main");
  HloInstruction* a = b.Parameter(0, Shape(F32, {4}));
  HloInstruction* c = b.Parameter(1, Shape(F32, {5}));
  try {
    b.Add(a, c);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("building add in 'main': add operands must have the "
                                         "same shape, got f32[4] and f32[5]"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(b.Reshape(a, {3}), Error);
  EXPECT_THROW(b.Transpose(a, {1}), Error);
  EXPECT_THROW(b.Slice(a, {0}, {5}), Error);
  EXPECT_THROW(b.Unary(HloOpcode::kAdd, a), Error);
  EXPECT_THROW(b.Broadcast(a, {4, 3}, {1}), Error);
  // A failed add leaves nothing behind.
  EXPECT_EQ(b.last(), c);
}

TEST(BuilderTest, BuildTwiceFails) {
  HloComputationBuilder b("f");
  b.Parameter(0, Shape::Scalar(F32));
  std::unique_ptr<HloComputation> c = b.Build();
  EXPECT_THROW(b.Build(), Error);
  EXPECT_THROW(b.Parameter(1, Shape::Scalar(F32)), Error);
  HloComputationBuilder empty("g");
  EXPECT_THROW(empty.Build(), Error);
}

}  // namespace
}  // namespace weft
