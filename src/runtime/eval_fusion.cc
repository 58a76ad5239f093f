// The fusion evaluator: an output fusion of a dot (kind=kOutput, a dot and
// its add / multiply chain) runs as one oneDNN matmul with binary post-ops
// (EvalOutputFusion, through eval_dot.cc's RunDot); every other fusion runs
// its FusionPlan (fusion_plan.h) a tile at a time (fusion_tiles.h):
//  - loop fusion (kLoop): tiles of the output's linear index range, so every
//    intermediate value lives in a tile-sized scratch buffer that stays in
//    cache instead of a whole-tensor buffer; tiles are split over the thread
//    pool;
//  - input fusion (kInput): each output element folds its row of the
//    reduce's input, computed a tile at a time into a row buffer;
//  - a fusion holding convolutions (XLA's `kind=kOutput,
//    calls=%fused_conv`, or any kind): each convolution is evaluated whole
//    by eval_convolution.cc on the fused parameters it reads, after the
//    fusion's result has its place, and the rest (the epilogue) runs as a
//    loop fusion reading the convolution's result as a source.
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "executor_eval.h"
#include "fusion_plan.h"
#include "fusion_tiles.h"
#include "weft/base/error.h"
#include "weft/hlo/computation.h"

namespace weft::runtime::exec {
namespace {

using fusion::FusionPlan;
using fusion::kTile;

const FusionPlan& GetPlan(const HloInstruction& instr, InstructionCache& cache) {
  if (const FusionPlan* plan = cache.Find<FusionPlan>(instr)) return *plan;
  return cache.Put(instr, fusion::MakeFusionPlan(instr));
}

// An output fusion (kOutput): a dot of two parameters and a chain of add /
// multiply steps, each with the previous value (the dot first) and a
// parameter of the dot's shape; root the last step. The dot runs through
// eval_dot.cc's RunDot with one binary post-op per step.
struct OutputFusion {
  const HloInstruction* dot = nullptr;
  int64_t lhs = -1, rhs = -1;  // fusion operands
  struct Step {
    HloOpcode op;
    int64_t operand;  // the fusion operand of the step's other value
  };
  std::vector<Step> steps;  // from the dot outwards
};

OutputFusion AnalyzeOutputFusion(const HloInstruction& fusion) {
  auto fail = [&](std::string_view why) {
    Fail("output fusion '{}' (kind=kOutput) cannot be run: {}", fusion.name(), why);
  };
  if (fusion.called_computations().size() != 1 || fusion.called_computations()[0] == nullptr) {
    fail("it needs one fused computation (calls=)");
  }
  const HloComputation& fused = *fusion.called_computations()[0];
  const HloInstruction* x = fused.root_instruction();
  if (x == nullptr) fail(fmt::format("fused computation '{}' has no root", fused.name()));
  if (!fusion.shape().IsArray() || fusion.shape().element_type() != PrimitiveType::kF32) {
    fail(fmt::format("its result is {}, the executor runs f32 output fusions only",
                     fusion.shape().ToString()));
  }
  // The fusion operand a fused parameter stands for, checked against it.
  auto operand_of = [&](const HloInstruction* p) -> int64_t {
    const int64_t number = p->attrs().parameter_number;
    if (number < 0 || number >= fusion.operand_count()) {
      fail(fmt::format("parameter {} has no fusion operand (the fusion has {})", number,
                       fusion.operand_count()));
    }
    if (fusion.operand(number)->shape() != p->shape()) {
      fail(fmt::format("parameter {} is {} but the fusion operand is {}", number,
                       p->shape().ToString(), fusion.operand(number)->shape().ToString()));
    }
    return number;
  };
  OutputFusion out;
  std::vector<OutputFusion::Step> steps;  // from the root inwards
  while (x->opcode() != HloOpcode::kDot) {
    if ((x->opcode() != HloOpcode::kAdd && x->opcode() != HloOpcode::kMultiply) ||
        x->operand_count() != 2) {
      fail(fmt::format("its root is not a chain of add / multiply over a dot ({} is in the way)",
                       x->Describe()));
    }
    const bool p0 = x->operand(0)->opcode() == HloOpcode::kParameter;
    const bool p1 = x->operand(1)->opcode() == HloOpcode::kParameter;
    if (p0 == p1) {
      fail(fmt::format("{} must combine the chain's value with one parameter", x->Describe()));
    }
    const HloInstruction* other = p0 ? x->operand(0) : x->operand(1);
    if (x->shape() != fusion.shape() || other->shape() != fusion.shape()) {
      fail(fmt::format("{} and its parameter must have the dot's shape {}", x->Describe(),
                       fusion.shape().ToString()));
    }
    steps.push_back({x->opcode(), operand_of(other)});
    x = p0 ? x->operand(1) : x->operand(0);
  }
  if (steps.empty()) fail("its root is the dot itself (no add / multiply after it)");
  if (x->operand_count() != 2 || x->operand(0)->opcode() != HloOpcode::kParameter ||
      x->operand(1)->opcode() != HloOpcode::kParameter) {
    fail(fmt::format("the dot {} must read two parameters", x->Describe()));
  }
  if (x->shape() != fusion.shape() ||
      x->operand(0)->shape().element_type() != PrimitiveType::kF32 ||
      x->operand(1)->shape().element_type() != PrimitiveType::kF32) {
    fail(fmt::format("the dot {} must be f32 of f32 operands with the fusion's shape {}",
                     x->Describe(), fusion.shape().ToString()));
  }
  CheckDot(*x);
  out.dot = x;
  out.lhs = operand_of(x->operand(0));
  out.rhs = operand_of(x->operand(1));
  out.steps.assign(steps.rbegin(), steps.rend());
  return out;
}

Value EvalOutputFusion(const HloInstruction& instr, EvalArgs& args) {
  const OutputFusion f = AnalyzeOutputFusion(instr);
  std::vector<DotPostOp> post_ops;
  for (const OutputFusion::Step& step : f.steps) {
    post_ops.push_back({step.op, &args.array(step.operand)});
  }
  return RunDot(*f.dot, instr, args.array(f.lhs), args.array(f.rhs), post_ops, args);
}

// Whether `instr` is an output fusion of a dot and its add / multiply chain
// (the other fusions, convolutions' included, run through a FusionPlan).
bool IsDotOutputFusion(const HloInstruction& instr) {
  return instr.attrs().fusion_kind == FusionKind::kOutput && !fusion::FusesConvolution(instr);
}

// Evaluates the plan's convolutions on the fusion's operands, after the
// fusion's result has its place (their buffers are the fusion's scratch),
// and appends their results to `sources`. The results must outlive the tiles.
std::vector<Value> EvalFusedConvolutions(const FusionPlan& plan, EvalArgs& args,
                                         std::vector<const void*>& sources) {
  std::vector<Value> results;
  for (const HloInstruction* conv : plan.convolutions) {
    std::vector<Value> values;
    for (const HloInstruction* p : conv->operands())
      values.emplace_back(args.array(p->parameter_number()));
    std::vector<EvalArgs::Operand> operands;
    for (Value& v : values) operands.push_back({&v, 0, false, false});
    EvalArgs conv_args(operands, args.ctx(), args.cache());
    results.push_back(EvalConvolution(*conv, conv_args));
    sources.push_back(results.back()[0].raw_data());
  }
  return results;
}

// An input fusion: each output element folds its row of the reduce's input,
// computed a tile at a time into a row buffer, as EvalReduce folds a
// contiguous row (FoldRowF32): the unfused bits.
Value EvalInputFusion(const FusionPlan& plan, const HloInstruction& instr, EvalArgs& args,
                      std::vector<const void*>& sources) {
  HostTensor out = args.ctx().Allocate(instr.shape());
  const std::vector<Value> convolutions = EvalFusedConvolutions(plan, args, sources);
  float* result = out.mutable_data<float>();
  const int64_t rows = out.element_count(), row = plan.row;
  const float init =
      plan.init_operand >= 0 ? args.array(plan.init_operand).data<float>()[0] : plan.init_value;
  if (row == 0) {  // empty rows: nothing to fold, every output is the init value
    std::fill(result, result + rows, init);
    return Value{std::move(out)};
  }
  ParallelRanges(rows, std::max<int64_t>(1, kParallelChunk / row),
                 args.ctx().options().use_thread_pool, [&](int64_t begin, int64_t end) {
                   fusion::Scratch& scratch = fusion::ThreadScratch(plan);
                   thread_local std::vector<float> values;
                   if (static_cast<int64_t>(values.size()) < row) values.resize(row);
                   fusion::TileRunner runner(plan, sources, values.data());
                   for (int64_t r = begin; r < end; ++r) {
                     const int64_t first = r * row;
                     runner.set_origin(first);
                     for (int64_t b = first; b < first + row; b += kTile) {
                       runner.Run(scratch, b, std::min(kTile, first + row - b));
                     }
                     result[r] = FoldRowF32(plan.reducer, init, values.data(), row);
                   }
                 });
  return Value{std::move(out)};
}

}  // namespace

void CheckFusion(const HloInstruction& instr) {
  if (IsDotOutputFusion(instr)) {
    AnalyzeOutputFusion(instr);
  } else {
    fusion::MakeFusionPlan(instr);
  }
}

Value EvalFusion(const HloInstruction& instr, EvalArgs& args) {
  if (IsDotOutputFusion(instr)) return EvalOutputFusion(instr, args);
  const FusionPlan& plan = GetPlan(instr, args.cache());
  std::vector<const void*> sources;
  for (int64_t i = 0; i < args.size(); ++i) sources.push_back(args.array(i).raw_data());
  if (plan.input) return EvalInputFusion(plan, instr, args, sources);
  // Take over a dying operand's buffer as eval_elementwise would; not one
  // that a broadcast also reads (through the same storage).
  HostTensor out;
  for (int64_t i : plan.reuse_candidates) {
    const bool read_elsewhere =
        std::any_of(plan.broadcast_sources.begin(), plan.broadcast_sources.end(),
                    [&](int64_t k) { return args.array(k).storage() == args.array(i).storage(); });
    if (read_elsewhere) continue;
    out = args.TryReuse(i, plan.shape);
    if (out.valid()) break;
  }
  if (!out.valid()) out = args.ctx().Allocate(plan.shape);
  const std::vector<Value> convolutions = EvalFusedConvolutions(plan, args, sources);
  const int64_t n = plan.shape.ElementsCount();
  ParallelRanges(n, kParallelChunk, args.ctx().options().use_thread_pool,
                 [&](int64_t begin, int64_t end) {
                   fusion::Scratch& scratch = fusion::ThreadScratch(plan);
                   fusion::TileRunner runner(plan, sources, out.mutable_raw_data());
                   for (int64_t b = begin; b < end; b += kTile) {
                     runner.Run(scratch, b, std::min(kTile, end - b));
                   }
                 });
  return Value{std::move(out)};
}

}  // namespace weft::runtime::exec
