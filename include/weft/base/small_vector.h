// SmallVector<T, N>: a vector of a trivially copyable T that keeps up to N
// elements inside the object and moves to the heap beyond. Shape keeps its
// dimensions in one (hlo/shape.h), so copying a shape of rank <= 6 — which
// every tensor, view and loop-state copy of the executor does — allocates
// nothing.
//
// It has the std::vector operations weft uses (size, data, iteration,
// push_back, insert, erase, resize, comparisons) and converts implicitly to
// std::vector<T> and std::span<const T>, so a caller that wants a vector
// still gets one (a copy).
#pragma once

#include <algorithm>
#include <compare>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <new>
#include <span>
#include <stdexcept>
#include <type_traits>
#include <vector>

namespace weft {

template <typename T, size_t N>
class SmallVector {
  static_assert(std::is_trivially_copyable_v<T>, "SmallVector holds trivially copyable values");
  static_assert(N > 0, "SmallVector needs an inline capacity");

 public:
  using value_type = T;
  using size_type = size_t;
  using difference_type = std::ptrdiff_t;
  using reference = T&;
  using const_reference = const T&;
  using pointer = T*;
  using const_pointer = const T*;
  using iterator = T*;
  using const_iterator = const T*;
  using reverse_iterator = std::reverse_iterator<iterator>;
  using const_reverse_iterator = std::reverse_iterator<const_iterator>;

  SmallVector() = default;
  explicit SmallVector(size_t n, const T& value = T()) { assign(n, value); }
  SmallVector(std::initializer_list<T> values) { assign(values.begin(), values.end()); }
  template <typename It, typename = std::enable_if_t<!std::is_integral_v<It>>>
  SmallVector(It first, It last) {
    assign(first, last);
  }
  SmallVector(const std::vector<T>& values) { assign(values.begin(), values.end()); }
  SmallVector(std::span<const T> values) { assign(values.begin(), values.end()); }
  SmallVector(const SmallVector& other) { assign(other.begin(), other.end()); }
  SmallVector(SmallVector&& other) noexcept { Steal(other); }
  ~SmallVector() { Release(); }

  SmallVector& operator=(const SmallVector& other) {
    if (this != &other) assign(other.begin(), other.end());
    return *this;
  }
  SmallVector& operator=(SmallVector&& other) noexcept {
    if (this != &other) {
      Release();
      Steal(other);
    }
    return *this;
  }
  SmallVector& operator=(std::initializer_list<T> values) {
    assign(values.begin(), values.end());
    return *this;
  }

  operator std::vector<T>() const { return std::vector<T>(begin(), end()); }
  operator std::span<const T>() const { return {data(), size()}; }

  template <typename It>
  void assign(It first, It last) {
    const size_t n = static_cast<size_t>(std::distance(first, last));
    if (n > capacity_) {
      // `first` may point into this vector only when n <= size <= capacity.
      Grow(n, /*keep=*/false);
    }
    std::copy(first, last, data_);
    size_ = n;
  }
  void assign(size_t n, const T& value) {
    const T copy = value;  // `value` may live in this vector
    if (n > capacity_) Grow(n, /*keep=*/false);
    std::fill(data_, data_ + n, copy);
    size_ = n;
  }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  size_t capacity() const { return capacity_; }
  T* data() { return data_; }
  const T* data() const { return data_; }

  iterator begin() { return data_; }
  iterator end() { return data_ + size_; }
  const_iterator begin() const { return data_; }
  const_iterator end() const { return data_ + size_; }
  const_iterator cbegin() const { return data_; }
  const_iterator cend() const { return data_ + size_; }
  reverse_iterator rbegin() { return reverse_iterator(end()); }
  reverse_iterator rend() { return reverse_iterator(begin()); }
  const_reverse_iterator rbegin() const { return const_reverse_iterator(end()); }
  const_reverse_iterator rend() const { return const_reverse_iterator(begin()); }

  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T& at(size_t i) {
    if (i >= size_) throw std::out_of_range("SmallVector::at");
    return data_[i];
  }
  const T& at(size_t i) const {
    if (i >= size_) throw std::out_of_range("SmallVector::at");
    return data_[i];
  }
  T& front() { return data_[0]; }
  const T& front() const { return data_[0]; }
  T& back() { return data_[size_ - 1]; }
  const T& back() const { return data_[size_ - 1]; }

