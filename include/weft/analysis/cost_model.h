// FLOPs of a per-device program and the step time they, the collectives and
// the host transfers imply on a chip.
//
// FLOPs per device (every executed instruction, loop bodies once per trip):
//   dot        2 x (result elements) x (contracted elements)
//   attention  the flex-attention custom calls over the (query, key) pairs
//              the mask keeps: causal masks (q_idx >= kv_idx) keep
//              Sq x (Skv + 1) / 2 on average, others Sq x Skv (segment ids
//              only remove more, which depends on the data: not counted).
//              forward  2 x B x Hq x pairs x (D + Dv)        (QK^T, PV)
//              backward 2 x B x Hq x pairs x (3 D + 2 Dv)    (recomputed QK^T,
//                                                  dP, dV, dQ, dK: 2.5x forward)
//   other      one per element of elementwise ops and reductions (vector
//              work, not timed: it is memory bound and fused on accelerators)
//
// Step time is simulated from the program (analysis/step_sim.h); MFU there
// uses model FLOPs = 6 x matmul parameters x tokens + 3 x the causal
// attention forward (no recomputation counted: remat shows as lower MFU).
#pragma once

#include <cstdint>

#include "weft/analysis/chips.h"
#include "weft/hlo/module.h"

namespace weft::analysis {

struct FlopCount {
  double dot = 0;
  double attention_forward = 0;
  double attention_backward = 0;
  double other = 0;
  double timed() const { return dot + attention_forward + attention_backward; }
};

// Per device, per execution of the entry.
FlopCount CountFlops(const HloModule& program);

// One run of one instruction (a fusion: its fused computation; a while or a
// call: nothing, their bodies are counted where they run).
FlopCount InstructionFlops(const HloInstruction& instr);

}  // namespace weft::analysis
