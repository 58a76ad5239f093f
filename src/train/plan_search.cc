#include "weft/train/plan_search.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

#include "weft/base/error.h"
#include "weft/train/plan_report.h"
#include "weft/train/program.h"

namespace weft {
namespace {

std::vector<int64_t> Divisors(int64_t n) {
  std::vector<int64_t> out;
  for (int64_t d = 1; d <= n; ++d) {
    if (n % d == 0) out.push_back(d);
  }
  return out;
}

// The meshes of `chips` chips in `slices` slices: data x fsdp x tensor per
// slice, the slices spanned by data or by fsdp.
std::vector<MeshConfig> Meshes(int64_t chips, int64_t slices, int64_t max_tensor) {
  const int64_t per_slice = chips / slices;
  std::vector<MeshConfig> out;
  for (int64_t tensor = 1; tensor <= std::min(per_slice, max_tensor); tensor *= 2) {
    if (per_slice % tensor != 0) continue;
    for (int64_t fsdp : Divisors(per_slice / tensor)) {
      const int64_t data = per_slice / tensor / fsdp;
      const std::string text = fmt::format("data={},fsdp={},tensor={}", data, fsdp, tensor);
      if (slices == 1) {
        out.push_back(ParseMeshFlag(text));
        continue;
      }
      for (const char* axis : {"data", "fsdp"}) {
        out.push_back(ApplyDcnFlag(ParseMeshFlag(text), fmt::format("{}={}", axis, slices)));
      }
    }
  }
  return out;
}

}  // namespace

AutoPlan SearchPlans(const RunConfig& config, const AutoPlanOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  WEFT_CHECK(options.chips >= 1, "--chips {}: give the number of chips to plan for (at least 1)",
             options.chips);
  // Here, not where the meshes are made: a count over the bound was blamed
  // on --dcn, which the user never gave.
  WEFT_CHECK(options.chips <= kMaxMeshDevices,
             "--chips {}: more than {} chips, the most weft plans or runs; give at most {}",
             options.chips, kMaxMeshDevices, kMaxMeshDevices);
  WEFT_CHECK(options.headroom >= 0 && options.headroom < 1,
             "--headroom {}: give the fraction of HBM to keep free, in [0, 1)", options.headroom);
  AutoPlan plan;
  plan.config_source = config.source;
  const std::filesystem::path chips_file =
      options.chips_file.empty() ? analysis::FindChipTable(config.source) : options.chips_file;
  plan.chip = analysis::LoadChipTable(chips_file).Find(options.chip);
  int64_t slices = 1;
  if (options.slices) {
    slices = *options.slices;
    WEFT_CHECK(slices >= 1 && options.chips % slices == 0,
               "--slices {}: the {} chips must split into that many equal slices; give a --slices "
               "that divides {}",
               slices, options.chips, options.chips);
  } else if (options.chips > plan.chip.max_slice_chips) {
    WEFT_CHECK(options.chips % plan.chip.max_slice_chips == 0,
               "--chips {}: more than the largest {} slice ({} chips) and not a multiple of it; "
               "give --slices",
               options.chips, plan.chip.name, plan.chip.max_slice_chips);
    slices = options.chips / plan.chip.max_slice_chips;
  }
  plan.chips = options.chips;
  plan.slices = slices;
  plan.batch_size = options.batch_size.value_or(config.train.batch_size);
  plan.seq_len = options.seq_len.value_or(config.model.seq_len);
  plan.headroom = options.headroom;
  plan.budget_bytes = plan.chip.hbm_bytes * (1 - options.headroom);

  const std::vector<std::string>& remats = options.remats.empty() ? kAutoRemats : options.remats;
  for (const MeshConfig& mesh : Meshes(options.chips, slices, options.max_tensor)) {
    for (const std::string& remat : remats) {
      for (int64_t accum : options.grad_accums) {
        AutoCandidate c;
        c.mesh = mesh;
        c.remat = remat;
        c.grad_accum = accum;
        PlanOptions o;
        o.chip = options.chip;
        o.chips_file = chips_file;
        o.mesh = mesh;
        o.batch_size = plan.batch_size;
        o.seq_len = plan.seq_len;
        o.remat = remat;
        o.grad_accum = accum;
        o.top_buffers = 0;
        o.timeline_points = 0;
        try {
          const StepPlan p = PlanTrainingStep(config, o);
          c.step_s = p.time.step_s;
          c.tokens_per_s_per_chip = p.tokens_per_s_per_chip();
          c.mfu = p.time.mfu;
          c.exposed_s = p.time.exposed_ici_s + p.time.exposed_dcn_s + p.time.exposed_host_s;
          c.peak_bytes = p.peak_bytes();
          c.micro_batch_per_device = p.micro_batch_size / mesh.batch_ways();
          if (static_cast<double>(c.peak_bytes) <= plan.budget_bytes) {
            c.outcome = AutoCandidate::Outcome::kRanked;
          } else {
            c.outcome = AutoCandidate::Outcome::kDoesNotFit;
            c.why = fmt::format("peak {} > {} ({} HBM less {:.0f}% headroom)",
                                FormatBytes(static_cast<double>(c.peak_bytes)),
                                FormatBytes(plan.budget_bytes), FormatBytes(plan.chip.hbm_bytes),
                                100 * options.headroom);
          }
        } catch (const Error& e) {
          c.outcome = AutoCandidate::Outcome::kInvalid;
          c.why = e.what();
        }
        plan.candidates.push_back(std::move(c));
      }
    }
  }
  std::stable_sort(plan.candidates.begin(), plan.candidates.end(),
                   [](const AutoCandidate& a, const AutoCandidate& b) {
                     if (a.outcome != b.outcome) return a.outcome < b.outcome;
                     return a.tokens_per_s_per_chip > b.tokens_per_s_per_chip;
                   });
  for (const AutoCandidate& c : plan.candidates) {
    if (c.outcome == AutoCandidate::Outcome::kRanked) ++plan.ranked;
    if (c.outcome == AutoCandidate::Outcome::kDoesNotFit) ++plan.does_not_fit;
    if (c.outcome == AutoCandidate::Outcome::kInvalid) ++plan.invalid;
  }
  plan.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return plan;
}

namespace {

std::string CandidateRow(const AutoCandidate& c, int64_t rank) {
  return fmt::format(
      "  {:>3}  {:<40} {:<22} {:>5} {:>6} {:>10} {:>9.3f} s {:>8.1f} ms {:>9.0f} {:>5.1f}%", rank,
      MeshText(c.mesh), c.remat, c.grad_accum, c.micro_batch_per_device,
      FormatBytes(static_cast<double>(c.peak_bytes)), c.step_s, 1e3 * c.exposed_s,
      c.tokens_per_s_per_chip, 100 * c.mfu);
}

}  // namespace

std::string FormatAutoPlanText(const AutoPlan& p, int64_t top) {
  std::string o;
  auto line = [&](const std::string& s) { o += s + "\n"; };
  line(fmt::format("weft plan --auto  {}", p.config_source));
  line(
      fmt::format("  {} x {} in {} slice{}; batch {} x seq {}; fits = peak <= {} ({} HBM less "
                  "{:.0f}% headroom)",
                  p.chips, p.chip.name, p.slices, p.slices == 1 ? "" : "s", p.batch_size, p.seq_len,
                  FormatBytes(p.budget_bytes), FormatBytes(p.chip.hbm_bytes), 100 * p.headroom));
  line(fmt::format("  {} candidates planned in {:.1f} s: {} fit, {} do not fit, {} invalid",
                   p.candidates.size(), p.seconds, p.ranked, p.does_not_fit, p.invalid));
  line("");
  if (p.ranked == 0) {
    line("VERDICT: no candidate fits");
  } else {
    const AutoCandidate& best = p.candidates[0];
    line(
        fmt::format("VERDICT: best {} remat {} grad_accum {}: {:.0f} tokens/s per chip, MFU "
                    "{:.1f}%, peak {}",
                    MeshText(best.mesh), best.remat, best.grad_accum, best.tokens_per_s_per_chip,
                    100 * best.mfu, FormatBytes(static_cast<double>(best.peak_bytes))));
  }
  line("");
  line(fmt::format("  {:>3}  {:<40} {:<22} {:>5} {:>6} {:>10} {:>11} {:>11} {:>9} {:>6}", "#",
                   "mesh", "remat", "accum", "b/dev", "peak", "step", "exposed", "tok/s/chip",
                   "MFU"));
  for (int64_t i = 0; i < std::min<int64_t>(top, p.ranked); ++i) {
    line(CandidateRow(p.candidates[i], i + 1));
  }
  line("");
  line("Why the others lost");
  if (p.ranked > top) {
    const AutoCandidate& next = p.candidates[top];
    line(
        fmt::format("  slower: {} more that fit, the fastest of them {:.0f} tokens/s per chip "
                    "({:.1f}% of the best)",
                    p.ranked - top, next.tokens_per_s_per_chip,
                    100 * next.tokens_per_s_per_chip / p.candidates[0].tokens_per_s_per_chip));
  }
  if (p.does_not_fit > 0) {
    const AutoCandidate& fastest = p.candidates[p.ranked];  // sorted by speed within the class
    line(
        fmt::format("  does not fit: {}, the fastest {} remat {} grad_accum {} ({:.0f} tokens/s "
                    "per chip): {}",
                    p.does_not_fit, MeshText(fastest.mesh), fastest.remat, fastest.grad_accum,
                    fastest.tokens_per_s_per_chip, fastest.why));
  }
  if (p.invalid > 0) {
    const AutoCandidate& first = p.candidates[p.ranked + p.does_not_fit];
    line(fmt::format("  invalid: {}, e.g. {} remat {} grad_accum {}: {}", p.invalid,
                     MeshText(first.mesh), first.remat, first.grad_accum, first.why));
  }
  return o;
}

std::string FormatAutoPlanJson(const AutoPlan& p) {
  using nlohmann::json;
  json j;
  j["schema"] = "weft.plan-auto/1";
  j["config"] = p.config_source;
  j["chip"] = p.chip.name;
  j["chips"] = p.chips;
  j["slices"] = p.slices;
  j["batch_size"] = p.batch_size;
  j["seq_len"] = p.seq_len;
  j["headroom"] = p.headroom;
  j["budget_bytes"] = p.budget_bytes;
  j["seconds"] = p.seconds;
  json all = json::array();
  for (const AutoCandidate& c : p.candidates) {
    const char* outcome = c.outcome == AutoCandidate::Outcome::kRanked       ? "fits"
                          : c.outcome == AutoCandidate::Outcome::kDoesNotFit ? "does not fit"
                                                                             : "invalid";
    json e = {{"mesh", MeshText(c.mesh)},
              {"remat", c.remat},
              {"grad_accum", c.grad_accum},
              {"outcome", outcome},
              {"why", c.why}};
    if (c.outcome != AutoCandidate::Outcome::kInvalid) {
      e["step_s"] = c.step_s;
      e["tokens_per_s_per_chip"] = c.tokens_per_s_per_chip;
      e["mfu"] = c.mfu;
      e["exposed_s"] = c.exposed_s;
      e["peak_bytes"] = c.peak_bytes;
      e["micro_batch_per_device"] = c.micro_batch_per_device;
    }
    all.push_back(std::move(e));
  }
  j["candidates"] = all;
  return j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

}  // namespace weft
