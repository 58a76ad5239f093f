#include "weft/train/plan_validation.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "weft/base/error.h"
#include "weft/train/plan_report.h"
#include "weft/train/program.h"

namespace weft {
namespace {

std::string Where(const std::filesystem::path& file, const toml::source_region& r) {
  return fmt::format("{}:{}", file.string(), r.begin.line);
}

}  // namespace

PublishedRuns LoadPublishedRuns(const std::filesystem::path& path) {
  toml::table root;
  try {
    root = toml::parse_file(path.string());
  } catch (const toml::parse_error& e) {
    Fail("{}: {} (give a runs file like configs/published_runs.toml)", Where(path, e.source()),
         e.description());
  }
  PublishedRuns out;
  out.file = path;
  for (const auto& [key, node] : root) {
    WEFT_CHECK(key.str() == "run" || key.str() == "band",
               "{}: unknown top-level key '{}' (known: band, [[run]])", Where(path, key.source()),
               key.str());
  }
  if (const toml::node* band = root.get("band")) {
    const auto v = band->value<double>();
    WEFT_CHECK(v && *v > 0 && *v < 1, "{}: band must be a fraction in (0, 1), e.g. 0.15",
               Where(path, band->source()));
    out.band = *v;
  }
  const toml::array* runs = root["run"].as_array();
  WEFT_CHECK(runs != nullptr && !runs->empty(), "{}: no [[run]] tables", path.string());
  static const std::set<std::string> known = {"name",
                                              "source",
                                              "config",
                                              "chip",
                                              "mesh",
                                              "dcn",
                                              "remat",
                                              "note",
                                              "batch",
                                              "seq",
                                              "tokens_per_s_per_chip",
                                              "fitted",
                                              "band"};
  for (const toml::node& node : *runs) {
    const toml::table* t = node.as_table();
    WEFT_CHECK(t != nullptr, "{}: each [[run]] must be a table", Where(path, node.source()));
    for (const auto& [k, v] : *t) {
      WEFT_CHECK(known.count(std::string(k.str())) > 0,
                 "{}: unknown key '{}' in a [[run]] (known: name, source, config, chip, mesh, "
                 "dcn, remat, note, batch, seq, tokens_per_s_per_chip, fitted, band)",
                 Where(path, k.source()), k.str());
    }
    PublishedRun r;
    auto text = [&](const char* key, bool required) {
      const toml::node* n = t->get(key);
      if (n == nullptr) {
        WEFT_CHECK(!required, "{}: a [[run]] is missing '{}'", Where(path, t->source()), key);
        return std::string();
      }
      const auto s = n->value<std::string>();
      WEFT_CHECK(n->is_string() && s, "{}: '{}' must be a string", Where(path, n->source()), key);
      return *s;
    };
    auto number = [&](const char* key) {
      const toml::node* n = t->get(key);
      WEFT_CHECK(n != nullptr, "{}: a [[run]] is missing '{}'", Where(path, t->source()), key);
      const auto v = n->value<double>();
      WEFT_CHECK((n->is_integer() || n->is_floating_point()) && v && *v > 0,
                 "{}: '{}' must be a positive number", Where(path, n->source()), key);
      return *v;
    };
    r.name = text("name", true);
    r.source = text("source", true);
    r.config = text("config", true);
    r.chip = text("chip", true);
    r.mesh = text("mesh", true);
    r.dcn = text("dcn", false);
    r.remat = text("remat", true);
    r.note = text("note", false);
    r.batch = static_cast<int64_t>(number("batch"));
    r.seq = static_cast<int64_t>(number("seq"));
    r.tokens_per_s_per_chip = number("tokens_per_s_per_chip");
    if (const toml::node* f = t->get("fitted")) {
      const auto b = f->value<bool>();
      WEFT_CHECK(f->is_boolean() && b, "{}: 'fitted' must be true or false",
                 Where(path, f->source()));
      r.fitted = *b;
    }
    if (t->get("band") != nullptr) {
      r.band = number("band");
      WEFT_CHECK(r.band < 1, "{}: a run's band must be a fraction in (0, 1)",
                 Where(path, t->get("band")->source()));
    }
    out.runs.push_back(std::move(r));
  }
  return out;
}

namespace {

// The plan of one published run, with the chip's matrix_efficiency replaced
// when `efficiency` is set.
StepPlan PlanPublishedRun(const PublishedRuns& runs, const PublishedRun& r,
                          std::optional<double> efficiency = std::nullopt) {
  const std::filesystem::path config_path = runs.file.parent_path() / r.config;
  const RunConfig config = LoadRunConfig(config_path.string());
  PlanOptions o;
  o.chip = r.chip;
  o.mesh = ParseMeshFlag(r.mesh);
  if (!r.dcn.empty()) o.mesh = ApplyDcnFlag(*o.mesh, r.dcn);
  o.batch_size = r.batch;
  o.seq_len = r.seq;
  o.remat = r.remat;
  o.top_buffers = 0;
  o.timeline_points = 0;
  o.matrix_efficiency = efficiency;
  return PlanTrainingStep(config, o);
}

}  // namespace

std::vector<FittedEfficiency> FitMatrixEfficiency(const PublishedRuns& runs) {
  std::vector<FittedEfficiency> out;
  for (const PublishedRun& r : runs.runs) {
    if (!r.fitted) continue;
    auto it = std::find_if(out.begin(), out.end(),
                           [&](const FittedEfficiency& f) { return f.chip == r.chip; });
    if (it == out.end()) it = out.insert(out.end(), FittedEfficiency{r.chip, {}, 1, 1, 0});
    it->runs.push_back(r.name);
  }
  for (FittedEfficiency& f : out) {
    // The mean log ratio of predicted to published tokens/s over the chip's
    // fitted runs; it grows with the efficiency.
    auto mean_log_ratio = [&](std::optional<double> efficiency) {
      double sum = 0;
      int64_t n = 0;
      for (const PublishedRun& r : runs.runs) {
        if (!r.fitted || r.chip != f.chip) continue;
        const StepPlan p = PlanPublishedRun(runs, r, efficiency);
        if (!efficiency) f.table = p.chip.matrix_efficiency;
        sum += std::log(p.tokens_per_s_per_chip() / r.tokens_per_s_per_chip);
        ++n;
      }
      ++f.evaluations;
      return sum / static_cast<double>(n);
    };
    // Secant steps on log(efficiency), from the table's value and then the
    // step a fully compute-bound run would take.
    double g0 = mean_log_ratio(std::nullopt);  // sets f.table
    double x0 = std::log(f.table);
    double x1 = std::min(0.0, x0 - g0);
    double g1 = mean_log_ratio(std::exp(x1));
    // Efficiency 1 (x = 0) still short of the published figures: the chip's
    // other figures are at fault, not the fit.
    auto check_reachable = [&] {
      WEFT_CHECK(!(x1 == 0 && g1 < 0),
                 "{}: chip '{}' reaches only {:.1f}% of its fitted runs' published tokens/s at "
                 "matrix_efficiency = 1; its other figures (peaks, bandwidths) are too low for "
                 "them",
                 runs.file.string(), f.chip, 100 * std::exp(g1));
    };
    for (int i = 0; i < 30 && std::fabs(g1) > kFitTolerance; ++i) {
      check_reachable();
      const double slope = g1 != g0 && x1 != x0 ? (g1 - g0) / (x1 - x0) : 1;
      const double x2 = std::min(0.0, x1 - g1 / std::max(slope, 1e-3));
      x0 = x1;
      g0 = g1;
      x1 = x2;
      g1 = mean_log_ratio(std::exp(x1));
    }
    check_reachable();
    WEFT_INTERNAL_CHECK(std::fabs(g1) <= kFitTolerance,
                        "fitting chip '{}''s matrix_efficiency did not converge "
                        "(last {:.4f}, off by {:+.3f}%)",
                        f.chip, std::exp(x1), 100 * (std::exp(g1) - 1));
    f.fitted = std::exp(x1);
  }
  return out;
}

std::string FormatFitMarkdown(const std::vector<FittedEfficiency>& fits) {
  std::string o = "| chip | matrix_efficiency in the chips file | fitted | fitted on |\n";
  o += "|---|---|---|---|\n";
  for (const FittedEfficiency& f : fits) {
    std::string on;
    for (const std::string& run : f.runs) on += (on.empty() ? "" : "; ") + run;
    o += fmt::format("| {} | {:.3f} | {:.3f} | {} |\n", f.chip, f.table, f.fitted, on);
  }
  return o;
}

Validation ValidatePublishedRuns(const PublishedRuns& runs) {
  Validation v;
  std::vector<double> errors;
  for (const PublishedRun& r : runs.runs) {
    const StepPlan p = PlanPublishedRun(runs, r);
    ValidatedRun out;
    out.run = r;
    out.step_s = p.time.step_s;
    out.predicted_tokens_per_s_per_chip = p.tokens_per_s_per_chip();
    out.error = out.predicted_tokens_per_s_per_chip / r.tokens_per_s_per_chip - 1;
    out.mfu = p.time.mfu;
    out.peak_bytes = static_cast<double>(p.peak_bytes());
    out.hbm_bytes = p.hbm_bytes();
    out.fits = p.fits();
    out.exposed_communication_s = p.time.exposed_ici_s + p.time.exposed_dcn_s;
    if (out.fits) ++v.fitting;
    if (!r.fitted) {
      ++v.reported;
      if (std::fabs(out.error) <= runs.band) ++v.within_band;
      errors.push_back(std::fabs(out.error));
    }
    v.runs.push_back(std::move(out));
  }
  if (!errors.empty()) {
    std::sort(errors.begin(), errors.end());
    const size_t n = errors.size();
    v.median_abs_error = n % 2 ? errors[n / 2] : (errors[n / 2 - 1] + errors[n / 2]) / 2;
  }
  return v;
}

std::string FormatValidationMarkdown(const PublishedRuns& runs, const Validation& v) {
  std::string o;
  o += "| run | chip | mesh | batch x seq | remat | published tok/s/chip | predicted | error | "
       "predicted MFU | peak / HBM | verdict |\n";
  o += "|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const ValidatedRun& r : v.runs) {
    const std::string mesh =
        r.run.dcn.empty() ? r.run.mesh : r.run.mesh + " (dcn " + r.run.dcn + ")";
    o += fmt::format(
        "| {}{} | {} | {} | {} x {} | {} | {:.1f} | {:.1f} | {:+.1f}% | {:.1f}% | {} / {} | {} |\n",
        r.run.name, r.run.fitted ? " (fitted)" : "", r.run.chip, mesh, r.run.batch, r.run.seq,
        r.run.remat, r.run.tokens_per_s_per_chip, r.predicted_tokens_per_s_per_chip, 100 * r.error,
        100 * r.mfu, FormatBytes(r.peak_bytes), FormatBytes(r.hbm_bytes),
        r.fits ? "fits" : "does not fit");
  }
  o += fmt::format(
      "\n{} of {} runs not used for fitting within {:.0f}% of published (median error {:.1f}%); "
      "{} of {} runs fit.\n",
      v.within_band, v.reported, 100 * runs.band, 100 * v.median_abs_error, v.fitting,
      v.runs.size());
  return o;
}

}  // namespace weft
