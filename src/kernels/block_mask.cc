#include "weft/kernels/block_mask.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <memory>

#include "weft/base/error.h"
#include "weft/base/memory.h"
#include "weft/base/thread_pool.h"

namespace weft::kernels {

// Builds the CSR lists of a BlockMask from one kind per block.
class BlockMaskBuilder {
 public:
  // Refuses sizes that are not positive, and sizes whose lists would not fit
  // in memory, before anything is allocated. Products are taken in 128 bits,
  // so no size overflows into a small one.
  static void CheckSizes(int64_t batch, int64_t heads, int64_t q_len, int64_t kv_len,
                         int64_t q_block, int64_t kv_block) {
    WEFT_CHECK(batch >= 1 && heads >= 1,
               "block_mask: batch {} and heads {} must be at least 1 (1 broadcasts)", batch, heads);
    WEFT_CHECK(q_len > 0 && kv_len > 0, "block_mask: q_len {} and kv_len {} must be positive",
               q_len, kv_len);
    WEFT_CHECK(q_block > 0 && kv_block > 0,
               "block_mask: block sizes {}x{} must be positive (default {})", q_block, kv_block,
               kDefaultBlockSize);
    using Wide = __int128;
    const int64_t nqb = BlockCount(q_len, q_block), nkb = BlockCount(kv_len, kv_block);
    constexpr int64_t kMaxBlocks = int64_t{1} << 34;
    const Wide slices = Wide{batch} * heads;  // < 2^126
    // Each factor is bounded before the next product, so none overflows.
    const bool countable = nqb <= std::numeric_limits<int32_t>::max() &&
                           nkb <= std::numeric_limits<int32_t>::max() && slices <= kMaxBlocks;
    const Wide blocks = countable ? slices * nqb * nkb : Wide{kMaxBlocks} + 1;
    // Up to 1 byte of kind and 2 x 4 bytes of list entries per block, 24 + 16
    // bytes per query-block row and 16 per kv-block row.
    const Wide bytes = countable ? blocks * 9 + slices * nqb * 40 + slices * nkb * 16 : 0;
    const int64_t memory = PhysicalMemoryBytes();
    const bool fits = blocks <= kMaxBlocks && (memory <= 0 || bytes <= memory);
    WEFT_CHECK(fits,
               "block_mask: batch {} x heads {} x {} query blocks x {} kv blocks ({:.3g} blocks{}) "
               "is too many{}; use larger blocks or broadcast batch/heads with 1",
               batch, heads, nqb, nkb,
               static_cast<double>(batch) * static_cast<double>(heads) * static_cast<double>(nqb) *
                   static_cast<double>(nkb),
               blocks <= kMaxBlocks ? fmt::format(", up to {} of block lists",
                                                  FormatBytes(static_cast<int64_t>(bytes)))
                                    : std::string(),
               blocks <= kMaxBlocks && memory > 0
                   ? fmt::format(" for this machine's {} of memory", FormatBytes(memory))
                   : fmt::format(" (at most {} blocks)", kMaxBlocks));
  }

  // Blocks of `block` along an axis of `len` (both positive), without
  // overflow for any block size.
  static int64_t BlockCount(int64_t len, int64_t block) {
    return len / block + (len % block != 0 ? 1 : 0);
  }

  // A block at least as long as the axis is one block whatever its size; it
  // is kept at most the axis rounded up to kClampMultiple, so that what is
  // allocated per block scales with the sequence, not with the block size
  // asked for (a power-of-two tile up to 256 still divides it).
  static int64_t ClampBlock(int64_t len, int64_t block) {
    constexpr int64_t kClampMultiple = 256;
    const int64_t room = (kClampMultiple - len % kClampMultiple) % kClampMultiple;
    const int64_t cap = len <= std::numeric_limits<int64_t>::max() - room ? len + room : len;
    return std::min(block, cap);
  }

