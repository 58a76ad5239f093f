#include "weft/hlo/ragged_dot.h"

#include <algorithm>

#include "weft/base/algorithm.h"
#include "weft/base/error.h"

namespace weft {

RaggedDotMode RaggedDotModeOf(const HloInstruction& ragged_dot) {
  const HloAttributes& a = ragged_dot.attrs();
  WEFT_CHECK(a.lhs_ragged_dims.size() == 1, "{}: a ragged-dot needs one lhs ragged dim, not {}",
             ragged_dot.Describe(), a.lhs_ragged_dims.size());
  const int64_t r = a.lhs_ragged_dims[0];
  if (Contains(a.dot.lhs_batch_dims, r)) return RaggedDotMode::kBatch;
  if (Contains(a.dot.lhs_contracting_dims, r)) return RaggedDotMode::kContracting;
  return RaggedDotMode::kNonContracting;
}

std::vector<int64_t> RaggedDotPrefix(const HloInstruction& ragged_dot) {
  const HloAttributes& a = ragged_dot.attrs();
  const RaggedDotMode mode = RaggedDotModeOf(ragged_dot);
  const int64_t r = a.lhs_ragged_dims[0];
  const std::vector<int64_t>& batch = a.dot.lhs_batch_dims;
  std::vector<int64_t> prefix;
  if (mode == RaggedDotMode::kBatch) {
    prefix.assign(batch.begin(), std::find(batch.begin(), batch.end(), r));
    return prefix;
  }
  prefix = batch;
  if (mode == RaggedDotMode::kContracting) {  // in the order of lhs_contracting_dims
    const std::vector<int64_t>& c = a.dot.lhs_contracting_dims;
    prefix.insert(prefix.end(), c.begin(), std::find(c.begin(), c.end(), r));
    return prefix;
  }
  for (int64_t d = 0; d < r; ++d) {  // the non-contracting dims before r
    if (!Contains(batch, d) && !Contains(a.dot.lhs_contracting_dims, d)) prefix.push_back(d);
  }
  return prefix;
}

}  // namespace weft
