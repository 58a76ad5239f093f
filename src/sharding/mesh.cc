#include "weft/sharding/mesh.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <numeric>

#include "weft/base/algorithm.h"

namespace weft {
namespace {

void CheckAxes(const std::vector<std::string>& names, const std::vector<int64_t>& sizes) {
  WEFT_CHECK(names.size() == sizes.size(), "mesh has {} axis names [{}] but {} sizes [{}]",
             names.size(), fmt::join(names, ", "), sizes.size(), fmt::join(sizes, ", "));
  WEFT_CHECK(!names.empty(), "a mesh needs at least one axis");
  for (size_t i = 0; i < names.size(); ++i) {
    WEFT_CHECK(!names[i].empty(), "mesh axis {} has an empty name", i);
    WEFT_CHECK(sizes[i] >= 1, "mesh axis '{}' has size {}; sizes must be >= 1", names[i], sizes[i]);
    for (size_t j = 0; j < i; ++j) {
      WEFT_CHECK(names[i] != names[j], "mesh axis name '{}' appears twice", names[i]);
    }
  }
  WEFT_CHECK(DeviceCountWithin(sizes).has_value(),
             "mesh ({}) of sizes [{}] has more than {} devices, the most weft supports",
             fmt::join(names, ", "), fmt::join(sizes, ","), kMaxDevices);
}

}  // namespace

Mesh::Mesh(std::vector<std::string> axis_names, std::vector<int64_t> axis_sizes)
    : axis_names_(std::move(axis_names)) {
  CheckAxes(axis_names_, axis_sizes);
  devices_ = TileAssignment::Iota(std::move(axis_sizes));
}

Mesh::Mesh(std::vector<std::string> axis_names, std::vector<int64_t> axis_sizes,
           std::vector<int64_t> device_ids)
    : axis_names_(std::move(axis_names)) {
  CheckAxes(axis_names_, axis_sizes);
  WEFT_CHECK(static_cast<int64_t>(device_ids.size()) == Product(axis_sizes),
             "mesh of shape [{}] needs {} device ids, got {}", fmt::join(axis_sizes, ","),
             Product(axis_sizes), device_ids.size());
  // Remember the iota form when there is one, so shardings print compactly.
  devices_ = TileAssignment(std::move(axis_sizes), std::move(device_ids)).AsIotaIfPossible();
}

Mesh Mesh::Hybrid(std::vector<std::string> axis_names, std::vector<int64_t> ici_shape,
                  std::vector<int64_t> dcn_shape) {
  WEFT_CHECK(ici_shape.size() == axis_names.size() && dcn_shape.size() == axis_names.size(),
             "hybrid mesh: {} axis names but ICI shape [{}] and DCN shape [{}]; give one ICI "
             "and one DCN size per axis",
             axis_names.size(), fmt::join(ici_shape, ","), fmt::join(dcn_shape, ","));
  const size_t rank = axis_names.size();
  std::vector<int64_t> sizes(rank), reshape(2 * rank), perm(2 * rank);
  for (size_t i = 0; i < rank; ++i) {
    WEFT_CHECK(ici_shape[i] >= 1 && dcn_shape[i] >= 1,
               "hybrid mesh axis '{}' has ICI size {} and DCN size {}; both must be >= 1",
               axis_names[i], ici_shape[i], dcn_shape[i]);
    WEFT_CHECK(DeviceCountWithin(std::vector<int64_t>{ici_shape[i], dcn_shape[i]}).has_value(),
               "hybrid mesh axis '{}' of ICI size {} x DCN size {} has more than {} devices, the "
               "most weft supports",
               axis_names[i], ici_shape[i], dcn_shape[i], kMaxDevices);
    sizes[i] = ici_shape[i] * dcn_shape[i];
    // Device id = slice * n_ici + local: value digits are (dcn..., ici...);
    // along each mesh axis the DCN digit is major to the ICI digit.
    reshape[i] = dcn_shape[i];
    reshape[rank + i] = ici_shape[i];
    perm[2 * i] = static_cast<int64_t>(i);
    perm[2 * i + 1] = static_cast<int64_t>(rank + i);
  }
  Mesh mesh(std::move(axis_names), sizes);
  mesh.devices_ = TileAssignment::Iota(std::move(sizes), std::move(reshape), std::move(perm));
  mesh.ici_shape_ = std::move(ici_shape);
  mesh.dcn_shape_ = std::move(dcn_shape);
  return mesh;
}

int64_t Mesh::axis_index(std::string_view name) const {
  auto it = std::find(axis_names_.begin(), axis_names_.end(), name);
  WEFT_CHECK(it != axis_names_.end(), "mesh has no axis '{}'; its axes are {}", name,
             fmt::join(axis_names_, ", "));
  return it - axis_names_.begin();
}

std::vector<int64_t> Mesh::IndexOf(int64_t device) const {
  std::optional<std::vector<int64_t>> index = devices_.IndexOf(device);
  WEFT_CHECK(index.has_value(), "device {} is not in mesh {}", device, ToString());
  return *index;
}

int64_t Mesh::SliceOf(int64_t device) const {
  if (!is_hybrid()) return 0;
  IndexOf(device);  // validates
  return device / Product(ici_shape_);
}

std::string Mesh::ToString() const {
  std::vector<std::string> axes;
  for (int64_t i = 0; i < num_axes(); ++i) {
    axes.push_back(fmt::format("'{}': {}", axis_names_[i], axis_sizes()[i]));
  }
  std::string out = fmt::format("Mesh({}", fmt::join(axes, ", "));
  if (is_hybrid()) {
    out +=
        fmt::format(", ici=[{}], dcn=[{}]", fmt::join(ici_shape_, ","), fmt::join(dcn_shape_, ","));
  } else if (devices_ != TileAssignment::Iota(axis_sizes())) {
    out += fmt::format(", device_ids=[{}]", fmt::join(devices_.devices(), ","));
  }
  return out + ")";
}

// ---------------------------------------------------------------------------
// PartitionSpec

std::string PartitionSpec::ToString() const {
  std::vector<std::string> parts;
  for (const AxisSpec& dim : dims_) {
    if (dim.is_none()) {
      parts.push_back("None");
    } else if (dim.axes().size() == 1) {
      parts.push_back(fmt::format("'{}'", dim.axes()[0]));
    } else {
      std::vector<std::string> quoted;
      for (const std::string& a : dim.axes()) quoted.push_back(fmt::format("'{}'", a));
      parts.push_back(fmt::format("({})", fmt::join(quoted, ", ")));
    }
  }
  return fmt::format("PartitionSpec({})", fmt::join(parts, ", "));
}

namespace {

class SpecParser {
 public:
  explicit SpecParser(std::string_view text) : text_(text) {}

