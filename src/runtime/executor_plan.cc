// The executor's plan of a computation (executor_plan.h).
#include "executor_plan.h"

#include <algorithm>
#include <array>
#include <unordered_map>

#include "weft/base/error.h"
#include "weft/runtime/executor.h"

namespace weft::runtime::exec {
namespace {

// c64 values are parsed but never computed with.
void CheckNoComplex(const HloInstruction& instr) {
  auto complex = [](const Shape& shape) {
    for (const Shape& leaf : shape.Leaves()) {
      if (IsComplex(leaf.element_type())) return true;
    }
    return false;
  };
  bool any = complex(instr.shape());
  for (const HloInstruction* operand : instr.operands()) any = any || complex(operand->shape());
  if (any) {
    Fail(
        "{} on complex (c64) values is not supported: weft computes with real and integer "
        "types only; split the values into real and imaginary f32 parts",
        HloOpcodeString(instr.opcode()));
  }
}

// The evaluator of an opcode the scheduler does not handle itself, after
// its static checks.
EvalFn SelectEval(const HloInstruction& instr) {
  const HloOpcode op = instr.opcode();
  CheckNoComplex(instr);
  if (op == HloOpcode::kCopy) return nullptr;
  if (IsElementwise(op)) {
    exec::CheckElementwise(instr);
    return &exec::EvalElementwise;
  }
  switch (op) {
    case HloOpcode::kParameter:
    case HloOpcode::kConstant:
    case HloOpcode::kTuple:
    case HloOpcode::kGetTupleElement:
    case HloOpcode::kWhile:
    case HloOpcode::kCall:
    case HloOpcode::kConditional:
      return nullptr;
    case HloOpcode::kAfterAll:
      return &exec::EvalAfterAll;
    case HloOpcode::kRng:
      exec::CheckRng(instr);
      return &exec::EvalRng;
    case HloOpcode::kRngBitGenerator:
      exec::CheckRng(instr);
      return &exec::EvalRngBitGenerator;
    case HloOpcode::kBroadcast:
    case HloOpcode::kReshape:
    case HloOpcode::kTranspose:
    case HloOpcode::kSlice:
    case HloOpcode::kDynamicSlice:
    case HloOpcode::kDynamicUpdateSlice:
    case HloOpcode::kConcatenate:
    case HloOpcode::kPad:
    case HloOpcode::kIota:
    case HloOpcode::kReverse:
    case HloOpcode::kBitcastConvert:
      exec::CheckShapeOp(instr);
      return &exec::EvalShapeOp;
    case HloOpcode::kSort:
      exec::CheckSort(instr);
      return &exec::EvalSort;
    case HloOpcode::kTopK:
      exec::CheckSort(instr);
      return &exec::EvalTopK;
    case HloOpcode::kReduceWindow:
      exec::CheckWindowOp(instr);
      return &exec::EvalReduceWindow;
    case HloOpcode::kSelectAndScatter:
      exec::CheckWindowOp(instr);
      return &exec::EvalSelectAndScatter;
    case HloOpcode::kDot:
      exec::CheckDot(instr);
      return &exec::EvalDot;
    case HloOpcode::kConvolution:
      exec::CheckConvolution(instr);
      return &exec::EvalConvolution;
    case HloOpcode::kReduce:
      exec::CheckReduce(instr);
      return &exec::EvalReduce;
    case HloOpcode::kGather:
      exec::CheckGatherScatter(instr);
      return &exec::EvalGather;
    case HloOpcode::kScatter:
      exec::CheckGatherScatter(instr);
      return &exec::EvalScatter;
    case HloOpcode::kFusion:
      exec::CheckFusion(instr);
      return &exec::EvalFusion;
    case HloOpcode::kAllReduce:
    case HloOpcode::kAllGather:
    case HloOpcode::kReduceScatter:
    case HloOpcode::kAllToAll:
    case HloOpcode::kCollectivePermute:
      exec::CheckCollective(instr);
      return &exec::EvalCollective;
    case HloOpcode::kPartitionId:
    case HloOpcode::kReplicaId:
      return &exec::EvalPartitionOrReplicaId;
    case HloOpcode::kRaggedDot:
      exec::CheckRaggedDot(instr);
      return &exec::EvalRaggedDot;
    case HloOpcode::kCholesky:
      exec::CheckLinalg(instr);
      return &exec::EvalCholesky;
    case HloOpcode::kTriangularSolve:
      exec::CheckLinalg(instr);
      return &exec::EvalTriangularSolve;
    case HloOpcode::kCustomCall:
      if (instr.attrs().custom_call_target == kTopKTarget) {
        exec::CheckSort(instr);
        return &exec::EvalTopK;
      }
      if (instr.attrs().custom_call_target == kShardingTarget) return &exec::EvalIdentity;
      if (IsMemorySpaceMoveTarget(instr.attrs().custom_call_target)) {
        WEFT_CHECK(instr.operand_count() == 1 && instr.shape().IsArray() &&
                       instr.operand(0)->shape() == instr.shape(),
                   "{}: a {} custom call takes one array and gives an array of its shape, not "
                   "{} operand(s) and {}",
                   instr.Describe(), instr.attrs().custom_call_target, instr.operand_count(),
                   instr.shape().ToString());
        return &exec::EvalIdentity;
      }
      if (instr.attrs().custom_call_target == kAllocateBufferTarget) {
        exec::CheckAllocateBuffer(instr);
        return &exec::EvalAllocateBuffer;
      }
      if (instr.attrs().custom_call_target == kFullToShardTarget ||
          instr.attrs().custom_call_target == kShardToFullTarget) {
        Fail(
            "{} is an edge of a manual region (jax.shard_map): the values inside are per "
            "device, so the module runs only partitioned (weft run on its devices), never as "
            "one unsharded program",
            instr.attrs().custom_call_target);
      }
      exec::CheckCustomCall(instr);
      return &exec::EvalCustomCall;
    default:
      Fail("the executor does not support opcode {}", HloOpcodeString(op));
  }
}

}  // namespace

HostTensor ConstantTensor(const HloInstruction& constant) {
  const Literal& literal = constant.literal();
  const Shape& shape = constant.shape();
  if (IsFloatingPoint(shape.element_type())) {
    std::vector<double> values(static_cast<size_t>(literal.size()));
    for (int64_t i = 0; i < literal.size(); ++i) values[i] = literal.Get(i);
    return HostTensor::FromDoubles(shape, values);
  }
  HostTensor t = HostTensor::Uninitialized(shape);
  for (int64_t i = 0; i < literal.size(); ++i) {  // exact 64-bit integers
    StoreInt(shape.element_type(), t.mutable_raw_data(), i, literal.GetInt(i));
  }
  return t;
}

// The leaves of `tuple`'s elements before element `index`.
static int64_t LeavesBefore(const Shape& tuple, int64_t index) {
  int64_t leaves = 0;
  for (int64_t k = 0; k < index; ++k) leaves += tuple.tuple_shapes(k).LeafCount();
  return leaves;
}

ComputationPlan MakePlan(const HloComputation& computation,
                         const compiler::ComputationAssignment& assignment,
                         std::unordered_map<const HloInstruction*, Value>& constants) {
  ComputationPlan plan;
  plan.computation = &computation;
  const std::vector<HloInstruction*>& order = assignment.sequence;
  std::unordered_map<const HloInstruction*, int32_t> slot;
  for (size_t i = 0; i < order.size(); ++i) slot[order[i]] = static_cast<int32_t>(i);
  plan.num_slots = static_cast<int32_t>(order.size());
  plan.root_slot = slot.at(computation.root_instruction());

  // A get-tuple-element that takes no step (compiler::TakesStep: its
  // readers are all evaluators) is read where the tuple's leaf lies: a step
  // would copy the leaf into a value of its own, for a third of a
  // partitioned training step's instructions. Its readers' operands point at
  // the tuple's slot and leaf instead (`source`, `first_leaf`).
  std::vector<int32_t> source(order.size()), first_leaf(order.size(), 0);
  std::vector<bool> takes_step(order.size(), true);
  for (size_t i = 0; i < order.size(); ++i) {
    const HloInstruction* instr = order[i];
    source[i] = static_cast<int32_t>(i);
    takes_step[i] = compiler::TakesStep(*instr);
    if (takes_step[i] || instr->opcode() != HloOpcode::kGetTupleElement) continue;
    const int32_t tuple = slot.at(instr->operand(0));
    source[i] = source[tuple];
    first_leaf[i] = first_leaf[tuple] + static_cast<int32_t>(LeavesBefore(
                                            instr->operand(0)->shape(), instr->tuple_index()));
  }

  // The last step that reads each slot.
  std::vector<int32_t> last_use(order.size(), -1);
  for (size_t i = 0; i < order.size(); ++i) {
    if (!takes_step[i]) continue;
    for (const HloInstruction* operand : order[i]->operands()) {
      last_use[source[slot.at(operand)]] = static_cast<int32_t>(i);
    }
  }
  // A constant's value lives as long as the executor: its readers point at
  // it, and it takes no step (the partitioned scan reads a constant 0 at
  // every dynamic slice: a step each would cost a value a step).
  auto constant_of = [&](const HloInstruction* instr) -> Value* {
    return instr->opcode() == HloOpcode::kConstant ? &constants.at(instr) : nullptr;
  };
  // Per step: its operands, dying slots and result leaves in the plan's
  // arrays.
  std::vector<std::array<size_t, 3>> counts;
  for (size_t i = 0; i < order.size(); ++i) {
    const HloInstruction* instr = order[i];
    if (!takes_step[i]) continue;
    Step step;
    step.instr = instr;
    step.opcode = instr->opcode();
    step.out = static_cast<int32_t>(i);
    try {
      step.eval = SelectEval(*instr);
    } catch (const Error& e) {
      Fail("{}: {}", instr->Describe(), e.what());
    }
    const compiler::InstructionAssignment& ia = assignment.instructions.at(instr);
    std::vector<StepOperand> operands;
    std::vector<int32_t> dying_slots;
    for (size_t k = 0; k < instr->operands().size(); ++k) {
      const int32_t operand_slot = slot.at(instr->operand(k));
      StepOperand o;
      o.constant = constant_of(instr->operand(k));
      o.slot = source[operand_slot];
      o.leaf = first_leaf[operand_slot];
      o.buffer_dies = ia.operand_dies.at(k);
      if (last_use[o.slot] == static_cast<int32_t>(i) && o.slot != plan.root_slot &&
          o.constant == nullptr) {
        auto it = std::find(dying_slots.begin(), dying_slots.end(), o.slot);
        o.dying_index = static_cast<int32_t>(it - dying_slots.begin());
        if (it == dying_slots.end()) dying_slots.push_back(o.slot);
      }
      operands.push_back(o);
    }
    step.result_unused = last_use[i] < 0 && step.out != plan.root_slot;
    if (!RunsCalledComputations(step.opcode)) {
      step.op_class = static_cast<int8_t>(ClassifyInstruction(*instr));
    }
    if (step.opcode == HloOpcode::kGetTupleElement) {
      const Shape& tuple = instr->operand(0)->shape();
      step.leaf_begin = LeavesBefore(tuple, instr->tuple_index());
      step.leaf_count = tuple.tuple_shapes(instr->tuple_index()).LeafCount();
    }
    const std::vector<Shape> leaves = instr->shape().Leaves();
    for (size_t k = 0; k < ia.leaves.size(); ++k) {
      const compiler::LeafAssignment& l = ia.leaves[k];
      EvalContext::OutputSlot out_slot;
      out_slot.kind = static_cast<EvalContext::OutputSlot::Kind>(l.kind);
      out_slot.offset = l.offset;
      out_slot.operand = l.operand;
      out_slot.operand_leaf = l.operand_leaf;
      out_slot.bytes = leaves[k].ByteSize();
      plan.slots.push_back(out_slot);
    }
    step.scratch_offset = ia.scratch_offset;
    step.scratch_bytes = ia.scratch_bytes;
    step.nested_offset = std::max<int64_t>(0, ia.nested_offset);
    plan.max_operands = std::max(plan.max_operands, operands.size());
    plan.max_dying = std::max(plan.max_dying, dying_slots.size());
    plan.operands.insert(plan.operands.end(), operands.begin(), operands.end());
    plan.dying_slots.insert(plan.dying_slots.end(), dying_slots.begin(), dying_slots.end());
    counts.push_back({operands.size(), dying_slots.size(), ia.leaves.size()});
    plan.steps.push_back(std::move(step));
  }
  // The spans, now that the arrays no longer grow.
  size_t next_operand = 0, next_dying = 0, next_slot = 0;
  for (size_t k = 0; k < plan.steps.size(); ++k) {
    Step& step = plan.steps[k];
    step.operands = {plan.operands.data() + next_operand, counts[k][0]};
    step.dying_slots = {plan.dying_slots.data() + next_dying, counts[k][1]};
    step.slots = {plan.slots.data() + next_slot, counts[k][2]};
    next_operand += counts[k][0];
    next_dying += counts[k][1];
    next_slot += counts[k][2];
  }
  return plan;
}
}  // namespace weft::runtime::exec
