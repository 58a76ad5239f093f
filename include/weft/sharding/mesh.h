// Mesh and PartitionSpec: the JAX-style way users write shardings. A Mesh
// names the axes of an N-d array of device ids; a PartitionSpec says, per
// array dim, which mesh axes split it. ToHloSharding converts the pair to
// XLA's general form (HloSharding), which the compiler works on.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "weft/sharding/hlo_sharding.h"

namespace weft {

class Mesh {
 public:
  // Devices 0..N-1 in row-major order over the axes.
  Mesh(std::vector<std::string> axis_names, std::vector<int64_t> axis_sizes);
  // Explicit device ids, row-major over the axes.
  Mesh(std::vector<std::string> axis_names, std::vector<int64_t> axis_sizes,
       std::vector<int64_t> device_ids);
  // A multi-slice mesh, as jax's create_hybrid_device_mesh: each axis has size
  // dcn_shape[i] * ici_shape[i]; slices are numbered row-major over dcn_shape
  // and own consecutive device ids (slice s holds s*n .. s*n+n-1, n =
  // prod(ici_shape)), laid out row-major over ici_shape inside the slice. Mesh
  // index x along axis i is slice coordinate x / ici[i], local x % ici[i].
  static Mesh Hybrid(std::vector<std::string> axis_names, std::vector<int64_t> ici_shape,
                     std::vector<int64_t> dcn_shape);

  const std::vector<std::string>& axis_names() const { return axis_names_; }
  const std::vector<int64_t>& axis_sizes() const { return devices_.dims(); }
  int64_t num_axes() const { return static_cast<int64_t>(axis_names_.size()); }
  int64_t num_devices() const { return devices_.num_elements(); }
  // Throws weft::Error listing the mesh's axes if `name` is not one.
  int64_t axis_index(std::string_view name) const;
  int64_t axis_size(std::string_view name) const { return axis_sizes()[axis_index(name)]; }
  // The device array (dims = axis sizes); in iota form when it is one.
  const TileAssignment& devices() const { return devices_; }
  int64_t device(std::span<const int64_t> index) const { return devices_(index); }
  // Mesh coordinates of `device` (throws if not in the mesh).
  std::vector<int64_t> IndexOf(int64_t device) const;

  bool is_hybrid() const { return !dcn_shape_.empty(); }
  // Hybrid meshes only (empty otherwise).
  const std::vector<int64_t>& ici_shape() const { return ici_shape_; }
  const std::vector<int64_t>& dcn_shape() const { return dcn_shape_; }
  // The slice holding `device` (0 for a single-slice mesh).
  int64_t SliceOf(int64_t device) const;

  // "Mesh('data': 2, 'model': 4)", with device ids when they are not 0..N-1.
  std::string ToString() const;
  bool operator==(const Mesh& other) const {
    return axis_names_ == other.axis_names_ && devices_ == other.devices_ &&
           ici_shape_ == other.ici_shape_ && dcn_shape_ == other.dcn_shape_;
  }

 private:
  std::vector<std::string> axis_names_;
  TileAssignment devices_;
  std::vector<int64_t> ici_shape_, dcn_shape_;
};

// One entry of a PartitionSpec: the array dim is not split (None), split over
// one mesh axis, or over several axes (major to minor).
class AxisSpec {
 public:
  AxisSpec() = default;        // None
  AxisSpec(std::nullopt_t) {}  // None
  AxisSpec(const char* axis) : axes_{axis} {}
  AxisSpec(std::string axis) : axes_{std::move(axis)} {}
  AxisSpec(std::initializer_list<std::string> axes) : axes_(axes) {}
  explicit AxisSpec(std::vector<std::string> axes) : axes_(std::move(axes)) {}

  bool is_none() const { return axes_.empty(); }
  const std::vector<std::string>& axes() const { return axes_; }
  bool operator==(const AxisSpec&) const = default;

 private:
  std::vector<std::string> axes_;
};

// JAX's PartitionSpec: one AxisSpec per leading array dim; dims past the end
// are not split. Mesh axes it does not mention replicate the array.
class PartitionSpec {
 public:
  PartitionSpec() = default;
  PartitionSpec(std::initializer_list<AxisSpec> dims) : dims_(dims) {}
  explicit PartitionSpec(std::vector<AxisSpec> dims) : dims_(std::move(dims)) {}

  const std::vector<AxisSpec>& dims() const { return dims_; }
  int64_t size() const { return static_cast<int64_t>(dims_.size()); }

  // JAX's repr: "PartitionSpec('data', None, ('fsdp', 'tensor'))".
  std::string ToString() const;
  // Parses that repr; also accepts "P(...)", bare "(...)", and unquoted names.
  static PartitionSpec Parse(std::string_view text);
  bool operator==(const PartitionSpec&) const = default;

 private:
  std::vector<AxisSpec> dims_;
};

// The HloSharding of an array of rank `rank` laid out by `spec` on `mesh`,
// as JAX's NamedSharding lowers it: dim i splits over its axes (major first);
// mesh axes not in the spec form the trailing replicated subgroup
// (last_tile_dim_replicate); `manual_axes` (shard_map) form a manual subgroup.
// Iota meshes give iota tile assignments. Throws weft::Error for an unknown
// or repeated axis, or a spec longer than the rank.
HloSharding ToHloSharding(const Mesh& mesh, const PartitionSpec& spec, int64_t rank,
                          std::span<const std::string> manual_axes = {});

}  // namespace weft
