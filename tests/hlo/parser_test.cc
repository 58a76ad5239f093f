#include "weft/hlo/parser.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <limits>

#include "weft/hlo/printer.h"

namespace weft {
namespace {

// A scan over stacked layer weights: while + dynamic-slice of layer i.
constexpr const char* kScanModule = R"(HloModule scan_mlp, num_partitions=4

add {
  lhs = f32[] parameter(0)
  rhs = f32[] parameter(1)
  ROOT sum = f32[] add(lhs, rhs)
}

cond {
  c_state = (s32[], f32[8,16], f32[4,16,16]) parameter(0)
  c_i = s32[] get-tuple-element(c_state), index=0
  c_n = s32[] constant(4)
  ROOT c_lt = pred[] compare(c_i, c_n), direction=LT
}

body {
  b_state = (s32[], f32[8,16], f32[4,16,16]) parameter(0)
  b_i = s32[] get-tuple-element(b_state), index=0
  b_h = f32[8,16] get-tuple-element(b_state), index=1
  b_ws = f32[4,16,16] get-tuple-element(b_state), index=2
  b_zero = s32[] constant(0)
  w_slice = f32[1,16,16] dynamic-slice(b_ws, b_i, b_zero, b_zero), dynamic_slice_sizes={1,16,16}
  w = f32[16,16] reshape(w_slice)
  mm = f32[8,16] dot(b_h, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  act = f32[8,16] tanh(mm)
  b_one = s32[] constant(1)
  b_next = s32[] add(b_i, b_one)
  ROOT b_out = (s32[], f32[8,16], f32[4,16,16]) tuple(b_next, act, b_ws)
}

ENTRY main {
  x = f32[8,16] parameter(0), sharding={devices=[4,1]<=[4]}
  weights = f32[4,16,16] parameter(1), sharding={devices=[1,4,1]<=[4]}
  start = s32[] constant(0)
  init = (s32[], f32[8,16], f32[4,16,16]) tuple(start, x, weights), sharding={{replicated}, {devices=[4,1]<=[4]}, {devices=[1,4,1]<=[4]}}
  loop = (s32[], f32[8,16], f32[4,16,16]) while(init), condition=cond, body=body
  h = f32[8,16] get-tuple-element(loop), index=1
  zero = f32[] constant(0)
  ROOT total = f32[8] reduce(h, zero), dimensions={1}, to_apply=add
}
)";

// Attention-shaped dots with batch dims, a custom-call with backend_config,
// collectives with replica groups, embeddings via gather/scatter.
constexpr const char* kOpsModule = R"(HloModule ops, replica_count=2, num_partitions=4

sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  q = bf16[2,4,128,64] parameter(0)
  k = bf16[2,4,128,64] parameter(1)
  scores = f32[2,4,128,128] dot(q, k), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={0,1}, rhs_contracting_dims={3}
  attn = bf16[2,4,128,64] custom-call(q, k), custom_call_target="weft.flash_attention", backend_config="mask=causal;block=128"
  cfg = bf16[2,4,128,64] custom-call(attn), custom_call_target="weft.identity", custom_call_has_side_effect=true, operand_layout_constraints={bf16[2,4,128,64]{3,2,1,0}}, backend_config={"scale": 0.125, "causal": true}
  x = f32[8,16] parameter(2), sharding={devices=[2,1,2]<=[4] last_tile_dim_replicate}
  ar = f32[8,16] all-reduce(x), channel_id=1, replica_groups={{0,1},{2,3},{4,5},{6,7}}, use_global_device_ids=true, to_apply=sum
  ag = f32[16,16] all-gather(x), channel_id=2, replica_groups={{0,1},{2,3},{4,5},{6,7}}, dimensions={0}, use_global_device_ids=true
  rs = f32[4,16] reduce-scatter(x), channel_id=3, replica_groups={{0,1},{2,3},{4,5},{6,7}}, dimensions={0}, use_global_device_ids=true, to_apply=sum
  a2a = f32[8,16] all-to-all(x), channel_id=4, replica_groups={{0,1},{2,3}}, dimensions={1}
  cp = f32[8,16] collective-permute(x), channel_id=5, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
  all = f32[8,16] all-reduce(x), replica_groups={}, to_apply=sum
  pid = u32[] partition-id(), origin={{"broadcast.443"}}
  emb = f32[1000,64] parameter(3), sharding={devices=[4,1]<=[4]}
  ids = s32[8,32] parameter(4)
  rows = f32[8,32,64] gather(emb, ids), offset_dims={2}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=2, slice_sizes={1,64}
  grad = f32[8,32,64] parameter(5)
  zero = f32[] constant(0)
  zeros = f32[1000,64] broadcast(zero), dimensions={}
  demb = f32[1000,64] scatter(zeros, ids, grad), update_window_dims={2}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=2, to_apply=sum
  ROOT out = (f32[2,4,128,128], bf16[2,4,128,64], f32[8,16], f32[16,16], f32[4,16], f32[8,16], f32[8,16], f32[8,16], u32[], f32[8,32,64], f32[1000,64]) tuple(scores, cfg, ar, ag, rs, a2a, cp, all, pid, rows, demb)
}
)";

// Every remaining op, with attribute syntax XLA uses.
constexpr const char* kElementwiseModule = R"(HloModule misc

max {
  m0 = f32[] parameter(0)
  m1 = f32[] parameter(1)
  ROOT m = f32[] maximum(m0, m1)
}

callee {
  c0 = f32[4,6] parameter(0)
  ROOT c1 = f32[4,6] negate(c0)
}

ENTRY main {
  p = f32[4,6] parameter(0)
  i = s32[4,6] iota(), iota_dimension=1
  f = f32[4,6] convert(i)
  c = f32[4,6] copy(p)
  t = f32[6,4] transpose(c), dimensions={1,0}
  s = f32[2,3] slice(p), slice={[0:4:2], [1:6:2]}
  r = f32[3,2] reshape(s)
  cat = f32[4,12] concatenate(p, f), dimensions={1}
  zero = f32[] constant(0)
  pd = f32[7,8] pad(p, zero), padding=1_2x0_2
  pdi = f32[7,11] pad(p, zero), padding=0_0_1x0_0_1
  e = f32[4,6] exponential(p)
  l = f32[4,6] log(e)
  th = f32[4,6] tanh(l)
  rs = f32[4,6] rsqrt(th)
  sq = f32[4,6] sqrt(rs)
  ng = f32[4,6] negate(sq)
  ab = f32[4,6] abs(ng)
  sub = f32[4,6] subtract(ab, p)
  mul = f32[4,6] multiply(sub, p)
  div = f32[4,6] divide(mul, p)
  mx = f32[4,6] maximum(div, p)
  mn = f32[4,6] minimum(mx, p)
  pw = f32[4,6] power(mn, p)
  lt = pred[4,6] compare(pw, p), direction=LT
  ge = pred[4,6] compare(pw, p), direction=GE, type=TOTALORDER
  both = pred[4,6] and(lt, ge)
  either = pred[4,6] or(lt, ge)
  neither = pred[4,6] not(either)
  sel = f32[4,6] select(neither, pw, p)
  called = f32[4,6] call(sel), to_apply=callee
  rv = f32[4,6] reverse(called), dimensions={0}
  ninf = f32[] constant(-inf)
  rmax = f32[6] reduce(rv, ninf), dimensions={0}, to_apply=max
  vec = s32[3] constant({1, -2, 3})
  mat = f32[2,2] constant({ { 1.5, -0.25 }, { 1e-06, 3 } })
  flags = pred[2] constant({true, false})
  half = bf16[] constant(0.1)
  i0 = s32[] constant(0)
  dus = f32[4,6] dynamic-update-slice(p, s, i0, i0), metadata={op_name="jit(f)/update" source_file="f.py" source_line=3}
  ROOT out = (f32[6,4], f32[3,2], f32[4,12], f32[7,8], f32[7,11], pred[4,6], f32[6], s32[3], f32[2,2], pred[2], bf16[], f32[4,6]) tuple(t, r, cat, pd, pdi, both, rmax, vec, mat, flags, half, dus)
}
)";

