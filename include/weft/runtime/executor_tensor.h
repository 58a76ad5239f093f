// HostTensor: an array value in host memory (shape, element type, 64-byte
// aligned bytes), the executor's inputs, outputs and intermediate buffers.
//
// A HostTensor is a reference: copies share the bytes (like a numpy view),
// Clone() copies them. The executor never writes into storage that anyone
// else can see: it reuses a buffer in place only when it holds the only
// reference, so tensors handed to Run() stay unchanged. Element encodings:
// f32 float, f64 double, bf16 and f16 uint16_t bits, s32 int32_t, s64
// int64_t, u16 uint16_t, u32 uint32_t, pred one byte (0 or 1).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "weft/base/bfloat16.h"
#include "weft/hlo/shape.h"

namespace weft::runtime {

// Live and peak bytes of the buffers made for one run of a program. Buffers
// report to it when allocated and freed, from any thread.
class MemoryTracker {
 public:
  void Allocated(int64_t bytes);
  void Freed(int64_t bytes) { live_.fetch_sub(bytes, std::memory_order_relaxed); }
  int64_t live_bytes() const { return live_.load(std::memory_order_relaxed); }
  int64_t peak_bytes() const { return peak_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> live_{0};
  std::atomic<int64_t> peak_{0};
};

// Buffers an executor keeps for its next runs. A buffer allocated through a
// pool goes back to it when its last tensor lets go (if the pool still
// exists), and a later allocation of the same size class takes it instead of
// asking the system: a training step that repeats the last one's
// allocations gets no fresh memory and no page faults. At most `capacity`
// bytes wait idle; past that, the longest-idle buffers are released. Size
// classes are at most 1/8 larger than the request. Thread-safe.
class BufferPool {
 public:
  BufferPool() = default;
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // The class a request of `bytes` is served from.
  static int64_t SizeClass(int64_t bytes);
  // An idle buffer of `class_bytes`, or null.
  void* Take(int64_t class_bytes);
  // Keeps `allocation` (of `class_bytes`, from std::aligned_alloc) for reuse,
  // or frees it, and whatever else is over capacity.
  void Give(void* allocation, int64_t class_bytes);
  void set_capacity(int64_t bytes);
  int64_t idle_bytes() const;

 private:
  // Frees (into `release`) the longest-idle buffers until within capacity.
  void EvictLocked(std::vector<void*>* release);
  mutable std::mutex mutex_;
  int64_t capacity_ = 0;
  int64_t idle_bytes_ = 0;
  uint64_t clock_ = 0;
  // class -> (stamp, allocation), most recently given last; and stamp ->
  // class, oldest first, for eviction.
  std::unordered_map<int64_t, std::vector<std::pair<uint64_t, void*>>> idle_;
  std::map<uint64_t, int64_t> age_;
};

// The bytes behind one or more tensors.
class TensorStorage {
 public:
  // Uninitialized, 64-byte aligned. Buffers of 16 KiB and more start at
  // rotating offsets within a 4 KiB page: glibc's memcpy between two buffers
  // at the same page offset runs 10-20x slower (4K aliasing). With a pool,
  // the bytes come from (and return to) it when it can.
  static std::shared_ptr<TensorStorage> Allocate(int64_t bytes,
                                                 std::shared_ptr<MemoryTracker> tracker = nullptr,
                                                 const std::shared_ptr<BufferPool>& pool = nullptr);
  // Counts `owner`'s bytes against `tracker` while the result lives, without
  // copying them; the result is read-only (the executor never writes into it).
  static std::shared_ptr<TensorStorage> Borrow(std::shared_ptr<TensorStorage> owner,
                                               std::shared_ptr<MemoryTracker> tracker);
  ~TensorStorage();
  TensorStorage(const TensorStorage&) = delete;
  TensorStorage& operator=(const TensorStorage&) = delete;

  std::byte* data() const { return data_; }
  int64_t bytes() const { return bytes_; }
  bool writable() const { return writable_; }
  // Whether Allocate served it from a pool (no fresh memory).
  bool reused() const { return reused_; }
  // Counts the bytes against `tracker` from now on (and no longer against a
  // previous tracker). Only for a storage its caller holds exclusively.
  void Track(std::shared_ptr<MemoryTracker> tracker);
  bool tracked() const { return tracker_ != nullptr; }

