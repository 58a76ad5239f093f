#include "weft/hlo/instruction.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <charconv>

#include "weft/base/algorithm.h"
#include "weft/base/error.h"
#include "weft/hlo/printer.h"

namespace weft {
namespace {

constexpr std::array<std::pair<ComparisonDirection, std::string_view>, 6> kDirections = {{
    {ComparisonDirection::kEq, "EQ"},
    {ComparisonDirection::kNe, "NE"},
    {ComparisonDirection::kLt, "LT"},
    {ComparisonDirection::kLe, "LE"},
    {ComparisonDirection::kGt, "GT"},
    {ComparisonDirection::kGe, "GE"},
}};

}  // namespace

std::string_view ComparisonDirectionString(ComparisonDirection direction) {
  for (const auto& [d, name] : kDirections) {
    if (d == direction) return name;
  }
  return "?";
}

std::optional<ComparisonDirection> StringToComparisonDirection(std::string_view name) {
  for (const auto& [d, n] : kDirections) {
    if (n == name) return d;
  }
  return std::nullopt;
}

namespace {
constexpr std::pair<FusionKind, std::string_view> kFusionKinds[] = {
    {FusionKind::kLoop, "kLoop"},
    {FusionKind::kInput, "kInput"},
    {FusionKind::kOutput, "kOutput"},
    {FusionKind::kCustom, "kCustom"},
};
}  // namespace

std::string_view FusionKindString(FusionKind kind) {
  for (const auto& [k, name] : kFusionKinds) {
    if (k == kind) return name;
  }
  return "?";
}

std::optional<FusionKind> StringToFusionKind(std::string_view name) {
  for (const auto& [k, n] : kFusionKinds) {
    if (n == name) return k;
  }
  return std::nullopt;
}

namespace {
constexpr std::pair<RngAlgorithm, std::string_view> kRngAlgorithms[] = {
    {RngAlgorithm::kDefault, "rng_default"},
    {RngAlgorithm::kThreeFry, "rng_three_fry"},
    {RngAlgorithm::kPhilox, "rng_philox"},
};
constexpr std::pair<RngDistribution, std::string_view> kRngDistributions[] = {
    {RngDistribution::kUniform, "rng_uniform"},
    {RngDistribution::kNormal, "rng_normal"},
};
constexpr std::pair<TriangularTranspose, std::string_view> kTriangularTransposes[] = {
    {TriangularTranspose::kNoTranspose, "NO_TRANSPOSE"},
    {TriangularTranspose::kTranspose, "TRANSPOSE"},
    {TriangularTranspose::kAdjoint, "ADJOINT"},
};

template <typename E, size_t N>
std::string_view NameOf(const std::pair<E, std::string_view> (&table)[N], E value) {
  for (const auto& [v, name] : table) {
    if (v == value) return name;
  }
  return "?";
}
template <typename E, size_t N>
std::optional<E> ValueOf(const std::pair<E, std::string_view> (&table)[N], std::string_view name) {
  for (const auto& [v, n] : table) {
    if (n == name) return v;
  }
  return std::nullopt;
}
}  // namespace

std::string_view RngAlgorithmString(RngAlgorithm algorithm) {
  return NameOf(kRngAlgorithms, algorithm);
}
std::optional<RngAlgorithm> StringToRngAlgorithm(std::string_view name) {
  return ValueOf(kRngAlgorithms, name);
}
std::string_view RngDistributionString(RngDistribution distribution) {
  return NameOf(kRngDistributions, distribution);
}
std::optional<RngDistribution> StringToRngDistribution(std::string_view name) {
  return ValueOf(kRngDistributions, name);
}
std::string_view TriangularTransposeString(TriangularTranspose t) {
  return NameOf(kTriangularTransposes, t);
}
std::optional<TriangularTranspose> StringToTriangularTranspose(std::string_view name) {
  return ValueOf(kTriangularTransposes, name);
}

namespace {

constexpr std::string_view kRngStreamKey = "rng_stream=", kRngTileKey = "rng_tile_of=";

// The value of `key` in a ';'-separated backend_config, or nullopt.
std::optional<std::string_view> ConfigValue(std::string_view config, std::string_view key) {
  while (!config.empty()) {
    const size_t end = config.find(';');
    const std::string_view item = config.substr(0, end);
    if (item.starts_with(key)) return item.substr(key.size());
    if (end == std::string_view::npos) break;
    config.remove_prefix(end + 1);
  }
  return std::nullopt;
}

}  // namespace

std::string RngStreamConfig(const HloInstruction& rng) {
  return std::string(kRngStreamKey) + std::string(RngStreamName(rng));
}

std::string_view RngStreamName(const HloInstruction& rng) {
  return ConfigValue(rng.attrs().backend_config, kRngStreamKey).value_or(rng.name());
}

std::optional<std::vector<int64_t>> RngTileOf(const HloInstruction& rng) {
  const std::optional<std::string_view> text = ConfigValue(rng.attrs().backend_config, kRngTileKey);
  if (!text) return std::nullopt;
  std::vector<int64_t> dims;
  std::string_view rest = *text;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    int64_t d = -1;
    auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), d);
    WEFT_CHECK(ec == std::errc() && ptr == item.data() + item.size() && d >= 0,
               "{}: backend_config {}{} is not a list of dims (D0,D1,...); write the unsharded "
               "value's dims, or leave it out",
               rng.Describe(), kRngTileKey, *text);
    dims.push_back(d);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return dims;
}