  void reserve(size_t n) {
    if (n > capacity_) Grow(n, /*keep=*/true);
  }
  void clear() { size_ = 0; }
  void resize(size_t n, const T& value = T()) {
    const T copy = value;  // `value` may live in this vector
    reserve(n);
    if (n > size_) std::fill(data_ + size_, data_ + n, copy);
    size_ = n;
  }
  void push_back(const T& value) {
    const T copy = value;  // `value` may live in this vector
    if (size_ == capacity_) Grow(capacity_ * 2, /*keep=*/true);
    data_[size_++] = copy;
  }
  template <typename... Args>
  T& emplace_back(Args&&... args) {
    push_back(T(std::forward<Args>(args)...));
    return back();
  }
  void pop_back() { --size_; }

  iterator insert(const_iterator pos, const T& value) { return insert(pos, size_t{1}, value); }
  iterator insert(const_iterator pos, size_t n, const T& value) {
    const T copy = value;
    const size_t at = Open(pos, n);
    std::fill(data_ + at, data_ + at + n, copy);
    return data_ + at;
  }
  template <typename It, typename = std::enable_if_t<!std::is_integral_v<It>>>
  iterator insert(const_iterator pos, It first, It last) {
    // Copied first: the range may lie in this vector, which Open may move.
    const std::vector<T> values(first, last);
    const size_t at = Open(pos, values.size());
    std::copy(values.begin(), values.end(), data_ + at);
    return data_ + at;
  }
  iterator insert(const_iterator pos, std::initializer_list<T> values) {
    return insert(pos, values.begin(), values.end());
  }
  iterator erase(const_iterator pos) { return erase(pos, pos + 1); }
  iterator erase(const_iterator first, const_iterator last) {
    const size_t at = static_cast<size_t>(first - data_);
    const size_t n = static_cast<size_t>(last - first);
    std::copy(data_ + at + n, data_ + size_, data_ + at);
    size_ -= n;
    return data_ + at;
  }

  friend bool operator==(const SmallVector& a, const SmallVector& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }
  friend bool operator==(const SmallVector& a, const std::vector<T>& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }
  friend auto operator<=>(const SmallVector& a, const SmallVector& b) {
    return std::lexicographical_compare_three_way(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  bool on_heap() const { return data_ != inline_; }

  // Room for `n` elements; `keep` copies the current ones over.
  void Grow(size_t n, bool keep) {
    const size_t capacity = std::max(n, capacity_ * 2);
    T* heap = static_cast<T*>(::operator new(capacity * sizeof(T)));
    if (keep && size_ > 0) std::memcpy(heap, data_, size_ * sizeof(T));
    Release();
    data_ = heap;
    capacity_ = capacity;
  }
  // Makes a gap of `n` elements at `pos`; returns its index.
  size_t Open(const_iterator pos, size_t n) {
    const size_t at = static_cast<size_t>(pos - data_);
    reserve(size_ + n);
    std::copy_backward(data_ + at, data_ + size_, data_ + size_ + n);
    size_ += n;
    return at;
  }
  void Release() {
    if (on_heap()) ::operator delete(data_);
    data_ = inline_;
    capacity_ = N;
  }
  void Steal(SmallVector& other) {
    if (other.on_heap()) {
      data_ = other.data_;
      capacity_ = other.capacity_;
    } else {
      // All N: a constant size, which the compiler copies in a few moves.
      std::memcpy(inline_, other.inline_, sizeof(inline_));
    }
    size_ = other.size_;
    other.data_ = other.inline_;
    other.capacity_ = N;
    other.size_ = 0;
  }

  T* data_ = inline_;
  size_t size_ = 0;
  size_t capacity_ = N;
  T inline_[N] = {};
};

}  // namespace weft
