#include "weft/sharding/tile_assignment.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <string_view>
#include <utility>

#include "weft/base/error.h"

namespace weft {
namespace {

int64_t Product(std::span<const int64_t> values) {
  int64_t product = 1;
  for (int64_t v : values) product *= v;
  return product;
}

// The device count of `dims`; throws when it is not one weft can hold.
int64_t CheckedDeviceCount(std::span<const int64_t> dims, std::string_view what) {
  for (int64_t d : dims) {
    WEFT_CHECK(d >= 1, "{} [{}] must all be >= 1", what, fmt::join(dims, ","));
  }
  std::optional<int64_t> n = DeviceCountWithin(dims);
  WEFT_CHECK(n.has_value(), "{} [{}] hold more than {} devices, the most weft supports", what,
             fmt::join(dims, ","), kMaxDevices);
  return *n;
}

size_t HashCombine(size_t seed, size_t value) {
  return seed ^ (value + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2));
}

bool IsPermutation(std::span<const int64_t> perm, size_t n) {
  if (perm.size() != n) return false;
  std::vector<bool> seen(n, false);
  for (int64_t p : perm) {
    if (p < 0 || p >= static_cast<int64_t>(n) || seen[p]) return false;
    seen[p] = true;
  }
  return true;
}

// Row-major strides of `dims`.
std::vector<int64_t> Strides(std::span<const int64_t> dims) {
  std::vector<int64_t> strides(dims.size(), 1);
  for (int64_t i = static_cast<int64_t>(dims.size()) - 2; i >= 0; --i) {
    strides[i] = strides[i + 1] * dims[i + 1];
  }
  return strides;
}

// Flat contents of reshape(transpose(iota(reshape_dims), perm), *).
std::vector<int64_t> IotaDevices(std::span<const int64_t> reshape_dims,
                                 std::span<const int64_t> perm) {
  const std::vector<int64_t> value_strides = Strides(reshape_dims);
  const size_t rank = reshape_dims.size();
  std::vector<int64_t> transposed(rank), stride(rank);
  for (size_t i = 0; i < rank; ++i) {
    transposed[i] = reshape_dims[perm[i]];
    stride[i] = value_strides[perm[i]];
  }
  std::vector<int64_t> out(Product(reshape_dims));
  std::vector<int64_t> index(rank, 0);
  int64_t value = 0;
  for (int64_t& o : out) {
    o = value;
    // Odometer increment over the transposed shape, tracking the value.
    for (int64_t d = static_cast<int64_t>(rank) - 1; d >= 0; --d) {
      if (++index[d] < transposed[d]) {
        value += stride[d];
        break;
      }
      value -= stride[d] * (transposed[d] - 1);
      index[d] = 0;
    }
  }
  return out;
}

struct IotaForm {
  std::vector<int64_t> reshape_dims;
  std::vector<int64_t> perm;
};

// Finds the canonical iota form of a flat device list, if it has one. The
// list is read as a mixed-radix number (minor digit first): each maximal run
// where value grows by a constant step is one digit. Maximal runs are exactly
// XLA's canonical form (no size-1 dims, no mergeable neighbours).
std::optional<IotaForm> DetectIota(const std::vector<int64_t>& v) {
  const int64_t n = static_cast<int64_t>(v.size());
  if (n == 0 || v[0] != 0) return std::nullopt;
  struct Digit {
    int64_t size, stride;
  };
  std::vector<Digit> digits;  // minor to major
  int64_t block = 1;
  while (block < n) {
    const int64_t step = v[block];
    if (step <= 0) return std::nullopt;
    int64_t r = 1;
    while (block * r < n && v[block * r] == r * step) ++r;
    if (n % (block * r) != 0) return std::nullopt;
    digits.push_back({r, step});
    block *= r;
  }
  // Verify every element.
  std::vector<int64_t> counter(digits.size(), 0);
  int64_t value = 0;
  for (int64_t p = 0; p < n; ++p) {
    if (v[p] != value) return std::nullopt;
    for (size_t k = 0; k < digits.size(); ++k) {
      if (++counter[k] < digits[k].size) {
        value += digits[k].stride;
        break;
      }
      value -= digits[k].stride * (digits[k].size - 1);
      counter[k] = 0;
    }
  }
  // The strides must form a mixed radix of the values 0..n-1.
  std::vector<size_t> by_stride(digits.size());
  std::iota(by_stride.begin(), by_stride.end(), 0);
  std::sort(by_stride.begin(), by_stride.end(),
            [&](size_t a, size_t b) { return digits[a].stride > digits[b].stride; });
  int64_t expected = 1;
  for (auto it = by_stride.rbegin(); it != by_stride.rend(); ++it) {
    if (digits[*it].stride != expected) return std::nullopt;
    expected *= digits[*it].size;
  }
  IotaForm form;
  if (digits.empty()) return IotaForm{{1}, {0}};
  std::vector<int64_t> reshape_index(digits.size());
  for (size_t i = 0; i < by_stride.size(); ++i) {
    form.reshape_dims.push_back(digits[by_stride[i]].size);
    reshape_index[by_stride[i]] = static_cast<int64_t>(i);
  }
  for (int64_t k = static_cast<int64_t>(digits.size()) - 1; k >= 0; --k) {
    form.perm.push_back(reshape_index[k]);
  }
  return form;
}

}  // namespace