  PartitionSpec Parse() {
    Skip();
    if (std::isalpha(static_cast<unsigned char>(Peek()))) Name();  // "P" / "PartitionSpec"
    std::vector<AxisSpec> dims;
    Expect('(');
    Skip();
    while (Peek() != ')') {
      if (Peek() == '(') {
        ++pos_;
        std::vector<std::string> axes;
        Skip();
        while (Peek() != ')') {
          axes.push_back(Name());
          if (!Comma(')')) break;
        }
        Expect(')');
        dims.emplace_back(std::move(axes));
      } else {
        std::string name = Name();
        if (name == "None") {
          dims.emplace_back();
        } else {
          dims.emplace_back(std::move(name));
        }
      }
      if (!Comma(')')) break;
    }
    Expect(')');
    Skip();
    if (pos_ != text_.size()) Fail("end of PartitionSpec");
    return PartitionSpec(std::move(dims));
  }

 private:
  char Peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void Skip() {
    while (std::isspace(static_cast<unsigned char>(Peek()))) ++pos_;
  }
  [[noreturn]] void Fail(std::string_view expected) const {
    Fail(fmt::format("PartitionSpec '{}' column {}: expected {}, found {}", text_, pos_ + 1,
                     expected,
                     pos_ < text_.size() ? fmt::format("'{}'", text_[pos_]) : "end of input"),
         0);
  }
  [[noreturn]] static void Fail(const std::string& message, int) { throw Error(message); }
  void Expect(char c) {
    Skip();
    if (Peek() != c) Fail(fmt::format("'{}'", c));
    ++pos_;
  }
  // Consumes ',' (true) or stops before `close` (false).
  bool Comma(char close) {
    Skip();
    if (Peek() == ',') {
      ++pos_;
      Skip();
      return Peek() != close;  // trailing comma
    }
    if (Peek() != close) Fail(fmt::format("',' or '{}'", close));
    return false;
  }
  std::string Name() {
    Skip();
    const char quote = Peek();
    if (quote == '\'' || quote == '"') {
      size_t end = text_.find(quote, pos_ + 1);
      if (end == std::string_view::npos) Fail("a closing quote");
      std::string name(text_.substr(pos_ + 1, end - pos_ - 1));
      pos_ = end + 1;
      Skip();
      return name;
    }
    size_t start = pos_;
    while (std::isalnum(static_cast<unsigned char>(Peek())) || Peek() == '_') ++pos_;
    if (start == pos_) Fail("a mesh axis name, None, or '('");
    std::string name(text_.substr(start, pos_ - start));
    Skip();
    return name;
  }

  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

PartitionSpec PartitionSpec::Parse(std::string_view text) { return SpecParser(text).Parse(); }

// ---------------------------------------------------------------------------
// Conversion

HloSharding ToHloSharding(const Mesh& mesh, const PartitionSpec& spec, int64_t rank,
                          std::span<const std::string> manual_axes) {
  WEFT_CHECK(spec.size() <= rank, "{} has {} entries but the array has rank {}", spec.ToString(),
             spec.size(), rank);
  std::vector<bool> used(mesh.num_axes(), false);
  std::vector<int64_t> perm, tile_dims;
  for (int64_t d = 0; d < rank; ++d) {
    int64_t tiles = 1;
    if (d < spec.size()) {
      for (const std::string& axis : spec.dims()[d].axes()) {
        const int64_t a = mesh.axis_index(axis);
        WEFT_CHECK(!used[a], "{} uses mesh axis '{}' twice; each axis splits at most one dim",
                   spec.ToString(), axis);
        used[a] = true;
        perm.push_back(a);
        tiles *= mesh.axis_sizes()[a];
      }
    }
    tile_dims.push_back(tiles);
  }
  int64_t manual = 1;
  for (const std::string& axis : manual_axes) {
    const int64_t a = mesh.axis_index(axis);
    WEFT_CHECK(!used[a], "mesh axis '{}' is manual and cannot also appear in {}", axis,
               spec.ToString());
    used[a] = true;
    perm.push_back(a);
    manual *= mesh.axis_sizes()[a];
  }
  int64_t replicated = 1;
  for (int64_t a = 0; a < mesh.num_axes(); ++a) {
    if (!used[a]) {
      perm.push_back(a);
      replicated *= mesh.axis_sizes()[a];
    }
  }
  if (Product(tile_dims) == 1 && manual == 1) return HloSharding::Replicate();
  std::vector<int64_t> dims = tile_dims;
  dims.push_back(manual);
  dims.push_back(replicated);
  TileAssignment tiles = mesh.devices().Transpose(perm).Reshape(std::move(dims));
  return HloSharding::Subgroup(std::move(tiles),
                               {SubgroupType::kManual, SubgroupType::kReplicated});
}

}  // namespace weft
