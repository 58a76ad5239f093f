#include "weft/compiler/block_scaled_dot.h"

#include <string>
#include <utility>
#include <vector>

#include "weft/hlo/block_scaled_dot.h"
#include "weft/hlo/shape_inference.h"

namespace weft::compiler {
namespace {

class Expander {
 public:
  Expander(HloComputation& computation, const HloInstruction& call)
      : c_(computation), call_(call) {}

  HloInstruction* Add(HloOpcode opcode, std::vector<HloInstruction*> operands, HloAttributes attrs,
                      Shape shape = {}) {
    auto instr =
        HloInstruction::Create(opcode, std::move(shape), std::move(operands), std::move(attrs), {},
                               call_.name() + "." + std::string(HloOpcodeString(opcode)));
    if (!instr->shape().IsArray()) instr->set_shape(InferHloShape(*instr));
    instr->set_sharding(std::nullopt);
    return c_.AddInstructionBefore(std::move(instr), &call_);
  }

  HloInstruction* Convert(HloInstruction* x, PrimitiveType type) {
    if (x->shape().element_type() == type) return x;
    return Add(HloOpcode::kConvert, {x}, {}, x->shape().WithElementType(type));
  }

  // Operand s of the call in the result's element type, times its scales.
  HloInstruction* Dequantized(int s) {
    const PrimitiveType type = call_.shape().element_type();
    HloInstruction* x = Convert(call_.operand(s), type);
    if (!HasBlockScale(call_, s)) return x;
    const int64_t block = BlockScaledDotBlockSize(call_, s);
    HloInstruction* scale = Convert(call_.operand(2 + s), type);
    const Shape& xs = x->shape();
    const int64_t rank = xs.rank(), ks = scale->shape().dimensions(rank - 1);
    std::vector<int64_t> dims(xs.dimensions().begin(), xs.dimensions().end());
    dims.back() = ks;
    dims.push_back(block);
    HloAttributes bcast;
    for (int64_t d = 0; d < rank; ++d) bcast.dimensions.push_back(d);
    HloInstruction* spread =
        Add(HloOpcode::kBroadcast, {scale}, std::move(bcast), scale->shape().WithDimensions(dims));
    dims.pop_back();
    dims.back() = ks * block;
    spread = Add(HloOpcode::kReshape, {spread}, {}, scale->shape().WithDimensions(dims));
    if (ks * block != xs.dimensions(rank - 1)) {  // padded scales: the first K
      HloAttributes slice;
      for (int64_t d = 0; d < rank; ++d) slice.slice.push_back({0, xs.dimensions(d), 1});
      spread = Add(HloOpcode::kSlice, {spread}, std::move(slice));
    }
    return Add(HloOpcode::kMultiply, {x, spread}, {}, xs);
  }

 private:
  HloComputation& c_;
  const HloInstruction& call_;
};

}  // namespace

int64_t ExpandBlockScaledDots(HloModule& module) {
  int64_t expanded = 0;
  for (HloComputation* computation : module.computations()) {
    std::vector<HloInstruction*> calls;
    for (HloInstruction* instr : computation->instructions()) {
      if (IsBlockScaledDot(*instr)) calls.push_back(instr);
    }
    for (HloInstruction* call : calls) {
      CheckBlockScaledDot(*call);
      Expander e(*computation, *call);
      HloInstruction* lhs = e.Dequantized(0);
      HloInstruction* rhs = e.Dequantized(1);
      HloAttributes dot;
      dot.dot = BlockScaledDotNumbers(call->operand(0)->shape().rank());
      HloInstruction* result = e.Add(HloOpcode::kDot, {lhs, rhs}, std::move(dot), call->shape());
      result->set_sharding(call->sharding());
      const std::string name = call->name();
      call->ReplaceAllUsesWith(result);
      if (computation->root_instruction() == call) computation->set_root_instruction(result);
      computation->RemoveInstruction(call);
      result->set_name(name);
      ++expanded;
    }
  }
  return expanded;
}

}  // namespace weft::compiler
