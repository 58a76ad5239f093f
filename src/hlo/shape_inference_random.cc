// Shape rules of rng and rng-bit-generator (XLA's: the result shape is
// declared; the operands must fit it).
#include "shape_inference_internal.h"
#include "weft/base/error.h"

namespace weft::hlo {
namespace {

// A tile's starts (RngTileOf): one integer scalar per dim of the value,
// whose rank is the result's.
void CheckRngTile(const HloInstruction& instr, const Shape& result) {
  const std::optional<std::vector<int64_t>> tile_of = RngTileOf(instr);
  const int64_t own = RngOwnOperandCount(instr);
  const std::string_view name = HloOpcodeString(instr.opcode());
  if (!tile_of) {
    WEFT_CHECK(instr.operand_count() == own, "{} takes {} operand{}, got {}", name, own,
               own == 1 ? "" : "s", instr.operand_count());
    return;
  }
  const int64_t rank = static_cast<int64_t>(tile_of->size());
  WEFT_CHECK(result.rank() == rank,
             "{} makes a tile of a value of rank {} (rng_tile_of), but its result {} has rank {}",
             name, rank, result.ToString(), result.rank());
  WEFT_CHECK(instr.operand_count() == own + rank,
             "{} making a tile of a rank-{} value takes {} operands ({} and the tile's start per "
             "dim), got {}",
             name, rank, own + rank, own, instr.operand_count());
  for (int64_t i = own; i < instr.operand_count(); ++i) {
    const Shape& start = instr.operand(i)->shape();
    WEFT_CHECK(start.IsScalar() && IsInteger(start.element_type()),
               "{}'s tile start {} (operand {}) must be an integer scalar, got {}", name, i - own,
               i, start.ToString());
  }
}

}  // namespace

Shape InferRng(const HloInstruction& instr) {
  WEFT_CHECK(instr.operand_count() >= 2,
             "rng takes 2 operands (the distribution's parameters), "
             "got {}",
             instr.operand_count());
  const Shape& out = instr.shape();
  WEFT_CHECK(out.IsArray(), "rng needs its result shape given, an array");
  CheckRngTile(instr, out);
  const PrimitiveType t = out.element_type();
  const bool normal = instr.attrs().rng_distribution == RngDistribution::kNormal;
  WEFT_CHECK(IsFloatingPoint(t) || (!normal && IsInteger(t)), "rng {} of {} is not defined: {}",
             RngDistributionString(instr.attrs().rng_distribution), PrimitiveTypeName(t),
             normal ? "rng_normal makes floats" : "rng_uniform makes floats or integers");
  for (int64_t i = 0; i < 2; ++i) {
    const Shape& p = instr.operand(i)->shape();
    WEFT_CHECK(p == Shape::Scalar(t),
               "rng operand {} must be a {}[] scalar like the result {}, "
               "got {}",
               i, PrimitiveTypeName(t), out.ToString(), p.ToString());
  }
  return out;
}

Shape InferRngBitGenerator(const HloInstruction& instr) {
  WEFT_CHECK(instr.operand_count() >= 1, "rng-bit-generator takes the state, 1 operand; got {}",
             instr.operand_count());
  const Shape& state = instr.operand(0)->shape();
  const RngAlgorithm algorithm = instr.attrs().rng_algorithm;
  const bool three_fry = algorithm == RngAlgorithm::kThreeFry;
  WEFT_CHECK(state.IsArray() && state.element_type() == PrimitiveType::kU64 && state.rank() == 1 &&
                 (state.dimensions(0) == 2 || (!three_fry && state.dimensions(0) == 3)),
             "rng-bit-generator {} needs a state of u64[2]{}, got {}",
             RngAlgorithmString(algorithm), three_fry ? "" : " or u64[3]", state.ToString());
  const Shape& out = instr.shape();
  WEFT_CHECK(out.IsArray() || (out.IsTuple() && out.tuple_shapes().size() == 2 &&
                               out.tuple_shapes(0) == state && out.tuple_shapes(1).IsArray()),
             "rng-bit-generator returns (state, bits) or the bits alone: give its shape as ({}, "
             "u32[...]) or u32[...], got {}",
             state.ToString(), out.IsValid() ? out.ToString() : "none");
  const Shape& bits = RngDrawnShape(instr);
  const PrimitiveType t = bits.element_type();
  WEFT_CHECK(t == PrimitiveType::kU16 || t == PrimitiveType::kU32 || t == PrimitiveType::kS32 ||
                 t == PrimitiveType::kU64 || t == PrimitiveType::kS64,
             "rng-bit-generator makes u16, u32, s32, u64 or s64 bits, not {}",
             PrimitiveTypeName(t));
  CheckRngTile(instr, bits);
  return out;
}

}  // namespace weft::hlo