 private:
  TensorStorage() = default;
  std::byte* data_ = nullptr;
  int64_t bytes_ = 0;
  void* allocation_ = nullptr;  // what std::free takes; null when borrowed
  int64_t allocation_bytes_ = 0;
  std::weak_ptr<BufferPool> pool_;  // where the allocation returns, if still there
  bool writable_ = true;
  bool reused_ = false;
  std::shared_ptr<TensorStorage> owner_;  // keeps borrowed bytes alive
  std::shared_ptr<MemoryTracker> tracker_;
};

// The C++ type holding one element of `type` (see the file comment).
template <typename T>
constexpr bool IsElementTypeOf(PrimitiveType type) {
  switch (type) {
    case PrimitiveType::kF32:
      return std::is_same_v<T, float>;
    case PrimitiveType::kF64:
      return std::is_same_v<T, double>;
    case PrimitiveType::kBF16:
    case PrimitiveType::kF16:
    case PrimitiveType::kU16:
      return std::is_same_v<T, uint16_t>;
    case PrimitiveType::kS32:
      return std::is_same_v<T, int32_t>;
    case PrimitiveType::kS64:
      return std::is_same_v<T, int64_t>;
    case PrimitiveType::kU32:
      return std::is_same_v<T, uint32_t>;
    case PrimitiveType::kU64:
      return std::is_same_v<T, uint64_t>;
    case PrimitiveType::kPred:
      return std::is_same_v<T, uint8_t> || std::is_same_v<T, bool>;
    default:
      return false;
  }
}

class HostTensor {
 public:
  HostTensor() = default;
  // Zero-filled. `shape` must be an array.
  explicit HostTensor(Shape shape);
  // Uninitialized bytes, optionally counted by `tracker` and drawn from `pool`.
  static HostTensor Uninitialized(Shape shape, std::shared_ptr<MemoryTracker> tracker = nullptr,
                                  const std::shared_ptr<BufferPool>& pool = nullptr);
  // Values rounded to the element type (floats) or truncated toward zero
  // (integers; pred is value != 0).
  static HostTensor FromDoubles(Shape shape, std::span<const double> values);
  // Exact typed values: T must be the element type's C++ type.
  template <typename T>
  static HostTensor FromVector(PrimitiveType type, std::vector<int64_t> dims,
                               const std::vector<T>& values);
  // A scalar.
  static HostTensor Scalar(PrimitiveType type, double value);

  bool valid() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  PrimitiveType element_type() const { return shape_.element_type(); }
  const DimensionVector& dimensions() const { return shape_.dimensions(); }
  int64_t rank() const { return shape_.rank(); }
  int64_t element_count() const { return shape_.ElementsCount(); }
  int64_t byte_size() const { return shape_.ByteSize(); }

  const void* raw_data() const { return storage_->data() + offset_; }
  void* mutable_raw_data() const { return storage_->data() + offset_; }
  // Typed access; throws weft::Error when T is not the element type's type.
  template <typename T>
  const T* data() const {
    CheckType(IsElementTypeOf<T>(element_type()), sizeof(T));
    return static_cast<const T*>(raw_data());
  }
  template <typename T>
  T* mutable_data() const {
    CheckType(IsElementTypeOf<T>(element_type()), sizeof(T));
    return static_cast<T*>(mutable_raw_data());
  }

  // Every element as a double (exact for all types but s64 beyond 2^53).
  std::vector<double> ToDoubles() const;
  double GetDouble(int64_t index) const;
  // A deep copy in a new buffer.
  HostTensor Clone() const;
  // The same bytes under another shape of equal byte size (reshape).
  HostTensor Reshaped(Shape shape) const;
  // `shape`'s bytes starting `byte_offset` bytes into this tensor (a
  // contiguous slice); shares the storage.
  HostTensor View(Shape shape, int64_t byte_offset) const;

  // The same bytes, counted against `tracker` while the result lives, and
  // read-only to the executor (it never reuses them in place).
  HostTensor Borrowed(std::shared_ptr<MemoryTracker> tracker) const {
    return HostTensor(shape_, TensorStorage::Borrow(storage_, std::move(tracker)), offset_);
  }

  const std::shared_ptr<TensorStorage>& storage() const { return storage_; }
  // True when no other tensor or program shares the bytes and they may be
  // written: the executor then reuses them in place.
  bool IsExclusivelyOwned() const {
    return storage_ != nullptr && storage_.use_count() == 1 && storage_->writable();
  }
  // "f32[2,3]{1.5, 2, ...}" with at most `max_elements` values.
  std::string ToString(int64_t max_elements = 8) const;

 private:
  HostTensor(Shape shape, std::shared_ptr<TensorStorage> storage, int64_t offset)
      : shape_(std::move(shape)), storage_(std::move(storage)), offset_(offset) {}
  void CheckType(bool ok, size_t size) const;

  Shape shape_;
  std::shared_ptr<TensorStorage> storage_;
  int64_t offset_ = 0;  // bytes into storage_
};

// bfloat16 and IEEE half conversions (round to nearest even; NaN stays NaN).
// The bf16 ones are base/bfloat16.h's, inline so that the elementwise span
// loops vectorize them.
inline float Bf16BitsToFloat(uint16_t bits) { return bf16::ToFloat(bits); }
inline uint16_t FloatToBf16Bits(float value) { return bf16::FromFloatBits(value); }
float F16BitsToFloat(uint16_t bits);
uint16_t FloatToF16Bits(float value);

template <typename T>
HostTensor HostTensor::FromVector(PrimitiveType type, std::vector<int64_t> dims,
                                  const std::vector<T>& values) {
  HostTensor t = Uninitialized(Shape(type, std::move(dims)));
  t.CheckType(IsElementTypeOf<T>(type), sizeof(T));
  t.CheckType(static_cast<int64_t>(values.size()) == t.element_count(), 0);
  T* out = static_cast<T*>(t.mutable_raw_data());
  for (size_t i = 0; i < values.size(); ++i) out[i] = values[i];
  return t;
}

}  // namespace weft::runtime
