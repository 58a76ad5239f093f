#include "weft/runtime/executor_tensor.h"

#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "executor_eval.h"
#include "weft/base/error.h"

namespace weft::runtime {

void MemoryTracker::Allocated(int64_t bytes) {
  const int64_t live = live_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  int64_t peak = peak_.load(std::memory_order_relaxed);
  while (live > peak && !peak_.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
  }
}

namespace {

constexpr int64_t kStaggerThreshold = 16 << 10;
constexpr int64_t kPage = 4096;
// Steps of 25 cache lines visit all 64 line offsets of a page before repeating.
constexpr int64_t kStaggerStep = 25 * 64;

// Buffers of at least kHugeBuffer bytes (the arena, weights, inputs) are
// aligned to a transparent huge page and asked to be backed by huge pages
// (madvise MADV_HUGEPAGE: Debian's kernels give them only where asked, by
// default). On the Zen 4 machine a bf16 training step of configs/small.toml
// ran 5-6% faster with them (every class of op: GEMMs 4%, copies 10-20%,
// fused loops 5-10%, fewer TLB misses), float32 the same within noise.
constexpr int64_t kHugePage = 2 << 20;
constexpr int64_t kHugeBuffer = 2 * kHugePage;

void* AllocateBytes(int64_t bytes) {
  if (bytes < kHugeBuffer) return std::aligned_alloc(64, static_cast<size_t>(bytes));
  const int64_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* p = std::aligned_alloc(kHugePage, static_cast<size_t>(rounded));
  if (p != nullptr) madvise(p, static_cast<size_t>(rounded), MADV_HUGEPAGE);  // only a hint
  return p;
}

std::atomic<int64_t> g_stagger_counter{0};

}  // namespace

BufferPool::~BufferPool() {
  for (auto& [size, buffers] : idle_) {
    for (auto& [stamp, allocation] : buffers) std::free(allocation);
  }
}

int64_t BufferPool::SizeClass(int64_t bytes) {
  if (bytes <= kPage) return std::max<int64_t>(64, (bytes + 63) / 64 * 64);
  // Eight classes per power of two: at most 1/8 (12.5%) larger than asked.
  const int shift = std::bit_width(static_cast<uint64_t>(bytes)) - 1 - 3;
  const int64_t step = int64_t{1} << shift;
  return (bytes + step - 1) / step * step;
}

void* BufferPool::Take(int64_t class_bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = idle_.find(class_bytes);
  if (it == idle_.end() || it->second.empty()) return nullptr;
  const auto [stamp, allocation] = it->second.back();
  it->second.pop_back();
  age_.erase(stamp);
  idle_bytes_ -= class_bytes;
  return allocation;
}

void BufferPool::EvictLocked(std::vector<void*>* release) {
  while (idle_bytes_ > capacity_ && !age_.empty()) {  // the longest idle go first
    const auto [stamp, size] = *age_.begin();
    age_.erase(age_.begin());
    auto& list = idle_[size];
    // A named copy: clang 14 cannot capture a structured binding.
    const auto oldest = stamp;
    const auto found =
        std::find_if(list.begin(), list.end(), [&](const auto& e) { return e.first == oldest; });
    WEFT_INTERNAL_CHECK(found != list.end(), "buffer pool: idle buffer {} lost", stamp);
    release->push_back(found->second);
    list.erase(found);
    idle_bytes_ -= size;
  }
}

void BufferPool::Give(void* allocation, int64_t class_bytes) {
  std::vector<void*> release;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const uint64_t stamp = ++clock_;
    idle_[class_bytes].emplace_back(stamp, allocation);
    age_.emplace(stamp, class_bytes);
    idle_bytes_ += class_bytes;
    EvictLocked(&release);
  }
  for (void* p : release) std::free(p);  // outside the lock
}

void BufferPool::set_capacity(int64_t bytes) {
  std::vector<void*> release;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    capacity_ = std::max<int64_t>(0, bytes);
    EvictLocked(&release);
  }
  for (void* p : release) std::free(p);
}

int64_t BufferPool::idle_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return idle_bytes_;
}

std::shared_ptr<TensorStorage> TensorStorage::Allocate(int64_t bytes,
                                                       std::shared_ptr<MemoryTracker> tracker,
                                                       const std::shared_ptr<BufferPool>& pool) {
  WEFT_CHECK(bytes >= 0, "cannot allocate {} bytes", bytes);
  std::shared_ptr<TensorStorage> s(new TensorStorage());
  int64_t offset = 0;
  int64_t alloc_bytes = (bytes + 63) / 64 * 64;
  if (bytes >= kStaggerThreshold) {
    offset = (g_stagger_counter.fetch_add(1, std::memory_order_relaxed) * kStaggerStep) % kPage;
    alloc_bytes += kPage;
  }
  if (alloc_bytes == 0) alloc_bytes = 64;
  if (pool != nullptr) {
    alloc_bytes = BufferPool::SizeClass(alloc_bytes);
    s->pool_ = pool;
    s->allocation_ = pool->Take(alloc_bytes);
    s->reused_ = s->allocation_ != nullptr;
  }
  if (s->allocation_ == nullptr) {
    s->allocation_ = AllocateBytes(alloc_bytes);
  }
  s->allocation_bytes_ = alloc_bytes;
  if (s->allocation_ == nullptr) {
    Fail("out of memory allocating a {}-byte tensor buffer", bytes);
  }
  s->data_ = static_cast<std::byte*>(s->allocation_) + offset;
  s->bytes_ = bytes;
  if (tracker != nullptr) s->Track(std::move(tracker));
  return s;
}

