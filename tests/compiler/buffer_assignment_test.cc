#include "weft/compiler/buffer_assignment.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "weft/hlo/builder.h"
#include "weft/hlo/module.h"
#include "weft/hlo/parser.h"

namespace weft::compiler {
namespace {

std::vector<HloInstruction*> PostOrder(const HloComputation& c) {
  return c.MakeInstructionPostOrder();
}

const Shape kMat(PrimitiveType::kF32, {8, 16});

// A random program of elementwise ops, dots, reduces, reshapes, slices,
// dynamic-update-slices, tuples and (with `loops`) a while loop, on f32[8,16].
std::unique_ptr<HloModule> RandomModule(uint32_t seed, bool loops, bool uniform) {
  std::mt19937 rng(seed);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  auto module = std::make_unique<HloModule>("random");
  HloComputation* add =
      module->AddComputation(MakeScalarReduction("add", HloOpcode::kAdd, PrimitiveType::kF32));
  HloComputation *cond = nullptr, *body = nullptr;
  if (loops) {
    const Shape state = Shape::Tuple({Shape::Scalar(PrimitiveType::kS32), kMat, kMat});
    HloComputationBuilder cb("cond");
    auto* p = cb.Parameter(0, state, "s");
    auto* i = cb.GetTupleElement(p, 0);
    cb.Compare(i, cb.ConstantScalar(PrimitiveType::kS32, 3), ComparisonDirection::kLt);
    cond = module->AddComputation(cb.Build());
    HloComputationBuilder bb("body");
    auto* q = bb.Parameter(0, state, "s");
    auto* j = bb.GetTupleElement(q, 0);
    auto* a = bb.GetTupleElement(q, 1);
    auto* b = bb.GetTupleElement(q, 2);
    auto* j1 = bb.Add(j, bb.ConstantScalar(PrimitiveType::kS32, 1));
    auto* a1 = bb.Multiply(a, b);
    auto* b1 = bb.Unary(HloOpcode::kNegate, b);
    if (seed % 2) {
      bb.Tuple({j1, b1, a1});  // swapped carries
    } else {
      bb.Tuple({j1, a1, b1});
    }
    body = module->AddComputation(bb.Build());
  }
  HloComputationBuilder b("main");
  std::vector<HloInstruction*> pool;
  for (int p = 0; p < 3; ++p) pool.push_back(b.Parameter(p, kMat, "p" + std::to_string(p)));
  const int steps = 20 + static_cast<int>(pick(30));
  for (int s = 0; s < steps; ++s) {
    HloInstruction* x = pool[pick(pool.size())];
    HloInstruction* y = pool[pool.size() - 1 - pick(std::min<size_t>(pool.size(), 4))];
    HloInstruction* r = nullptr;
    switch (pick(uniform ? 4 : 10)) {
      case 0:
        r = b.Add(x, y);
        break;
      case 1:
        r = b.Multiply(x, x);
        break;
      case 2:
        r = b.Unary(HloOpcode::kExp, x);
        break;
      case 3:
        r = b.Select(b.Compare(x, y, ComparisonDirection::kGt), x, y);
        break;
      case 4: {  // [8,16] x [16,8]^T -> [8,8] -> broadcast back
        DotDimensionNumbers dn;
        dn.lhs_contracting_dims = {1};
        dn.rhs_contracting_dims = {1};
        auto* d = b.Dot(x, y, dn);  // [8,8]
        r = b.Reshape(b.Concatenate({d, d}, 1), {8, 16});
        break;
      }
      case 5: {
        auto* red = b.Reduce(x, b.ConstantScalar(PrimitiveType::kF32, 0), {1}, add);
        r = b.Broadcast(red, {8, 16}, {0});
        break;
      }
      case 6:
        r = b.Reshape(b.Transpose(b.Reshape(x, {16, 8}), {1, 0}), {8, 16});
        break;
      case 7: {
        auto* sl = b.Slice(x, {2, 0}, {4, 16}, {1, 1});
        auto* zero = b.ConstantScalar(PrimitiveType::kS32, 0);
        auto* three = b.ConstantScalar(PrimitiveType::kS32, 3);
        r = b.DynamicUpdateSlice(y, b.Unary(HloOpcode::kNegate, sl), {three, zero});
        break;
      }
      case 8: {
        auto* t = b.Tuple({x, y});
        r = b.Subtract(b.GetTupleElement(t, 1), b.GetTupleElement(t, 0));
        break;
      }
      default: {
        if (!loops) {
          r = b.Add(x, y);
          break;
        }
        auto* w = b.While(b.Tuple({b.ConstantScalar(PrimitiveType::kS32, 0), x, b.Add(x, y)}), cond,
                          body);
        r = b.Add(b.GetTupleElement(w, 1), b.GetTupleElement(w, 2));
        break;
      }
    }
    pool.push_back(r);
  }
  b.Tuple({pool.back(), pool[pool.size() - 2]});
  module->AddEntryComputation(b.Build());
  return module;
}

// Buffers live at the same time never overlap; every value's buffer is live
// from its definition to its last use.
void CheckAssignment(const HloModule& module, const BufferAssignment& a) {
  for (const auto& [c, ca] : a.computations()) {
    for (size_t i = 0; i < ca.buffers.size(); ++i) {
      const AssignedBuffer& x = ca.buffers[i];
      EXPECT_LE(x.offset + x.size, ca.size);
      EXPECT_EQ(x.offset % kBufferAlignment, 0);
      for (size_t j = i + 1; j < ca.buffers.size(); ++j) {
        const AssignedBuffer& y = ca.buffers[j];
        const bool together = x.start <= y.end && y.start <= x.end;
        const bool overlap = x.offset < y.offset + y.size && y.offset < x.offset + x.size;
        EXPECT_FALSE(together && overlap)
            << c->name() << ": buffers of " << x.instr->name() << " [" << x.start << "," << x.end
            << "] at " << x.offset << "+" << x.size << " and " << y.instr->name() << " [" << y.start
            << "," << y.end << "] at " << y.offset << "+" << y.size;
      }
    }
    EXPECT_GE(ca.size, ca.max_live_bytes);
    const int64_t n = static_cast<int64_t>(ca.sequence.size());
    for (const HloInstruction* instr : ca.sequence) {
      const InstructionAssignment& ia = a.Of(*instr);
      int64_t last = instr == c->root_instruction() ? n : ia.position;
      for (const HloInstruction* user : instr->users()) {
        if (ca.instructions.count(user)) last = std::max(last, a.Of(*user).position);
      }
      for (const LeafAssignment& l : ia.leaves) {
        if (l.buffer < 0) continue;
        const AssignedBuffer& buf = ca.buffers[l.buffer];
        EXPECT_LE(buf.start, ia.position) << instr->name();
        EXPECT_GE(buf.end, last) << instr->name();
        if (l.kind == LeafAssignment::Kind::kNew) {
          EXPECT_EQ(l.offset, buf.offset);
        }
      }
    }
  }
  EXPECT_EQ(a.arena_bytes(), a.Of(*module.entry_computation()).size);
}

TEST(BufferAssignmentTest, RandomProgramsNeverOverlapLiveBuffers) {
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    SCOPED_TRACE(seed);
    auto module = RandomModule(seed, /*loops=*/seed % 3 == 0, /*uniform=*/false);
    const BufferAssignment a = AssignBuffers(*module, PostOrder);
    CheckAssignment(*module, a);
    EXPECT_GT(a.arena_bytes(), 0);
    EXPECT_EQ(a.input_bytes(), 3 * kMat.ByteSize());
  }
}

// Straight-line code of equal-sized buffers packs perfectly: the arena is
// the most bytes live at once.
TEST(BufferAssignmentTest, UniformStraightLineCodePacksPerfectly) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE(seed);
    auto module = RandomModule(seed, /*loops=*/false, /*uniform=*/true);
    const BufferAssignment a = AssignBuffers(*module, PostOrder);
    CheckAssignment(*module, a);
    const ComputationAssignment& e = a.Of(*module->entry_computation());
    // compare's pred results are smaller; all others are f32[8,16].
    EXPECT_LE(e.size, e.max_live_bytes + 128 * (e.size / kMat.ByteSize()));
    EXPECT_GE(e.size, e.max_live_bytes);
  }
}