TEST(ParserTest, RealisticModulesRoundTrip) {
  for (const char* text : {kScanModule, kOpsModule}) {
    std::unique_ptr<HloModule> module = ParseHloModule(text);
    EXPECT_EQ(PrintModule(*module), text);
  }
}

TEST(ParserTest, EveryOpRoundTrips) {
  std::unique_ptr<HloModule> module = ParseHloModule(kElementwiseModule);
  EXPECT_EQ(PrintModule(*module), kElementwiseModule);
  HloComputation* entry = module->entry_computation();
  EXPECT_EQ(entry->GetInstruction("s")->attrs().slice[1].stride, 2);
  EXPECT_EQ(entry->GetInstruction("pdi")->attrs().padding[1].interior, 1);
  EXPECT_EQ(entry->GetInstruction("ge")->attrs().comparison_type, "TOTALORDER");
  EXPECT_EQ(entry->GetInstruction("mat")->literal().Get(2), static_cast<float>(1e-06));
  EXPECT_EQ(entry->GetInstruction("half")->literal().Get(0), 0.10009765625);  // bf16(0.1)
  EXPECT_EQ(entry->GetInstruction("dus")->attrs().passthrough[0].first, "metadata");
}

// Operations as XLA prints them: sort (several operands, stable),
// topk, the TopK custom call, reduce-window (padding, both dilations,
// variadic), select-and-scatter, bitcast-convert between widths,
// cholesky and triangular-solve, ragged-dot, f8 element types,
// conditional (predicate and branch-index forms), tokens, and the element
// types f64, u16 and c64.
constexpr const char* kWindowAndSortModule = R"(HloModule more_ops

lt {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  c = s32[] parameter(2)
  d = s32[] parameter(3)
  ROOT r = pred[] compare(a, b), direction=LT, type=TOTALORDER
}

gt {
  a_gt = f32[] parameter(0)
  b_gt = f32[] parameter(1)
  ROOT r_gt = pred[] compare(a_gt, b_gt), direction=GT
}

add {
  a_add = f64[] parameter(0)
  b_add = f64[] parameter(1)
  ROOT r_add = f64[] add(a_add, b_add)
}

ge {
  a_ge = f64[] parameter(0)
  b_ge = f64[] parameter(1)
  ROOT r_ge = pred[] compare(a_ge, b_ge), direction=GE
}

neg {
  a_neg = f32[4] parameter(0)
  ROOT r_neg = f32[4] negate(a_neg)
}

same {
  ROOT a_same = f32[4] parameter(0)
}

ENTRY e {
  x = f32[4,8] parameter(0)
  i = s32[4,8] iota(), iota_dimension=1
  s = (f32[4,8], s32[4,8]) sort(x, i), dimensions={1}, is_stable=true, to_apply=lt
  k = (f32[4,3], s32[4,3]) topk(x), k=3, largest=false
  sq = f32[4,4] slice(x), slice={[0:4], [0:4]}
  ch = f32[4,4] cholesky(sq), lower=true
  ts = f32[4,8] triangular-solve(ch, x), left_side=true, lower=true, unit_diagonal=false, transpose_a=ADJOINT
  gs = u32[2] constant({3, 1})
  z8 = f32[] constant(0.5)
  we = f32[2,8,5] broadcast(z8), dimensions={}
  rg = f32[4,5] ragged-dot(x, we, gs), lhs_contracting_dims={1}, rhs_contracting_dims={1}, lhs_ragged_dims={0}, rhs_group_dims={0}
  q8 = f8e4m3fn[4,8] convert(x)
  e8 = f8e8m0fnu[4,8] convert(x)
  kc = (f32[4,2], s32[4,2]) custom-call(x), custom_call_target="TopK", called_computations={gt}
  dd = f64[9,7] parameter(1)
  z = f64[] constant(0)
  rw = f64[5,4] reduce-window(dd, z), window={size=3x2 stride=2x2 pad=1_1x0_1}, to_apply=add
  rd = f64[9,12] reduce-window(dd, z), window={size=1x3 pad=0_0x1_2 lhs_dilate=1x2 rhs_dilate=1x2}, to_apply=add
  src = f64[5,4] parameter(2)
  ss = f64[9,7] select-and-scatter(dd, src, z), window={size=3x2 stride=2x2 pad=1_1x0_1}, select=ge, scatter=add
  h = u16[4,8,2] bitcast-convert(x)
  w = f32[4,8] bitcast-convert(h)
  p = pred[] parameter(3)
  v = f32[4] parameter(4)
  c1 = f32[4] conditional(p, v, v), true_computation=neg, false_computation=same
  idx = s32[] parameter(5)
  c2 = f32[4] conditional(idx, v, v, v), branch_computations={neg, same, neg}
  cx = c64[2] parameter(6)
  t = token[] after-all()
  k0 = f32[4,3] get-tuple-element(k), index=0
  kc1 = s32[4,2] get-tuple-element(kc), index=1
  ROOT o = (f32[4,8], f32[4,3], s32[4,2], f64[5,4], f64[9,12], f64[9,7], f32[4,8], f32[4], f32[4], c64[2], token[]) tuple(x, k0, kc1, rw, rd, ss, w, c1, c2, cx, t)
}
)";

TEST(ParserTest, SortWindowAndControlOpsRoundTrip) {
  std::unique_ptr<HloModule> module = ParseHloModule(kWindowAndSortModule);
  EXPECT_EQ(PrintModule(*module), kWindowAndSortModule);
  const HloComputation* entry = module->entry_computation();
  const HloInstruction* rd = entry->GetInstruction("rd");
  EXPECT_EQ(rd->attrs().window[1].base_dilation, 2);
  EXPECT_EQ(rd->attrs().window[1].window_dilation, 2);
  EXPECT_EQ(rd->attrs().window[1].padding_high, 2);
  EXPECT_TRUE(entry->GetInstruction("s")->attrs().is_stable);
  EXPECT_FALSE(entry->GetInstruction("k")->attrs().largest);
  EXPECT_TRUE(entry->GetInstruction("ch")->attrs().lower);
  EXPECT_TRUE(entry->GetInstruction("ts")->attrs().left_side);
  EXPECT_EQ(entry->GetInstruction("ts")->attrs().transpose_a, TriangularTranspose::kAdjoint);
  EXPECT_EQ(entry->GetInstruction("rg")->attrs().lhs_ragged_dims, std::vector<int64_t>{0});
  EXPECT_EQ(entry->GetInstruction("rg")->attrs().rhs_group_dims, std::vector<int64_t>{0});
  EXPECT_EQ(entry->GetInstruction("q8")->shape().ByteSize(), 32);
  EXPECT_EQ(entry->GetInstruction("ss")->called_computations()[0]->name(), "ge");
  EXPECT_EQ(entry->GetInstruction("c2")->called_computations().size(), 3u);
  EXPECT_EQ(entry->GetInstruction("cx")->shape().ByteSize(), 16);
}

