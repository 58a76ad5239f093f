// AdamW on float32 master weights, elementwise over flat spans, so the same
// call updates a whole parameter or any shard of it. Global-norm clipping is
// split in two so the trainer can all-reduce between the halves:
//
//   double sq = 0;
//   for (shard of every gradient on this device) sq += SumOfSquares(shard);
//   sq = AllReduceSum(sq);              // over the devices holding shards
//   float scale = ClipScale(sq, max_norm);
//   for (each shard) AdamWUpdate(..., {.lr = schedule.LearningRate(step),
//                                      .step = step + 1, .grad_scale = scale});
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace weft {

struct AdamWHyperParams {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
};

struct AdamWStep {
  double lr = 0;
  int64_t step = 1;                // 1-based: the number of updates including this one
  double grad_scale = 1.0;         // from ClipScale (and loss scaling, if any)
  bool apply_weight_decay = true;  // false for parameters WeightDecayApplies rejects
};

// One AdamW update, PyTorch's formulation (decoupled weight decay):
//   g = grad * grad_scale
//   m = beta1 m + (1 - beta1) g;   v = beta2 v + (1 - beta2) g²
//   param = param (1 - lr wd) - lr (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)
// All spans have the same length; m and v start at zero.
void AdamWUpdate(std::span<float> param, std::span<const float> grad, std::span<float> m,
                 std::span<float> v, const AdamWHyperParams& hyper, const AdamWStep& step);

// Whether AdamWUpdate with these arguments would leave every parameter and
// moment finite; computes the same values and writes nothing. A finite
// gradient can still overflow (g² in float32, a huge learning rate): the
// trainer asks every device first and skips the step everywhere if any says no.
bool AdamWUpdateStaysFinite(std::span<const float> param, std::span<const float> grad,
                            std::span<const float> m, std::span<const float> v,
                            const AdamWHyperParams& hyper, const AdamWStep& step);

// Σ x², accumulated in float64: this shard's part of the squared global norm.
double SumOfSquares(std::span<const float> x);

// The factor that brings a gradient of squared norm `total_sq_norm` down to
// `max_norm`: min(1, max_norm / (norm + 1e-6)). max_norm <= 0 disables
// clipping (1). A non-finite norm (NaN/inf gradients) gives 0, so no NaN
// reaches the moments; the trainer should skip such a step altogether (with
// a zero gradient AdamW still moves the weights along the old momentum).
double ClipScale(double total_sq_norm, double max_norm);

// Linear warmup to peak_lr over warmup_steps, then cosine decay to min_lr at
// total_steps; min_lr after. `step` counts from 0 (the first update), and
// warmup starts at peak_lr / warmup_steps so the first update is not wasted.
struct LrSchedule {
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  double peak_lr = 3e-4;
  double min_lr = 0;

  double LearningRate(int64_t step) const;
};

// Whether weight decay applies to a parameter: not when its name matches one
// of `no_decay_patterns` (name_pattern.h syntax, e.g. "*norm*").
bool WeightDecayApplies(std::string_view parameter,
                        const std::vector<std::string>& no_decay_patterns);

}  // namespace weft
