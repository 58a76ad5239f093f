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
// tile (i0, ..., ik). Either an explicit list, or XLA's compact iota form
//   reshape(transpose(iota(reshape_dims), transpose_perm), dims)
// which is never expanded on its own: device at an index, the index of a
// device, reshape, transpose (when the result is an iota, as it is for any
// transpose that keeps whole mesh axes together), equality, hashing and
// printing (`<=[reshape_dims]T(perm)`) all work on the form in O(rank). The
// device list is built (once, shared by copies) only when a caller asks for
// devices(). Equality compares devices only, never the form.
class TileAssignment {
 public:
  // A single tile on device 0.
  TileAssignment();
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
  int64_t num_elements() const { return num_elements_; }
  // Row-major device ids. For an iota this expands the list (once; copies
  // share it): O(devices). Prefer DeviceAt / IndexOf.
  const std::vector<int64_t>& devices() const;
  // The device at row-major position `flat` (0 <= flat < num_elements()).
  int64_t DeviceAt(int64_t flat) const;
  int64_t operator()(std::span<const int64_t> index) const;
  // The tile index (one entry per dim) holding `device`, or nullopt.
  std::optional<std::vector<int64_t>> IndexOf(int64_t device) const;
  // IndexOf for every device at once: entry device * num_dims() + d for
  // device ids 0 to the largest present; -1 (all dims) for an id absent.
  // O(devices) when built; the last few tables built are kept (planning asks
  // for the same assignments' tables many times), so repeats are O(rank).
  std::shared_ptr<const std::vector<int64_t>> IndexTable() const;

  bool is_iota() const { return iota_.has_value(); }
  // Canonical iota form (size-1 dims removed, in-order runs merged). Only when is_iota().
  const std::vector<int64_t>& iota_reshape_dims() const { return iota_->reshape_dims; }
  const std::vector<int64_t>& iota_transpose_perm() const { return iota_->perm; }

  // Same devices in row-major order, new dims (same element count).
  TileAssignment Reshape(std::vector<int64_t> dims) const;
  // Output dim i is input dim perm[i]. Keeps the iota form when the result is one.
  TileAssignment Transpose(std::span<const int64_t> perm) const;
  // Each run of dims().back() consecutive devices (a replication group)
  // sorted ascending. An iota stays an iota (no expansion) when the last dim
  // splits into whole factors of the form.
  TileAssignment SortMinorGroups() const;
  // The explicit form (prints every device).
  TileAssignment AsExplicit() const;
  // The iota form if the devices happen to be one, else *this.
  TileAssignment AsIotaIfPossible() const;

  // "devices=[2,2]0,1,2,3" or "devices=[4,2]<=[2,4]T(1,0)".
  std::string ToString() const;

  bool operator==(const TileAssignment& other) const;
  // Consistent with ==, from the dims and a fixed sample of positions (never
  // the whole list).
  size_t Hash() const;

 private:
  struct IotaForm {
    std::vector<int64_t> reshape_dims;
    std::vector<int64_t> perm;
    bool operator==(const IotaForm&) const = default;
  };
  // The expanded list of an iota, built on first use and shared by copies.
  struct Expanded {
    std::once_flag once;
    std::optional<SharedDeviceList> list;
  };
  TileAssignment(std::vector<int64_t> dims, IotaForm form);
  static std::optional<IotaForm> Detect(const std::vector<int64_t>& devices);

  std::vector<int64_t> dims_;
  int64_t num_elements_ = 1;
  std::optional<SharedDeviceList> devices_;  // explicit form
  std::optional<IotaForm> iota_;             // iota form
  std::shared_ptr<Expanded> expanded_;       // iota form: its list, once asked for
};

}  // namespace weft
