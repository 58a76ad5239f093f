// The structure of a scan lowered to an HLO while, recorded in the while's
// backend_config so autodiff can find it (models/scan.h writes it):
//
//   state = (i s32[], carry_0..carry_{c-1}, xs_0..xs_{x-1} [L,...],
//            consts_0..consts_{k-1}, ys_0..ys_{y-1} [L,...])
//   condition: i < L
//   body: step i reads carry, xs_j[i] (dynamic-slice at (i, 0, ...) then a
//         reshape dropping the layer dim) and consts; returns (i + 1,
//         new carry, xs and consts unchanged, ys_j with dynamic-update-slice
//         of the step's value at (i, 0, ...)).
//   backend_config = {"scan": {"length": L, "carry": c, "xs": x, "consts": k, "ys": y}}
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "weft/hlo/instruction.h"

namespace weft {

struct ScanConfig {
  int64_t length = 0;
  int64_t num_carry = 0;
  int64_t num_xs = 0;
  int64_t num_consts = 0;
  int64_t num_ys = 0;
  // The forward loop autodiff builds appends this many stacked residuals to
  // the state ("residuals" in the JSON; 0 for a scan as models/scan.h writes it).
  int64_t num_residuals = 0;

  // State tuple positions.
  int64_t carry_index(int64_t j) const { return 1 + j; }
  int64_t xs_index(int64_t j) const { return 1 + num_carry + j; }
  int64_t consts_index(int64_t j) const { return 1 + num_carry + num_xs + j; }
  int64_t ys_index(int64_t j) const { return 1 + num_carry + num_xs + num_consts + j; }
  int64_t state_size() const { return 1 + num_carry + num_xs + num_consts + num_ys; }

  std::string ToJson() const;
};

// The scan structure of a while, or nullopt when its backend_config has no
// "scan" entry. Throws weft::Error for a malformed entry.
std::optional<ScanConfig> ScanConfigOf(const HloInstruction& instr);

// The forward loop autodiff builds for a scan (the scan's state, then the
// stacked residuals) records which state elements hold values kept in host
// memory between the forward and the backward (selective offload):
// backend_config {"scan": ..., "offload_state": [i, ...]}. The planner reads
// it; on a CPU the executor keeps them where they are (host memory already).
std::vector<int64_t> OffloadedStateOf(const HloInstruction& instr);
// `backend_config` with "offload_state" set to `state` (removed when empty).
std::string WithOffloadedState(const std::string& backend_config,
                               const std::vector<int64_t>& state);

}  // namespace weft
