#include "weft/train/optimizer.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "weft/base/error.h"
#include "weft/base/thread_pool.h"
#include "weft/models/name_pattern.h"

namespace weft {

namespace {

// Elements per task of the pool (a few hundred KiB of the five arrays).
constexpr int64_t kChunk = 16384;

// The update, written once: kApply writes the new values; otherwise it only
// computes them and reports whether all would be finite (nothing written).
template <bool kApply>
bool AdamW(std::span<float> param, std::span<const float> grad, std::span<float> m,
           std::span<float> v, const AdamWHyperParams& hyper, const AdamWStep& step) {
  WEFT_INTERNAL_CHECK(
      grad.size() == param.size() && m.size() == param.size() && v.size() == param.size(),
      "AdamW: param, grad, m and v must have one length, got {}, {}, {}, {}", param.size(),
      grad.size(), m.size(), v.size());
  WEFT_INTERNAL_CHECK(step.step >= 1, "AdamW: step counts updates from 1, got {}", step.step);
  // Per-step scalars in float64, then the elementwise loop in float32.
  const double t = static_cast<double>(step.step);
  const float beta1 = static_cast<float>(hyper.beta1);
  const float beta2 = static_cast<float>(hyper.beta2);
  const float one_minus_beta1 = static_cast<float>(1.0 - hyper.beta1);
  const float one_minus_beta2 = static_cast<float>(1.0 - hyper.beta2);
  const float step_size = static_cast<float>(step.lr / (1.0 - std::pow(hyper.beta1, t)));
  const float inv_sqrt_bias2 = static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(hyper.beta2, t)));
  const float eps = static_cast<float>(hyper.eps);
  const float decay =
      step.apply_weight_decay ? static_cast<float>(1.0 - step.lr * hyper.weight_decay) : 1.0f;
  const float scale = static_cast<float>(step.grad_scale);
  float* __restrict p = param.data();
  const float* __restrict g_in = grad.data();
  float* __restrict m_io = m.data();
  float* __restrict v_io = v.data();
  // Elementwise, so the split across the pool changes no bit.
  const int64_t n = static_cast<int64_t>(param.size());
  const int64_t tasks = (n + kChunk - 1) / kChunk;
  std::vector<uint8_t> finite(kApply ? 0 : static_cast<size_t>(tasks), 1);
  ThreadPool::Global().ParallelFor(tasks, [&](int64_t task, int) {
    const int64_t begin = task * kChunk, end = std::min(n, begin + kChunk);
    // x - x is 0 for finite x and NaN otherwise: one sum tells whether all are finite.
    float finite_probe = 0;
    for (int64_t i = begin; i < end; ++i) {
      const float g = g_in[i] * scale;
      const float mi = beta1 * m_io[i] + one_minus_beta1 * g;
      const float vi = beta2 * v_io[i] + one_minus_beta2 * g * g;
      const float pi = p[i] * decay - step_size * mi / (std::sqrt(vi) * inv_sqrt_bias2 + eps);
      if constexpr (kApply) {
        m_io[i] = mi;
        v_io[i] = vi;
        p[i] = pi;
      } else {
        finite_probe += (mi - mi) + (vi - vi) + (pi - pi);
      }
    }
    if constexpr (!kApply) finite[static_cast<size_t>(task)] = finite_probe == 0;
  });
  return std::all_of(finite.begin(), finite.end(), [](uint8_t f) { return f != 0; });
}

}  // namespace

void AdamWUpdate(std::span<float> param, std::span<const float> grad, std::span<float> m,
                 std::span<float> v, const AdamWHyperParams& hyper, const AdamWStep& step) {
  AdamW<true>(param, grad, m, v, hyper, step);
}

bool AdamWUpdateStaysFinite(std::span<const float> param, std::span<const float> grad,
                            std::span<const float> m, std::span<const float> v,
                            const AdamWHyperParams& hyper, const AdamWStep& step) {
  // Read only: the <false> instance never writes through these pointers.
  auto mut = [](std::span<const float> s) {
    return std::span<float>(const_cast<float*>(s.data()), s.size());
  };
  return AdamW<false>(mut(param), grad, mut(m), mut(v), hyper, step);
}

double SumOfSquares(std::span<const float> x) {
  // Chunks summed on the pool, then added in chunk order: the result does
  // not depend on the number of threads. Four accumulators per chunk:
  // independent chains vectorize and add less rounding.
  const int64_t n = static_cast<int64_t>(x.size());
  const int64_t tasks = (n + kChunk - 1) / kChunk;
  std::vector<double> sums(static_cast<size_t>(tasks), 0.0);
  ThreadPool::Global().ParallelFor(tasks, [&](int64_t task, int) {
    const int64_t begin = task * kChunk, end = std::min(n, begin + kChunk);
    double acc[4] = {0, 0, 0, 0};
    int64_t i = begin;
    for (; i + 4 <= end; i += 4) {
      for (int k = 0; k < 4; ++k) {
        const double value = x[i + k];
        acc[k] += value * value;
      }
    }
    for (; i < end; ++i) acc[0] += static_cast<double>(x[i]) * x[i];
    sums[static_cast<size_t>(task)] = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  });
  double total = 0;
  for (double s : sums) total += s;
  return total;
}

double ClipScale(double total_sq_norm, double max_norm) {
  if (!std::isfinite(total_sq_norm)) return 0.0;
  if (max_norm <= 0) return 1.0;
  return std::min(1.0, max_norm / (std::sqrt(total_sq_norm) + 1e-6));
}

double LrSchedule::LearningRate(int64_t step) const {
  WEFT_CHECK(step >= 0, "learning rate asked for step {}; steps count from 0", step);
  if (step < warmup_steps) {
    return peak_lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  }
  const int64_t decay_steps = total_steps - warmup_steps;
  if (decay_steps <= 0 || step >= total_steps) return decay_steps <= 0 ? peak_lr : min_lr;
  const double progress = static_cast<double>(step - warmup_steps) / decay_steps;
  return min_lr + 0.5 * (peak_lr - min_lr) * (1.0 + std::cos(std::numbers::pi * progress));
}

bool WeightDecayApplies(std::string_view parameter,
                        const std::vector<std::string>& no_decay_patterns) {
  for (const auto& pattern : no_decay_patterns) {
    if (MatchesNamePattern(pattern, parameter)) return false;
  }
  return true;
}

}  // namespace weft
