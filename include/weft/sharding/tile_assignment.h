// TileAssignment: which device holds which tile of a sharded array, stored
// explicitly or in XLA's compact iota form `[dims]<=[reshape_dims]T(perm)`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "weft/base/limits.h"

namespace weft {

// The product of `dims` (a device count) when every dim is >= 1 and the
// product is at most `limit` (kMaxDevices: base/limits.h); nullopt
// otherwise. Never overflows.
std::optional<int64_t> DeviceCountWithin(std::span<const int64_t> dims,
                                         int64_t limit = kMaxDevices);

// An immutable device list shared between copies: a TileAssignment is
// copied with every HloSharding (propagation copies shardings per
// instruction and per user), and on a 65,536-device mesh a private copy is
// half a megabyte each time. Reads like a const std::vector<int64_t>.
class SharedDeviceList {
 public:
  SharedDeviceList(std::vector<int64_t> devices)  // NOLINT: implicit, as a vector
      : list_(std::make_shared<const List>(std::move(devices))) {}
  SharedDeviceList(std::initializer_list<int64_t> devices)
      : SharedDeviceList(std::vector<int64_t>(devices)) {}
  operator const std::vector<int64_t>&() const { return list_->devices; }  // NOLINT
  const std::vector<int64_t>& get() const { return list_->devices; }
  size_t size() const { return list_->devices.size(); }
  int64_t operator[](size_t i) const { return list_->devices[i]; }
  std::vector<int64_t>::const_iterator begin() const { return list_->devices.begin(); }
  std::vector<int64_t>::const_iterator end() const { return list_->devices.end(); }
  bool operator==(const SharedDeviceList& other) const {
    return list_ == other.list_ || list_->devices == other.list_->devices;
  }
  // The position of `device` in the list, or -1: O(1) after a first call
  // that indexes the list (callers ask for every device in turn).
  int64_t PositionOf(int64_t device) const;

 private:
  struct List {
    explicit List(std::vector<int64_t> d) : devices(std::move(d)) {}
    std::vector<int64_t> devices;
    mutable std::once_flag indexed;
    mutable std::vector<int64_t> position;  // [device id] -> position, -1: absent
  };
  std::shared_ptr<const List> list_;
};

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
  // Explicit devices, row-major over `dims`. Devices must be distinct, >= 0
  // and below kMaxDevices; dims hold at most kMaxDevices devices.
  TileAssignment(std::vector<int64_t> dims, std::vector<int64_t> devices);
  // Devices 0..N-1 in row-major order.
  static TileAssignment Iota(std::vector<int64_t> dims);
  // XLA's `[dims]<=[reshape_dims]T(transpose_perm)`. Throws weft::Error,
  // before expanding the devices, when the dims hold more than kMaxDevices.
  static TileAssignment Iota(std::vector<int64_t> dims, std::vector<int64_t> reshape_dims,
                             std::vector<int64_t> transpose_perm);

  const std::vector<int64_t>& dims() const { return dims_; }
  int64_t num_dims() const { return static_cast<int64_t>(dims_.size()); }
  int64_t dim(int64_t i) const { return dims_.at(i); }
  int64_t num_elements() const { return static_cast<int64_t>(devices_.size()); }
  // Row-major device ids.
  const std::vector<int64_t>& devices() const { return devices_.get(); }
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
  SharedDeviceList devices_;
  std::optional<std::vector<int64_t>> iota_reshape_dims_;
  std::optional<std::vector<int64_t>> iota_transpose_perm_;
};

}  // namespace weft