// rng and rng-bit-generator print as XLA prints them; u64 is a type.
TEST(ParserTest, RandomOpsRoundTrip) {
  const char* text = R"(HloModule rng

ENTRY e {
  s = u64[2] parameter(0)
  g = (u64[2], u32[4,3]) rng-bit-generator(s), algorithm=rng_three_fry
  a = f32[] constant(0)
  b = f32[] constant(1)
  u = f32[5] rng(a, b), distribution=rng_normal
  s3 = u64[3] parameter(1)
  h = (u64[3], s64[2]) rng-bit-generator(s3), algorithm=rng_philox
  k = u32[7] rng-bit-generator(s), algorithm=rng_default
  ROOT t = ((u64[2], u32[4,3]), f32[5], (u64[3], s64[2]), u32[7]) tuple(g, u, h, k)
}
)";
  std::unique_ptr<HloModule> module = ParseHloModule(text);
  EXPECT_EQ(PrintModule(*module), text);
  const HloComputation* entry = module->entry_computation();
  EXPECT_EQ(entry->GetInstruction("g")->attrs().rng_algorithm, RngAlgorithm::kThreeFry);
  EXPECT_EQ(entry->GetInstruction("u")->attrs().rng_distribution, RngDistribution::kNormal);
  EXPECT_EQ(entry->GetInstruction("s")->shape().ByteSize(), 16);
}

// A while written without its result shape has its operand's, as XLA
// infers it.
TEST(ParserTest, AWhileWithoutAResultShapeHasItsOperands) {
  std::unique_ptr<HloModule> module = ParseHloModule(R"(HloModule m
cond {
  s = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  k = s32[] constant(3)
  ROOT lt = pred[] compare(i, k), direction=LT
}
body {
  s = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  x = f32[4] get-tuple-element(s), index=1
  ROOT t = (s32[], f32[4]) tuple(i2, x)
}
ENTRY e {
  z = s32[] constant(0)
  p = f32[4] parameter(0)
  t0 = (s32[], f32[4]) tuple(z, p)
  ROOT w = while(t0), condition=cond, body=body
})");
  EXPECT_EQ(module->entry_computation()->root_instruction()->shape().ToString(), "(s32[], f32[4])");
}

// outfeed_shape= names the tuple it sends, parentheses, brackets, layouts
// and spaces included, as XLA prints it.
TEST(ParserTest, AnOutfeedOfATupleRoundTrips) {
  const char* text = R"(HloModule feed

ENTRY e {
  p = f32[4,8] parameter(0)
  q = s32[2] parameter(1)
  t = (f32[4,8], s32[2]) tuple(p, q)
  token0 = token[] after-all()
  ROOT o = token[] outfeed(t, token0), outfeed_shape=((f32[4,8]{1,0}, s32[2]{0}))
}
)";
  EXPECT_EQ(PrintModule(*ParseHloModule(text)), text);
}

// A bitcast that keeps row-major order on both sides is the reshape it is
// (size-1 dims may sit anywhere in the layout); one that changes the layout,
// the element type or the count is refused by name.
TEST(ParserTest, BitcastIsAReshapeOnlyWhereTheLayoutsAllowIt) {
  std::unique_ptr<HloModule> module = ParseHloModule(R"(HloModule m
ENTRY e {
  x = f32[4,8]{1,0} parameter(0)
  r = f32[32]{0} bitcast(x)
  y = f32[4,1,8]{2,1,0} parameter(1)
  ROOT s = f32[4,8] bitcast(y)
})");
  const HloComputation* entry = module->entry_computation();
  EXPECT_EQ(entry->GetInstruction("r")->opcode(), HloOpcode::kReshape);
  EXPECT_EQ(entry->GetInstruction("s")->opcode(), HloOpcode::kReshape);
  EXPECT_EQ(ParseHloModule(R"(HloModule m
ENTRY e {
  y = f32[4,1,8]{2,0,1} parameter(0)
  ROOT s = f32[32] bitcast(y)
})")
                ->entry_computation()
                ->root_instruction()
                ->opcode(),
            HloOpcode::kReshape);
  for (const auto& [text, fragment] : std::vector<std::pair<std::string, std::string>>{
           {"x = f32[4,8]{0,1} parameter(0)\n  ROOT r = f32[32] bitcast(x)",
            "bitcast 'r' from f32[4,8]{0,1} to f32[32] is not a reshape: it changes the layout"},
           {"x = f32[4,8] parameter(0)\n  ROOT r = f32[8,4]{0,1} bitcast(x)",
            "bitcast 'r' from f32[4,8] to f32[8,4]{0,1} is not a reshape"},
           {"x = f32[4,8] parameter(0)\n  ROOT r = s32[32] bitcast(x)",
            "changes the element type or count"}}) {
    try {
      ParseHloModule("HloModule m\nENTRY e {\n  " + text + "\n}");
      ADD_FAILURE() << "accepted " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("before layout assignment"), std::string::npos);
    }
  }
}

TEST(ParserTest, ScanModuleStructure) {
  std::unique_ptr<HloModule> module = ParseHloModule(kScanModule);
  EXPECT_EQ(module->name(), "scan_mlp");
  EXPECT_EQ(module->num_partitions(), 4);
  HloComputation* entry = module->entry_computation();
  ASSERT_NE(entry, nullptr);
  EXPECT_EQ(entry->name(), "main");
  EXPECT_EQ(entry->root_instruction()->name(), "total");

  HloInstruction* loop = entry->GetInstruction("loop");
  ASSERT_NE(loop, nullptr);
  EXPECT_EQ(loop->opcode(), HloOpcode::kWhile);
  EXPECT_EQ(loop->while_condition()->name(), "cond");
  EXPECT_EQ(loop->while_body()->name(), "body");
  EXPECT_EQ(loop->shape().ToString(), "(s32[], f32[8,16], f32[4,16,16])");

  HloInstruction* x = entry->GetInstruction("x");
  ASSERT_TRUE(x->sharding().has_value());
  EXPECT_EQ(x->sharding()->ToString(), "{devices=[4,1]<=[4]}");
  EXPECT_EQ(x->location().line, 32);
  EXPECT_EQ(x->location().col, 3);
  EXPECT_EQ(entry->GetInstruction("init")->sharding()->tuple_elements().size(), 3u);

  HloComputation* body = module->GetComputation("body");
  HloInstruction* slice = body->GetInstruction("w_slice");
  EXPECT_EQ(slice->opcode(), HloOpcode::kDynamicSlice);
  EXPECT_EQ(slice->operand_count(), 4);
  EXPECT_EQ(slice->operand(1)->name(), "b_i");
  EXPECT_EQ(slice->attrs().dynamic_slice_sizes, (std::vector<int64_t>{1, 16, 16}));
  HloInstruction* mm = body->GetInstruction("mm");
  EXPECT_EQ(mm->attrs().dot.lhs_contracting_dims, (std::vector<int64_t>{1}));
  EXPECT_TRUE(mm->attrs().dot.lhs_batch_dims.empty());

  HloInstruction* total = entry->GetInstruction("total");
  EXPECT_EQ(total->to_apply()->name(), "add");
  EXPECT_EQ(total->dimensions(), (std::vector<int64_t>{1}));
  // Callees print before callers; the entry last.
  std::vector<HloComputation*> order = module->MakeComputationPostOrder();
  EXPECT_EQ(order.back(), entry);
}

