// Reverse-mode autodiff over HLO: turns a forward computation that produces a
// scalar loss into a training-step module computing (loss, grads...).
//
//   auto forward = BuildLlamaForward(config, shape);        // models/llama.h
//   GradOptions opts;
//   opts.wrt = {5, 6, 7};                 // entry parameter numbers
//   auto step = BuildTrainingStep(*forward, opts);
//   // step's entry: the same parameters; root (loss, d_p5, d_p6, d_p7).
//
// The backward is emitted by processing the forward's instructions in reverse
// post-order; each instruction's cotangent is the sum (add) of what its users
// hand back, and one vjp rule per opcode (src/autodiff/vjp_*.cc) turns a
// result cotangent into operand cotangents. Compare, integer values,
// constants and values marked with StopGradient (autodiff/stop_gradient.h)
// get no gradient. Whiles must be scans (autodiff/scan_config.h,
// built by models/scan.h): their backward is a reverse while loop, either
// over residuals the forward loop saves (Remat::kNone) or recomputing each
// step's forward from the saved step input (Remat::kFull), but for the
// named values GradOptions::remat.save (selective remat).
// Mixed precision (a forward that casts f32 weights to bf16 where its dots
// read them): the cast's vjp widens the backward dot that made its bf16
// cotangent to return f32 (vjp_elementwise.cc), so weight gradients are
// accumulated, and reduced across devices, in f32.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "weft/hlo/module.h"

namespace weft {

// How the backward of a scan gets the forward's values (selective remat):
// the one representation of a remat choice, from a config's train.remat
// (models/llama_config.h parses and prints it) to the gradient.
enum class Remat {
  kNone,  // the forward loop stacks every non-trivial value the backward needs
  kFull,  // the forward loop stacks only each step's carry; the backward recomputes
};
struct RematPolicy {
  Remat kind = Remat::kNone;
  // With kFull, scan-body instructions named here (models name a layer's
  // activations, e.g. "q_proj") are stacked by the forward loop like the
  // carry and read by the backward instead of recomputed. A name no scan
  // body has is an error.
  std::vector<std::string> save;
  // With kFull: values stacked like `save`'s but kept in host memory between
  // the forward and the backward ("layer_input": the carry itself; the
  // forward loop's backend_config lists their state elements:
  // OffloadedStateOf).
  std::vector<std::string> offload;
  bool operator==(const RematPolicy&) const = default;
};

struct GradOptions {
  // Entry parameter numbers to differentiate, in the order of the gradients
  // in the result. Empty: every floating-point parameter.
  std::vector<int64_t> wrt;
  RematPolicy remat;
  // Tie each scan's gradient carries to their forward counterparts with
  // `shard_as` groups (the stacked weight-gradient accumulator to the stacked
  // weight, the carry cotangent to the carry), so propagation gives every
  // weight gradient its weight's sharding. false omits the groups.
  bool shard_as = true;
};

// A new module whose entry takes the forward entry's parameters (same
// numbers, names, shapes and shardings) and returns the tuple
// (loss, gradient of each `wrt` parameter). The forward's root must be a
// floating-point scalar. Throws weft::Error naming the instruction when an op
// has no vjp rule, a while is not a scan, or options are out of range.
std::unique_ptr<HloModule> BuildTrainingStep(const HloModule& forward,
                                             const GradOptions& options = {});

// The parameter numbers BuildTrainingStep differentiates for `options`
// (resolves the empty default).
std::vector<int64_t> DifferentiatedParameters(const HloModule& forward, const GradOptions& options);

}  // namespace weft