// ---------------------------------------------------------------------------
// TileAssignment

std::optional<int64_t> DeviceCountWithin(std::span<const int64_t> dims, int64_t limit) {
  int64_t product = 1;
  for (int64_t d : dims) {
    if (d < 1 || __builtin_mul_overflow(product, d, &product) || product > limit) {
      return std::nullopt;
    }
  }
  return product;
}

TileAssignment::TileAssignment(std::vector<int64_t> dims, std::vector<int64_t> devices)
    : dims_(std::move(dims)), devices_(std::move(devices)) {
  CheckedDeviceCount(dims_, "tile assignment dims");
  WEFT_CHECK(Product(dims_) == num_elements(),
             "tile assignment dims [{}] hold {} devices but {} were listed; list one device "
             "per tile",
             fmt::join(dims_, ","), Product(dims_), devices_.size());
  std::vector<int64_t> sorted = devices_;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    WEFT_CHECK(sorted[i] >= 0, "tile assignment device id {} is negative", sorted[i]);
    WEFT_CHECK(sorted[i] < kMaxDevices,
               "tile assignment device id {} is not below {}, the most devices weft supports",
               sorted[i], kMaxDevices);
    WEFT_CHECK(i == 0 || sorted[i] != sorted[i - 1],
               "tile assignment lists device {} twice; each device holds one tile", sorted[i]);
  }
}

TileAssignment TileAssignment::Iota(std::vector<int64_t> dims) {
  const int64_t n = CheckedDeviceCount(dims, "tile assignment dims");
  return Iota(std::move(dims), {n}, {0});
}

TileAssignment TileAssignment::Iota(std::vector<int64_t> dims, std::vector<int64_t> reshape_dims,
                                    std::vector<int64_t> transpose_perm) {
  WEFT_CHECK(IsPermutation(transpose_perm, reshape_dims.size()),
             "iota transpose T({}) is not a permutation of the {} reshape dims",
             fmt::join(transpose_perm, ","), reshape_dims.size());
  // Counted, without overflow, before the devices are expanded.
  CheckedDeviceCount(dims, "tile assignment dims");
  CheckedDeviceCount(reshape_dims, "iota reshape dims");
  WEFT_CHECK(Product(dims) == Product(reshape_dims),
             "iota tile assignment [{}]<=[{}]: the two shapes hold different device counts",
             fmt::join(dims, ","), fmt::join(reshape_dims, ","));
  TileAssignment t(std::move(dims), IotaDevices(reshape_dims, transpose_perm));
  return t.AsIotaIfPossible();
}

int64_t TileAssignment::operator()(std::span<const int64_t> index) const {
  WEFT_CHECK(index.size() == dims_.size(), "tile index has {} entries, tile assignment rank {}",
             index.size(), dims_.size());
  int64_t flat = 0;
  for (size_t i = 0; i < dims_.size(); ++i) {
    WEFT_CHECK(index[i] >= 0 && index[i] < dims_[i], "tile index {} out of range for dim {} ({})",
               index[i], i, dims_[i]);
    flat = flat * dims_[i] + index[i];
  }
  return devices_[flat];
}

