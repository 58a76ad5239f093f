#include "weft/sharding/hlo_sharding.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <functional>
#include <numeric>
#include <utility>

#include "weft/base/algorithm.h"
#include "weft/base/text_cursor.h"

namespace weft {

namespace {
// XLA's kShardingPropagationCSEPrevention.
constexpr std::string_view kCsePreventionOpName = "_sharding_propagation_cse_prevention";
}  // namespace

// ---------------------------------------------------------------------------
// Small types

std::string_view SubgroupTypeName(SubgroupType type) {
  switch (type) {
    case SubgroupType::kManual:
      return "manual";
    case SubgroupType::kUnreduced:
      return "unreduced";
    case SubgroupType::kReplicated:
      break;
  }
  return "replicated";
}

std::string ShardGroup::ToString() const {
  return fmt::format("{} {}", kind == Kind::kAs ? "shard_as" : "shard_like", id);
}

// ---------------------------------------------------------------------------
// HloSharding construction

HloSharding HloSharding::Replicate() { return HloSharding(Kind::kReplicated); }
HloSharding HloSharding::Manual() { return HloSharding(Kind::kManual); }
HloSharding HloSharding::Unreduced() { return HloSharding(Kind::kUnreduced); }
HloSharding HloSharding::Unknown() { return HloSharding(Kind::kUnknown); }

HloSharding HloSharding::AssignDevice(int64_t device) {
  WEFT_CHECK(device >= 0, "maximal sharding device {} is negative", device);
  WEFT_CHECK(device < kMaxDevices,
             "maximal sharding device {} is not below {}, the most devices weft supports", device,
             kMaxDevices);
  HloSharding s(Kind::kMaximal);
  s.device_ = device;
  return s;
}

HloSharding HloSharding::Tile(TileAssignment tiles) {
  HloSharding s(Kind::kTiled);
  s.tiles_ = std::move(tiles);
  return s;
}

HloSharding HloSharding::PartialTile(TileAssignment tiles) {
  const int64_t last = tiles.dims().back();
  if (tiles.num_dims() == 1 || last == tiles.num_elements()) return Replicate();
  if (last == 1) {
    std::vector<int64_t> dims(tiles.dims().begin(), tiles.dims().end() - 1);
    return Tile(tiles.Reshape(std::move(dims)));
  }
  HloSharding s(Kind::kTiled);
  // Devices within a replication group sorted, so that shardings equal up
  // to replica order compare equal, as in XLA.
  s.tiles_ = tiles.SortMinorGroups();
  s.replicate_on_last_tile_dim_ = true;
  return s;
}

HloSharding HloSharding::Subgroup(TileAssignment tiles, std::vector<SubgroupType> types) {
  WEFT_CHECK(static_cast<int64_t>(types.size()) <= tiles.num_dims(),
             "{} subgroup types for a tile assignment of rank {}", types.size(), tiles.num_dims());
  if (types.empty()) return Tile(std::move(tiles));
  const int64_t data_rank = tiles.num_dims() - static_cast<int64_t>(types.size());
  // Order: data dims, manual, unreduced, replicated dims, then size-1
  // subgroups (dropped).
  std::vector<int64_t> perm(data_rank);
  std::iota(perm.begin(), perm.end(), 0);
  std::vector<int64_t> new_dims(tiles.dims().begin(), tiles.dims().begin() + data_rank);
  std::vector<SubgroupType> new_types;
  std::vector<int64_t> trivial;
  for (SubgroupType type :
       {SubgroupType::kManual, SubgroupType::kUnreduced, SubgroupType::kReplicated}) {
    int64_t size = 1;
    for (size_t i = 0; i < types.size(); ++i) {
      const int64_t dim = data_rank + static_cast<int64_t>(i);
      if (types[i] != type) continue;
      if (tiles.dim(dim) == 1) {
        trivial.push_back(dim);
        continue;
      }
      perm.push_back(dim);
      size *= tiles.dim(dim);
    }
    if (size > 1) {
      new_dims.push_back(size);
      new_types.push_back(type);
    }
  }
  perm.insert(perm.end(), trivial.begin(), trivial.end());
  TileAssignment normalized = tiles.Transpose(perm).Reshape(new_dims);
  const int64_t data_tiles = Product(std::span(new_dims).first(data_rank));
  if (new_types.empty()) return Tile(std::move(normalized));
  if (data_tiles == 1 && new_types.size() == 1) {
    switch (new_types[0]) {
      case SubgroupType::kManual:
        return Manual();
      case SubgroupType::kUnreduced:
        return Unreduced();
      case SubgroupType::kReplicated:
        return Replicate();
    }
  }
  if (new_types.size() == 1 && new_types[0] == SubgroupType::kReplicated) {
    return PartialTile(std::move(normalized));
  }
  HloSharding s(Kind::kTiled);
  s.tiles_ = new_types.back() == SubgroupType::kReplicated ? normalized.SortMinorGroups()
                                                           : std::move(normalized);
  s.subgroup_types_ = std::move(new_types);
  return s;
}

HloSharding HloSharding::Tuple(std::vector<HloSharding> elements) {
  for (const HloSharding& e : elements) {
    WEFT_CHECK(!e.IsTuple(),
               "tuple shardings are flat (one leaf sharding per array in the tuple shape); "
               "got a nested tuple {}",
               e.ToString());
  }
  HloSharding s(Kind::kTuple);
  s.tuple_elements_ = std::move(elements);
  return s;
}

HloSharding HloSharding::WithShardGroup(std::optional<ShardGroup> group) const {
  WEFT_CHECK(!IsTuple() || !group.has_value(),
             "a shard group goes on a leaf sharding, not on tuple sharding {}", ToString());
  HloSharding s = *this;
  s.shard_group_ = group;
  return s;
}

HloSharding HloSharding::WithCsePrevention(bool mark) const {
  WEFT_CHECK(!IsTuple() || !mark, "the CSE-prevention mark goes on a leaf sharding, not on {}",
             ToString());
  HloSharding s = *this;
  s.cse_prevention_ = mark;
  return s;
}

// ---------------------------------------------------------------------------
// Queries

namespace {
template <typename Pred>
bool AllLeaves(const std::vector<HloSharding>& elements, Pred pred) {
  return std::all_of(elements.begin(), elements.end(), pred);
}
}  // namespace

bool HloSharding::IsReplicated() const {
  if (IsTuple()) return AllLeaves(tuple_elements_, [](auto& e) { return e.IsReplicated(); });
  return kind_ == Kind::kReplicated;
}

bool HloSharding::IsManual() const {
  if (IsTuple()) return AllLeaves(tuple_elements_, [](auto& e) { return e.IsManual(); });
  return kind_ == Kind::kManual;
}

bool HloSharding::IsUnreduced() const {
  if (IsTuple()) return AllLeaves(tuple_elements_, [](auto& e) { return e.IsUnreduced(); });
  return kind_ == Kind::kUnreduced;
}

bool HloSharding::IsUnknown() const {
  if (IsTuple()) return AllLeaves(tuple_elements_, [](auto& e) { return e.IsUnknown(); });
  return kind_ == Kind::kUnknown;
}

bool HloSharding::IsTileMaximal() const {
  if (IsTuple()) return AllLeaves(tuple_elements_, [](auto& e) { return e.IsTileMaximal(); });
  return kind_ == Kind::kReplicated || kind_ == Kind::kMaximal;
}

int64_t HloSharding::TiledDataRank() const {
  if (!IsTiled()) return 0;
  return tiles_.num_dims() - (replicate_on_last_tile_dim_ ? 1 : 0) -
         static_cast<int64_t>(subgroup_types_.size());
}

int64_t HloSharding::SubgroupReplicationDim() const {
  if (!IsTiled()) return -1;
  if (replicate_on_last_tile_dim_) return tiles_.num_dims() - 1;
  for (size_t i = 0; i < subgroup_types_.size(); ++i) {
    if (subgroup_types_[i] == SubgroupType::kReplicated) return TiledDataRank() + i;
  }
  return -1;
}

int64_t HloSharding::SubgroupManualDim() const {
  if (!IsTiled()) return -1;
  for (size_t i = 0; i < subgroup_types_.size(); ++i) {
    if (subgroup_types_[i] == SubgroupType::kManual) return TiledDataRank() + i;
  }
  return -1;
}

int64_t HloSharding::SubgroupUnreducedDim() const {
  if (!IsTiled()) return -1;
  for (size_t i = 0; i < subgroup_types_.size(); ++i) {
    if (subgroup_types_[i] == SubgroupType::kUnreduced) return TiledDataRank() + i;
  }
  return -1;
}

bool HloSharding::HasUnreduced() const {
  if (IsTuple()) {
    return std::any_of(tuple_elements_.begin(), tuple_elements_.end(),
                       [](const HloSharding& e) { return e.HasUnreduced(); });
  }
  return kind_ == Kind::kUnreduced || SubgroupUnreducedDim() >= 0;
}

HloSharding HloSharding::WithoutUnreduced() const {
  if (IsTuple()) {
    std::vector<HloSharding> elements;
    for (const HloSharding& e : tuple_elements_) elements.push_back(e.WithoutUnreduced());
    return Tuple(std::move(elements));
  }
  if (!HasUnreduced()) return *this;
  HloSharding s = Replicate();
  if (kind_ == Kind::kTiled) {
    std::vector<SubgroupType> types = subgroup_types_;
    std::replace(types.begin(), types.end(), SubgroupType::kUnreduced, SubgroupType::kReplicated);
    s = Subgroup(tiles_, std::move(types));
  }
  return s.WithShardGroup(shard_group_).WithCsePrevention(cse_prevention_);
}

int64_t HloSharding::NumTiles() const {
  if (!IsTiled()) return 1;
  return Product(std::span(tiles_.dims()).first(TiledDataRank()));
}

std::vector<int64_t> HloSharding::TilesPerDim() const {
  if (!IsTiled()) return {};
  return std::vector<int64_t>(tiles_.dims().begin(), tiles_.dims().begin() + TiledDataRank());
}

int64_t HloSharding::device() const {
  WEFT_CHECK(IsMaximal(), "sharding {} is not a single-device placement", ToString());
  return device_;
}

// ---------------------------------------------------------------------------
// Tile geometry

namespace {
int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

std::vector<int64_t> HloSharding::TileIndexForDevice(int64_t device) const {
  WEFT_CHECK(IsTiled() || IsTileMaximal(), "sharding {} has no tiles", ToString());
  if (!IsTiled()) return {};
  std::optional<std::vector<int64_t>> index = tiles_.IndexOf(device);
  WEFT_CHECK(index.has_value(), "device {} is not in sharding {}", device, ToString());
  index->resize(TiledDataRank());
  return *index;
}

HloSharding::TileIndices HloSharding::TileIndexTable(int64_t num_devices) const {
  WEFT_CHECK(IsTiled() || IsTileMaximal(), "sharding {} has no tiles", ToString());
  TileIndices out;
  if (!IsTiled()) {
    out.table_ = std::make_shared<const std::vector<int64_t>>();
    return out;
  }
  WEFT_CHECK(tiles_.num_elements() == num_devices, "sharding {} spans {} devices, not {}",
             ToString(), tiles_.num_elements(), num_devices);
  out.table_ = tiles_.IndexTable();
  out.stride_ = tiles_.num_dims();
  WEFT_CHECK(static_cast<int64_t>(out.table_->size()) == num_devices * out.stride_,
             "sharding {} uses a device id not below {}", ToString(), num_devices);
  return out;
}

std::vector<int64_t> HloSharding::TileShape(std::span<const int64_t> dims) const {
  WEFT_CHECK(IsTiled() || IsTileMaximal(), "sharding {} has no tiles", ToString());
  if (!IsTiled()) return {dims.begin(), dims.end()};
  WEFT_CHECK(static_cast<int64_t>(dims.size()) == TiledDataRank(),
             "sharding {} splits {} dims but the array has rank {}", ToString(), TiledDataRank(),
             dims.size());
  std::vector<int64_t> shape(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) shape[i] = CeilDiv(dims[i], tiles_.dim(i));
  return shape;
}

std::vector<int64_t> HloSharding::TileOffsetForDevice(std::span<const int64_t> dims,
                                                      int64_t device) const {
  std::vector<int64_t> tile = TileShape(dims);
  if (!IsTiled()) return std::vector<int64_t>(dims.size(), 0);
  std::vector<int64_t> index = TileIndexForDevice(device);
  for (size_t i = 0; i < dims.size(); ++i) index[i] = std::min(index[i] * tile[i], dims[i]);
  return index;
}

std::vector<int64_t> HloSharding::TileLimitForDevice(std::span<const int64_t> dims,
                                                     int64_t device) const {
  std::vector<int64_t> tile = TileShape(dims);
  if (!IsTiled()) return {dims.begin(), dims.end()};
  std::vector<int64_t> index = TileIndexForDevice(device);
  for (size_t i = 0; i < dims.size(); ++i) index[i] = std::min((index[i] + 1) * tile[i], dims[i]);
  return index;
}

std::vector<int64_t> HloSharding::TileShapeForDevice(std::span<const int64_t> dims,
                                                     int64_t device) const {
  std::vector<int64_t> offset = TileOffsetForDevice(dims, device);
  std::vector<int64_t> limit = TileLimitForDevice(dims, device);
  for (size_t i = 0; i < limit.size(); ++i) limit[i] -= offset[i];
  return limit;
}

bool HloSharding::UsesDevice(int64_t device) const {
  switch (kind_) {
    case Kind::kTuple:
      return std::any_of(tuple_elements_.begin(), tuple_elements_.end(),
                         [&](const HloSharding& e) { return e.UsesDevice(device); });
    case Kind::kMaximal:
      return device == device_;
    case Kind::kTiled:
      return tiles_.IndexOf(device).has_value();
    default:
      return true;
  }
}

void HloSharding::Validate(std::span<const int64_t> dims,
                           std::optional<int64_t> num_devices) const {
  WEFT_CHECK(!IsTuple(), "tuple sharding {} applied to an array; give one sharding per leaf",
             ToString());
  if (IsMaximal()) {
    WEFT_CHECK(!num_devices || device_ < *num_devices,
               "sharding {} names device {} but only {} devices exist", ToString(), device_,
               *num_devices);
    return;
  }
  if (!IsTiled()) return;
  WEFT_CHECK(static_cast<int64_t>(dims.size()) == TiledDataRank(),
             "sharding {} splits {} dims but the array has rank {}; give one tile count per "
             "array dim",
             ToString(), TiledDataRank(), dims.size());
  WEFT_CHECK(tiles_.num_elements() > 1,
             "sharding {} uses a single device; write {{replicated}} or {{maximal device=N}}",
             ToString());
  if (num_devices) {
    WEFT_CHECK(tiles_.num_elements() == *num_devices,
               "sharding {} spans {} devices but the program runs on {}", ToString(),
               tiles_.num_elements(), *num_devices);
    // An iota holds devices 0..N-1 exactly.
    for (int64_t d : tiles_.is_iota() ? std::vector<int64_t>{} : tiles_.devices()) {
      WEFT_CHECK(d < *num_devices, "sharding {} names device {} but only {} devices exist",
                 ToString(), d, *num_devices);
    }
  }
}

// ---------------------------------------------------------------------------
// Printing, equality

std::string HloSharding::ToString() const {
  if (IsTuple()) {
    std::string out = "{";
    for (size_t i = 0; i < tuple_elements_.size(); ++i) {
      // XLA marks every fifth element's index to help readers count.
      if (i > 0) out += (i % 5 == 0) ? fmt::format(", /*index={}*/", i) : ", ";
      out += tuple_elements_[i].ToString();
    }
    return out + "}";
  }
  std::string body;
  switch (kind_) {
    case Kind::kReplicated:
      body = "replicated";
      break;
    case Kind::kManual:
      body = "manual";
      break;
    case Kind::kUnreduced:
      body = "unreduced";
      break;
    case Kind::kUnknown:
      body = "unknown";
      break;
    case Kind::kMaximal:
      body = fmt::format("maximal device={}", device_);
      break;
    case Kind::kTiled:
      body = tiles_.ToString();
      if (replicate_on_last_tile_dim_) body += " last_tile_dim_replicate";
      if (!subgroup_types_.empty()) {
        std::vector<std::string_view> names;
        for (SubgroupType t : subgroup_types_) names.push_back(SubgroupTypeName(t));
        body += fmt::format(" last_tile_dims={{{}}}", fmt::join(names, ", "));
      }
      break;
    case Kind::kTuple:
      break;
  }
  if (shard_group_) body += " " + shard_group_->ToString();
  if (cse_prevention_) body += fmt::format(" metadata={{op_name=\"{}\"}}", kCsePreventionOpName);
  return "{" + body + "}";
}

bool HloSharding::operator==(const HloSharding& other) const {
  if (kind_ != other.kind_ || shard_group_ != other.shard_group_) return false;
  switch (kind_) {
    case Kind::kMaximal:
      return device_ == other.device_;
    case Kind::kTiled:
      return tiles_ == other.tiles_ &&
             replicate_on_last_tile_dim_ == other.replicate_on_last_tile_dim_ &&
             subgroup_types_ == other.subgroup_types_;
    case Kind::kTuple:
      return tuple_elements_ == other.tuple_elements_;
    default:
      return true;
  }
}

size_t HloSharding::Hash() const {
  size_t h = std::hash<int>()(static_cast<int>(kind_));
  if (shard_group_) {
    h = HashCombine(h, std::hash<int64_t>()(shard_group_->id * 2 +
                                            (shard_group_->kind == ShardGroup::Kind::kAs)));
  }
  switch (kind_) {
    case Kind::kMaximal:
      return HashCombine(h, std::hash<int64_t>()(device_));
    case Kind::kTiled:
      h = HashCombine(h, tiles_.Hash());
      h = HashCombine(h, replicate_on_last_tile_dim_);
      for (SubgroupType t : subgroup_types_) h = HashCombine(h, static_cast<size_t>(t) + 7);
      return h;
    case Kind::kTuple:
      for (const HloSharding& e : tuple_elements_) h = HashCombine(h, e.Hash());
      return h;
    default:
      return h;
  }
}

// ---------------------------------------------------------------------------
// Parsing

namespace {

class ShardingParser {
 public:
  ShardingParser(std::string_view text, size_t pos, const ShardingLimits& limits = {})
      : cur_(text, ""), limits_(limits) {
    cur_.set_pos(pos);
  }
  TextCursor& cursor() { return cur_; }

