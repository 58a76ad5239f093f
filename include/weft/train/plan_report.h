// `weft plan` output: a text report that fits a terminal, JSON with the
// schema below, and an SVG (memory breakdown at the peak + live memory over
// the step).
//
// JSON schema "weft.plan/2" (bytes are per device, of the program's own
// element types; times in seconds; every key is always present, null where noted):
//   schema            "weft.plan/2"
//   config            the run config file
//   chip              {name, description, hbm_bytes, peak_flops (the
//                     matrix peak MFU is measured against: bf16's when most
//                     of the program's dot FLOPs read bf16), ici_bytes_per_s, dcn_bytes_per_s,
//                     host_bytes_per_s, max_slice_chips, source}
//   chips_file        where the chip came from
//   mesh              {axes: [{name, size}], devices, slices}
//   precision         "bf16" | "f32"
//   remat             "none" | "full" | "offload"
//   shard_as          bool
//   batch_size, seq_len, tokens_per_step, parameters
//   memory            {
//     hbm_bytes, peak_bytes (program peak + optimizer state),
//     program_peak_bytes, static_bytes, parameter_bytes, gradient_bytes,
//     optimizer_bytes, host_bytes (offloaded, not in peak_bytes),
//     saved_bytes (saved for backward, wherever it lives),
//     fits (bool), margin_bytes (hbm - peak; negative when it does not fit),
//     peak_breakdown: {parameters, inputs, gradients, saved, collectives,
//                      temporaries, optimizer_state}  (sums to peak_bytes),
//     peak_at: {instruction, computation, step, steps},
//     largest_buffers: [{instruction, computation, role, category, bytes,
//                        dtype, local_shape: [dims], global_shape: [dims] |
//                        null, sharding: text | null, split_axes: [names]}],
//     timeline: {steps: [n], total: [bytes], by_category: {<category>: [bytes]}}
//                (program buffers only; add optimizer_bytes for the device),
//     unsplit_stacked: {axis: name | null, count, buffers: [{instruction,
//                       computation, global_shape, sharding, local_bytes}]}
//   }
//   collectives       {device (the slowest), calls, bytes, ici_bytes,
//                      dcn_bytes, by_kind: {<kind>: {calls, bytes, dcn_calls,
//                      dcn_bytes}}, largest: [{instruction, computation, kind,
//                      runs, group_size, crosses_slices, bytes}]}
//                     (kinds: all-reduce, all-gather, reduce-scatter,
//                      all-to-all, collective-permute; largest is device 0's)
//   compute           {flops: {dot, attention_forward, attention_backward,
//                      other}, model_flops}  (per device per step)
//   time              the simulated step (analysis/step_sim.h): {step_s,
//                      compute_s, matrix_s (of compute_s), exposed_ici_s,
//                      exposed_dcn_s, exposed_host_s (step_s = compute_s +
//                      the exposed times), ici_s, dcn_s, host_s (links busy),
//                      serial_s (no overlap), mfu, mfu_serial,
//                      tokens_per_s_per_chip, simulated_runs, top:
//                      [{instruction, computation, stream, bound, runs,
//                      seconds}] (most time first)}
//   verdict           "fits" | "does not fit"
//   warnings          [text]
//   plan_seconds      {compile, analysis}
#pragma once

#include <string>

#include "weft/train/planner.h"

namespace weft {

std::string FormatPlanText(const StepPlan& plan);
std::string FormatPlanJson(const StepPlan& plan);  // pretty-printed, ends with a newline
std::string RenderPlanSvg(const StepPlan& plan);

// "25.37 GB" (decimal units, as chips are sold).
std::string FormatBytes(double bytes);

}  // namespace weft