std::shared_ptr<TensorStorage> TensorStorage::Borrow(std::shared_ptr<TensorStorage> owner,
                                                     std::shared_ptr<MemoryTracker> tracker) {
  std::shared_ptr<TensorStorage> s(new TensorStorage());
  s->data_ = owner->data_;
  s->bytes_ = owner->bytes_;
  s->writable_ = false;
  s->owner_ = std::move(owner);
  if (tracker != nullptr) s->Track(std::move(tracker));
  return s;
}

void TensorStorage::Track(std::shared_ptr<MemoryTracker> tracker) {
  if (tracker_ != nullptr) tracker_->Freed(bytes_);
  tracker_ = std::move(tracker);
  tracker_->Allocated(bytes_);
}

TensorStorage::~TensorStorage() {
  if (tracker_ != nullptr) tracker_->Freed(bytes_);
  if (allocation_ == nullptr) return;
  if (const std::shared_ptr<BufferPool> pool = pool_.lock()) {
    pool->Give(allocation_, allocation_bytes_);
  } else {
    std::free(allocation_);
  }
}

HostTensor::HostTensor(Shape shape) {
  *this = Uninitialized(std::move(shape));
  std::memset(mutable_raw_data(), 0, static_cast<size_t>(byte_size()));
}

HostTensor HostTensor::Uninitialized(Shape shape, std::shared_ptr<MemoryTracker> tracker,
                                     const std::shared_ptr<BufferPool>& pool) {
  WEFT_CHECK(shape.IsArray(), "a HostTensor must have an array shape, not {}", shape.ToString());
  const int64_t bytes = shape.ByteSize();
  return HostTensor(std::move(shape), TensorStorage::Allocate(bytes, std::move(tracker), pool), 0);
}

HostTensor HostTensor::FromDoubles(Shape shape, std::span<const double> values) {
  HostTensor t = Uninitialized(std::move(shape));
  WEFT_CHECK(static_cast<int64_t>(values.size()) == t.element_count(), "{} needs {} values, got {}",
             t.shape().ToString(), t.element_count(), values.size());
  for (int64_t i = 0; i < t.element_count(); ++i) {
    exec::StoreDouble(t.element_type(), t.mutable_raw_data(), i, values[i]);
  }
  return t;
}

HostTensor HostTensor::Scalar(PrimitiveType type, double value) {
  return FromDoubles(Shape::Scalar(type), std::span<const double>(&value, 1));
}

void HostTensor::CheckType(bool ok, size_t size) const {
  if (ok) return;
  if (size == 0) {
    Fail("values do not match the tensor's {} elements", element_count());
  }
  Fail("tensor of {} accessed as a {}-byte type that is not its element type", shape_.ToString(),
       size);
}

std::vector<double> HostTensor::ToDoubles() const {
  std::vector<double> out(static_cast<size_t>(element_count()));
  for (int64_t i = 0; i < element_count(); ++i) out[i] = GetDouble(i);
  return out;
}

double HostTensor::GetDouble(int64_t index) const {
  WEFT_CHECK(index >= 0 && index < element_count(), "index {} out of range for {}", index,
             shape_.ToString());
  return exec::LoadAsDouble(element_type(), raw_data(), index);
}

HostTensor HostTensor::Clone() const {
  HostTensor t = Uninitialized(shape_);
  std::memcpy(t.mutable_raw_data(), raw_data(), static_cast<size_t>(byte_size()));
  return t;
}

HostTensor HostTensor::Reshaped(Shape shape) const {
  WEFT_CHECK(shape.IsArray() && shape.ByteSize() == byte_size(),
             "cannot view {} as {}: the byte sizes differ", shape_.ToString(), shape.ToString());
  return HostTensor(std::move(shape), storage_, offset_);
}

HostTensor HostTensor::View(Shape shape, int64_t byte_offset) const {
  WEFT_CHECK(shape.IsArray() && byte_offset >= 0 && byte_offset + shape.ByteSize() <= byte_size(),
             "a view of {} at byte {} does not fit in {}", shape.ToString(), byte_offset,
             shape_.ToString());
  return HostTensor(std::move(shape), storage_, offset_ + byte_offset);
}

std::string HostTensor::ToString(int64_t max_elements) const {
  if (!valid()) return "<empty>";
  std::string out = shape_.ToString() + "{";
  const int64_t n = element_count();
  for (int64_t i = 0; i < n && i < max_elements; ++i) {
    if (i > 0) out += ", ";
    out += fmt::format("{}", GetDouble(i));
  }
  if (n > max_elements) out += ", ...";
  return out + "}";
}

float F16BitsToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t man = h & 0x3ff;
  if (exp == 0) {  // zero or subnormal: man * 2^-24
    const float v = std::ldexp(static_cast<float>(man), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (man << 13));
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t FloatToF16Bits(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  if (std::isnan(value)) return sign | 0x7e00;
  const float a = std::fabs(value);
  if (a >= 65520.0f) return sign | 0x7c00;  // rounds past the largest half
  if (a < 6.103515625e-05f) {               // subnormal: multiples of 2^-24
    return sign | static_cast<uint16_t>(std::nearbyint(std::ldexp(a, 24)));
  }
  // Normal: round the 23-bit mantissa to 10 bits, nearest even.
  uint32_t abits = std::bit_cast<uint32_t>(a);
  abits += 0xfffu + ((abits >> 13) & 1u);
  const uint32_t exp = (abits >> 23) - 112;
  return sign | static_cast<uint16_t>((exp << 10) | ((abits >> 13) & 0x3ff));
}

}  // namespace weft::runtime
