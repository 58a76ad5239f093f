// `weft plan --auto`: the fastest training step that fits. For a config, a
// chip and a number of chips it plans every candidate of
//   mesh    data x fsdp x tensor over the chips of a slice (tensor a power
//           of two up to 16, inside a slice), the slices (when there are
//           several) spanned by data or by fsdp;
//   remat   none, full, offload and the save_* presets;
//   accum   gradient accumulation 1, 2, 4, 8 (micro-batches of the global
//           batch, which stays fixed);
// with the planner (planner.h: memory, simulated step time) and ranks those
// whose peak leaves the headroom free by predicted tokens/s per chip.
// Candidates the program's checks refuse (a batch that does not split over
// the mesh, heads that tensor does not divide) are listed as invalid, with
// the reason.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "weft/train/planner.h"

namespace weft {

struct AutoPlanOptions {
  std::string chip = "v6e";
  std::filesystem::path chips_file;
  int64_t chips = 0;                  // at least 1
  std::optional<int64_t> slices;      // unset: chips / max_slice_chips when larger, else 1
  std::optional<int64_t> batch_size;  // global; unset: train.batch_size
  std::optional<int64_t> seq_len;
  double headroom = 0.1;            // fraction of HBM a candidate must leave free
  std::vector<std::string> remats;  // empty: kAutoRemats
  std::vector<int64_t> grad_accums = {1, 2, 4, 8};
  int64_t max_tensor = 16;
};

inline const std::vector<std::string> kAutoRemats = {"none",
                                                     "full",
                                                     "offload",
                                                     "save_qkv_proj",
                                                     "save_out_proj",
                                                     "save_dot_except_mlp",
                                                     "save_dot_except_mlpwi",
                                                     "save_dots"};

struct AutoCandidate {
  MeshConfig mesh;
  std::string remat;
  int64_t grad_accum = 1;
  enum class Outcome { kRanked, kDoesNotFit, kInvalid };
  Outcome outcome = Outcome::kInvalid;
  std::string why;  // kInvalid: the check's message; kDoesNotFit: peak vs budget
  // From the plan (kRanked and kDoesNotFit).
  double step_s = 0, tokens_per_s_per_chip = 0, mfu = 0, exposed_s = 0;
  int64_t peak_bytes = 0, micro_batch_per_device = 0;
};

struct AutoPlan {
  std::string config_source;
  analysis::Chip chip;
  int64_t chips = 0, slices = 1, batch_size = 0, seq_len = 0;
  double headroom = 0, budget_bytes = 0;
  std::vector<AutoCandidate> candidates;  // ranked first, fastest first; then the rest
  int64_t ranked = 0, does_not_fit = 0, invalid = 0;
  double seconds = 0;
};

// Throws weft::Error for bad options (chips below 1, slices not dividing
// the chips, a headroom outside [0, 1), an unknown chip) before planning.
AutoPlan SearchPlans(const RunConfig& config, const AutoPlanOptions& options);

std::string FormatAutoPlanText(const AutoPlan& plan, int64_t top);
std::string FormatAutoPlanJson(const AutoPlan& plan);  // schema "weft.plan-auto/1"

}  // namespace weft
