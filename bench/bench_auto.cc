#include "bench_auto.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "timer.h"
#include "weft/base/data_files.h"
#include "weft/base/error.h"
#include "weft/train/plan_search.h"
#include "weft/train/program.h"
#include "weft/train/trainer.h"

namespace weft::bench {
namespace {

// Spearman's rank correlation of two equally long series.
double RankCorrelation(const std::vector<double>& a, const std::vector<double>& b) {
  auto ranks = [](const std::vector<double>& v) {
    std::vector<size_t> order(v.size());
    for (size_t i = 0; i < v.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return v[x] < v[y]; });
    std::vector<double> r(v.size());
    for (size_t i = 0; i < order.size(); ++i) r[order[i]] = static_cast<double>(i);
    return r;
  };
  const std::vector<double> ra = ranks(a), rb = ranks(b);
  const double n = static_cast<double>(a.size());
  double d2 = 0;
  for (size_t i = 0; i < a.size(); ++i) d2 += (ra[i] - rb[i]) * (ra[i] - rb[i]);
  return n > 1 ? 1 - 6 * d2 / (n * (n * n - 1)) : 1;
}

struct Measured {
  const AutoCandidate* candidate = nullptr;
  double step_s = 0;
};

}  // namespace

int RunAutoBench(const AutoBenchOptions& options) {
  WEFT_CHECK(options.steps >= 1, "--steps {}: give at least 1 timed step", options.steps);
  const RunConfig config = LoadRunConfig(FindDataFile(options.config));
  AutoPlanOptions o;
  o.chip = "local-cpu";
  o.chips = options.chips;
  o.remats = options.remats;
  o.grad_accums = options.grad_accums;
  const AutoPlan plan = SearchPlans(config, o);
  WEFT_CHECK(plan.ranked > 0, "weft plan --auto found no candidate that fits for {} on {} chips",
             options.config, options.chips);

  std::vector<Measured> measured;
  for (int64_t i = 0; i < plan.ranked; ++i) {
    const AutoCandidate& c = plan.candidates[i];
    RunConfig run = config;
    run.mesh = c.mesh;
    run.train.remat = ParseRematPolicy(c.remat, "--remat");
    run.train.grad_accum_steps = c.grad_accum;
    std::vector<double> seconds;
    TrainStepsOptions t;
    t.steps = options.steps + 1;
    t.on_step = [&](const StepMetrics& m, const StepProfile&) {
      seconds.push_back(m.step_seconds);
    };
    TrainStepsInMemory(run, t);
    seconds.erase(seconds.begin());  // the first step compiles nothing but warms the arena
    measured.push_back({&c, Median(seconds)});
  }
  const Measured* best = &measured[0];
  for (const Measured& m : measured) {
    if (m.step_s < best->step_s) best = &m;
  }
  const Measured& chosen = measured[0];  // the planner's first
  std::vector<double> predicted, actual;
  for (const Measured& m : measured) {
    predicted.push_back(m.candidate->step_s);
    actual.push_back(m.step_s);
  }
  const double ratio = chosen.step_s / best->step_s;
  const double rho = RankCorrelation(predicted, actual);

  if (options.json) {
    nlohmann::json j;
    j["bench"] = "auto";
    j["config"] = options.config;
    j["chips"] = options.chips;
    j["candidates"] = plan.candidates.size();
    j["measured"] = measured.size();
    j["chosen"] = {{"mesh", MeshText(chosen.candidate->mesh)},
                   {"remat", chosen.candidate->remat},
                   {"grad_accum", chosen.candidate->grad_accum},
                   {"predicted_s", chosen.candidate->step_s},
                   {"measured_s", chosen.step_s}};
    j["best_measured"] = {{"mesh", MeshText(best->candidate->mesh)},
                          {"remat", best->candidate->remat},
                          {"grad_accum", best->candidate->grad_accum},
                          {"predicted_s", best->candidate->step_s},
                          {"measured_s", best->step_s}};
    j["chosen_over_best"] = ratio;
    j["target_ratio"] = 1.2;
    j["rank_correlation"] = rho;
    nlohmann::json all = nlohmann::json::array();
    for (const Measured& m : measured) {
      all.push_back({{"mesh", MeshText(m.candidate->mesh)},
                     {"remat", m.candidate->remat},
                     {"grad_accum", m.candidate->grad_accum},
                     {"predicted_s", m.candidate->step_s},
                     {"measured_s", m.step_s}});
    }
    j["all"] = all;
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("weft plan --auto on this machine: %s, %lld in-process devices, chip local-cpu\n",
              options.config.c_str(), static_cast<long long>(options.chips));
  std::printf("  %zu candidates, %lld fit and were run for %lld timed steps each (median)\n",
              plan.candidates.size(), static_cast<long long>(plan.ranked),
              static_cast<long long>(options.steps));
  std::printf("  %-36s %-22s %5s %12s %12s\n", "mesh", "remat", "accum", "predicted", "measured");
  for (const Measured& m : measured) {
    std::printf("  %-36s %-22s %5lld %10.4f s %10.4f s%s\n", MeshText(m.candidate->mesh).c_str(),
                m.candidate->remat.c_str(), static_cast<long long>(m.candidate->grad_accum),
                m.candidate->step_s, m.step_s,
                &m == &chosen ? "  <- chosen" : (&m == best ? "  <- fastest measured" : ""));
  }
  std::printf(
      "  chosen / fastest measured = %.3f (target <= 1.2); rank correlation of predicted and "
      "measured %.2f\n",
      ratio, rho);
  return 0;
}

}  // namespace weft::bench
