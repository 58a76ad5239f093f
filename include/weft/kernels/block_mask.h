// BlockMask: which (query block, kv block) tiles of attention need work.
//
// Built once from a mask and sizes (FlexAttention's create_block_mask) and
// reused across calls. Per query block it lists the kv blocks that are full
// (mask not evaluated) and partial (mask evaluated per element); empty blocks
// are skipped. The transposed lists (per kv block, its query blocks) drive
// the dk/dv backward kernel. B or H may be 1 to broadcast.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "weft/kernels/mask_mod.h"

namespace weft::kernels {

inline constexpr int64_t kDefaultBlockSize = 64;
// Create keeps partial blocks' masks up to this many bytes in all.
inline constexpr int64_t kMaxPartialTileBytes = int64_t{256} << 20;

class BlockMask {
 public:
  // Classifies every block of mask_mod (Classify() where it can tell,
  // per-element evaluation otherwise) and keeps the mask of each partial
  // block (PartialKeep) while they fit in kMaxPartialTileBytes, so the
  // kernels read them instead of evaluating the mask again for every head
  // and call. A block at least as long as its axis is one block: it is kept
  // as the axis rounded up to 256 when it is longer, so memory follows the
  // sequence, not the block size. Throws weft::Error on sizes that are not
  // positive or whose block lists would not fit in memory, before allocating.
  static BlockMask Create(MaskModPtr mask_mod, int64_t batch, int64_t heads, int64_t q_len,
                          int64_t kv_len, int64_t q_block = kDefaultBlockSize,
                          int64_t kv_block = kDefaultBlockSize);
  // No mask: every block full, B = H = 1.
  static BlockMask Dense(int64_t q_len, int64_t kv_len, int64_t q_block = kDefaultBlockSize,
                         int64_t kv_block = kDefaultBlockSize);

  // Block indices, ascending; `full` blocks need no mask evaluation.
  struct BlockList {
    const int32_t* full = nullptr;
    int32_t num_full = 0;
    const int32_t* partial = nullptr;
    int32_t num_partial = 0;
  };
  // kv blocks of query block qb for batch row b and query head h
  // (broadcast when batch() or heads() is 1).
  BlockList KvBlocks(int64_t b, int64_t h, int64_t qb) const;
  // query blocks of kv block kb for batch row b and query head h.
  BlockList QBlocks(int64_t b, int64_t h, int64_t kb) const;

  // The mask of partial block (qb, kb) for (b, h) as Create evaluated it:
  // q_block() rows of kv_block() bytes (1 keep, 0 masked; rows and columns
  // past q_len / kv_len are not set). Null when the block is not partial or
  // the tiles were not kept (Dense, more than kMaxPartialTileBytes, or blocks
  // of more than 16 MiB each).
  const uint8_t* PartialKeep(int64_t b, int64_t h, int64_t qb, int64_t kb) const;

  // The kind of block (qb, kb) for (b, h).
  BlockKind Kind(int64_t b, int64_t h, int64_t qb, int64_t kb) const;

  int64_t batch() const { return batch_; }
  int64_t heads() const { return heads_; }
  int64_t q_len() const { return q_len_; }
  int64_t kv_len() const { return kv_len_; }
  int64_t q_block() const { return q_block_; }
  int64_t kv_block() const { return kv_block_; }
  int64_t num_q_blocks() const { return q_len_ / q_block_ + (q_len_ % q_block_ != 0); }
  int64_t num_kv_blocks() const { return kv_len_ / kv_block_ + (kv_len_ % kv_block_ != 0); }
  // The mask evaluated on partial blocks; null for Dense().
  const MaskMod* mask_mod() const { return mask_mod_.get(); }
  const MaskModPtr& mask_mod_ptr() const { return mask_mod_; }

  // Counts over all (b, h, qb, kb).
  int64_t num_full() const;
  int64_t num_partial() const;
  int64_t num_empty() const;
  // Percentage of blocks skipped (empty), as FlexAttention's sparsity().
  double Sparsity() const;
  // Fraction of blocks that need work (full + partial).
  double Density() const { return 1.0 - Sparsity() / 100.0; }
  // A short human-readable summary: sizes, block counts, density, and for
  // small masks a picture of the first (b, h) ("█" full, "░" partial, " " empty).
  std::string ToString() const;

 private:
  BlockMask() = default;
  MaskModPtr mask_mod_;
  int64_t batch_ = 1, heads_ = 1, q_len_ = 0, kv_len_ = 0;
  int64_t q_block_ = kDefaultBlockSize, kv_block_ = kDefaultBlockSize;
  // kinds_[((b * heads + h) * nq + qb) * nkv + kb] would be S^2/block^2 bytes;
  // we keep CSR lists instead (row: per query block; column: per kv block).
  struct Csr {
    std::vector<int64_t> full_offsets, partial_offsets;  // size rows + 1
    std::vector<int32_t> full, partial;
  };
  Csr by_q_;  // rows: (b, h, qb)
  // Partial blocks' masks, q_block_ x kv_block_ bytes each, in by_q_.partial
  // order (shared: copies of a BlockMask are cheap).
  std::shared_ptr<const std::vector<uint8_t>> partial_tiles_;
  Csr by_kv_;  // rows: (b, h, kb)
  friend class BlockMaskBuilder;
};

}  // namespace weft::kernels
