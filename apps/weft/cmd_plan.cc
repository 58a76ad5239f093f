// `weft plan CONFIG --mesh AXES --chip NAME [--slices N] [--batch B] [--seq S]
// [--remat full|offload|none] [--grad-accum N] [--no-shard-as]
// [--precision bf16|f32] [--chips-file FILE] [--json] [--svg FILE] [--hlo FILE]`
// and `weft plan CONFIG --auto --chips N --chip NAME [--slices S] [--batch B]
// [--headroom F] [--top K] [--json]` (train/plan_search.h): the training step `weft train` would
// run, analysed for a mesh of any size before renting it (plan/planner.h).
#include <fmt/core.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "commands.h"
#include "weft/base/atomic_file.h"
#include "weft/base/error.h"
#include "weft/train/plan_report.h"
#include "weft/train/plan_search.h"
#include "weft/train/plan_validation.h"
#include "weft/train/planner.h"
#include "weft/train/program.h"

namespace weft::cli {
namespace {

struct PlanFlags {
  std::string config;
  std::string mesh;
  std::string dcn;
  std::string chip = "v6e";
  std::string chips_file;
  std::string remat;
  std::string precision;
  std::string svg;
  std::string hlo;
  int64_t slices = 0, batch = 0, seq = 0, grad_accum = 1, chips = 0, top = 10;
  double headroom = 0.1;
  // Whether each was given: a given 0 is an error, never "the default".
  CLI::Option *slices_given = nullptr, *batch_given = nullptr, *seq_given = nullptr;
  CLI::Option *chips_given = nullptr, *headroom_given = nullptr, *top_given = nullptr;
  CLI::Option* grad_accum_given = nullptr;
  bool no_shard_as = false;
  bool json = false;
  bool auto_search = false;
};

std::optional<int64_t> IfGiven(const CLI::Option* option, int64_t value) {
  return option != nullptr && option->count() > 0 ? std::optional<int64_t>(value) : std::nullopt;
}

int RunAutoPlan(const PlanFlags& f) {
  // --auto chooses what these say; giving them is a contradiction.
  for (const auto& [flag, given] :
       {std::pair{"--mesh", !f.mesh.empty()}, std::pair{"--dcn", !f.dcn.empty()},
        std::pair{"--remat", !f.remat.empty()},
        std::pair{"--grad-accum", f.grad_accum_given->count() > 0},
        std::pair{"--svg", !f.svg.empty()}, std::pair{"--hlo", !f.hlo.empty()}}) {
    WEFT_CHECK(!given,
               "{} with --auto: --auto searches meshes, remat and gradient accumulation itself; "
               "drop {} (or drop --auto to plan that one configuration)",
               flag, flag);
  }
  WEFT_CHECK(f.chips_given->count() > 0,
             "--auto needs --chips N, the number of chips to plan for (e.g. --chips 256)");
  WEFT_CHECK(f.top >= 1, "--top {}: give at least 1", f.top);
  const RunConfig config = LoadRunConfig(f.config);
  AutoPlanOptions o;
  o.chip = f.chip;
  o.chips_file = f.chips_file;
  o.chips = f.chips;
  o.slices = IfGiven(f.slices_given, f.slices);
  o.batch_size = IfGiven(f.batch_given, f.batch);
  o.seq_len = IfGiven(f.seq_given, f.seq);
  o.headroom = f.headroom;
  const AutoPlan p = SearchPlans(config, o);
  const std::string out = f.json ? FormatAutoPlanJson(p) : FormatAutoPlanText(p, f.top);
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

int RunPlan(const PlanFlags& f) {
  if (f.auto_search) return RunAutoPlan(f);
  for (const auto& [flag, given] : {std::pair{"--chips", f.chips_given->count() > 0},
                                    std::pair{"--headroom", f.headroom_given->count() > 0},
                                    std::pair{"--top", f.top_given->count() > 0}}) {
    WEFT_CHECK(!given, "{} is an option of --auto; add --auto, or drop {}", flag, flag);
  }
  const RunConfig config = LoadRunConfig(f.config);
  PlanOptions o;
  o.chip = f.chip;
  o.chips_file = f.chips_file;
  o.grad_accum = IfGiven(f.grad_accum_given, f.grad_accum);
  if (!f.mesh.empty()) o.mesh = ParseMeshFlag(f.mesh);
  if (!f.dcn.empty()) o.mesh = ApplyDcnFlag(o.mesh ? *o.mesh : config.mesh, f.dcn);
  o.slices = IfGiven(f.slices_given, f.slices);
  o.batch_size = IfGiven(f.batch_given, f.batch);
  o.seq_len = IfGiven(f.seq_given, f.seq);
  o.remat = f.remat;
  o.shard_as = !f.no_shard_as;
  if (!f.precision.empty()) o.precision = ParsePrecision(f.precision, "--precision");
  // Before any compute: a typo in an output's directory should not wait for the plan.
  for (const auto& [flag, path] : {std::pair{"--svg", f.svg}, std::pair{"--hlo", f.hlo}}) {
    if (path.empty()) continue;
    const std::filesystem::path dir = std::filesystem::path(path).parent_path();
    std::error_code ec;
    WEFT_CHECK(dir.empty() || std::filesystem::is_directory(dir, ec),
               "{} {}: the directory {} does not exist; create it or give another path", flag, path,
               dir.string());
  }
  o.keep_program = !f.hlo.empty();
  const StepPlan p = PlanTrainingStep(config, o);
  if (!f.svg.empty()) WriteFileAtomically(f.svg, RenderPlanSvg(p), OutputTarget::kUserPath);
  if (!f.hlo.empty()) WriteFileAtomically(f.hlo, p.program_text, OutputTarget::kUserPath);
  const std::string out = f.json ? FormatPlanJson(p) : FormatPlanText(p);
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

int RunPlanValidate(const std::string& file, bool fit) {
  const PublishedRuns runs = LoadPublishedRuns(file);
  const std::string out = fit ? FormatFitMarkdown(FitMatrixEfficiency(runs))
                              : FormatValidationMarkdown(runs, ValidatePublishedRuns(runs));
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace

void AddPlan(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "plan",
      "Memory, communication and step time of the training step `weft train` would run, on a "
      "mesh of any size and a chip from configs/chips.toml, without running it");
  auto f = std::make_shared<PlanFlags>();
  cmd->add_option("config", f->config, "Run config (TOML), e.g. configs/llama3.1-405b.toml")
      ->required();
  cmd->add_option("--mesh", f->mesh,
                  "Mesh axes, major to minor, e.g. fsdp=64,tensor=4 (replaces the config's "
                  "[mesh] and [dcn]); with --dcn, the sizes within one slice");
  cmd->add_option("--dcn", f->dcn,
                  "Slices each mesh axis spans, e.g. fsdp=2: with --mesh fsdp=64,tensor=4, fsdp "
                  "has 128 devices in 2 slices of 64 (JAX's create_hybrid_device_mesh; replaces "
                  "the config's [dcn])");
  cmd->add_option("--chip", f->chip,
                  "Chip name in the chips file (v5e, v5p, v6e, h100, h200, "
                  "local-cpu)")
      ->capture_default_str();
  cmd->add_option("--chips-file", f->chips_file,
                  "Chips file (default: chips.toml beside the config, else configs/chips.toml)");
  f->grad_accum_given = cmd->add_option(
      "--grad-accum", f->grad_accum,
      "Micro-batches per optimizer step: the step is planned for batch / N sequences and run N "
      "times (default 1)");
  cmd->add_flag("--auto", f->auto_search,
                "Search meshes (data x fsdp x tensor, which axis spans slices), remat presets "
                "and gradient accumulation for the fastest step that fits; needs --chips");
  f->chips_given =
      cmd->add_option("--chips", f->chips, "With --auto: the number of chips to plan for");
  f->headroom_given =
      cmd->add_option("--headroom", f->headroom,
                      "With --auto: the fraction of HBM a candidate must leave free (default 0.1)");
  f->top_given =
      cmd->add_option("--top", f->top, "With --auto: how many candidates to list (default 10)");
  f->slices_given = cmd->add_option(
      "--slices", f->slices,
      "Slices of a hybrid mesh: the major axis spans them and collectives that cross "
      "them go over DCN (default: the product of --dcn or [dcn], else a major 'dcn' "
      "axis's size, else 1, or as many as the chip's largest slice requires)");
  f->batch_given =
      cmd->add_option("--batch", f->batch, "Global batch size (default: train.batch_size)");
  f->seq_given = cmd->add_option("--seq", f->seq, "Sequence length (default: model.seq_len)");
  cmd->add_option("--remat", f->remat,
                  "What the forward saves for the backward: none (everything), full (each "
                  "layer's input; the layer recomputed), offload (full, saved inputs in host "
                  "memory), a preset (save_qkv_proj, save_out_proj, save_dot_except_mlp, "
                  "save_dot_except_mlpwi, save_dots) or layer activations to save, e.g. "
                  "q_proj,attention (default: train.remat)");
  cmd->add_flag("--no-shard-as", f->no_shard_as,
                "Do not tie scan-backward gradient carries to the weights with shard_as");
  cmd->add_option("--precision", f->precision,
                  "bf16 or f32: the mixed-precision policy of the planned program, as weft "
                  "train --precision (default: the config's train.precision)");
  cmd->add_flag("--json", f->json, "Print JSON (schema weft.plan/2, train/plan_report.h)");
  cmd->add_option("--svg", f->svg, "Write the memory breakdown and timeline as SVG");
  cmd->add_option("--hlo", f->hlo,
                  "Write the planned per-device program (fused, scheduled; XLA's HLO text)");
  cmd->callback([f] { SetAction([f] { return RunPlan(*f); }); });

  auto* validate = app.add_subcommand(
      "plan-validate",
      "Plan each published training run of a runs file (configs/published_runs.toml) and print "
      "published vs predicted tokens/s per chip as a Markdown table (docs/PLANNER.md)");
  // Default: beside the chips table (./configs, else the source tree's).
  auto file = std::make_shared<std::string>(
      (analysis::FindChipTable("").parent_path() / "published_runs.toml").string());
  validate->add_option("runs", *file, "Runs file (default: configs/published_runs.toml)");
  auto fit = std::make_shared<bool>(false);
  validate->add_flag("--fit", *fit,
                     "Instead of the table: each chip's matrix_efficiency fitted on its runs "
                     "marked fitted (the value to write in the chips file)");
  validate->callback(
      [file, fit] { SetAction([file, fit] { return RunPlanValidate(*file, *fit); }); });
}

}  // namespace weft::cli
