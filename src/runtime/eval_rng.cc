// rng-bit-generator: XLA's bits (random_bits.h). rng: weft's own generator,
// as XLA leaves rng's numbers to the implementation: Philox4x32-10 keyed by
// a hash of its stream name (RngStreamName: the instruction's name unless
// the partitioner recorded the unsharded one), one block per element (its
// row-major position in the value), its counter's high word the
// instruction's evaluation count in this executor (so a rng in a loop draws
// fresh numbers each trip, and an executor run again continues the stream;
// a new executor starts it over: runs repeat). A partitioned rng or
// rng-bit-generator making one tile of a sharded value (RngTileOf) draws
// the elements at the tile's positions in the unsharded value: sharded and
// unsharded runs agree.
#include <atomic>
#include <cmath>
#include <numbers>
#include <vector>

#include "executor_eval.h"
#include "random_bits.h"
#include "weft/base/error.h"

namespace weft::runtime::exec {
namespace {

uint64_t NameKey(std::string_view name) {
  uint64_t hash = 0xcbf29ce484222325ULL;  // FNV-1a
  for (unsigned char c : name) hash = (hash ^ c) * 0x100000001b3ULL;
  return hash;
}

// [0, 1) with 53 random bits.
double Unit(uint32_t hi, uint32_t lo) {
  return static_cast<double>((static_cast<uint64_t>(hi) << 21) ^ (lo >> 11)) * 0x1p-53;
}

}  // namespace

void CheckRng(const HloInstruction& instr) {
  const PrimitiveType t = RngDrawnShape(instr).element_type();
  WEFT_CHECK(t != PrimitiveType::kPred && t != PrimitiveType::kC64, "{} of {} is not supported",
             HloOpcodeString(instr.opcode()), PrimitiveTypeName(t));
}

namespace {

// The value's dims and this instruction's tile's start in it: the whole
// value at 0, or the tile RngTileOf and the start operands say.
struct TileOfValue {
  std::vector<int64_t> global, start;
};
TileOfValue TileOf(const HloInstruction& instr, const Shape& local, EvalArgs& args) {
  const std::optional<std::vector<int64_t>> tile_of = RngTileOf(instr);
  if (!tile_of) return {local.dimensions(), std::vector<int64_t>(local.rank(), 0)};
  TileOfValue t{*tile_of, {}};
  for (int64_t i = RngOwnOperandCount(instr); i < instr.operand_count(); ++i) {
    const HostTensor& start = args.array(i);
    t.start.push_back(LoadAsInt(start.shape().element_type(), start.raw_data(), 0));
    WEFT_CHECK(t.start.back() >= 0, "{}: tile start {} is negative", instr.Describe(),
               t.start.back());
  }
  return t;
}

}  // namespace

Value EvalRngBitGenerator(const HloInstruction& instr, EvalArgs& args) {
  const HostTensor& state = args.array(0);
  const Shape& bits_shape = RngDrawnShape(instr);
  const TileOfValue tile = TileOf(instr, bits_shape, args);
  const int64_t words = state.element_count();
  // Copied first: the new state may be written where the old one was read.
  std::vector<uint64_t> old(state.data<uint64_t>(), state.data<uint64_t>() + words);
  // The result's leaves in order: (state, bits), or the bits alone (the
  // state after them is then dropped).
  const bool with_state = instr.shape().IsTuple();
  std::vector<uint64_t> dropped(with_state ? 0 : words);
  HostTensor new_state = with_state ? args.ctx().Allocate(state.shape()) : HostTensor();
  HostTensor bits = args.ctx().Allocate(bits_shape);
  RngBitGenerator(instr.attrs().rng_algorithm, old, bits_shape.element_type(),
                  RngTile{tile.global, tile.start, bits_shape.dimensions()},
                  bits.mutable_raw_data(),
                  with_state ? std::span<uint64_t>(new_state.mutable_data<uint64_t>(), words)
                             : std::span<uint64_t>(dropped));
  if (!with_state) return Value(std::move(bits));
  return Value{std::move(new_state), std::move(bits)};
}

Value EvalRng(const HloInstruction& instr, EvalArgs& args) {
  const PrimitiveType t = instr.shape().element_type();
  const double a = args.array(0).GetDouble(0), b = args.array(1).GetDouble(0);
  const int64_t ia = LoadAsInt(t, args.array(0).raw_data(), 0);
  const int64_t ib = LoadAsInt(t, args.array(1).raw_data(), 0);
  auto* count = args.cache().Find<std::atomic<uint64_t>>(instr);
  if (count == nullptr)
    count = &args.cache().Put(instr, std::make_shared<std::atomic<uint64_t>>(0));
  const uint64_t evaluation = count->fetch_add(1);
  const uint64_t key = NameKey(RngStreamName(instr));
  const std::array<uint32_t, 2> k = {static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32)};
  const TileOfValue tile = TileOf(instr, instr.shape(), args);
  HostTensor out = args.ctx().Allocate(instr.shape());
  void* data = out.mutable_raw_data();
  const bool normal = instr.attrs().rng_distribution == RngDistribution::kNormal;
  ForEachTileElement(
      tile.global, tile.start, instr.shape().dimensions(), [&](int64_t e, int64_t g) {
        if (g < 0) {  // a padded tile's padding
          StoreDouble(t, data, e, 0);
          return;
        }
        const uint64_t block = static_cast<uint64_t>(g);
        const std::array<uint32_t, 4> w =
            Philox4x32({static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                        static_cast<uint32_t>(evaluation), static_cast<uint32_t>(evaluation >> 32)},
                       k);
        if (normal) {                                // Box-Muller: mean a, standard deviation b
          const double u1 = 1.0 - Unit(w[0], w[1]);  // (0, 1]
          const double z =
              std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * Unit(w[2], w[3]));
          StoreDouble(t, data, e, a + b * z);
        } else if (IsFloatingPoint(t)) {  // [a, b): a value rounded up to b is taken as a
          StoreDouble(t, data, e, a + (b - a) * Unit(w[0], w[1]));
          if (b > a && LoadAsDouble(t, data, e) >= b) StoreDouble(t, data, e, a);
        } else {  // [a, b) over the integers
          const uint64_t range = static_cast<uint64_t>(ib) - static_cast<uint64_t>(ia);
          const uint64_t bits = static_cast<uint64_t>(w[1]) << 32 | w[0];
          StoreInt(t, data, e, ib > ia ? ia + static_cast<int64_t>(bits % range) : ia);
        }
      });
  return Value{std::move(out)};
}

}  // namespace weft::runtime::exec