  // `in_tuple`: an element of a tuple sharding, which must be a leaf (tuple
  // shardings are flat); refused before descending, so deeply nested braces
  // cannot exhaust the stack.
  HloSharding ParseSharding(bool in_tuple = false) {
    const size_t at = cur_.Mark();
    cur_.Expect("{", "'{' to start a sharding");
    if (cur_.Peek() == '{' || cur_.Peek() == '}') {
      if (in_tuple) {
        cur_.ExpectedAt(at,
                        "a leaf sharding: tuple shardings are flat (one leaf sharding per array "
                        "in the tuple shape), not nested");
      }
      return ParseTupleRest();
    }
    return ParseLeafRest();
  }

 private:
  HloSharding ParseTupleRest() {
    std::vector<HloSharding> elements;
    if (cur_.Peek() != '}') {
      do {
        elements.push_back(ParseSharding(/*in_tuple=*/true));
      } while (cur_.TryConsume(","));
    }
    cur_.Expect("}", "',' or '}' in tuple sharding");
    return HloSharding::Tuple(std::move(elements));
  }

  HloSharding ParseLeafRest() {
    enum class LeafKind { kNone, kReplicated, kManual, kUnreduced, kUnknown, kMaximal, kTiled };
    LeafKind kind = LeafKind::kNone;
    std::optional<int64_t> device;
    std::optional<TileAssignment> tiles;
    bool last_tile_dim_replicate = false;
    std::optional<std::vector<SubgroupType>> last_tile_dims;
    std::optional<ShardGroup> group;
    bool cse_prevention = false;
    size_t tiles_at = cur_.Mark();
    auto set_kind = [&](LeafKind k, size_t at) {
      if (kind != LeafKind::kNone) {
        cur_.ExpectedAt(at,
                        "a single sharding kind (replicated, manual, unreduced, unknown, maximal, "
                        "devices=)");
      }
      kind = k;
    };
    while (!cur_.TryConsume("}")) {
      const size_t at = cur_.Mark();
      if (cur_.TryKeyword("replicated")) {
        set_kind(LeafKind::kReplicated, at);
      } else if (cur_.TryKeyword("manual")) {
        set_kind(LeafKind::kManual, at);
      } else if (cur_.TryKeyword("unreduced")) {
        set_kind(LeafKind::kUnreduced, at);
      } else if (cur_.TryKeyword("unknown")) {
        set_kind(LeafKind::kUnknown, at);
      } else if (cur_.TryKeyword("maximal")) {
        set_kind(LeafKind::kMaximal, at);
      } else if (cur_.TryKeyword("device")) {
        cur_.Expect("=", "'=' after device");
        device = cur_.ParseInt("a device id after device=");
      } else if (cur_.TryKeyword("devices")) {
        set_kind(LeafKind::kTiled, at);
        tiles_at = at;
        cur_.Expect("=", "'=' after devices");
        tiles = ParseTiles();
      } else if (cur_.TryKeyword("last_tile_dim_replicate")) {
        last_tile_dim_replicate = true;
      } else if (cur_.TryKeyword("last_tile_dims")) {
        cur_.Expect("=", "'=' after last_tile_dims");
        last_tile_dims = ParseSubgroupTypes();
      } else if (cur_.TryKeyword("shard_as")) {
        group = ShardGroup::As(cur_.ParseInt("a shard group id"));
      } else if (cur_.TryKeyword("shard_like")) {
        group = ShardGroup::Like(cur_.ParseInt("a shard group id"));
      } else if (cur_.TryKeyword("metadata")) {
        // Op metadata inside a sharding is informational only and dropped,
        // but for XLA's CSE-prevention mark.
        cur_.Expect("=", "'=' after metadata");
        if (cur_.Peek() != '{') cur_.Expected("'{' to start the metadata");
        std::string metadata = cur_.ParseRawValue("the metadata");
        std::erase_if(metadata, [](unsigned char c) { return std::isspace(c); });
        cse_prevention = metadata == fmt::format("{{op_name=\"{}\"}}", kCsePreventionOpName);
      } else {
        cur_.Expected(
            "a sharding attribute (replicated, manual, unreduced, unknown, maximal, device=, "
            "devices=, last_tile_dim_replicate, last_tile_dims=, shard_as, shard_like) or '}'");
      }
    }
    if (kind == LeafKind::kNone) {
      cur_.ExpectedAt(
          tiles_at, "a sharding kind (replicated, manual, unreduced, unknown, maximal, devices=)");
    }
    if (kind == LeafKind::kMaximal && !device) {
      cur_.ExpectedAt(tiles_at, "device=N in a maximal sharding");
    }
    if (kind != LeafKind::kMaximal && device) {
      cur_.ExpectedAt(tiles_at, "'maximal' with device=N (device= alone is not a sharding)");
    }
    if (kind != LeafKind::kTiled && (last_tile_dim_replicate || last_tile_dims)) {
      cur_.ExpectedAt(tiles_at, "devices=[...] before last_tile_dim_replicate/last_tile_dims");
    }
    if (last_tile_dim_replicate && last_tile_dims) {
      cur_.ExpectedAt(tiles_at, "either last_tile_dim_replicate or last_tile_dims, not both");
    }
    HloSharding s;
    try {
      switch (kind) {
        case LeafKind::kReplicated:
          s = HloSharding::Replicate();
          break;
        case LeafKind::kManual:
          s = HloSharding::Manual();
          break;
        case LeafKind::kUnreduced:
          s = HloSharding::Unreduced();
          break;
        case LeafKind::kUnknown:
          s = HloSharding::Unknown();
          break;
        case LeafKind::kMaximal:
          s = HloSharding::AssignDevice(*device);
          break;
        default:
          if (last_tile_dim_replicate) {
            s = HloSharding::PartialTile(std::move(*tiles));
          } else if (last_tile_dims) {
            s = HloSharding::Subgroup(std::move(*tiles), std::move(*last_tile_dims));
          } else {
            s = HloSharding::Tile(std::move(*tiles));
          }
      }
    } catch (const Error& e) {
      cur_.FailAt(tiles_at, e.what());
    }
    return s.WithShardGroup(group).WithCsePrevention(cse_prevention);
  }