LeafAssignment::Kind KindOf(const BufferAssignment& a, const HloInstruction* instr) {
  return a.Of(*instr).leaves.at(0).kind;
}

// In place only when no other operand reads the buffer.
TEST(BufferAssignmentTest, NoInPlaceReuseWhenAnotherOperandReadsTheBuffer) {
  HloModule module("alias");
  HloComputation* add =
      module.AddComputation(MakeScalarReduction("add", HloOpcode::kAdd, PrimitiveType::kF32));
  HloComputationBuilder b("main");
  const Shape v(PrimitiveType::kF32, {16});
  auto* p = b.Parameter(0, v, "p");
  auto* q = b.Parameter(1, v, "q");
  auto* x = b.Unary(HloOpcode::kNegate, p);    // x dies at add_xx
  auto* add_xx = b.Add(x, x);                  // reads x twice: no reuse
  auto* y = b.Unary(HloOpcode::kExp, add_xx);  // in place of add_xx
  auto* zero = b.ConstantScalar(PrimitiveType::kS32, 0);
  auto* dus = b.DynamicUpdateSlice(y, y, {zero});  // operand == update: no reuse
  auto* z = b.Unary(HloOpcode::kNegate, dus);      // in place
  ScatterDimensionNumbers dn;
  dn.update_window_dims = {0};
  dn.scatter_dims_to_operand_dims = {0};
  dn.index_vector_dim = 0;
  auto* idx = b.Constant(Literal::FromInts(Shape(PrimitiveType::kS32, {1}), {0}));
  auto* sc = b.Scatter(z, idx, z, dn, add);  // operand == updates: no reuse
  auto* w = b.Add(sc, q);                    // in place of sc
  auto* r = b.Reshape(w, {4, 4});            // a view
  auto* dus2 = b.DynamicUpdateSlice(r, b.Unary(HloOpcode::kNegate, b.Reshape(w, {4, 4})),
                                    {zero, zero});  // w is read through its update: no reuse
  auto* out = b.Unary(HloOpcode::kNegate, dus2);
  module.AddEntryComputation(b.Build(out));
  const BufferAssignment a = AssignBuffers(module, PostOrder);
  CheckAssignment(module, a);
  using K = LeafAssignment::Kind;
  EXPECT_EQ(KindOf(a, x), K::kNew);  // p is the caller's
  EXPECT_EQ(KindOf(a, add_xx), K::kNew);
  EXPECT_EQ(KindOf(a, y), K::kInPlace);
  EXPECT_EQ(KindOf(a, dus), K::kNew);
  EXPECT_EQ(KindOf(a, z), K::kInPlace);
  EXPECT_EQ(KindOf(a, sc), K::kNew);
  EXPECT_EQ(KindOf(a, w), K::kInPlace);
  EXPECT_EQ(KindOf(a, r), K::kForward);
  EXPECT_EQ(KindOf(a, out), K::kInPlace);
  // The buffers of a value and its in-place successor are the same.
  EXPECT_EQ(a.Of(*y).leaves[0].offset, a.Of(*add_xx).leaves[0].offset);
  EXPECT_NE(a.Of(*dus).leaves[0].offset, a.Of(*y).leaves[0].offset);
  EXPECT_EQ(a.output_bytes(), 64);  // the root leaf is copied out of the arena
}

