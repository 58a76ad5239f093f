#include "weft/hlo/opcode.h"

#include <array>

namespace weft {
namespace {

struct OpcodeName {
  HloOpcode opcode;
  std::string_view name;
};

constexpr OpcodeName kOpcodeNames[] = {
#define WEFT_OPCODE_NAME(enumerator, name) {HloOpcode::enumerator, name},
    WEFT_HLO_OPCODES(WEFT_OPCODE_NAME)
#undef WEFT_OPCODE_NAME
};

}  // namespace

std::string_view HloOpcodeString(HloOpcode opcode) {
  return kOpcodeNames[static_cast<int>(opcode)].name;
}

std::optional<HloOpcode> StringToHloOpcode(std::string_view name) {
  for (const OpcodeName& entry : kOpcodeNames) {
    if (entry.name == name) return entry.opcode;
  }
  return std::nullopt;
}

std::string SupportedHloOpcodeNames() {
  std::string out;
  for (const OpcodeName& entry : kOpcodeNames) {
    if (!out.empty()) out += ", ";
    out += entry.name;
  }
  return out;
}

bool IsElementwiseUnary(HloOpcode opcode) {
  switch (opcode) {
    case HloOpcode::kAbs:
    case HloOpcode::kCeil:
    case HloOpcode::kClz:
    case HloOpcode::kCosine:
    case HloOpcode::kExp:
    case HloOpcode::kExpm1:
    case HloOpcode::kFloor:
    case HloOpcode::kLog:
    case HloOpcode::kLog1p:
    case HloOpcode::kLogistic:
    case HloOpcode::kNegate:
    case HloOpcode::kNot:
    case HloOpcode::kPopcnt:
    case HloOpcode::kRsqrt:
    case HloOpcode::kSign:
    case HloOpcode::kSine:
    case HloOpcode::kSqrt:
    case HloOpcode::kTanh:
      return true;
    default:
      return false;
  }
}

bool IsElementwiseBinary(HloOpcode opcode) {
  switch (opcode) {
    case HloOpcode::kAdd:
    case HloOpcode::kAnd:
    case HloOpcode::kCompare:
    case HloOpcode::kDivide:
    case HloOpcode::kMaximum:
    case HloOpcode::kMinimum:
    case HloOpcode::kMultiply:
    case HloOpcode::kOr:
    case HloOpcode::kPower:
    case HloOpcode::kRemainder:
    case HloOpcode::kShiftLeft:
    case HloOpcode::kShiftRightArith:
    case HloOpcode::kShiftRightLogical:
    case HloOpcode::kSubtract:
    case HloOpcode::kXor:
      return true;
    default:
      return false;
  }
}

bool IsElementwise(HloOpcode opcode) {
  return IsElementwiseUnary(opcode) || IsElementwiseBinary(opcode) ||
         opcode == HloOpcode::kSelect || opcode == HloOpcode::kClamp ||
         opcode == HloOpcode::kConvert || opcode == HloOpcode::kCopy;
}

bool IsCollective(HloOpcode opcode) {
  switch (opcode) {
    case HloOpcode::kAllGather:
    case HloOpcode::kAllReduce:
    case HloOpcode::kAllToAll:
    case HloOpcode::kCollectivePermute:
    case HloOpcode::kReduceScatter:
      return true;
    default:
      return false;
  }
}

bool RunsCalledComputations(HloOpcode opcode) {
  return opcode == HloOpcode::kWhile || opcode == HloOpcode::kCall ||
         opcode == HloOpcode::kConditional;
}

}  // namespace weft