  TileAssignment ParseTiles() {
    const size_t start = cur_.Mark();
    std::vector<int64_t> dims = cur_.ParseIntList("the tile assignment dims", '[', ']');
    if (dims.empty()) cur_.ExpectedAt(start, "at least one tile assignment dim");
    // The device count, against the limit, before any device is expanded.
    const bool positive = std::all_of(dims.begin(), dims.end(), [](int64_t d) { return d >= 1; });
    if (positive && !DeviceCountWithin(dims, limits_.max_devices)) {
      cur_.FailAt(start, fmt::format("tile assignment [{}] spans more than {} devices, {}",
                                     fmt::join(dims, ","), limits_.max_devices, limits_.why));
    }
    if (cur_.TryConsume("<=")) {
      std::vector<int64_t> reshape = cur_.ParseIntList("the iota reshape dims", '[', ']');
      std::vector<int64_t> perm(reshape.size());
      std::iota(perm.begin(), perm.end(), 0);
      if (cur_.TryConsume("T")) perm = cur_.ParseIntList("the iota transpose", '(', ')');
      return MakeTiles(start, [&] {
        return TileAssignment::Iota(std::move(dims), std::move(reshape), std::move(perm));
      });
    }
    // XLA's dumps may break a long list anywhere, a line even starting with ','.
    std::vector<int64_t> devices;
    do {
      devices.push_back(cur_.ParseInt("a device id in the tile assignment"));
    } while (cur_.TryConsume(","));
    return MakeTiles(start, [&] { return TileAssignment(std::move(dims), std::move(devices)); });
  }