  // kinds[((b * heads + h) * nqb + qb) * nkb + kb]
  static void Fill(BlockMask& m, const std::vector<BlockKind>& kinds) {
    const int64_t nqb = m.num_q_blocks(), nkb = m.num_kv_blocks();
    const int64_t slices = m.batch_ * m.heads_;
    BlockMask::Csr& q = m.by_q_;
    BlockMask::Csr& kv = m.by_kv_;
    q.full_offsets.assign(slices * nqb + 1, 0);
    q.partial_offsets.assign(slices * nqb + 1, 0);
    kv.full_offsets.assign(slices * nkb + 1, 0);
    kv.partial_offsets.assign(slices * nkb + 1, 0);
    // Count per row and per column, then place: rows are visited in order,
    // so every list comes out ascending.
    for (int64_t s = 0; s < slices; ++s) {
      for (int64_t qb = 0; qb < nqb; ++qb) {
        const BlockKind* row = kinds.data() + (s * nqb + qb) * nkb;
        for (int64_t kb = 0; kb < nkb; ++kb) {
          if (row[kb] == BlockKind::kFull) {
            ++q.full_offsets[s * nqb + qb + 1];
            ++kv.full_offsets[s * nkb + kb + 1];
          } else if (row[kb] == BlockKind::kPartial) {
            ++q.partial_offsets[s * nqb + qb + 1];
            ++kv.partial_offsets[s * nkb + kb + 1];
          }
        }
      }
    }
    for (BlockMask::Csr* c : {&q, &kv}) {
      for (size_t r = 1; r < c->full_offsets.size(); ++r) {
        c->full_offsets[r] += c->full_offsets[r - 1];
        c->partial_offsets[r] += c->partial_offsets[r - 1];
      }
      c->full.resize(c->full_offsets.back());
      c->partial.resize(c->partial_offsets.back());
    }
    std::vector<int64_t> kv_full(kv.full_offsets.begin(), kv.full_offsets.end() - 1);
    std::vector<int64_t> kv_partial(kv.partial_offsets.begin(), kv.partial_offsets.end() - 1);
    for (int64_t s = 0; s < slices; ++s) {
      for (int64_t qb = 0; qb < nqb; ++qb) {
        const BlockKind* row = kinds.data() + (s * nqb + qb) * nkb;
        int64_t full = q.full_offsets[s * nqb + qb], partial = q.partial_offsets[s * nqb + qb];
        for (int64_t kb = 0; kb < nkb; ++kb) {
          if (row[kb] == BlockKind::kFull) {
            q.full[full++] = static_cast<int32_t>(kb);
            kv.full[kv_full[s * nkb + kb]++] = static_cast<int32_t>(qb);
          } else if (row[kb] == BlockKind::kPartial) {
            q.partial[partial++] = static_cast<int32_t>(kb);
            kv.partial[kv_partial[s * nkb + kb]++] = static_cast<int32_t>(qb);
          }
        }
      }
    }
  }

  static BlockMask Make(MaskModPtr mask_mod, int64_t batch, int64_t heads, int64_t q_len,
                        int64_t kv_len, int64_t q_block, int64_t kv_block) {
    BlockMask m;
    m.mask_mod_ = std::move(mask_mod);
    m.batch_ = batch;
    m.heads_ = heads;
    m.q_len_ = q_len;
    m.kv_len_ = kv_len;
    m.q_block_ = ClampBlock(q_len, q_block);
    m.kv_block_ = ClampBlock(kv_len, kv_block);
    return m;
  }

