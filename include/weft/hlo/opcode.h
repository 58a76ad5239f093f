// HloOpcode: the operations weft's HLO supports, with XLA's text names.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace weft {

// X(enumerator, "text name")
#define WEFT_HLO_OPCODES(X)                      \
  X(kAbs, "abs")                                 \
  X(kAdd, "add")                                 \
  X(kAllGather, "all-gather")                    \
  X(kAllReduce, "all-reduce")                    \
  X(kAfterAll, "after-all")                      \
  X(kAllToAll, "all-to-all")                     \
  X(kAnd, "and")                                 \
  X(kBitcastConvert, "bitcast-convert")          \
  X(kBroadcast, "broadcast")                     \
  X(kCall, "call")                               \
  X(kCallDone, "call-done")                      \
  X(kCallStart, "call-start")                    \
  X(kCeil, "ceil")                               \
  X(kCholesky, "cholesky")                       \
  X(kClamp, "clamp")                             \
  X(kCollectivePermute, "collective-permute")    \
  X(kCompare, "compare")                         \
  X(kConcatenate, "concatenate")                 \
  X(kConditional, "conditional")                 \
  X(kConstant, "constant")                       \
  X(kConvert, "convert")                         \
  X(kConvolution, "convolution")                 \
  X(kClz, "count-leading-zeros")                 \
  X(kCopy, "copy")                               \
  X(kCosine, "cosine")                           \
  X(kCustomCall, "custom-call")                  \
  X(kDivide, "divide")                           \
  X(kDot, "dot")                                 \
  X(kDynamicSlice, "dynamic-slice")              \
  X(kDynamicUpdateSlice, "dynamic-update-slice") \
  X(kExp, "exponential")                         \
  X(kExpm1, "exponential-minus-one")             \
  X(kFloor, "floor")                             \
  X(kFusion, "fusion")                           \
  X(kGather, "gather")                           \
  X(kGetTupleElement, "get-tuple-element")       \
  X(kInfeed, "infeed")                           \
  X(kIota, "iota")                               \
  X(kLog, "log")                                 \
  X(kLog1p, "log-plus-one")                      \
  X(kLogistic, "logistic")                       \
  X(kMaximum, "maximum")                         \
  X(kMinimum, "minimum")                         \
  X(kMultiply, "multiply")                       \
  X(kNegate, "negate")                           \
  X(kNot, "not")                                 \
  X(kOr, "or")                                   \
  X(kOutfeed, "outfeed")                         \
  X(kPad, "pad")                                 \
  X(kParameter, "parameter")                     \
  X(kPartitionId, "partition-id")                \
  X(kPopcnt, "popcnt")                           \
  X(kPower, "power")                             \
  X(kRaggedDot, "ragged-dot")                    \
  X(kReduce, "reduce")                           \
  X(kReduceWindow, "reduce-window")              \
  X(kReduceScatter, "reduce-scatter")            \
  X(kRemainder, "remainder")                     \
  X(kReplicaId, "replica-id")                    \
  X(kReshape, "reshape")                         \
  X(kReverse, "reverse")                         \
  X(kRng, "rng")                                 \
  X(kRngBitGenerator, "rng-bit-generator")       \
  X(kRecv, "recv")                               \
  X(kRecvDone, "recv-done")                      \
  X(kRsqrt, "rsqrt")                             \
  X(kScatter, "scatter")                         \
  X(kSelect, "select")                           \
  X(kSelectAndScatter, "select-and-scatter")     \
  X(kSend, "send")                               \
  X(kSendDone, "send-done")                      \
  X(kShiftLeft, "shift-left")                    \
  X(kShiftRightArith, "shift-right-arithmetic")  \
  X(kShiftRightLogical, "shift-right-logical")   \
  X(kSign, "sign")                               \
  X(kSine, "sine")                               \
  X(kSlice, "slice")                             \
  X(kSort, "sort")                               \
  X(kSqrt, "sqrt")                               \
  X(kSubtract, "subtract")                       \
  X(kTanh, "tanh")                               \
  X(kTopK, "topk")                               \
  X(kTranspose, "transpose")                     \
  X(kTriangularSolve, "triangular-solve")        \
  X(kTuple, "tuple")                             \
  X(kWhile, "while")                             \
  X(kXor, "xor")

enum class HloOpcode {
#define WEFT_DECLARE_OPCODE(enumerator, name) enumerator,
  WEFT_HLO_OPCODES(WEFT_DECLARE_OPCODE)
#undef WEFT_DECLARE_OPCODE
};

// XLA's text name ("get-tuple-element").
std::string_view HloOpcodeString(HloOpcode opcode);
// nullopt for names weft does not support.
std::optional<HloOpcode> StringToHloOpcode(std::string_view name);
// Every supported name, comma-separated, for error messages.
std::string SupportedHloOpcodeNames();

// Same-shape elementwise ops with one / two operands (compare is binary but
// yields pred; select and clamp take three).
bool IsElementwiseUnary(HloOpcode opcode);
bool IsElementwiseBinary(HloOpcode opcode);
bool IsElementwise(HloOpcode opcode);
// Ops that talk to other devices.
bool IsCollective(HloOpcode opcode);
// while, call, conditional: their called computations are programs the
// executor runs (with buffers of their own), not scalar functions applied
// per element (reduce, sort, scatter's to_apply) or fused loops.
bool RunsCalledComputations(HloOpcode opcode);

}  // namespace weft
