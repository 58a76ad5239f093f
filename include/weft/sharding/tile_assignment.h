// TileAssignment: which device holds which tile of a sharded array, stored
// explicitly or in XLA's compact iota form `[dims]<=[reshape_dims]T(perm)`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace weft {

// An N-d array of device ids: element [i0, ..., ik] is the device that holds
// tile (i0, ..., ik). Stored explicitly; when it came from (or still is) an
// iota it also remembers XLA's compact form
//   reshape(transpose(iota(reshape_dims), transpose_perm), dims)
// so that it prints as `<=[reshape_dims]T(perm)`. Equality compares devices
// only, never the form.
class TileAssignment {
 public:
  // A single tile on device 0.
  TileAssignment() : dims_{1}, devices_{0} {}
  // Explicit devices, row-major over `dims`. Devices must be distinct and >= 0.
  TileAssignment(std::vector<int64_t> dims, std::vector<int64_t> devices);
  // Devices 0..N-1 in row-major order.
  static TileAssignment Iota(std::vector<int64_t> dims);
  // XLA's `[dims]<=[reshape_dims]T(transpose_perm)`.
  static TileAssignment Iota(std::vector<int64_t> dims, std::vector<int64_t> reshape_dims,
                             std::vector<int64_t> transpose_perm);

  const std::vector<int64_t>& dims() const { return dims_; }
  int64_t num_dims() const { return static_cast<int64_t>(dims_.size()); }
  int64_t dim(int64_t i) const { return dims_.at(i); }
  int64_t num_elements() const { return static_cast<int64_t>(devices_.size()); }
  // Row-major device ids.
  const std::vector<int64_t>& devices() const { return devices_; }
  int64_t operator()(std::span<const int64_t> index) const;
  // The tile index (one entry per dim) holding `device`, or nullopt.
  std::optional<std::vector<int64_t>> IndexOf(int64_t device) const;

  bool is_iota() const { return iota_reshape_dims_.has_value(); }
  // Canonical iota form (size-1 dims removed, in-order runs merged). Only when is_iota().
  const std::vector<int64_t>& iota_reshape_dims() const { return *iota_reshape_dims_; }
  const std::vector<int64_t>& iota_transpose_perm() const { return *iota_transpose_perm_; }

  // Same devices in row-major order, new dims (same element count).
  TileAssignment Reshape(std::vector<int64_t> dims) const;
  // Output dim i is input dim perm[i]. Keeps the iota form when the result is one.
  TileAssignment Transpose(std::span<const int64_t> perm) const;
  // The explicit form (prints every device).
  TileAssignment AsExplicit() const;
  // The iota form if the devices happen to be one, else *this.
  TileAssignment AsIotaIfPossible() const;

  // "devices=[2,2]0,1,2,3" or "devices=[4,2]<=[2,4]T(1,0)".
  std::string ToString() const;

  bool operator==(const TileAssignment& other) const {
    return dims_ == other.dims_ && devices_ == other.devices_;
  }
  size_t Hash() const;

 private:
  std::vector<int64_t> dims_;
  std::vector<int64_t> devices_;
  std::optional<std::vector<int64_t>> iota_reshape_dims_;
  std::optional<std::vector<int64_t>> iota_transpose_perm_;
};

}  // namespace weft