  static BlockMask::BlockList List(const BlockMask::Csr& c, int64_t row) {
    BlockMask::BlockList list;
    list.full = c.full.data() + c.full_offsets[row];
    list.num_full = static_cast<int32_t>(c.full_offsets[row + 1] - c.full_offsets[row]);
    list.partial = c.partial.data() + c.partial_offsets[row];
    list.num_partial = static_cast<int32_t>(c.partial_offsets[row + 1] - c.partial_offsets[row]);
    return list;
  }
};

namespace {

// A task never evaluates more than this many bytes of mask at once.
constexpr int64_t kMaxEvaluatedTileBytes = int64_t{16} << 20;

BlockKind KindOf(bool any_kept, bool any_masked) {
  return !any_kept ? BlockKind::kEmpty : any_masked ? BlockKind::kPartial : BlockKind::kFull;
}

// The kind of block [q0, q0 + nq) x [k0, k0 + nk), evaluated a band of rows
// at a time (at most kBandBytes, or one row) into `band`; stops at the first
// band that shows the block partial.
BlockKind EvaluateKind(const MaskMod& mask, int64_t b, int64_t h, int64_t q0, int64_t nq,
                       int64_t k0, int64_t nk, std::vector<uint8_t>& band) {
  constexpr int64_t kBandBytes = int64_t{64} << 10;
  const int64_t rows = std::clamp<int64_t>(kBandBytes / nk, 1, nq);
  band.resize(static_cast<size_t>(rows * nk));
  bool any_kept = false, any_masked = false;
  for (int64_t i0 = 0; i0 < nq; i0 += rows) {
    const int64_t n = std::min(rows, nq - i0);
    mask.Evaluate(b, h, q0 + i0, n, k0, nk, band.data(), nk);
    for (int64_t i = 0; i < n * nk; ++i) (band[i] != 0 ? any_kept : any_masked) = true;
    if (any_kept && any_masked) break;
  }
  return KindOf(any_kept, any_masked);
}

}  // namespace

BlockMask BlockMask::Create(MaskModPtr mask_mod, int64_t batch, int64_t heads, int64_t q_len,
                            int64_t kv_len, int64_t q_block, int64_t kv_block) {
  WEFT_CHECK(mask_mod != nullptr,
             "block_mask: mask_mod is null; pass a mask (e.g. CausalMask()) or use "
             "BlockMask::Dense for no mask");
  BlockMaskBuilder::CheckSizes(batch, heads, q_len, kv_len, q_block, kv_block);
  mask_mod->Validate(batch, heads, q_len, kv_len);
  BlockMask m =
      BlockMaskBuilder::Make(std::move(mask_mod), batch, heads, q_len, kv_len, q_block, kv_block);
  const int64_t nqb = m.num_q_blocks(), nkb = m.num_kv_blocks();
  q_block = m.q_block_;  // clamped to the sequence
  kv_block = m.kv_block_;
  std::vector<BlockKind> kinds(static_cast<size_t>(batch * heads * nqb * nkb));
  const MaskMod& mask = *m.mask_mod_;
  // Each row's partial blocks evaluated, in kv order (the CSR order), while
  // their bytes stay under kMaxPartialTileBytes in all. A block of more than
  // kMaxEvaluatedTileBytes is never kept: its kind is found a band of rows at
  // a time, so a task holds at most that much whatever the block size.
  const bool keepable = q_block <= kMaxEvaluatedTileBytes / kv_block;
  const int64_t tile_bytes = keepable ? q_block * kv_block : 0;
  std::vector<std::vector<uint8_t>> row_tiles(static_cast<size_t>(batch * heads * nqb));
  std::atomic<int64_t> stored_bytes{0};
  std::atomic<bool> keep_tiles{keepable};
  // One task per (b, h, query block); each writes only its own row of kinds.
  ThreadPool::Global().ParallelFor(batch * heads * nqb, [&](int64_t task, int) {
    const int64_t b = task / (heads * nqb), h = task / nqb % heads, qb = task % nqb;
    const int64_t q0 = qb * q_block, q1 = q_len - q0 > q_block ? q0 + q_block : q_len;
    std::vector<uint8_t> band;
    std::vector<uint8_t>& kept_tiles = row_tiles[task];
    BlockKind* row = kinds.data() + task * nkb;
    for (int64_t kb = 0; kb < nkb; ++kb) {
      const int64_t k0 = kb * kv_block, k1 = kv_len - k0 > kv_block ? k0 + kv_block : kv_len;
      const int64_t nq = q1 - q0, nk = k1 - k0;
      const std::optional<BlockKind> told = mask.Classify(b, h, q0, q1, k0, k1);
      // A block told partial is evaluated only to keep its mask; past the
      // bound nothing more is kept, so its kind is all that is needed.
      const bool keeping = keep_tiles.load(std::memory_order_relaxed);
      if (told && (*told != BlockKind::kPartial || !keeping)) {
        row[kb] = *told;
        continue;
      }
      if (!keeping) {
        row[kb] = EvaluateKind(mask, b, h, q0, nq, k0, nk, band);
        continue;
      }
      // Evaluated in place at the end of the row's kept tiles; taken back
      // unless the block is partial and fits under the bound.
      const size_t at = kept_tiles.size();
      kept_tiles.resize(at + static_cast<size_t>(tile_bytes));
      uint8_t* tile = kept_tiles.data() + at;
      mask.Evaluate(b, h, q0, nq, k0, nk, tile, kv_block);
      bool any_kept = false, any_masked = false;
      for (int64_t i = 0; i < nq; ++i) {
        for (int64_t j = 0; j < nk; ++j)
          (tile[i * kv_block + j] != 0 ? any_kept : any_masked) = true;
      }
      row[kb] = KindOf(any_kept, any_masked);
      if (row[kb] == BlockKind::kPartial) {
        if (stored_bytes.fetch_add(tile_bytes) + tile_bytes <= kMaxPartialTileBytes) continue;
        keep_tiles = false;
      }
      kept_tiles.resize(at);
    }
  });
  BlockMaskBuilder::Fill(m, kinds);
  if (keep_tiles && m.num_partial() > 0) {
    std::vector<uint8_t> tiles;
    tiles.reserve(static_cast<size_t>(m.num_partial() * tile_bytes));
    for (std::vector<uint8_t>& r : row_tiles) {
      tiles.insert(tiles.end(), r.begin(), r.end());
      std::vector<uint8_t>().swap(r);
    }
    m.partial_tiles_ = std::make_shared<const std::vector<uint8_t>>(std::move(tiles));
  }
  return m;
}

BlockMask BlockMask::Dense(int64_t q_len, int64_t kv_len, int64_t q_block, int64_t kv_block) {
  BlockMaskBuilder::CheckSizes(1, 1, q_len, kv_len, q_block, kv_block);
  BlockMask m = BlockMaskBuilder::Make(nullptr, 1, 1, q_len, kv_len, q_block, kv_block);
  BlockMaskBuilder::Fill(
      m, std::vector<BlockKind>(m.num_q_blocks() * m.num_kv_blocks(), BlockKind::kFull));
  return m;
}

namespace {

// The CSR row of (b, h, block), broadcasting b and h when the mask has 1.
int64_t RowIndex(int64_t batch, int64_t heads, int64_t b, int64_t h, int64_t block,
                 int64_t num_blocks, const char* block_name) {
  WEFT_CHECK(b >= 0 && (batch == 1 || b < batch),
             "block_mask: batch row {} is out of range for a block mask of batch {}", b, batch);
  WEFT_CHECK(h >= 0 && (heads == 1 || h < heads),
             "block_mask: head {} is out of range for a block mask of {} heads", h, heads);
  WEFT_CHECK(block >= 0 && block < num_blocks, "block_mask: {} {} is out of range; there are {}",
             block_name, block, num_blocks);
  return ((batch == 1 ? 0 : b) * heads + (heads == 1 ? 0 : h)) * num_blocks + block;
}

bool Contains(const int32_t* list, int32_t n, int64_t x) {
  return std::binary_search(list, list + n, static_cast<int32_t>(x));
}

}  // namespace

BlockMask::BlockList BlockMask::KvBlocks(int64_t b, int64_t h, int64_t qb) const {
  const int64_t row = RowIndex(batch_, heads_, b, h, qb, num_q_blocks(), "query block");
  return BlockMaskBuilder::List(by_q_, row);
}

BlockMask::BlockList BlockMask::QBlocks(int64_t b, int64_t h, int64_t kb) const {
  const int64_t row = RowIndex(batch_, heads_, b, h, kb, num_kv_blocks(), "kv block");
  return BlockMaskBuilder::List(by_kv_, row);
}

const uint8_t* BlockMask::PartialKeep(int64_t b, int64_t h, int64_t qb, int64_t kb) const {
  if (partial_tiles_ == nullptr) return nullptr;
  const BlockList list = KvBlocks(b, h, qb);
  const int32_t* end = list.partial + list.num_partial;
  const int32_t* at = std::lower_bound(list.partial, end, static_cast<int32_t>(kb));
  if (at == end || *at != kb) return nullptr;
  return partial_tiles_->data() + (at - by_q_.partial.data()) * q_block_ * kv_block_;
}

BlockKind BlockMask::Kind(int64_t b, int64_t h, int64_t qb, int64_t kb) const {
  WEFT_CHECK(kb >= 0 && kb < num_kv_blocks(),
             "block_mask: kv block {} is out of range; there are {}", kb, num_kv_blocks());
  const BlockList list = KvBlocks(b, h, qb);
  if (Contains(list.full, list.num_full, kb)) return BlockKind::kFull;
  if (Contains(list.partial, list.num_partial, kb)) return BlockKind::kPartial;
  return BlockKind::kEmpty;
}

int64_t BlockMask::num_full() const { return static_cast<int64_t>(by_q_.full.size()); }
int64_t BlockMask::num_partial() const { return static_cast<int64_t>(by_q_.partial.size()); }
int64_t BlockMask::num_empty() const {
  return batch_ * heads_ * num_q_blocks() * num_kv_blocks() - num_full() - num_partial();
}

double BlockMask::Sparsity() const {
  const int64_t total = batch_ * heads_ * num_q_blocks() * num_kv_blocks();
  return total == 0 ? 0.0 : 100.0 * static_cast<double>(num_empty()) / static_cast<double>(total);
}

std::string BlockMask::ToString() const {
  std::string mask = mask_mod_ ? mask_mod_->ToString() : "none (dense)";
  if (mask.size() > 100) mask = mask.substr(0, 97) + "...";
  std::string out = fmt::format(
      "BlockMask(batch={}, heads={}, q_len={}, kv_len={}, block={}x{}, {}x{} blocks per head: "
      "{} full, {} partial, {} empty, sparsity {:.2f}%)\n  mask: {}\n",
      batch_, heads_, q_len_, kv_len_, q_block_, kv_block_, num_q_blocks(), num_kv_blocks(),
      num_full(), num_partial(), num_empty(), Sparsity(), mask);
  if (num_q_blocks() <= 32 && num_kv_blocks() <= 32) {
    // Rows are query blocks, columns kv blocks, of (b=0, h=0).
    for (int64_t qb = 0; qb < num_q_blocks(); ++qb) {
      out += "  |";
      for (int64_t kb = 0; kb < num_kv_blocks(); ++kb) {
        const BlockKind kind = Kind(0, 0, qb, kb);
        out += kind == BlockKind::kFull ? "█" : kind == BlockKind::kPartial ? "░" : " ";
      }
      out += "|\n";
    }
  }
  return out;
}

}  // namespace weft::kernels
