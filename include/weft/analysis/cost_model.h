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
// Step time: compute = (dot + attention FLOPs) / the chip's peak for the
// precision; ICI and DCN time = the busiest device's bytes / link bandwidth;
// host time = offloaded bytes moved (written in the forward, read back in the
// backward) / host bandwidth. The estimate assumes collectives and host
// transfers overlap compute perfectly (as XLA's asynchronous collectives and
// latency-hiding scheduler aim to): step = max(compute, ICI + DCN, host).
// The no-overlap bound is their sum. MFU = model FLOPs / (devices x step x
// peak), with model FLOPs = 6 x matmul parameters x tokens + 3 x the causal
// attention forward (no recomputation counted: remat shows as lower MFU).
#pragma once

#include <cstdint>

#include "weft/analysis/chips.h"
#include "weft/analysis/precision.h"
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

struct StepTimeInputs {
  FlopCount flops;         // per device
  double model_flops = 0;  // per device
  int64_t ici_bytes = 0;   // sent by the busiest device
  int64_t dcn_bytes = 0;
  int64_t host_bytes = 0;  // moved to and from host memory per device
};

struct StepTime {
  double compute_s = 0, ici_s = 0, dcn_s = 0, host_s = 0;
  double step_s = 0;      // the estimate (perfect overlap)
  double serial_s = 0;    // the no-overlap bound
  double mfu = 0;         // at step_s
  double mfu_serial = 0;  // at serial_s
  double peak_flops = 0;  // the rate used
};

StepTime EstimateStepTime(const StepTimeInputs& in, const Chip& chip, Precision precision);

}  // namespace weft::analysis