TEST(BufferAssignmentTest, WhileCarryIsUpdatedInPlace) {
  int saw_while = 0;
  for (uint32_t seed = 1; seed <= 12; ++seed) {
    auto module = RandomModule(seed, true, false);
    const BufferAssignment a = AssignBuffers(*module, PostOrder);
    const ComputationAssignment& e = a.Of(*module->entry_computation());
    for (const HloInstruction* instr : e.sequence) {
      if (instr->opcode() != HloOpcode::kWhile) continue;
      ++saw_while;
      const InstructionAssignment& ia = a.Of(*instr);
      EXPECT_GE(ia.nested_offset, 0);
      // The counter is a constant (read-only): a new carry; the others die here.
      EXPECT_EQ(ia.leaves[0].kind, LeafAssignment::Kind::kNew);
      EXPECT_EQ(ia.leaves[2].kind, LeafAssignment::Kind::kInPlace);
      // The body writes its carry in place: the multiply into the dying a.
      const HloComputation* body = instr->while_body();
      for (const HloInstruction* b : a.Of(*body).sequence) {
        if (b->opcode() == HloOpcode::kMultiply) {
          EXPECT_EQ(a.Of(*b).leaves[0].kind, LeafAssignment::Kind::kInPlace);
        }
      }
    }
  }
  EXPECT_GT(saw_while, 0);
}