TEST(ParserTest, OpsModuleAttributes) {
  std::unique_ptr<HloModule> module = ParseHloModule(kOpsModule);
  HloComputation* entry = module->entry_computation();
  EXPECT_EQ(module->replica_count(), 2);
  HloInstruction* scores = entry->GetInstruction("scores");
  EXPECT_EQ(scores->attrs().dot.lhs_batch_dims, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(scores->attrs().dot.rhs_contracting_dims, (std::vector<int64_t>{3}));
  HloInstruction* attn = entry->GetInstruction("attn");
  EXPECT_EQ(attn->attrs().custom_call_target, "weft.flash_attention");
  EXPECT_EQ(attn->attrs().backend_config, "mask=causal;block=128");
  EXPECT_EQ(entry->GetInstruction("cfg")->attrs().backend_config,
            "{\"scale\": 0.125, \"causal\": true}");
  HloInstruction* ar = entry->GetInstruction("ar");
  // Global device ids (use_global_device_ids): the groups cover all 4 x 2.
  EXPECT_EQ(ar->attrs().replica_groups,
            (std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(ar->attrs().channel_id, 1);
  EXPECT_TRUE(ar->attrs().use_global_device_ids);
  EXPECT_EQ(ar->to_apply()->name(), "sum");
  EXPECT_FALSE(entry->GetInstruction("all")->attrs().channel_id.has_value());
  HloInstruction* cp = entry->GetInstruction("cp");
  EXPECT_EQ(cp->attrs().source_target_pairs.size(), 4u);
  EXPECT_EQ(cp->attrs().source_target_pairs[3], (std::pair<int64_t, int64_t>{3, 0}));
  HloInstruction* rows = entry->GetInstruction("rows");
  EXPECT_EQ(rows->attrs().gather.offset_dims, (std::vector<int64_t>{2}));
  EXPECT_EQ(rows->attrs().gather.index_vector_dim, 2);
  EXPECT_EQ(rows->attrs().gather_slice_sizes, (std::vector<int64_t>{1, 64}));
  HloInstruction* demb = entry->GetInstruction("demb");
  EXPECT_EQ(demb->attrs().scatter.inserted_window_dims, (std::vector<int64_t>{0}));
  EXPECT_EQ(demb->to_apply()->name(), "sum");
}

TEST(ParserTest, AcceptsXlaDefaultPrinting) {
  // What XLA's HloModule::ToString() prints: %names, operand shapes,
  // layouts, signatures, metadata, iota replica groups, comments.
  const char* xla =
      R"(HloModule jit_step, entry_computation_layout={(f32[8,16]{1,0}, f32[]{:T(128)})->f32[8,16]{1,0}}, is_scheduled=true, num_partitions=2

%region_0.4 (Arg_0.5: f32[], Arg_1.6: f32[]) -> f32[] {
  %Arg_0.5 = f32[] parameter(0)
  %Arg_1.6 = f32[] parameter(1)
  ROOT %add.7 = f32[] add(f32[] %Arg_0.5, f32[] %Arg_1.6), metadata={op_name="jit(step)/add"}
}

ENTRY %main.10 (Arg_0.1: f32[8,16], Arg_1.2: f32[]) -> f32[8,16] {
  %Arg_0.1 = f32[8,16]{1,0} parameter(0), sharding={devices=[2,1]<=[2]}
  %Arg_1.2 = f32[] parameter(1), sharding={replicated}
  /* a comment */
  %all-reduce.8 = f32[8,16]{1,0} all-reduce(f32[8,16]{1,0} %Arg_0.1), channel_id=1, replica_groups=[1,2]<=[2], use_global_device_ids=true, to_apply=%region_0.4
  ROOT %multiply.9 = f32[8,16]{1,0} multiply(f32[8,16]{1,0} %all-reduce.8, f32[8,16]{1,0} %all-reduce.8)  // trailing
}
)";
  std::string text = xla;
  std::unique_ptr<HloModule> module = ParseHloModule(text);
  EXPECT_EQ(PrintModule(*module), R"(HloModule jit_step, num_partitions=2

region_0.4 {
  Arg_0.5 = f32[] parameter(0)
  Arg_1.6 = f32[] parameter(1)
  ROOT add.7 = f32[] add(Arg_0.5, Arg_1.6), metadata={op_name="jit(step)/add"}
}

ENTRY main.10 {
  Arg_0.1 = f32[8,16] parameter(0), sharding={devices=[2,1]<=[2]}
  Arg_1.2 = f32[] parameter(1), sharding={replicated}
  all-reduce.8 = f32[8,16] all-reduce(Arg_0.1), channel_id=1, replica_groups={{0,1}}, use_global_device_ids=true, to_apply=region_0.4
  ROOT multiply.9 = f32[8,16] multiply(all-reduce.8, all-reduce.8)
}
)");
  // XLA-style printing parses back to the same text.
  const std::string xla_style = PrintModule(*module, HloPrintOptions::XlaStyle());
  EXPECT_NE(xla_style.find("ENTRY %main.10 (Arg_0.1: f32[8,16]{1,0}, Arg_1.2: f32[]) -> "
                           "f32[8,16]{1,0} {"),
            std::string::npos)
      << xla_style;
  EXPECT_EQ(PrintModule(*ParseHloModule(xla_style), HloPrintOptions::XlaStyle()), xla_style);

  // The tiled layout of the entry signature parses too (and is dropped).
  EXPECT_EQ(PrintModule(*ParseHloModule(xla)), PrintModule(*module));
}

TEST(ParserTest, TheSignaturesParameterListIsNotComparedWithTheBody) {
  // As in XLA's parser, which reads only the result shape of a signature.
  std::unique_ptr<HloModule> module = ParseHloModule(R"(HloModule m
ENTRY main() -> f32[3] {
  p = f32[6] parameter(0)
  ROOT s = f32[3] slice(p), slice={[1:4]}
})");
  EXPECT_EQ(module->entry_computation()->num_parameters(), 1);
  EXPECT_EQ(module->entry_computation()->parameter_instruction(0)->shape().ToString(), "f32[6]");
}

TEST(ParserTest, ResultShapesTheOperandsDetermineMayBeLeftOut) {
  std::unique_ptr<HloModule> module = ParseHloModule(R"(HloModule m
ENTRY e {
  x = f32[8,4] parameter(0)
  i = s32[8,4] parameter(1)
  a = copy(x)
  m = minimum(a, x)
  c = compare(m, x), direction=LT
  s = select(c, m, a)
  n = negate(i)
  t = tuple(s, n)
  ROOT g = get-tuple-element(t), index=1
})");
  const HloComputation& e = *module->entry_computation();
  auto shape_of = [&](const char* name) {
    for (const HloInstruction* instr : e.instructions()) {
      if (instr->name() == name) return instr->shape().ToString();
    }
    return std::string("(missing)");
  };
  EXPECT_EQ(shape_of("a"), "f32[8,4]");
  EXPECT_EQ(shape_of("m"), "f32[8,4]");
  EXPECT_EQ(shape_of("c"), "pred[8,4]");
  EXPECT_EQ(shape_of("s"), "f32[8,4]");
  EXPECT_EQ(shape_of("t"), "(f32[8,4], s32[8,4])");
  EXPECT_EQ(shape_of("g"), "s32[8,4]");
  // Printed with the shapes, and parsed back the same.
  EXPECT_EQ(PrintModule(*ParseHloModule(PrintModule(*module))), PrintModule(*module));
}

TEST(ParserTest, EntryDefaultsToLastComputationAndNamesAreScopedPerComputation) {
  // No ENTRY marker: the last computation is the entry. The same name in two
  // computations is fine in text; the module renames the later one.
  std::unique_ptr<HloModule> module = ParseHloModule(R"(HloModule m
f {
  p = f32[2] parameter(0)
  ROOT r = f32[2] negate(p)
}
g {
  p = f32[2] parameter(0)
  ROOT r = f32[2] call(p), to_apply=f
}
)");
  EXPECT_EQ(module->entry_computation()->name(), "g");
  EXPECT_EQ(module->entry_computation()->instructions()[0]->name(), "p.1");
  EXPECT_EQ(PrintModule(*ParseHloModule(PrintModule(*module))), PrintModule(*module));
}

// Integer constants are read and printed exactly: s64 and u64 values
// beyond 2^53 (where a double would round them), their extremes, and
// integers written as floats.
TEST(ParserTest, WideIntegerConstantsRoundTripExactly) {
  constexpr const char* kText = R"(HloModule wide_ints

ENTRY e {
  a = s64[4] constant({9007199254740993, -9223372036854775808, 9223372036854775807, -9007199254740995})
  b = u64[3] constant({18446744073709551615, 9223372036854775808, 9007199254740993})
  c = u32[2] constant({4294967295, 0})
  ROOT t = (s64[4], u64[3], u32[2]) tuple(a, b, c)
}
)";
  std::unique_ptr<HloModule> module = ParseHloModule(kText);
  EXPECT_EQ(PrintModule(*module), kText);
  const HloComputation* entry = module->entry_computation();
  const Literal& a = entry->GetInstruction("a")->literal();
  EXPECT_EQ(a.GetInt(0), (int64_t{1} << 53) + 1);
  EXPECT_EQ(a.GetInt(1), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(a.GetInt(2), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(a.GetInt(3), -(int64_t{1} << 53) - 3);
  const Literal& b = entry->GetInstruction("b")->literal();
  EXPECT_EQ(static_cast<uint64_t>(b.GetInt(0)), ~uint64_t{0});
  EXPECT_EQ(static_cast<uint64_t>(b.GetInt(1)), uint64_t{1} << 63);
  EXPECT_EQ(static_cast<uint64_t>(b.GetInt(2)), (uint64_t{1} << 53) + 1);
  // Integers written as floats still read, through their checks.
  EXPECT_EQ(ParseHloModule("HloModule m\nENTRY e {\n  ROOT c = s32[2] constant({2.0, -3})\n}\n")
                ->entry_computation()
                ->root_instruction()
                ->literal()
                .GetInt(0),
            2);
}

struct BadText {
  const char* name;
  const char* text;
  const char* message;  // expected substring, starting with line:col
};

class ParseErrorTest : public testing::TestWithParam<BadText> {};

TEST_P(ParseErrorTest, NamesLineColAndExpectation) {
  const BadText& c = GetParam();
  try {
    ParseHloModule(c.text);
    FAIL() << "accepted:\n" << c.text;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos)
        << "message: " << e.what() << "\nwanted: " << c.message;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Parser, ParseErrorTest,
    testing::Values(
        BadText{"NoHeader", "x = f32[] parameter(0)\n",
                "1:1: expected 'HloModule <name>' at the start"},
        BadText{"U64ConstantTooLarge",
                "HloModule m\nENTRY main {\n  c = u64[2] constant({1, 18446744073709551616})\n}",
                "3:27: a u64 value 18446744073709551616 does not fit in 64 bits"},
        BadText{"U64ConstantNegative", "HloModule m\nENTRY main {\n  c = u64[] constant(-1)\n}",
                "3:22: constant -1 does not fit in u64"},
        BadText{"S64ConstantTooLarge",
                "HloModule m\nENTRY main {\n  c = s64[] constant(9223372036854775808)\n}",
                "3:22: constant 9223372036854775808 does not fit in s64"},
        BadText{"S32ConstantTooLarge",
                "HloModule m\nENTRY main {\n  c = s32[] constant(2147483648)\n}",
                "constant 2147483648 does not fit in s32"},
        BadText{"IntegerConstantNotIntegral",
                "HloModule m\nENTRY main {\n  c = s64[] constant(2.5)\n}",
                "3:22: constant 2.5 is not an integer; s64 needs integers"},
        BadText{"MissingEquals", "HloModule m\nENTRY main {\n  x f32[] parameter(0)\n}",
                "3:5: expected '=' after instruction name 'x', found 'f32'"},
        BadText{"UnknownOpcode",
                "HloModule m\nENTRY main {\n  x = f32[] parameter(0)\n  y = f32[] frobnicate(x)\n}",
                "4:13: unsupported opcode 'frobnicate'"},
        BadText{"ShapelessBroadcast",
                "HloModule m\nENTRY main {\n  x = f32[] parameter(0)\n  y = broadcast(x), "
                "dimensions={}\n}",
                "4:3: 'y' (broadcast) has no result shape, and its operands do not determine it"},
        BadText{"ShapelessMismatch",
                "HloModule m\nENTRY main {\n  x = f32[2] parameter(0)\n  y = f32[3] "
                "parameter(1)\n  z = add(x, y)\n}",
                "5:3: cannot infer the shape of 'z' (add)"},
        BadText{"UnknownType", "HloModule m\nENTRY main {\n  x = f8e4m3[] parameter(0)\n}",
                "3:7: unsupported element type 'f8e4m3'; weft supports pred, s32"},
        BadText{"UndefinedOperand",
                "HloModule m\nENTRY main {\n  x = f32[] parameter(0)\n  y = f32[] add(x, z)\n}",
                "4:20: operand 'z' is not defined before this use"},
        BadText{"OperandListSyntax",
                "HloModule m\nENTRY main {\n  x = f32[] parameter(0)\n  y = f32[] add(x x)\n}",
                "4:19: expected ',' or ')' in the operand list, found 'x'"},
        BadText{"NotALayout", "HloModule m\nENTRY main {\n  x = f32[4,8]{0,2} parameter(0)\n}",
                "3:15: layout {0,2} of f32[4,8] is not a minor-to-major order of its 2 dims"},
        BadText{"DynamicDim", "HloModule m\nENTRY main {\n  x = f32[<=4] parameter(0)\n}",
                "3:11: dynamic dimensions are not supported"},
        BadText{
            "BadSharding",
            "HloModule m\nENTRY main {\n  x = f32[4] parameter(0), sharding={devices=[2]0,0}\n}",
            "3:46: bad sharding: tile assignment lists device 0 twice"},
        BadText{"MissingAttribute",
                "HloModule m\nENTRY main {\n  x = f32[4] parameter(0)\n"
                "  y = f32[4,4] broadcast(x)\n}",
                "4:3: broadcast 'y' is missing attribute dimensions="},
        BadText{"WrongAttribute",
                "HloModule m\nENTRY main {\n  x = f32[4] parameter(0)\n"
                "  y = f32[4] negate(x), dimensions={0}\n}",
                "4:25: attribute 'dimensions' does not apply to negate"},
        BadText{"UnknownAttribute",
                "HloModule m\nENTRY main {\n  x = f32[4] parameter(0)\n"
                "  y = f32[4] negate(x), colour=red\n}",
                "4:25: unknown attribute 'colour' on negate"},
        BadText{"DuplicateName",
                "HloModule m\nENTRY main {\n  x = f32[4] parameter(0)\n  x = f32[4] negate(x)\n}",
                "4:3: instruction name 'x' is already used at 3:3"},
        BadText{"UnknownComputation",
                "HloModule m\nENTRY main {\n  x = f32[4] parameter(0)\n"
                "  y = f32[4] call(x), to_apply=nowhere\n}",
                "4:23: unknown computation 'nowhere'"},
        BadText{"ConstantCount", "HloModule m\nENTRY main {\n  c = s32[3] constant({1, 2})\n}",
                "3:23: constant has 2 entries along dimension 0 but s32[3] says 3"},
        BadText{"BadDirection",
                "HloModule m\nENTRY main {\n  x = f32[] parameter(0)\n"
                "  y = pred[] compare(x, x), direction=LESS\n}",
                "4:39: direction must be one of EQ, NE, LT, LE, GT, GE"},
        BadText{"Unterminated", "HloModule m\nENTRY main {\n  x = f32[] parameter(0)\n",
                "4:1: expected '}' to end computation 'main'"},
        // Shape errors come from the verifier, at the instruction.
        BadText{"ShapeMismatch",
                "HloModule m\nENTRY main {\n  a = f32[4,8] parameter(0)\n"
                "  b = f32[8,16] parameter(1)\n"
                "  ROOT d = f32[4,8] dot(a, b), lhs_contracting_dims={1}, "
                "rhs_contracting_dims={0}\n}",
                "5:3: 'd' (dot): result f32[4,8] does not match f32[4,16] inferred from the "
                "operands (f32[4,8], f32[8,16])"},
        BadText{"OperandShapes",
                "HloModule m\nENTRY main {\n  a = f32[4] parameter(0)\n"
                "  b = f32[5] parameter(1)\n  ROOT c = f32[4] add(a, b)\n}",
                "5:3: 'c' (add): add operands must have the same shape, got f32[4] and f32[5]"},
        BadText{"SignatureMismatch",
                "HloModule m\nENTRY main (p: f32[3]) -> f32[2] {\n  p = f32[3] parameter(0)\n"
                "  ROOT n = f32[3] negate(p)\n}",
                "2:12: signature of 'main' returns f32[2] but its root is f32[3]"}),
    [](const testing::TestParamInfo<BadText>& info) { return info.param.name; });

// Sizes that overflow int64, wherever a shape is written and for every op
// family: a parse error at the shape's line:col (the shape is refused before
// anything could allocate by its wrapped size). Sizes computed from the
// operands (concatenate, pad, all-gather, dot, tuple) overflow in shape
// inference, reported at the instruction.
INSTANTIATE_TEST_SUITE_P(
    Overflow, ParseErrorTest,
    testing::Values(
        BadText{"Parameter",
                "HloModule m\nENTRY main {\n  p = s32[3,6148914691236517206] parameter(0)\n}",
                "3:7: shape s32[3,6148914691236517206] is too large: the product of its "
                "dimensions overflows int64"},
        BadText{"Iota",
                "HloModule m\nENTRY main {\n  ROOT i = s32[3,6148914691236517206] iota(), "
                "iota_dimension=0\n}",
                "3:12: shape s32[3,6148914691236517206] is too large"},
        BadText{"ByteSize",
                "HloModule m\nENTRY main {\n  p = f32[2305843009213693952] parameter(0)\n}",
                "3:7: shape f32[2305843009213693952] is too large: 2305843009213693952 elements "
                "of 4 bytes overflow int64"},
        BadText{"ZeroDimension",
                "HloModule m\nENTRY main {\n  p = pred[4294967296,0,4294967296] parameter(0)\n}",
                "3:7: shape pred[4294967296,0,4294967296] is too large: the product of its "
                "non-zero dimensions overflows int64"},
        BadText{"Elementwise",
                "HloModule m\nENTRY main {\n  x = f32[4] parameter(0)\n"
                "  ROOT n = f32[3074457345618258603,4] negate(x)\n}",
                "4:12: shape f32[3074457345618258603,4] is too large"},
        BadText{"Transpose",
                "HloModule m\nENTRY main {\n  x = s32[3,4] parameter(0)\n"
                "  ROOT t = s32[6148914691236517206,3] transpose(x), dimensions={1,0}\n}",
                "4:12: shape s32[6148914691236517206,3] is too large"},
        BadText{"Dot",
                "HloModule m\nENTRY main {\n  a = f32[4,3074457345618258603] parameter(0)\n"
                "  b = f32[3074457345618258603,4] parameter(1)\n"
                "  ROOT d = f32[4,4] dot(a, b), lhs_contracting_dims={1}, "
                "rhs_contracting_dims={0}\n}",
                "3:7: shape f32[4,3074457345618258603] is too large"},
        BadText{"DotResult",
                "HloModule m\nENTRY main {\n  a = f32[2305843009213693951] parameter(0)\n"
                "  ROOT d = f32[2305843009213693951,2305843009213693951] dot(a, a)\n}",
                "4:12: shape f32[2305843009213693951,2305843009213693951] is too large"},
        BadText{"Broadcast",
                "HloModule m\nENTRY main {\n  x = f32[] parameter(0)\n"
                "  ROOT b = f32[1000000000,1000000000,1000000000] broadcast(x), dimensions={}\n}",
                "4:12: shape f32[1000000000,1000000000,1000000000] is too large"},
        BadText{"Reshape",
                "HloModule m\nENTRY main {\n  x = f32[4] parameter(0)\n"
                "  ROOT r = f32[2,4611686018427387904] reshape(x)\n}",
                "4:12: shape f32[2,4611686018427387904] is too large"},
        BadText{"Concatenate",
                "HloModule m\nENTRY main {\n  x = pred[4611686018427387904] parameter(0)\n"
                "  ROOT c = pred[1] concatenate(x, x), dimensions={0}\n}",
                "4:3: 'c' (concatenate): concatenate dimension 0 adds up to a size that overflows "
                "int64"},
        BadText{"Pad",
                "HloModule m\nENTRY main {\n  x = pred[4611686018427387904] parameter(0)\n"
                "  z = pred[] constant(false)\n"
                "  ROOT p = pred[1] pad(x, z), padding=0_4611686018427387904\n}",
                "5:3: 'p' (pad): padding 0_4611686018427387904_0 of dim 0 (size "
                "4611686018427387904) gives a size that overflows int64"},
        BadText{"Reduce",
                "HloModule m\nadd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
                "  ROOT s = f32[] add(a, b)\n}\nENTRY main {\n"
                "  x = f32[65536,65536,65536,65536] parameter(0)\n  z = f32[] constant(0)\n"
                "  ROOT r = f32[65536] reduce(x, z), dimensions={1,2,3}, to_apply=add\n}",
                "8:7: shape f32[65536,65536,65536,65536] is too large"},
        BadText{"Gather",
                "HloModule m\nENTRY main {\n  x = f32[4,4] parameter(0)\n"
                "  i = s64[4611686018427387904,2] parameter(1)\n"
                "  ROOT g = f32[4611686018427387904,1,1] gather(x, i), offset_dims={1,2}, "
                "collapsed_slice_dims={}, start_index_map={0,1}, index_vector_dim=1, "
                "slice_sizes={1,1}\n}",
                "4:7: shape s64[4611686018427387904,2] is too large"},
        BadText{"Scatter",
                "HloModule m\nadd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
                "  ROOT s = f32[] add(a, b)\n}\nENTRY main {\n  x = f32[4] parameter(0)\n"
                "  i = s32[2305843009213693952,1] parameter(1)\n"
                "  u = f32[2305843009213693952] parameter(2)\n"
                "  ROOT s = f32[4] scatter(x, i, u), update_window_dims={}, "
                "inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, "
                "to_apply=add\n}",
                "9:7: shape s32[2305843009213693952,1] is too large"},
        BadText{"TupleElement",
                "HloModule m\nENTRY main {\n  p = (f32[4], f32[2305843009213693952]) "
                "parameter(0)\n}",
                "3:16: shape f32[2305843009213693952] is too large"},
        BadText{"TupleTotal",
                "HloModule m\nENTRY main {\n  x = pred[4611686018427387904] parameter(0)\n"
                "  ROOT t = (pred[4611686018427387904], pred[4611686018427387904]) tuple(x, x)\n}",
                "4:12: tuple of 2 elements is too large: its byte size overflows int64"},
        BadText{"WhileState",
                "HloModule m\ncond {\n  s = (s32[], f32[9223372036854775807]) parameter(0)\n"
                "  ROOT t = pred[] constant(false)\n}\nENTRY main {\n  p = f32[4] parameter(0)\n}",
                "3:15: shape f32[9223372036854775807] is too large"},
        BadText{"AllGather",
                "HloModule m\nENTRY main {\n  x = pred[4611686018427387904] parameter(0)\n"
                "  ROOT g = pred[1] all-gather(x), replica_groups={{0,1}}, dimensions={0}\n}",
                "4:3: 'g' (all-gather): all-gather of dim 0 of pred[4611686018427387904] over 2 "
                "devices gives a size that overflows int64"},
        BadText{"OperandShape",
                "HloModule m\nENTRY main {\n  x = f32[4] parameter(0)\n"
                "  ROOT n = f32[4] negate(f32[3074457345618258603,4] x)\n}",
                "4:26: shape f32[3074457345618258603,4] is too large"},
        BadText{"Signature",
                "HloModule m\nENTRY main (p: f32[3074457345618258603,4]) -> f32[4] {\n"
                "  p = f32[4] parameter(0)\n}",
                "2:16: shape f32[3074457345618258603,4] is too large"},
        BadText{"EntryLayout",
                "HloModule m, entry_computation_layout={(f32[3074457345618258603,4]{1,0})->f32[]}\n"
                "ENTRY main {\n  p = f32[] parameter(0)\n}",
                "1:41: shape f32[3074457345618258603,4] is too large"},
        BadText{"NestedTuple",
                "HloModule m\nENTRY main {\n  p = ((((((((((((((((((((((((((((((((((((((((("
                "((((((((((((((((((((((((f32[])))))))))))))))))))))))))))))))))))))))))))))))))"
                ")))))))))))))))) parameter(0)\n}",
                "tuple shapes nest more than 64 deep"}),
    [](const testing::TestParamInfo<BadText>& info) { return info.param.name; });

// Device counts: a sharding may span at most kMaxDevices devices, and at
// most the module's num_partitions when it gives one; both are checked on
// the tile assignment's dims before a single device id is expanded.
INSTANTIATE_TEST_SUITE_P(
    Devices, ParseErrorTest,
    testing::Values(
        BadText{"GiantIota",
                "HloModule m\nENTRY e {\n  ROOT p = f32[8] parameter(0), "
                "sharding={devices=[1000000000]<=[1000000000]}\n}",
                "3:51: bad sharding: tile assignment [1000000000] spans more than 65536 devices"},
        BadText{"OverflowingDims",
                "HloModule m\nENTRY e {\n  ROOT p = f32[8,8] parameter(0), "
                "sharding={devices=[4294967296,4294967296]<=[16]}\n}",
                "bad sharding: tile assignment [4294967296,4294967296] spans more than 65536"},
        BadText{"MoreThanNumPartitions",
                "HloModule m, num_partitions=8\nENTRY e {\n  ROOT p = f32[64] parameter(0), "
                "sharding={devices=[64]<=[64]}\n}",
                "3:52: bad sharding: tile assignment [64] spans more than 8 devices, the "
                "module's num_partitions=8"},
        BadText{"ExplicitDeviceId",
                "HloModule m\nENTRY e {\n  ROOT p = f32[8] parameter(0), "
                "sharding={devices=[2]0,1000000000}\n}",
                "tile assignment device id 1000000000 is not below 65536"},
        BadText{"MaximalDevice",
                "HloModule m\nENTRY e {\n  ROOT p = f32[8] parameter(0), "
                "sharding={maximal device=1000000000}\n}",
                "maximal sharding device 1000000000 is not below 65536"},
        BadText{"NumPartitions", "HloModule m, num_partitions=1000000000\nENTRY e {\n}",
                "1:29: num_partitions=1000000000 makes num_partitions x replica_count = "
                "1000000000 x 1 devices, more than 65536"},
        BadText{"PartitionsTimesReplicas",
                "HloModule m, num_partitions=65536, replica_count=65536\nENTRY e {\n}",
                "1:50: replica_count=65536 makes num_partitions x replica_count = 65536 x 65536"},
        BadText{"IotaReplicaGroups",
                "HloModule m\nENTRY e {\n  p = f32[4] parameter(0)\n"
                "  ROOT a = f32[4] all-to-all(p), replica_groups=[1,1000000000]<=[1000000000], "
                "dimensions={0}\n}",
                "4:49: bad iota replica groups: tile assignment [1,1000000000] spans more than "
                "65536 devices"},
        BadText{"NestedTupleSharding",
                "HloModule m\nENTRY e {\n  ROOT p = f32[8] parameter(0), "
                "sharding={{{{{{{{{{{{{{{{replicated}}}}}}}}}}}}}}}}\n}",
                "3:43: bad sharding: expected a leaf sharding: tuple shardings are flat"}),
    [](const testing::TestParamInfo<BadText>& info) { return info.param.name; });

// A sharding that names a billion devices is refused at once, not expanded
// (it took 8 GB and 38 s before std::bad_alloc).
TEST(ParserTest, GiantDeviceCountsAreRefusedWithoutExpanding) {
  const auto start = std::chrono::steady_clock::now();
  for (const char* sharding :
       {"{devices=[1000000000]<=[1000000000]}", "{devices=[31623,31623]<=[1000014129]}",
        "{devices=[65536,65536]<=[65536,65536]T(1,0)}",
        "{devices=[2,2]<=[1000000000] last_tile_dim_replicate}"}) {
    const std::string text = fmt::format(
        "HloModule m\nENTRY e {{\n  ROOT p = f32[8,8] parameter(0), sharding={}\n}}", sharding);
    EXPECT_THROW(ParseHloModule(text), Error) << sharding;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
}

// One sharding repeated on many instructions is expanded once and shared;
// many distinct large ones are refused once they list more device ids in
// all than HloParseOptions::max_expanded_device_ids (a 1 MB file of distinct
// 65,536-device shardings would otherwise take gigabytes).
TEST(ParserTest, ShardingDeviceListsAreSharedAndBoundedInAll) {
  auto module_text = [](int n, bool distinct) {
    std::string text = "HloModule m\nENTRY e {\n  p0 = f32[65536] parameter(0)\n";
    for (int i = 1; i <= n; ++i) {
      text +=
          fmt::format("  p{} = f32[65536] negate(p{}), sharding={{devices=[65536]<=[65536]{}}}\n",
                      i, i - 1, distinct ? fmt::format(" shard_as {}", i) : "");
    }
    return text + "}\n";
  };
  HloParseOptions options;
  options.verify = false;
  options.max_expanded_device_ids = 4 * kMaxDevices;
  const auto start = std::chrono::steady_clock::now();
  auto module = ParseHloModule(module_text(2000, false), options);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  const HloComputation* entry = module->entry_computation();
  EXPECT_EQ(entry->GetInstruction("p2000")->sharding()->tile_assignment().num_elements(),
            kMaxDevices);
  // Shared, not copied: both name the same device list.
  EXPECT_EQ(&entry->GetInstruction("p1")->sharding()->tile_assignment().devices(),
            &entry->GetInstruction("p2000")->sharding()->tile_assignment().devices());
  try {
    ParseHloModule(module_text(5, true), options);
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("8:40: the module's distinct shardings and replica "
                                         "groups list more than 262144 device ids in all"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(HloParseOptions().max_expanded_device_ids, int64_t{1} << 26);
}

TEST(ParserTest, SourceNamePrefixesLocations) {
  HloParseOptions options;
  options.source_name = "model.hlo";
  try {
    ParseHloModule("HloModule m\nENTRY main {\n  x = f32[] parameter(0)\n  y = f32[] add(x, q)\n}",
                   options);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("model.hlo:4:20: ", 0), 0u) << e.what();
  }
  try {
    ParseHloModule("HloModule m\nENTRY main {\n  x = f32[] parameter(0)\n  y = s32[] negate(x)\n}",
                   options);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("model.hlo:4:3: 'y' (negate)", 0), 0u) << e.what();
  }
}

// `weft run /dev/zero` (and propagate, partition, compile) read the device
// until memory ran out.
TEST(ParserTest, AFileThatIsNotARegularFileIsRefusedUnread) {
  try {
    ParseHloModuleFile("/dev/zero");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("HLO module /dev/zero is a character device"),
              std::string::npos)
        << e.what();
  }
  try {
    ParseHloModuleFile("/nonexistent/model.hlo");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot read '/nonexistent/model.hlo'"), std::string::npos)
        << e.what();
  }
}

TEST(ParserTest, VerifyCanBeTurnedOff) {
  HloParseOptions options;
  options.verify = false;
  std::unique_ptr<HloModule> module = ParseHloModule(
      "HloModule m\nENTRY main {\n  x = f32[4] parameter(0)\n  ROOT y = f32[5] negate(x)\n}",
      options);
  EXPECT_EQ(module->entry_computation()->root_instruction()->shape().ToString(), "f32[5]");
}

TEST(ParseShapeTest, ShapesAndLayouts) {
  EXPECT_EQ(ParseShape("f32[4,8]").ToString(), "f32[4,8]");
  EXPECT_EQ(ParseShape("f32[4,8]{1,0}").ToString(), "f32[4,8]");
  EXPECT_EQ(ParseShape("pred[]").ToString(), "pred[]");
  EXPECT_EQ(ParseShape("(f32[4]{0}, (s32[], u32[2]))").ToString(), "(f32[4], (s32[], u32[2]))");
  EXPECT_EQ(ParseShape("()").ToString(), "()");
  // Any layout: values do not depend on it; it is dropped.
  EXPECT_EQ(ParseShape("f32[4,8]{0,1}").ToString(), "f32[4,8]");
  EXPECT_EQ(ParseShape("f32[4,8]{1,0:T(8,128)}").ToString(), "f32[4,8]");
  EXPECT_EQ(ParseShape("bf16[2,4,8]{0,2,1:T(8,128)(2,1)S(1)}").ToString(), "bf16[2,4,8]");
  EXPECT_EQ(ParseShape("f32[]{:T(128)}").ToString(), "f32[]");
  EXPECT_THROW(ParseShape("f32[4] x"), Error);
  EXPECT_THROW(ParseShape("f32[4,8]{0,0}"), Error);    // not a permutation
  EXPECT_THROW(ParseShape("f32[4,8]{2,1,0}"), Error);  // too many dims
}

}  // namespace
}  // namespace weft

namespace weft {
namespace {

// XLA reads a text of computations alone as a module named after its entry.
TEST(ParserTest, AModuleWithoutItsHeaderLineIsNamedAfterItsEntry) {
  auto m = ParseHloModule(R"(add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main.7 {
  x = f32[4] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[] reduce(x, z), dimensions={0}, to_apply=add
}
)");
  EXPECT_EQ(m->name(), "module_main.7");
  EXPECT_EQ(m->entry_computation()->name(), "main.7");
  // Text that is neither a header nor a computation is refused as before.
  EXPECT_THROW(ParseHloModule("x = f32[] parameter(0)\n"), Error);
}

// `}, execution_thread="..."` after a computation is kept and printed back;
// any other attribute there is refused by name.
TEST(ParserTest, ExecutionThreadAfterAComputationRoundTrips) {
  const std::string text = R"(HloModule m

helper {
  a = f32[4] parameter(0)
  ROOT n = f32[4] negate(a)
}, execution_thread="thread_1"

ENTRY main {
  x = f32[4] parameter(0)
  ROOT c = f32[4] call(x), to_apply=helper
}
)";
  auto m = ParseHloModule(text);
  EXPECT_EQ(m->GetComputation("helper")->execution_thread(), "thread_1");
  EXPECT_EQ(m->entry_computation()->execution_thread(), "main");
  const std::string printed = PrintModule(*m);
  EXPECT_NE(printed.find("}, execution_thread=\"thread_1\""), std::string::npos) << printed;
  EXPECT_EQ(PrintModule(*ParseHloModule(printed)), printed);
  std::string bad = text;
  bad.replace(bad.find("execution_thread"), 16, "schedule");
  try {
    ParseHloModule(bad);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown attribute 'schedule' after computation"),
              std::string::npos)
        << e.what();
  }
}

// One sharding on a tuple-shaped instruction is that sharding on every leaf,
// tiled shardings included (XLA's parser normalizes it so).
TEST(ParserTest, OneShardingOnATupleIsEachLeafsSharding) {
  auto m = ParseHloModule(R"(HloModule m, num_partitions=2

ENTRY main {
  p = (f32[4,2], (f32[6,2], f32[2,2])) parameter(0), sharding={devices=[2,1]<=[2]}
  q = (f32[4], s32[]) parameter(1), sharding={replicated}
  ROOT t = f32[4,2] get-tuple-element(p), index=0
}
)");
  const HloInstruction* p = m->entry_computation()->GetInstruction("p");
  EXPECT_EQ(*p->sharding(), HloSharding::Parse("{{devices=[2,1]<=[2]}, {devices=[2,1]<=[2]}, "
                                               "{devices=[2,1]<=[2]}}"));
  const HloInstruction* q = m->entry_computation()->GetInstruction("q");
  EXPECT_EQ(*q->sharding(), HloSharding::Parse("{{replicated}, {replicated}}"));
}

}  // namespace
}  // namespace weft