std::string RngTileConfig(std::string_view stream, const std::vector<int64_t>& tile_of) {
  std::string config;
  if (!stream.empty()) config = fmt::format("{}{};", kRngStreamKey, stream);
  return config + fmt::format("{}{}", kRngTileKey, fmt::join(tile_of, ","));
}

int64_t RngOwnOperandCount(const HloInstruction& rng) {
  return rng.opcode() == HloOpcode::kRng ? 2 : 1;
}

const Shape& RngDrawnShape(const HloInstruction& rng) {
  return rng.shape().IsTuple() ? rng.shape().tuple_shapes().at(1) : rng.shape();
}

bool IsFusibleElementType(PrimitiveType type) {
  switch (type) {
    case PrimitiveType::kF32:
    case PrimitiveType::kBF16:
    case PrimitiveType::kF16:
    case PrimitiveType::kS32:
    case PrimitiveType::kS64:
    case PrimitiveType::kU32:
    case PrimitiveType::kPred:
      return true;
    default:
      return false;
  }
}

std::unique_ptr<HloInstruction> HloInstruction::Create(HloOpcode opcode, Shape shape,
                                                       std::vector<HloInstruction*> operands,
                                                       HloAttributes attrs,
                                                       std::vector<HloComputation*> called,
                                                       std::string name) {
  std::unique_ptr<HloInstruction> instr(new HloInstruction());
  instr->opcode_ = opcode;
  instr->shape_ = std::move(shape);
  instr->attrs_ = std::move(attrs);
  instr->called_ = std::move(called);
  instr->name_ = std::move(name);
  for (size_t i = 0; i < operands.size(); ++i) {
    HloInstruction* operand = operands[i];
    WEFT_CHECK(operand != nullptr, "null operand for new {} instruction", HloOpcodeString(opcode));
    // A new instruction is no one's user yet: only an operand it names twice
    // (add(x, x)) could list it already, so the check looks at its own
    // operands, not at the operand's users (a value with N users made the
    // module's construction O(N^2)).
    if (std::find(operands.begin(), operands.begin() + i, operand) == operands.begin() + i) {
      operand->AddUser(instr.get());
    }
  }
  instr->operands_ = std::move(operands);
  return instr;
}

HloInstruction::~HloInstruction() {
  // Detach from operands that outlive us (instructions die with their
  // computation, in any order, so only unlink; never touch users).
  for (HloInstruction* operand : operands_) {
    if (operand != nullptr) operand->RemoveUser(this);
  }
  for (HloInstruction* user : users_) {
    for (HloInstruction*& op : user->operands_) {
      if (op == this) op = nullptr;
    }
  }
}

// `user` is not listed yet: each caller knows it from the user's own
// operands (a few), never by scanning this instruction's users (many).
void HloInstruction::AddUser(HloInstruction* user) { users_.push_back(user); }

void HloInstruction::RemoveUser(HloInstruction* user) {
  // users_ holds each user once. From the back: a computation destroys its
  // instructions last first, so the user leaving is the newest and the
  // removal is O(1) (a value with N users was O(N^2) to destroy).
  const auto it = std::find(users_.rbegin(), users_.rend(), user);
  if (it != users_.rend()) users_.erase(std::next(it).base());
}