TEST(BufferAssignmentTest, GetTupleElementsOnlyEvaluatorsReadTakeNoStep) {
  const std::unique_ptr<HloModule> module = ParseHloModule(R"(HloModule m
ENTRY e {
  p = (f32[4], (f32[4], f32[4]), f32[4]) parameter(0)
  a = f32[4] get-tuple-element(p), index=0
  inner = (f32[4], f32[4]) get-tuple-element(p), index=1
  b = f32[4] get-tuple-element(inner), index=1
  c = f32[4] get-tuple-element(p), index=2
  unread = f32[4] get-tuple-element(p), index=0
  two = f32[] constant(2)
  twos = f32[4] broadcast(two), dimensions={}
  ab = f32[4] add(a, b)
  abc = f32[4] multiply(ab, twos)
  ROOT t = (f32[4], f32[4], f32[4]) tuple(abc, c, a)
})");
  // `b` is read only by an add, `unread` by nothing: no step. `a` is read
  // by the root tuple too, `c` only by it, and `inner` (a tuple) by a
  // get-tuple-element: a step each. The constant is made once.
  const std::map<std::string, bool> want = {{"p", true},    {"a", true},    {"inner", true},
                                            {"b", false},   {"c", true},    {"unread", false},
                                            {"two", false}, {"twos", true}, {"ab", true},
                                            {"abc", true},  {"t", true}};
  for (const HloInstruction* instr : module->entry_computation()->instructions()) {
    ASSERT_TRUE(want.count(instr->name())) << instr->name();
    EXPECT_EQ(TakesStep(*instr), want.at(instr->name())) << instr->name();
  }
  // A get-tuple-element or a constant that is the root takes a step.
  const std::unique_ptr<HloModule> roots = ParseHloModule(R"(HloModule m
ENTRY e {
  p = (f32[4], f32[4]) parameter(0)
  ROOT a = f32[4] get-tuple-element(p), index=0
}
)");
  EXPECT_TRUE(TakesStep(*roots->entry_computation()->root_instruction()));
  const std::unique_ptr<HloModule> constant = ParseHloModule(R"(HloModule m
ENTRY e {
  ROOT c = f32[2] constant({1, 2})
}
)");
  EXPECT_TRUE(TakesStep(*constant->entry_computation()->root_instruction()));
}

