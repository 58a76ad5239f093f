// Per-thread recycling of the attention kernels' large per-call buffers
// (scaled Q, packed K^T, V and the backward's packed operands: O(S·D) each).
// A WorkspaceBuffer takes its block from its thread's free list and gives it
// back there when it is destroyed, so the next call of the same or a smaller
// size reuses memory whose pages are already mapped: repeated calls
// (training steps) take no fresh pages from the system, where a fresh
// aligned_alloc of several MiB per call came back as newly faulted,
// zero-filled pages each time.
#pragma once

#include <cstddef>
#include <cstring>

namespace weft::kernels::internal {

struct WorkspaceBlock {
  void* data = nullptr;
  size_t bytes = 0;
};

// A 64-byte aligned block of at least `bytes`: the smallest idle block of
// this thread that is large enough, or a new one.
WorkspaceBlock AcquireWorkspace(size_t bytes);
// Returns a block to this thread's free list, which keeps at most
// kMaxIdleWorkspaceBlocks (the smallest go first).
void ReleaseWorkspace(WorkspaceBlock block);
inline constexpr size_t kMaxIdleWorkspaceBlocks = 16;
// This thread's idle blocks and their bytes.
size_t IdleWorkspaceBlocks();
size_t IdleWorkspaceBytes();

// AlignedBuffer's interface (base/aligned.h) over a recycled block.
template <typename T>
class WorkspaceBuffer {
 public:
  WorkspaceBuffer() = default;
  explicit WorkspaceBuffer(size_t count) { Resize(count); }
  ~WorkspaceBuffer() {
    if (block_.data != nullptr) ReleaseWorkspace(block_);
  }
  WorkspaceBuffer(const WorkspaceBuffer&) = delete;
  WorkspaceBuffer& operator=(const WorkspaceBuffer&) = delete;

  // Contents are unspecified after a resize that grows.
  void Resize(size_t count) {
    const size_t bytes = count * sizeof(T);
    if (bytes > block_.bytes) {
      if (block_.data != nullptr) ReleaseWorkspace(block_);
      block_ = AcquireWorkspace(bytes);
    }
    size_ = count;
  }
  void Zero() {
    if (size_ > 0) std::memset(block_.data, 0, size_ * sizeof(T));
  }
  T* data() { return static_cast<T*>(block_.data); }
  const T* data() const { return static_cast<const T*>(block_.data); }
  size_t size() const { return size_; }
  T& operator[](size_t i) { return data()[i]; }
  const T& operator[](size_t i) const { return data()[i]; }

 private:
  WorkspaceBlock block_;
  size_t size_ = 0;
};

}  // namespace weft::kernels::internal
