// Test helpers: gradients from BuildTrainingStep against central finite
// differences of the executor's forward, along random directions.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "weft/autodiff/grad.h"
#include "weft/hlo/parser.h"
#include "weft/runtime/executor.h"

namespace weft::testing {

using runtime::Executor;
using runtime::HostTensor;

// Uniform in +-[0.5, 1.5] * scale: random and never zero.
inline HostTensor RandomTensor(const Shape& shape, std::mt19937& rng, double scale = 1.0,
                               bool positive = false) {
  std::uniform_real_distribution<double> mag(0.5, 1.5);
  std::bernoulli_distribution sign(0.5);
  std::vector<double> v(shape.ElementsCount());
  for (double& x : v) x = (positive || sign(rng) ? 1 : -1) * mag(rng) * scale;
  return HostTensor::FromDoubles(shape, v);
}

inline double RunLoss(const HloModule& forward, const std::vector<HostTensor>& inputs) {
  Executor exec(forward);
  return exec.Run(inputs).at(0).GetDouble(0);
}

struct GradCheckResult {
  double max_rel_error = 0;
  std::vector<double> analytic, numeric;  // per wrt parameter, <g, v>
};

// For each differentiated parameter p: <dL/dp, v> from the training step
// against (L(p + h v) - L(p - h v)) / 2h with a random direction v.
inline GradCheckResult CheckGradients(const HloModule& forward,
                                      const std::vector<HostTensor>& inputs, GradOptions options,
                                      double h = 1e-2, uint32_t seed = 7) {
  std::unique_ptr<HloModule> step = BuildTrainingStep(forward, options);
  const std::vector<int64_t> wrt = DifferentiatedParameters(forward, options);
  Executor exec(*step);
  std::vector<HostTensor> out = exec.Run(inputs);
  EXPECT_EQ(out.size(), wrt.size() + 1);
  EXPECT_NEAR(out[0].GetDouble(0), RunLoss(forward, inputs),
              1e-5 * (1 + std::abs(out[0].GetDouble(0))));
  std::mt19937 rng(seed);
  GradCheckResult result;
  for (size_t k = 0; k < wrt.size(); ++k) {
    const HostTensor& p = inputs[wrt[k]];
    const HostTensor v = RandomTensor(p.shape(), rng);
    const std::vector<double> g = out[k + 1].ToDoubles();
    const std::vector<double> pv = p.ToDoubles();
    const std::vector<double> vv = v.ToDoubles();
    double dot = 0, norm_g = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      dot += g[i] * vv[i];
      norm_g += g[i] * g[i];
    }
    auto shifted = [&](double sign) {
      std::vector<double> x(pv.size());
      for (size_t i = 0; i < x.size(); ++i) x[i] = pv[i] + sign * h * vv[i];
      std::vector<HostTensor> in = inputs;
      in[wrt[k]] = HostTensor::FromDoubles(p.shape(), x);
      return RunLoss(forward, in);
    };
    const double numeric = (shifted(1) - shifted(-1)) / (2 * h);
    // Relative to the directional derivative's natural scale |g| (v's
    // entries are O(1) with random signs).
    const double scale = std::max(std::abs(numeric), std::sqrt(norm_g));
    const double rel = std::abs(dot - numeric) / std::max(scale, 1e-6);
    result.analytic.push_back(dot);
    result.numeric.push_back(numeric);
    result.max_rel_error = std::max(result.max_rel_error, rel);
  }
  return result;
}

// A forward module: `body` defines `r` of shape `r_shape` from parameters
// 0..n-1; the loss is sum(r * w) with w = parameter n (random weights, so the
// cotangent of r is not all ones).
inline std::string LossModule(const std::string& body, const std::string& r_shape, int64_t n,
                              const std::string& extra = "") {
  std::string dims;
  const auto open = r_shape.find('[');
  const std::string inner = r_shape.substr(open + 1, r_shape.find(']') - open - 1);
  int64_t rank = inner.empty() ? 0 : 1 + std::count(inner.begin(), inner.end(), ',');
  for (int64_t d = 0; d < rank; ++d) dims += (d ? "," : "") + std::to_string(d);
  return "HloModule m\n\nadd {\n  ax = f32[] parameter(0)\n  ay = f32[] parameter(1)\n  ROOT as = "
         "f32[] add(ax, ay)\n}\n\nmax {\n  mx = f32[] parameter(0)\n  my = f32[] parameter(1)\n  "
         "ROOT ms = f32[] maximum(mx, my)\n}\n" +
         extra + "\nENTRY e {\n" + body + "\n  w = " + r_shape + " parameter(" + std::to_string(n) +
         ")\n  rw = " + r_shape + " multiply(r, w)\n  z = f32[] constant(0)\n" +
         "  ROOT loss = f32[] reduce(rw, z), dimensions={" + dims + "}, to_apply=add\n}\n";
}

}  // namespace weft::testing