// The attention calls' scratch (runtime/eval_custom_call.cc): the kernels
// compute in bf16 when q, k and v all are bf16, else in f32; lse and dlse
// in f32. Scratch holds what the kernel writes for a result of another type,
// an out-alone forward's lse, and operands converted to the kernel's types.
std::vector<Shape> CallScratch(const std::string& operands, const std::string& result,
                               const std::string& call, const std::string& target,
                               const std::string& config = "{}") {
  const std::string text = fmt::format(
      "HloModule m\nENTRY e {{\n{}  ROOT r = {} custom-call({}), custom_call_target=\"{}\", "
      "backend_config={}\n}}\n",
      operands, result, call, target, config);
  const std::unique_ptr<HloModule> module = ParseHloModule(text);
  return InstructionScratch(*module->entry_computation()->root_instruction());
}

std::string Qkv(const char* q, const char* k, const char* v) {
  return fmt::format(
      "  q = {}[1,2,8,4] parameter(0)\n  k = {}[1,2,8,4] parameter(1)\n"
      "  v = {}[1,2,8,4] parameter(2)\n",
      q, k, v);
}

TEST(BufferAssignmentTest, AttentionScratchFollowsTheKernelsTypes) {
  const std::string fwd = "weft.flex_attention", bwd = "weft.flex_attention_backward";
  const Shape lse(PrimitiveType::kF32, {1, 2, 8});
  const Shape f32_out(PrimitiveType::kF32, {1, 2, 8, 4});
  const Shape bf16_out(PrimitiveType::kBF16, {1, 2, 8, 4});
  using V = std::vector<Shape>;
  const std::string bf16 = Qkv("bf16", "bf16", "bf16");
  // bf16 kernels writing what is returned: nothing; out alone: its lse.
  EXPECT_EQ(CallScratch(bf16, "(bf16[1,2,8,4], f32[1,2,8])", "q, k, v", fwd), V{});
  EXPECT_EQ(CallScratch(bf16, "bf16[1,2,8,4]", "q, k, v", fwd), V{lse});
  // Results of other types: the kernel's buffers (bf16 out, f32 lse).
  EXPECT_EQ(CallScratch(bf16, "(f32[1,2,8,4], bf16[1,2,8])", "q, k, v", fwd), (V{bf16_out, lse}));
  // f32 kernels, as before bf16 kernels ran in the executor.
  EXPECT_EQ(CallScratch(Qkv("f32", "f32", "f32"), "f32[1,2,8,4]", "q, k, v", fwd), V{lse});
  // Mixed q, k, v: f32 kernels on f32 copies of the others.
  EXPECT_EQ(CallScratch(Qkv("f32", "bf16", "f32"), "(f32[1,2,8,4], f32[1,2,8])", "q, k, v", fwd),
            V{f32_out});
  // The backward: bf16 kernels read an f32 out as a bf16 copy, a bf16 lse
  // and dlse as f32 copies, and write an f32 result to bf16 scratch.
  const std::string back = bf16 +
                           "  o = f32[1,2,8,4] parameter(3)\n  l = bf16[1,2,8] parameter(4)\n"
                           "  d = bf16[1,2,8,4] parameter(5)\n  dl = bf16[1,2,8] parameter(6)\n";
  EXPECT_EQ(CallScratch(back, "(bf16[1,2,8,4], f32[1,2,8,4], bf16[1,2,8,4])",
                        "q, k, v, o, l, d, dl", bwd, R"({"has_dlse": true})"),
            (V{bf16_out, bf16_out, lse, lse}));
  // Without has_dlse the seventh operand is not dlse (here: a score tensor,
  // which the score mod reads as it is).
  EXPECT_EQ(
      CallScratch(back, "(bf16[1,2,8,4], bf16[1,2,8,4], bf16[1,2,8,4])", "q, k, v, o, l, d, dl",
                  bwd, R"({"score_mod": "score + t[b, h, q_idx]", "score_tensors": ["t"]})"),
      (V{bf16_out, lse}));
  // Other custom calls reserve nothing.
  EXPECT_EQ(CallScratch(Qkv("f32", "f32", "f32"), "f32[1,2,8,4]", "q, k, v", "my.op"), V{});
}

}  // namespace
}  // namespace weft::compiler