void HloInstruction::ReplaceOperandWith(int64_t index, HloInstruction* new_operand) {
  WEFT_CHECK(index >= 0 && index < operand_count(), "{} has no operand {}", Describe(), index);
  WEFT_CHECK(new_operand != nullptr, "null replacement operand for {}", Describe());
  HloInstruction* old = operands_[index];
  // Already a user of new_operand exactly when another slot names it.
  const bool uses_new = Contains(operands_, new_operand);
  operands_[index] = new_operand;
  if (!uses_new) new_operand->AddUser(this);
  // Drop the old operand's use only if no other operand slot still uses it.
  if (old != nullptr && std::count(operands_.begin(), operands_.end(), old) == 0) {
    old->RemoveUser(this);
  }
}

void HloInstruction::ReplaceAllUsesWith(HloInstruction* replacement) {
  WEFT_CHECK(replacement != this, "cannot replace {} with itself", Describe());
  WEFT_CHECK(replacement != nullptr, "null replacement for {}", Describe());
  // Every user moves to `replacement` at once: no removal per user from
  // this instruction's list (O(users^2) for a value with many users).
  for (HloInstruction* user : users_) {
    const bool uses_replacement = Contains(user->operands_, replacement);
    for (HloInstruction*& op : user->operands_) {
      if (op == this) op = replacement;
    }
    if (!uses_replacement) replacement->AddUser(user);
  }
  users_.clear();
}

HloComputation* HloInstruction::fused_computation() const {
  WEFT_CHECK(opcode_ == HloOpcode::kFusion && called_.size() == 1, "{} has no fused computation",
             Describe());
  return called_[0];
}

namespace {

// How an outfeed's sharding is written: over (data, token), over the data
// alone (XLA's usual form: a tuple of the data's leaves, or a tiled array
// sharding of array data), or over the token.
enum class OutfeedSharding { kDataAndToken, kData, kToken };

OutfeedSharding OutfeedShardingForm(const HloSharding& s, const Shape& data) {
  const int64_t leaves = data.LeafCount();
  if (s.IsTuple()) {
    const int64_t n = static_cast<int64_t>(s.tuple_elements().size());
    if (n == leaves + 1) return OutfeedSharding::kDataAndToken;
    return data.IsTuple() && n == leaves ? OutfeedSharding::kData : OutfeedSharding::kToken;
  }
  return data.IsArray() && s.IsTiled() ? OutfeedSharding::kData : OutfeedSharding::kToken;
}

}  // namespace

Shape HloInstruction::ShardingShape() const {
  if (opcode_ == HloOpcode::kOutfeed && sharding_ && !operands_.empty()) {
    switch (OutfeedShardingForm(*sharding_, operands_[0]->shape())) {
      case OutfeedSharding::kDataAndToken:
        return Shape::Tuple({operands_[0]->shape(), shape_});
      case OutfeedSharding::kData:
        return operands_[0]->shape();
      case OutfeedSharding::kToken:
        break;
    }
  }
  return shape_;
}

std::optional<HloSharding> HloInstruction::ResultSharding() const {
  if (opcode_ == HloOpcode::kOutfeed && sharding_ && !operands_.empty()) {
    switch (OutfeedShardingForm(*sharding_, operands_[0]->shape())) {
      case OutfeedSharding::kDataAndToken:
        return sharding_->tuple_elements().back();
      case OutfeedSharding::kData:
        return std::nullopt;  // the token carries no data
      case OutfeedSharding::kToken:
        break;
    }
  }
  return sharding_;
}

HloComputation* HloInstruction::to_apply() const {
  WEFT_CHECK(called_.size() == 1 && opcode_ != HloOpcode::kWhile, "{} has no to_apply computation",
             Describe());
  return called_[0];
}

HloComputation* HloInstruction::while_condition() const {
  WEFT_CHECK(opcode_ == HloOpcode::kWhile && called_.size() == 2, "{} is not a while", Describe());
  return called_[0];
}

HloComputation* HloInstruction::while_body() const {
  WEFT_CHECK(opcode_ == HloOpcode::kWhile && called_.size() == 2, "{} is not a while", Describe());
  return called_[1];
}

std::string HloInstruction::Describe() const {
  std::string out = fmt::format("'{}' ({})", name_, HloOpcodeString(opcode_));
  if (location_.known()) out += fmt::format(" at {}:{}", location_.line, location_.col);
  return out;
}

std::string HloInstruction::ToString() const { return PrintInstruction(*this); }

}  // namespace weft
