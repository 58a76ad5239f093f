#include "weft/analysis/cost_model.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "weft/analysis/loops.h"
#include "weft/base/error.h"
#include "weft/hlo/custom_call_targets.h"
#include "weft/hlo/ragged_dot.h"

namespace weft::analysis {
namespace {

double Product(const Shape& s, const std::vector<int64_t>& dims) {
  double n = 1;
  for (int64_t d : dims) n *= static_cast<double>(s.dimensions(d));
  return n;
}

bool IsCausal(const HloInstruction& instr) {
  const std::string& text = instr.attrs().backend_config;
  if (text.empty()) return false;
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("mask") || !j["mask"].is_string()) return false;
  const std::string mask = j["mask"].get<std::string>();
  return mask.find("q_idx >= kv_idx") != std::string::npos ||
         mask.find("kv_idx <= q_idx") != std::string::npos;
}

// Forward and backward FLOPs of one flex-attention call (see the header).
void AttentionFlops(const HloInstruction& instr, double times, FlopCount& f) {
  const Shape& q = instr.operand(0)->shape();
  const Shape& k = instr.operand(1)->shape();
  const Shape& v = instr.operand(2)->shape();
  const double batch = static_cast<double>(q.dimensions(0));
  const double heads = static_cast<double>(q.dimensions(1));
  const double sq = static_cast<double>(q.dimensions(2));
  const double d = static_cast<double>(q.dimensions(3));
  const double skv = static_cast<double>(k.dimensions(2));
  const double dv = static_cast<double>(v.dimensions(3));
  const double pairs = IsCausal(instr) ? sq * (skv + 1) / 2 : sq * skv;
  if (instr.attrs().custom_call_target == kFlexAttentionBackwardTarget) {
    f.attention_backward += times * 2 * batch * heads * pairs * (3 * d + 2 * dv);
  } else {
    f.attention_forward += times * 2 * batch * heads * pairs * (d + dv);
  }
}

// Elements each window of a reduce-window / select-and-scatter / convolution
// covers at most.
double WindowElements(const HloInstruction& instr) {
  double n = 1;
  for (const WindowDim& w : instr.attrs().window) n *= static_cast<double>(w.size);
  return n;
}

// A sort's comparisons, n log2 n per row, each running the comparator's
// instructions; a top-k's n log2 k.
double SortWork(const HloInstruction& instr) {
  const Shape& x = instr.operand(0)->shape();
  const double elements = static_cast<double>(x.ElementsCount());
  if (instr.opcode() != HloOpcode::kSort) {
    const double k = static_cast<double>(instr.shape().tuple_shapes(0).dimensions().back());
    return elements * std::ceil(std::log2(std::max(2.0, k)));
  }
  const double len = static_cast<double>(x.dimensions(instr.dimensions().at(0)));
  const double steps = static_cast<double>(instr.to_apply()->instruction_count() -
                                           instr.to_apply()->num_parameters());
  return elements * std::ceil(std::log2(std::max(2.0, len))) * std::max(1.0, steps);
}

// One instruction's FLOPs, `times` runs. A fusion's are its fused
// computation's (which ComputationRunCounts does not reach).
void CountInstructionFlops(const HloInstruction& instr, double times, FlopCount& f) {
  const HloOpcode op = instr.opcode();
  if (op == HloOpcode::kDot) {
    const DotDimensionNumbers& dn = instr.attrs().dot;
    const double contracted = Product(instr.operand(0)->shape(), dn.lhs_contracting_dims);
    f.dot += times * 2 * static_cast<double>(instr.shape().ElementsCount()) * contracted;
  } else if (op == HloOpcode::kRaggedDot) {
    // Each row meets one group (non-contracting mode), each contracted
    // position one group's result (contracting mode): a dot's work, the
    // contracting mode's result counted once, not per group.
    const DotDimensionNumbers& dn = instr.attrs().dot;
    const double contracted = Product(instr.operand(0)->shape(), dn.lhs_contracting_dims);
    double results = static_cast<double>(instr.shape().ElementsCount());
    if (RaggedDotModeOf(instr) == RaggedDotMode::kContracting) {
      results /= static_cast<double>(std::max<int64_t>(1, instr.shape().dimensions(0)));
    }
    f.dot += times * 2 * results * contracted;
  } else if (op == HloOpcode::kConvolution) {
    // 2 x result elements x window elements x a group's input features (the
    // kernel's input feature dim); window positions over padding included,
    // as a dense kernel computes them.
    const Shape& rhs = instr.operand(1)->shape();
    const double group_in = static_cast<double>(
        rhs.dimensions(instr.attrs().convolution.kernel_input_feature_dimension));
    f.dot += times * 2 * static_cast<double>(instr.shape().ElementsCount()) *
             WindowElements(instr) * group_in;
  } else if (op == HloOpcode::kCustomCall &&
             (instr.attrs().custom_call_target == kFlexAttentionTarget ||
              instr.attrs().custom_call_target == kFlexAttentionBackwardTarget)) {
    AttentionFlops(instr, times, f);
  } else if (IsElementwise(op) && op != HloOpcode::kCopy && op != HloOpcode::kConvert) {
    f.other += times * static_cast<double>(instr.shape().ElementsCount());
  } else if (op == HloOpcode::kReduce) {
    f.other += times * static_cast<double>(instr.operand(0)->shape().ElementsCount());
  } else if (op == HloOpcode::kReduceWindow) {
    const double outputs = static_cast<double>(instr.shape().Leaves()[0].ElementsCount());
    f.other +=
        times * outputs * WindowElements(instr) * static_cast<double>(instr.operand_count() / 2);
  } else if (op == HloOpcode::kSelectAndScatter) {  // a select per covered element, a scatter
    const double sources = static_cast<double>(instr.operand(1)->shape().ElementsCount());
    f.other += times * sources * (WindowElements(instr) + 1);
  } else if (op == HloOpcode::kCholesky) {  // n^3 / 3 multiply-adds per matrix
    const Shape& a = instr.shape();
    const double n = static_cast<double>(a.dimensions(a.rank() - 1));
    f.other += times * static_cast<double>(a.ElementsCount()) / (n * n) * 2 * n * n * n / 3;
  } else if (op == HloOpcode::kTriangularSolve) {  // m^2 / 2 multiply-adds per column of b
    const Shape& a = instr.operand(0)->shape();
    const double m = static_cast<double>(a.dimensions(a.rank() - 1));
    f.other += times * static_cast<double>(instr.shape().ElementsCount()) * m;
  } else if (op == HloOpcode::kSort || op == HloOpcode::kTopK ||
             (op == HloOpcode::kCustomCall && instr.attrs().custom_call_target == kTopKTarget)) {
    f.other += times * SortWork(instr);
  } else if (op == HloOpcode::kFusion) {
    for (const HloComputation* fused : instr.called_computations()) {
      for (const HloInstruction* inner : fused->instructions())
        CountInstructionFlops(*inner, times, f);
    }
  }
}

}  // namespace

FlopCount CountFlops(const HloModule& program) {
  FlopCount f;
  const auto runs = ComputationRunCounts(program);
  for (const HloComputation* computation : program.MakeComputationPostOrder()) {
    auto found = runs.find(computation);
    if (found == runs.end()) continue;
    const double times = static_cast<double>(found->second);
    for (const HloInstruction* instr : computation->MakeInstructionPostOrder()) {
      CountInstructionFlops(*instr, times, f);
    }
  }
  return f;
}

FlopCount InstructionFlops(const HloInstruction& instr) {
  FlopCount f;
  CountInstructionFlops(instr, 1, f);
  return f;
}

}  // namespace weft::analysis