  // make(), its refusal (repeated devices, a count that does not match the
  // dims) a syntax error at the tile assignment.
  template <typename Make>
  TileAssignment MakeTiles(size_t start, Make make) {
    try {
      return make();
    } catch (const TextError&) {
      throw;
    } catch (const Error& e) {
      cur_.FailAt(start, e.what());
    }
  }

  std::vector<SubgroupType> ParseSubgroupTypes() {
    cur_.Expect("{", "'{' to start last_tile_dims");
    std::vector<SubgroupType> types;
    do {
      if (cur_.TryKeyword("manual")) {
        types.push_back(SubgroupType::kManual);
      } else if (cur_.TryKeyword("replicated")) {
        types.push_back(SubgroupType::kReplicated);
      } else if (cur_.TryKeyword("unreduced")) {
        types.push_back(SubgroupType::kUnreduced);
      } else {
        cur_.Expected("'manual', 'unreduced' or 'replicated' in last_tile_dims");
      }
    } while (cur_.TryConsume(","));
    cur_.Expect("}", "',' or '}' in last_tile_dims");
    return types;
  }

  TextCursor cur_;
  ShardingLimits limits_;
};

}  // namespace

HloSharding ParseHloShardingAt(std::string_view text, size_t* pos, const ShardingLimits& limits) {
  ShardingParser parser(text, *pos, limits);
  try {
    HloSharding s = parser.ParseSharding();
    *pos = parser.cursor().pos();
    return s;
  } catch (const TextError& e) {
    throw ShardingSyntaxError(e.offset(), e.message());
  }
}

HloSharding HloSharding::Parse(std::string_view text) {
  try {
    ShardingParser parser(text, 0);
    HloSharding s = parser.ParseSharding();
    if (!parser.cursor().AtEnd()) parser.cursor().Expected("end of sharding after '}'");
    return s;
  } catch (const TextError& e) {
    throw ShardingSyntaxError(
        e.offset(), fmt::format("sharding '{}' column {}: {}", text, e.offset() + 1, e.message()));
  }
}

}  // namespace weft
