#include "weft/sharding/tile_assignment.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <string_view>
#include <utility>

#include "weft/base/algorithm.h"
#include "weft/base/error.h"

namespace weft {
namespace {

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

// One digit of an iota's flat order: `size` positions whose device ids step
// by `stride`. Digits are listed major to minor; their strides are a mixed
// radix of 0..N-1 (every device once).
struct Digit {
  int64_t size, stride;
};

// Drops size-1 digits and merges each digit into its major neighbour when the
// two count in one run (XLA's canonical form: the result is unique for a
// device order).
std::vector<Digit> CanonicalDigits(std::span<const Digit> digits) {
  std::vector<Digit> out;
  for (const Digit& d : digits) {
    if (d.size == 1) continue;
    if (!out.empty() && out.back().stride == d.stride * d.size) {
      out.back() = {out.back().size * d.size, d.stride};
    } else {
      out.push_back(d);
    }
  }
  return out;
}

// Splits the digits (major to minor) at the boundaries of `dims` (row-major
// over the same order): pieces[i] are dim i's digits, major to minor.
// nullopt when some boundary falls inside a digit in a way that is not a
// digit split (e.g. 6 positions over digits of 4).
std::optional<std::vector<std::vector<Digit>>> SplitDigits(std::span<const Digit> digits,
                                                           std::span<const int64_t> dims) {
  std::vector<std::vector<Digit>> pieces(dims.size());
  int64_t k = static_cast<int64_t>(digits.size()) - 1;
  Digit cur = k >= 0 ? digits[k] : Digit{1, 1};
  for (int64_t i = static_cast<int64_t>(dims.size()) - 1; i >= 0; --i) {
    int64_t rem = dims[i];
    while (rem > 1) {
      while (cur.size == 1) {
        if (--k < 0) return std::nullopt;
        cur = digits[k];
      }
      const int64_t g = std::gcd(cur.size, rem);
      if (g == 1) return std::nullopt;
      pieces[i].push_back({g, cur.stride});
      cur = {cur.size / g, cur.stride * g};
      rem /= g;
    }
    std::reverse(pieces[i].begin(), pieces[i].end());
  }
  return pieces;
}

// The digits of a canonical form, major to minor.
std::vector<Digit> FormDigits(const std::vector<int64_t>& reshape_dims,
                              const std::vector<int64_t>& perm) {
  const std::vector<int64_t> strides = Strides(reshape_dims);
  std::vector<Digit> digits;
  digits.reserve(perm.size());
  for (int64_t p : perm) digits.push_back({reshape_dims[p], strides[p]});
  return digits;
}

// The canonical (reshape_dims, perm) of digits that are a mixed radix.
std::pair<std::vector<int64_t>, std::vector<int64_t>> FormOf(std::span<const Digit> digits) {
  std::vector<Digit> c = CanonicalDigits(digits);
  if (c.empty()) return {{1}, {0}};
  std::vector<size_t> by_stride(c.size());
  std::iota(by_stride.begin(), by_stride.end(), 0);
  std::sort(by_stride.begin(), by_stride.end(),
            [&](size_t a, size_t b) { return c[a].stride > c[b].stride; });
  std::vector<int64_t> reshape(c.size()), perm(c.size());
  for (size_t i = 0; i < by_stride.size(); ++i) {
    reshape[i] = c[by_stride[i]].size;
    perm[by_stride[i]] = static_cast<int64_t>(i);
  }
  return {std::move(reshape), std::move(perm)};
}

// The digits of a device list read as an iota (minor digit first runs of a
// constant step), or nullopt.
std::optional<std::vector<Digit>> DetectDigits(const std::vector<int64_t>& v) {
  const int64_t n = static_cast<int64_t>(v.size());
  if (n == 0 || v[0] != 0) return std::nullopt;
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
  std::vector<Digit> by_stride = digits;
  std::sort(by_stride.begin(), by_stride.end(),
            [](const Digit& a, const Digit& b) { return a.stride < b.stride; });
  int64_t expected = 1;
  for (const Digit& d : by_stride) {
    if (d.stride != expected) return std::nullopt;
    expected *= d.size;
  }
  std::reverse(digits.begin(), digits.end());
  return digits;
}

// Flat contents of digits (major to minor).
std::vector<int64_t> ExpandDigits(std::span<const Digit> digits, int64_t n) {
  std::vector<int64_t> out(n);
  const int64_t rank = static_cast<int64_t>(digits.size());
  std::vector<int64_t> index(rank, 0);
  int64_t value = 0;
  for (int64_t& o : out) {
    o = value;
    for (int64_t d = rank - 1; d >= 0; --d) {
      if (++index[d] < digits[d].size) {
        value += digits[d].stride;
        break;
      }
      value -= digits[d].stride * (digits[d].size - 1);
      index[d] = 0;
    }
  }
  return out;
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

TileAssignment::TileAssignment() : dims_{1}, num_elements_(1), devices_(std::vector<int64_t>{0}) {}

TileAssignment::TileAssignment(std::vector<int64_t> dims, IotaForm form)
    : dims_(std::move(dims)),
      num_elements_(Product(dims_)),
      iota_(std::move(form)),
      expanded_(std::make_shared<Expanded>()) {}

TileAssignment::TileAssignment(std::vector<int64_t> dims, std::vector<int64_t> devices)
    : dims_(std::move(dims)) {
  num_elements_ = CheckedDeviceCount(dims_, "tile assignment dims");
  WEFT_CHECK(num_elements_ == static_cast<int64_t>(devices.size()),
             "tile assignment dims [{}] hold {} devices but {} were listed; list one device "
             "per tile",
             fmt::join(dims_, ","), num_elements_, devices.size());
  std::vector<bool> seen(kMaxDevices, false);
  for (int64_t d : devices) {
    WEFT_CHECK(d >= 0, "tile assignment device id {} is negative", d);
    WEFT_CHECK(d < kMaxDevices,
               "tile assignment device id {} is not below {}, the most devices weft supports", d,
               kMaxDevices);
    WEFT_CHECK(!seen[d], "tile assignment lists device {} twice; each device holds one tile", d);
    seen[d] = true;
  }
  devices_ = SharedDeviceList(std::move(devices));
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
  // Counted, without overflow; nothing is expanded.
  CheckedDeviceCount(dims, "tile assignment dims");
  CheckedDeviceCount(reshape_dims, "iota reshape dims");
  WEFT_CHECK(Product(dims) == Product(reshape_dims),
             "iota tile assignment [{}]<=[{}]: the two shapes hold different device counts",
             fmt::join(dims, ","), fmt::join(reshape_dims, ","));
  auto [reshape, perm] = FormOf(FormDigits(reshape_dims, transpose_perm));
  return TileAssignment(std::move(dims), IotaForm{std::move(reshape), std::move(perm)});
}

const std::vector<int64_t>& TileAssignment::devices() const {
  if (devices_) return devices_->get();
  Expanded& e = *expanded_;
  std::call_once(e.once, [&] {
    if (!e.list) e.list = ExpandDigits(FormDigits(iota_->reshape_dims, iota_->perm), num_elements_);
  });
  return e.list->get();
}

int64_t TileAssignment::DeviceAt(int64_t flat) const {
  if (devices_) return (*devices_)[flat];
  const std::vector<int64_t>& reshape = iota_->reshape_dims;
  const std::vector<int64_t>& perm = iota_->perm;
  // Digits minor to major: perm read backwards; value stride of reshape dim p.
  int64_t value = 0;
  int64_t stride_cache[16];
  const size_t r = reshape.size();
  std::vector<int64_t> big;
  int64_t* stride = stride_cache;
  if (r > 16) {
    big.resize(r);
    stride = big.data();
  }
  int64_t s = 1;
  for (size_t i = r; i-- > 0;) {
    stride[i] = s;
    s *= reshape[i];
  }
  for (size_t i = perm.size(); i-- > 0;) {
    const int64_t p = perm[i];
    value += flat % reshape[p] * stride[p];
    flat /= reshape[p];
  }
  return value;
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
  return DeviceAt(flat);
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
    const std::vector<int64_t>& reshape = iota_->reshape_dims;
    const std::vector<int64_t>& perm = iota_->perm;
    for (int64_t p : perm) {
      int64_t stride = 1;
      for (size_t i = p + 1; i < reshape.size(); ++i) stride *= reshape[i];
      flat = flat * reshape[p] + device / stride % reshape[p];
    }
  } else {
    flat = devices_->PositionOf(device);
    if (flat < 0) return std::nullopt;
  }
  std::vector<int64_t> index(dims_.size());
  for (int64_t i = num_dims() - 1; i >= 0; --i) {
    index[i] = flat % dims_[i];
    flat /= dims_[i];
  }
  return index;
}

std::shared_ptr<const std::vector<int64_t>> TileAssignment::IndexTable() const {
  // Most recently used first; equality of two iotas is O(rank).
  static std::mutex mu;
  static std::vector<std::pair<TileAssignment, std::shared_ptr<const std::vector<int64_t>>>> recent;
  constexpr size_t kKept = 16;
  {
    std::lock_guard<std::mutex> lock(mu);
    for (size_t i = 0; i < recent.size(); ++i) {
      if (recent[i].first == *this) {
        std::rotate(recent.begin(), recent.begin() + i, recent.begin() + i + 1);
        return recent.front().second;
      }
    }
  }
  const std::vector<int64_t>& list = devices();
  const int64_t ids = list.empty() ? 0 : *std::max_element(list.begin(), list.end()) + 1;
  const int64_t rank = num_dims();
  auto table = std::make_shared<std::vector<int64_t>>(ids * rank, -1);
  std::vector<int64_t> index(rank, 0);
  for (const int64_t device : list) {
    std::copy(index.begin(), index.end(), table->begin() + device * rank);
    for (int64_t d = rank - 1; d >= 0; --d) {
      if (++index[d] < dims_[d]) break;
      index[d] = 0;
    }
  }
  std::lock_guard<std::mutex> lock(mu);
  recent.insert(recent.begin(), {*this, table});
  if (recent.size() > kKept) recent.pop_back();
  return table;
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
  if (is_iota()) {
    // Each dim is a run of the form's digits (split where a dim boundary
    // falls inside one): the transpose reorders those runs.
    const std::vector<Digit> digits = FormDigits(iota_->reshape_dims, iota_->perm);
    if (std::optional<std::vector<std::vector<Digit>>> pieces = SplitDigits(digits, dims_)) {
      std::vector<Digit> moved;
      for (int64_t p : perm) moved.insert(moved.end(), (*pieces)[p].begin(), (*pieces)[p].end());
      auto [reshape, form_perm] = FormOf(moved);
      return TileAssignment(std::move(new_dims),
                            IotaForm{std::move(reshape), std::move(form_perm)});
    }
  }
  const std::vector<int64_t>& src_devices = devices();
  const std::vector<int64_t> old_strides = Strides(dims_);
  std::vector<int64_t> stride(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) stride[i] = old_strides[perm[i]];
  std::vector<int64_t> out(num_elements_);
  std::vector<int64_t> index(perm.size(), 0);
  int64_t src = 0;
  for (int64_t& d : out) {
    d = src_devices[src];
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
  t.num_elements_ = num_elements_;
  t.devices_ = SharedDeviceList(std::move(out));
  return is_iota() ? t.AsIotaIfPossible() : t;
}

TileAssignment TileAssignment::SortMinorGroups() const {
  const int64_t group = dims_.back();
  if (is_iota()) {
    // A group is sorted when its digits step down in stride; sorting a group
    // reorders its digits, so the result is an iota again.
    const std::vector<Digit> digits = FormDigits(iota_->reshape_dims, iota_->perm);
    const std::vector<int64_t> split = {num_elements_ / group, group};
    if (std::optional<std::vector<std::vector<Digit>>> pieces = SplitDigits(digits, split)) {
      std::vector<Digit>& minor = (*pieces)[1];
      const auto by_stride = [](const Digit& a, const Digit& b) { return a.stride > b.stride; };
      if (std::is_sorted(minor.begin(), minor.end(), by_stride)) return *this;
      std::sort(minor.begin(), minor.end(), by_stride);
      std::vector<Digit> all = (*pieces)[0];
      all.insert(all.end(), minor.begin(), minor.end());
      auto [reshape, perm] = FormOf(all);
      return TileAssignment(dims_, IotaForm{std::move(reshape), std::move(perm)});
    }
  }
  std::vector<int64_t> sorted = devices();
  bool changed = false;
  for (size_t i = 0; i < sorted.size(); i += group) {
    auto begin = sorted.begin() + i, end = begin + group;
    if (!std::is_sorted(begin, end)) {
      std::sort(begin, end);
      changed = true;
    }
  }
  if (!changed) return *this;
  TileAssignment t(dims_, std::move(sorted));
  return is_iota() ? t.AsIotaIfPossible() : t;
}

TileAssignment TileAssignment::AsExplicit() const {
  if (!is_iota()) return *this;
  TileAssignment t;
  t.dims_ = dims_;
  t.num_elements_ = num_elements_;
  t.devices_ = SharedDeviceList(devices());
  return t;
}

TileAssignment TileAssignment::AsIotaIfPossible() const {
  if (is_iota()) return *this;
  std::optional<std::vector<Digit>> digits = DetectDigits(devices_->get());
  if (!digits) return *this;
  auto [reshape, perm] = FormOf(*digits);
  TileAssignment t(dims_, IotaForm{std::move(reshape), std::move(perm)});
  // The list is known already: no expansion later.
  t.expanded_->list = *devices_;
  return t;
}

std::string TileAssignment::ToString() const {
  std::string out = fmt::format("devices=[{}]", fmt::join(dims_, ","));
  if (is_iota()) {
    out += fmt::format("<=[{}]", fmt::join(iota_->reshape_dims, ","));
    if (iota_->reshape_dims.size() > 1) {
      out += fmt::format("T({})", fmt::join(iota_->perm, ","));
    }
  } else {
    out += fmt::format("{}", fmt::join(devices_->get(), ","));
  }
  return out;
}

bool TileAssignment::operator==(const TileAssignment& other) const {
  if (dims_ != other.dims_) return false;
  if (is_iota() && other.is_iota()) return *iota_ == *other.iota_;
  if (!is_iota() && !other.is_iota()) return *devices_ == *other.devices_;
  // One of each: compare position by position without expanding the iota.
  const TileAssignment& iota = is_iota() ? *this : other;
  const std::vector<int64_t>& list = is_iota() ? other.devices_->get() : devices_->get();
  if (iota.expanded_->list) return iota.expanded_->list->get() == list;
  for (int64_t i = 0; i < num_elements_; ++i) {
    if (iota.DeviceAt(i) != list[i]) return false;
  }
  return true;
}

size_t TileAssignment::Hash() const {
  size_t h = 0;
  for (int64_t d : dims_) h = HashCombine(h, std::hash<int64_t>()(d));
  // A sample of positions, the same for both forms: the first few, each
  // power of two and its predecessor, the last.
  const int64_t n = num_elements_;
  const auto mix = [&](int64_t i) { h = HashCombine(h, std::hash<int64_t>()(DeviceAt(i))); };
  for (int64_t i = 0; i < std::min<int64_t>(n, 8); ++i) mix(i);
  for (int64_t p = 8; p < n; p *= 2) {
    mix(p - 1);
    mix(p);
  }
  if (n > 8) mix(n - 1);
  return h;
}

}  // namespace weft