int64_t SharedDeviceList::PositionOf(int64_t device) const {
  const List& l = *list_;
  std::call_once(l.indexed, [&l] {
    int64_t largest = -1;
    for (int64_t d : l.devices) largest = std::max(largest, d);
    l.position.assign(largest + 1, -1);
    for (size_t i = 0; i < l.devices.size(); ++i) {
      if (l.devices[i] >= 0) l.position[l.devices[i]] = static_cast<int64_t>(i);
    }
  });
  if (device < 0 || device >= static_cast<int64_t>(l.position.size())) return -1;
  return l.position[device];
}

std::optional<std::vector<int64_t>> TileAssignment::IndexOf(int64_t device) const {
  int64_t flat = 0;
  if (is_iota()) {
    // O(rank), not a search: callers ask for every device in turn (O(N^2)
    // on large meshes otherwise). Device d sits where its digits in the
    // reshape dims, read in transposed order, put it.
    if (device < 0 || device >= num_elements()) return std::nullopt;
    const std::vector<int64_t>& reshape = *iota_reshape_dims_;
    const std::vector<int64_t>& perm = *iota_transpose_perm_;
    const std::vector<int64_t> value_strides = Strides(reshape);
    for (int64_t p : perm) flat = flat * reshape[p] + device / value_strides[p] % reshape[p];
  } else {
    flat = devices_.PositionOf(device);
    if (flat < 0) return std::nullopt;
  }
  std::vector<int64_t> index(dims_.size());
  for (int64_t i = num_dims() - 1; i >= 0; --i) {
    index[i] = flat % dims_[i];
    flat /= dims_[i];
  }
  return index;
}

TileAssignment TileAssignment::Reshape(std::vector<int64_t> dims) const {
  const std::optional<int64_t> n = DeviceCountWithin(dims);
  WEFT_CHECK(n.has_value() && *n == num_elements(), "cannot reshape tile assignment [{}] to [{}]",
             fmt::join(dims_, ","), fmt::join(dims, ","));
  TileAssignment t = *this;
  t.dims_ = std::move(dims);
  return t;
}

TileAssignment TileAssignment::Transpose(std::span<const int64_t> perm) const {
  WEFT_CHECK(IsPermutation(perm, dims_.size()),
             "transpose [{}] is not a permutation of the {} tile dims", fmt::join(perm, ","),
             dims_.size());
  std::vector<int64_t> new_dims(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) new_dims[i] = dims_[perm[i]];
  const std::vector<int64_t> old_strides = Strides(dims_);
  std::vector<int64_t> stride(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) stride[i] = old_strides[perm[i]];
  std::vector<int64_t> devices(devices_.size());
  std::vector<int64_t> index(perm.size(), 0);
  int64_t src = 0;
  for (int64_t& d : devices) {
    d = devices_[src];
    for (int64_t k = static_cast<int64_t>(perm.size()) - 1; k >= 0; --k) {
      if (++index[k] < new_dims[k]) {
        src += stride[k];
        break;
      }
      src -= stride[k] * (new_dims[k] - 1);
      index[k] = 0;
    }
  }
  TileAssignment t;
  t.dims_ = std::move(new_dims);
  t.devices_ = std::move(devices);
  return is_iota() ? t.AsIotaIfPossible() : t;
}

TileAssignment TileAssignment::AsExplicit() const {
  TileAssignment t = *this;
  t.iota_reshape_dims_.reset();
  t.iota_transpose_perm_.reset();
  return t;
}

TileAssignment TileAssignment::AsIotaIfPossible() const {
  if (is_iota()) return *this;
  std::optional<IotaForm> form = DetectIota(devices_);
  if (!form) return *this;
  TileAssignment t = *this;
  t.iota_reshape_dims_ = std::move(form->reshape_dims);
  t.iota_transpose_perm_ = std::move(form->perm);
  return t;
}

std::string TileAssignment::ToString() const {
  std::string out = fmt::format("devices=[{}]", fmt::join(dims_, ","));
  if (is_iota()) {
    out += fmt::format("<=[{}]", fmt::join(*iota_reshape_dims_, ","));
    if (iota_reshape_dims_->size() > 1) {
      out += fmt::format("T({})", fmt::join(*iota_transpose_perm_, ","));
    }
  } else {
    out += fmt::format("{}", fmt::join(devices_, ","));
  }
  return out;
}

size_t TileAssignment::Hash() const {
  size_t h = 0;
  for (int64_t d : dims_) h = HashCombine(h, std::hash<int64_t>()(d));
  for (int64_t d : devices_) h = HashCombine(h, std::hash<int64_t>()(d));
  return h;
}

}  // namespace weft
