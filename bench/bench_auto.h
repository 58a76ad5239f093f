// `weft bench auto [CONFIG]`: does `weft plan --auto` pick a fast
// configuration on the machine it can measure? It plans every candidate for
// this machine's in-process devices (chip local-cpu), then runs each that
// fits for a few training steps with the executor and compares the step
// time of the candidate the planner ranked first with the best measured
// one (the target: within 20%). Also the rank correlation of
// predicted and measured step times.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace weft::bench {

struct AutoBenchOptions {
  std::string config = "configs/tiny.toml";
  int64_t chips = 4;
  int64_t steps = 3;                // timed steps per candidate (after one untimed)
  std::vector<std::string> remats;  // empty: plan/plan_search.h's list
  std::vector<int64_t> grad_accums = {1, 2, 4};
  bool json = false;
};

int RunAutoBench(const AutoBenchOptions& options);

}  // namespace weft::bench
