// Attention masks with FlexAttention's mask_mod semantics: a predicate over
// (b, h, q_idx, kv_idx) that is true where the query may attend to the key.
//
// Masks are values that can be written down: built-ins, and_masks/or_masks,
// and a small expression language (mod_expr.h). ToString() gives the
// expression text, so a mask serializes into an HLO custom-call config.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "weft/kernels/mod_tensor.h"

namespace weft::kernels {

// How a rectangular block of (q, kv) pairs relates to a mask.
enum class BlockKind : uint8_t {
  kEmpty = 0,    // no pair attends: the block is skipped
  kPartial = 1,  // some pairs attend: the mask is evaluated per element
  kFull = 2,     // every pair attends: the mask is not evaluated
};

class MaskMod {
 public:
  virtual ~MaskMod() = default;

  // keep[i * ld + j] = 1 if query q0+i may attend to key k0+j, else 0, for
  // i < nq, j < nk. Query head h, batch row b.
  virtual void Evaluate(int64_t b, int64_t h, int64_t q0, int64_t nq, int64_t k0, int64_t nk,
                        uint8_t* keep, int64_t ld) const = 0;

  // Classifies the block [q0, q1) x [k0, k1) without evaluating every element
  // when the mask's structure allows it; nullopt when it cannot tell (the
  // caller then evaluates the elements). Must never claim kFull or kEmpty
  // wrongly.
  virtual std::optional<BlockKind> Classify(int64_t b, int64_t h, int64_t q0, int64_t q1,
                                            int64_t k0, int64_t k1) const {
    return std::nullopt;
  }

  // Throws weft::Error when the mask cannot apply to attention of these sizes
  // (e.g. segment ids of the wrong shape), naming the input and the fix.
  virtual void Validate(int64_t batch, int64_t heads, int64_t q_len, int64_t kv_len) const {}

  // The mask in the expression language (mod_expr.h); captured tensors are
  // referred to by name.
  virtual std::string ToString() const = 0;

  // The named integer tensors the expression refers to.
  virtual std::map<std::string, IndexTensor> Tensors() const { return {}; }
};

using MaskModPtr = std::shared_ptr<const MaskMod>;

// q_idx + offset >= kv_idx (top-left aligned causal; offset shifts the diagonal).
MaskModPtr CausalMask(int64_t offset = 0);
// q_idx - left <= kv_idx <= q_idx + right.
MaskModPtr SlidingWindowMask(int64_t left, int64_t right);
// kv_idx < prefix_lengths[b] || q_idx >= kv_idx.
MaskModPtr PrefixLmMask(std::vector<int64_t> prefix_lengths);
// q_segment_ids[b, q_idx] == kv_segment_ids[b, kv_idx]; both [B, S].
MaskModPtr DocumentMask(IndexTensor q_segment_ids, IndexTensor kv_segment_ids);
// q_idx / chunk == kv_idx / chunk && q_idx >= kv_idx.
MaskModPtr ChunkedCausalMask(int64_t chunk);
// Conjunction / disjunction of masks (at least one mask).
MaskModPtr AndMasks(std::vector<MaskModPtr> masks);
MaskModPtr OrMasks(std::vector<MaskModPtr> masks);
// An expression over b, h, q_idx, kv_idx and the named integer tensors,
// e.g. "q_idx >= kv_idx && seg[b, q_idx] == seg[b, kv_idx]".
MaskModPtr MaskExpr(const std::string& text, std::map<std::string, IndexTensor> tensors = {});
// A C++ callable (not serializable: ToString() says so). It is called from
// several threads at once (BlockMask::Create, the attention kernels).
MaskModPtr LambdaMask(std::function<bool(int64_t b, int64_t h, int64_t q_idx, int64_t kv_idx)> fn,
                      std::string description = "lambda");

}  // namespace weft::kernels
