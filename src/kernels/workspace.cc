#include "workspace.h"

#include <algorithm>
#include <cstdlib>
#include <new>
#include <vector>

namespace weft::kernels::internal {
namespace {

struct FreeList {
  std::vector<WorkspaceBlock> blocks;
  ~FreeList() {
    for (const WorkspaceBlock& b : blocks) std::free(b.data);
  }
};

FreeList& ThisThread() {
  thread_local FreeList list;
  return list;
}

}  // namespace

WorkspaceBlock AcquireWorkspace(size_t bytes) {
  std::vector<WorkspaceBlock>& blocks = ThisThread().blocks;
  auto best = blocks.end();
  for (auto it = blocks.begin(); it != blocks.end(); ++it) {
    if (it->bytes >= bytes && (best == blocks.end() || it->bytes < best->bytes)) best = it;
  }
  if (best != blocks.end()) {
    const WorkspaceBlock block = *best;
    blocks.erase(best);
    return block;
  }
  const size_t rounded = std::max<size_t>(64, (bytes + 63) / 64 * 64);
  void* p = std::aligned_alloc(64, rounded);
  if (p == nullptr) throw std::bad_alloc();
  return WorkspaceBlock{p, rounded};
}

void ReleaseWorkspace(WorkspaceBlock block) {
  std::vector<WorkspaceBlock>& blocks = ThisThread().blocks;
  blocks.push_back(block);
  if (blocks.size() > kMaxIdleWorkspaceBlocks) {
    auto smallest = std::min_element(
        blocks.begin(), blocks.end(),
        [](const WorkspaceBlock& a, const WorkspaceBlock& b) { return a.bytes < b.bytes; });
    std::free(smallest->data);
    blocks.erase(smallest);
  }
}

size_t IdleWorkspaceBlocks() { return ThisThread().blocks.size(); }

size_t IdleWorkspaceBytes() {
  size_t total = 0;
  for (const WorkspaceBlock& b : ThisThread().blocks) total += b.bytes;
  return total;
}

}  // namespace weft::kernels::internal
