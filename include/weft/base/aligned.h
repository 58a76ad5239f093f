// A 64-byte aligned, heap-allocated array of trivially copyable values.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

namespace weft {

template <typename T>
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t count) { Resize(count); }

  // Contents are unspecified after a resize that grows; call Zero() if needed.
  void Resize(size_t count) {
    if (count <= capacity_) {
      size_ = count;
      return;
    }
    size_t bytes = ((count * sizeof(T) + 63) / 64) * 64;
    void* p = std::aligned_alloc(64, bytes == 0 ? 64 : bytes);
    if (p == nullptr) throw std::bad_alloc();
    data_.reset(static_cast<T*>(p));
    size_ = capacity_ = count;
  }
  void Zero() {
    if (size_ > 0) std::memset(static_cast<void*>(data_.get()), 0, size_ * sizeof(T));
  }

  T* data() { return data_.get(); }
  const T* data() const { return data_.get(); }
  size_t size() const { return size_; }
  T& operator[](size_t i) { return data_.get()[i]; }
  const T& operator[](size_t i) const { return data_.get()[i]; }

 private:
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T, Free> data_;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

}  // namespace weft
