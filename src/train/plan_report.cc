#include "weft/train/plan_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "weft/train/svg_plot.h"

namespace weft {
namespace {

using analysis::BufferCategory;
using analysis::kNumBufferCategories;
using analysis::kNumProgramCollectiveKinds;
using runtime::CollectiveKind;

constexpr std::array<std::string_view, kNumProgramCollectiveKinds> kKindKeys = {
    "all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute"};

std::string_view KindKey(CollectiveKind kind) { return kKindKeys[static_cast<int>(kind)]; }

std::string Grouped(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

std::string Seconds(double s) {
  if (s == 0) return "0 s";
  if (s < 1e-3) return fmt::format("{:.1f} us", s * 1e6);
  if (s < 1) return fmt::format("{:.1f} ms", s * 1e3);
  return fmt::format("{:.2f} s", s);
}

std::string Flops(double f) {
  if (f >= 1e15) return fmt::format("{:.2f} PFLOP", f / 1e15);
  if (f >= 1e12) return fmt::format("{:.2f} TFLOP", f / 1e12);
  if (f >= 1e9) return fmt::format("{:.2f} GFLOP", f / 1e9);
  return fmt::format("{:.3g} FLOP", f);
}

std::string Verdict(const StepPlan& p) {
  const double peak = static_cast<double>(p.peak_bytes());
  if (p.fits()) {
    return fmt::format("fits: the peak {} leaves {} of the {} HBM free ({:.1f}% headroom)",
                       FormatBytes(peak), FormatBytes(p.margin_bytes()), FormatBytes(p.hbm_bytes()),
                       100 * p.margin_bytes() / p.hbm_bytes());
  }
  return fmt::format("does not fit: the peak {} exceeds the {} HBM by {} ({:.0f}% of HBM)",
                     FormatBytes(peak), FormatBytes(p.hbm_bytes()), FormatBytes(-p.margin_bytes()),
                     100 * peak / p.hbm_bytes());
}

// The policy in words, for the report.
std::string RematDescription(const RematPolicy& remat) {
  if (remat.kind == Remat::kNone) return "none (every residual saved)";
  if (remat.save.empty() && remat.offload.empty()) {
    return "full (each layer's input saved, the layer recomputed)";
  }
  if (RematText(remat) == "offload")
    return "offload (as full, the saved layer inputs in host memory)";
  std::string what = remat.save.empty()
                         ? std::string("each layer's input saved")
                         : fmt::format("each layer's input and {} saved",
                                       fmt::format("{}", fmt::join(remat.save, ", ")));
  if (!remat.offload.empty()) {
    what += fmt::format(", {} in host memory", fmt::format("{}", fmt::join(remat.offload, ", ")));
  }
  return fmt::format("{} ({}, the rest recomputed)", RematText(remat), what);
}

std::string PrecisionText(Precision p) {
  return p == Precision::kBf16
             ? "bf16 (f32 master weights and gradients, bf16 activations; m + v f32)"
             : "f32 (every floating value; m + v f32)";
}

// The simulated step: the critical path, then what fills it.
template <typename Line>
void StepTimeText(const StepPlan& p, Line&& line) {
  const analysis::StepTime& t = p.time;
  line(fmt::format("Step time {} (simulated over the compiled schedule, device {})",
                   Seconds(t.step_s), p.collective_device));
  line(
      fmt::format("  critical path  compute {} + exposed ICI {} + exposed DCN {} + exposed host {}",
                  Seconds(t.compute_s), Seconds(t.exposed_ici_s), Seconds(t.exposed_dcn_s),
                  Seconds(t.exposed_host_s)));
  line(fmt::format("  compute        matrix (dots, attention) {}, loops and copies {}",
                   Seconds(t.matrix_s), Seconds(t.compute_s - t.matrix_s)));
  line(fmt::format("  links busy     ICI {}, DCN {}, host {} (hidden behind compute: {})",
                   Seconds(t.ici_s), Seconds(t.dcn_s), Seconds(t.host_s),
                   Seconds(std::max(0.0, t.ici_s + t.dcn_s + t.host_s - t.exposed_ici_s -
                                             t.exposed_dcn_s - t.exposed_host_s))));
  line(
      fmt::format("  MFU {:.1f}%, {:.0f} tokens/s per chip ({:.1f}% and {} with no overlap at all)",
                  100 * t.mfu, p.tokens_per_s_per_chip(), 100 * t.mfu_serial, Seconds(t.serial_s)));
  if (!t.top.empty()) {
    line("  longest instructions (all runs):");
    for (size_t i = 0; i < t.top.size() && i < 5; ++i) {
      const analysis::SimInstruction& s = t.top[i];
      line(fmt::format("    {:>10}  {:<7} {:<6} x{:<5} {} ({})", Seconds(s.seconds),
                       analysis::StreamName(s.stream), s.bound, s.runs, s.instruction,
                       s.computation));
    }
  }
}

// Category colors, shared by the SVG's bar and timeline.
constexpr std::array<const char*, kNumBufferCategories + 1> kColors = {
    "#4e79a7", "#bab0ac", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#b07aa1"};
constexpr int kOptimizerIndex = kNumBufferCategories;

}  // namespace

std::string FormatBytes(double bytes) {
  const double a = std::fabs(bytes);
  if (a >= 1e12) return fmt::format("{:.2f} TB", bytes / 1e12);
  if (a >= 1e9) return fmt::format("{:.2f} GB", bytes / 1e9);
  if (a >= 1e6) return fmt::format("{:.2f} MB", bytes / 1e6);
  if (a >= 1e3) return fmt::format("{:.2f} kB", bytes / 1e3);
  return fmt::format("{:.0f} B", bytes);
}

std::string FormatPlanText(const StepPlan& p) {
  std::string o;
  auto line = [&](const std::string& s) { o += s + "\n"; };
  const LlamaConfig& m = p.model;
  line(fmt::format("weft plan  {}", p.config_source));
  const double n = static_cast<double>(p.num_parameters);
  const std::string params = n >= 1e9   ? fmt::format("{:.1f} B", n / 1e9)
                             : n >= 1e6 ? fmt::format("{:.2f} M", n / 1e6)
                                        : Grouped(p.num_parameters);
  line(fmt::format(
      "  model      {} parameters: {} layers, dim {}, ffn {}, {} heads, {} KV heads, vocab {}",
      params, m.n_layers, m.dim, m.ffn_dim, m.n_heads, m.n_kv_heads, m.vocab_size));
  line(fmt::format("  step       batch {} x seq {} = {} tokens, shard_as {}", p.batch_size,
                   p.seq_len, Grouped(p.batch_size * p.seq_len), p.shard_as ? "on" : "off"));
  line(fmt::format("  remat      {}", RematDescription(p.remat_policy)));
  line(fmt::format("  mesh       {} = {} devices in {} slice{}", MeshText(p.mesh), p.num_devices,
                   p.slices, p.slices == 1 ? "" : "s"));
  line(fmt::format("  chip       {}: {}", p.chip.name, p.chip.description));
  line(fmt::format("             {} HBM, {:.4g} TFLOP/s {}; ICI {}/s, DCN {}/s, host {}/s",
                   FormatBytes(p.chip.hbm_bytes), p.time.peak_flops / 1e12,
                   PrecisionName(p.precision), FormatBytes(p.chip.ici_bytes_per_s),
                   FormatBytes(p.chip.dcn_bytes_per_s), FormatBytes(p.chip.host_bytes_per_s)));
  line(fmt::format("  precision  {}", PrecisionText(p.precision)));
  line("");
  line(fmt::format("VERDICT: {}", Verdict(p)));
  line("");
  StepTimeText(p, line);
  line("");

  line("Memory per chip");
  line(fmt::format("  static     parameters {} + gradients {} + optimizer state {} = {}",
                   FormatBytes(p.parameter_bytes), FormatBytes(p.gradient_bytes),
                   FormatBytes(p.optimizer_bytes), FormatBytes(p.static_bytes())));
  line(fmt::format("  peak at    {} in {} (instruction {} of {} executed)",
                   p.memory.peak_instruction, p.memory.peak_computation,
                   Grouped(p.memory.peak_step), Grouped(p.memory.total_steps)));
  const std::array<BufferCategory, kNumBufferCategories> order = {
      BufferCategory::kParameters,  BufferCategory::kGradients,   BufferCategory::kSaved,
      BufferCategory::kCollectives, BufferCategory::kTemporaries, BufferCategory::kInputs};
  for (BufferCategory c : order) {
    if (c == BufferCategory::kGradients) {
      line(fmt::format("    {:<22}{:>12}", "optimizer state", FormatBytes(p.optimizer_bytes)));
    }
    line(fmt::format("    {:<22}{:>12}", analysis::BufferCategoryName(c),
                     FormatBytes(p.memory.peak_by_category[static_cast<int>(c)])));
  }
  line(fmt::format("    {:<22}{:>12}   of {} HBM", "peak", FormatBytes(p.peak_bytes()),
                   FormatBytes(p.hbm_bytes())));
  if (!p.remat_policy.offload.empty()) {
    line(fmt::format("  host       {} of saved layer inputs offloaded (not in the peak)",
                     FormatBytes(p.memory.host_peak_bytes)));
  }
  line("");

  line(fmt::format("Largest buffers live at the peak"));
  for (size_t i = 0; i < p.top_buffers.size(); ++i) {
    const PeakBuffer& pb = p.top_buffers[i];
    const analysis::LiveBuffer& b = pb.buffer;
    line(fmt::format("  {:>2} {:>10}  {:<12} {} ({}){}", i + 1, FormatBytes(b.bytes),
                     analysis::BufferCategoryKey(b.category), b.instruction, b.computation,
                     b.role.empty() ? "" : ": " + b.role));
    std::string where = "local " + b.shape.ToString();
    if (pb.global_known) {
      where += "  global " + pb.global_shape.ToString();
      where += pb.split_axes.empty()
                   ? "  not split"
                   : fmt::format("  split along {}", fmt::join(pb.split_axes, ", "));
    } else {
      where += "  (made by the partitioner)";
    }
    line(fmt::format("                {}", where));
  }
  if (!p.stacked_axis.empty()) {
    if (p.unsplit_stacked.empty()) {
      line(fmt::format("  every [{}, ...] buffer of rank >= 3 is split along {}", m.n_layers,
                       p.stacked_axis));
    } else {
      const UnsplitStackedBuffer& u = p.unsplit_stacked[0];
      line(fmt::format(
          "  {} [{}, ...] buffer{} not split along {}; the largest:", p.unsplit_stacked.size(),
          m.n_layers, p.unsplit_stacked.size() == 1 ? " is" : "s are", p.stacked_axis));
      line(fmt::format("     {} ({}) global {}, {} per device", u.instruction, u.computation,
                       u.global_shape.ToString(), FormatBytes(u.local_bytes)));
      line(fmt::format("     sharding {}", u.sharding));
    }
  }
  line("");

  const int64_t slowest = p.collective_device;
  const analysis::DeviceTraffic& t = p.collectives.per_device[slowest];
  line(fmt::format("Collectives per step (device {}; ring model of runtime/communicator.h)",
                   slowest));
  line(fmt::format("  {:<20}{:>10}{:>14}{:>14}", "kind", "calls", "sent", "over DCN"));
  for (int k = 0; k < kNumProgramCollectiveKinds; ++k) {
    const analysis::KindTraffic& kt = t.by_kind[k];
    if (kt.calls == 0) continue;
    line(fmt::format("  {:<20}{:>10}{:>14}{:>14}", kKindKeys[k], Grouped(kt.calls),
                     FormatBytes(kt.bytes), FormatBytes(kt.dcn_bytes)));
  }
  line(fmt::format("  {:<20}{:>10}{:>14}{:>14}", "total", Grouped(t.calls()),
                   FormatBytes(t.bytes()), FormatBytes(t.dcn_bytes())));
  line("");

  line("Compute per chip");
  line(fmt::format("  executed   {}: matmul {}, attention forward {}, backward {}",
                   Flops(p.flops.timed()), Flops(p.flops.dot), Flops(p.flops.attention_forward),
                   Flops(p.flops.attention_backward)));
  line(fmt::format("             + vector work {}", Flops(p.flops.other)));
  line(fmt::format("  model      {} (6 x matmul parameters x tokens + 3 x causal attention)",
                   Flops(p.model_flops)));
  line("");
  for (const std::string& w : p.warnings) line("warning: " + w);
  line(fmt::format("(planned in {:.2f} s: compile {:.2f} s, analysis {:.2f} s)",
                   p.compile_seconds + p.analysis_seconds, p.compile_seconds, p.analysis_seconds));
  return o;
}

namespace {

using nlohmann::json;

// The "memory" object of FormatPlanJson.
json MemoryJson(const StepPlan& p) {
  json mem;
  mem["hbm_bytes"] = p.hbm_bytes();
  mem["peak_bytes"] = p.peak_bytes();
  mem["program_peak_bytes"] = p.memory.peak_bytes;
  mem["live_peak_bytes"] = p.memory.live_peak_bytes;
  mem["static_bytes"] = p.static_bytes();
  mem["parameter_bytes"] = p.parameter_bytes;
  mem["gradient_bytes"] = p.gradient_bytes;
  mem["optimizer_bytes"] = p.optimizer_bytes;
  mem["host_bytes"] = p.memory.host_peak_bytes;
  mem["saved_bytes"] = p.memory.saved_bytes;
  mem["fits"] = p.fits();
  mem["margin_bytes"] = p.margin_bytes();
  json breakdown;
  for (int c = 0; c < kNumBufferCategories; ++c) {
    breakdown[std::string(analysis::BufferCategoryKey(BufferCategory(c)))] =
        p.memory.peak_by_category[c];
  }
  breakdown["optimizer_state"] = p.optimizer_bytes;
  mem["peak_breakdown"] = breakdown;
  mem["peak_at"] = {{"instruction", p.memory.peak_instruction},
                    {"computation", p.memory.peak_computation},
                    {"step", p.memory.peak_step},
                    {"steps", p.memory.total_steps}};
  json largest = json::array();
  for (const PeakBuffer& pb : p.top_buffers) {
    const analysis::LiveBuffer& b = pb.buffer;
    json e = {{"instruction", b.instruction},
              {"computation", b.computation},
              {"role", b.role},
              {"category", analysis::BufferCategoryKey(b.category)},
              {"bytes", b.bytes},
              {"dtype", std::string(PrimitiveTypeName(b.shape.element_type()))},
              {"local_shape", b.shape.dimensions()}};
    e["global_shape"] = pb.global_known ? json(pb.global_shape.dimensions()) : json(nullptr);
    e["sharding"] = pb.sharding.empty() ? json(nullptr) : json(pb.sharding);
    e["split_axes"] = pb.split_axes;
    largest.push_back(std::move(e));
  }
  mem["largest_buffers"] = largest;
  json steps = json::array(), total = json::array(), by = json::object();
  for (int c = 0; c < kNumBufferCategories; ++c) {
    by[std::string(analysis::BufferCategoryKey(BufferCategory(c)))] = json::array();
  }
  for (const analysis::TimelinePoint& tp : p.memory.timeline) {
    steps.push_back(tp.step);
    total.push_back(tp.total);
    for (int c = 0; c < kNumBufferCategories; ++c) {
      by[std::string(analysis::BufferCategoryKey(BufferCategory(c)))].push_back(tp.by_category[c]);
    }
  }
  mem["timeline"] = {{"steps", steps}, {"total", total}, {"by_category", by}};
  json unsplit = json::array();
  for (size_t i = 0; i < p.unsplit_stacked.size() && i < 10; ++i) {
    const UnsplitStackedBuffer& u = p.unsplit_stacked[i];
    unsplit.push_back({{"instruction", u.instruction},
                       {"computation", u.computation},
                       {"global_shape", u.global_shape.dimensions()},
                       {"sharding", u.sharding},
                       {"local_bytes", u.local_bytes}});
  }
  mem["unsplit_stacked"] = {{"axis", p.stacked_axis.empty() ? json(nullptr) : json(p.stacked_axis)},
                            {"count", p.unsplit_stacked.size()},
                            {"buffers", unsplit}};
  return mem;
}

// The "collectives" object: the busiest device's traffic and largest sites.
json CollectivesJson(const StepPlan& p) {
  const analysis::CollectivePlan& cp = p.collectives;
  const int64_t slowest = p.collective_device;
  const analysis::DeviceTraffic& t = cp.per_device[slowest];
  json kinds = json::object();
  for (int k = 0; k < kNumProgramCollectiveKinds; ++k) {
    const analysis::KindTraffic& kt = t.by_kind[k];
    kinds[std::string(kKindKeys[k])] = {{"calls", kt.calls},
                                        {"bytes", kt.bytes},
                                        {"dcn_calls", kt.dcn_calls},
                                        {"dcn_bytes", kt.dcn_bytes}};
  }
  json sites = json::array();
  for (size_t i = 0; i < cp.sites.size() && i < 10; ++i) {
    const analysis::CollectiveSite& s = cp.sites[i];
    sites.push_back({{"instruction", s.instruction},
                     {"computation", s.computation},
                     {"kind", KindKey(s.kind)},
                     {"runs", s.runs},
                     {"group_size", s.group_size},
                     {"crosses_slices", s.crosses_slices},
                     {"bytes", s.bytes()}});
  }
  return {{"device", slowest},
          {"calls", t.calls()},
          {"bytes", t.bytes()},
          {"ici_bytes", t.ici_bytes()},
          {"dcn_bytes", t.dcn_bytes()},
          {"by_kind", kinds},
          {"largest", sites}};
}

// The "time" object: the simulated step and its slowest instructions.
json TimeJson(const StepPlan& p) {
  json top = json::array();
  for (const analysis::SimInstruction& i : p.time.top) {
    top.push_back({{"instruction", i.instruction},
                   {"computation", i.computation},
                   {"stream", analysis::StreamName(i.stream)},
                   {"bound", i.bound},
                   {"runs", i.runs},
                   {"seconds", i.seconds}});
  }
  return {{"step_s", p.time.step_s},
          {"compute_s", p.time.compute_s},
          {"matrix_s", p.time.matrix_s},
          {"exposed_ici_s", p.time.exposed_ici_s},
          {"exposed_dcn_s", p.time.exposed_dcn_s},
          {"exposed_host_s", p.time.exposed_host_s},
          {"ici_s", p.time.ici_s},
          {"dcn_s", p.time.dcn_s},
          {"host_s", p.time.host_s},
          {"serial_s", p.time.serial_s},
          {"mfu", p.time.mfu},
          {"mfu_serial", p.time.mfu_serial},
          {"tokens_per_s_per_chip", p.tokens_per_s_per_chip()},
          {"simulated_runs", p.time.simulated_runs},
          {"top", top}};
}

}  // namespace

std::string FormatPlanJson(const StepPlan& p) {
  json j;
  j["schema"] = "weft.plan/2";
  j["config"] = p.config_source;
  j["chip"] = {{"name", p.chip.name},
               {"description", p.chip.description},
               {"hbm_bytes", p.chip.hbm_bytes},
               {"peak_flops", p.time.peak_flops},
               {"ici_bytes_per_s", p.chip.ici_bytes_per_s},
               {"dcn_bytes_per_s", p.chip.dcn_bytes_per_s},
               {"host_bytes_per_s", p.chip.host_bytes_per_s},
               {"max_slice_chips", p.chip.max_slice_chips},
               {"source", p.chip.source}};
  j["chips_file"] = p.chips_file;
  json axes = json::array();
  for (size_t i = 0; i < p.mesh.axis_names.size(); ++i) {
    axes.push_back({{"name", p.mesh.axis_names[i]}, {"size", p.mesh.axis_sizes[i]}});
  }
  j["mesh"] = {{"axes", axes}, {"devices", p.num_devices}, {"slices", p.slices}};
  j["precision"] = PrecisionName(p.precision);
  j["remat"] = p.remat;
  j["shard_as"] = p.shard_as;
  j["batch_size"] = p.batch_size;
  j["seq_len"] = p.seq_len;
  j["tokens_per_step"] = p.batch_size * p.seq_len;
  j["parameters"] = p.num_parameters;

  j["memory"] = MemoryJson(p);
  j["collectives"] = CollectivesJson(p);
  j["compute"] = {{"flops",
                   {{"dot", p.flops.dot},
                    {"attention_forward", p.flops.attention_forward},
                    {"attention_backward", p.flops.attention_backward},
                    {"other", p.flops.other}}},
                  {"model_flops", p.model_flops}};
  j["time"] = TimeJson(p);
  j["verdict"] = p.fits() ? "fits" : "does not fit";
  j["warnings"] = p.warnings;
  j["plan_seconds"] = {{"compile", p.compile_seconds}, {"analysis", p.analysis_seconds}};
  // Paths and names come from the user (a config file name need not be
  // UTF-8): invalid bytes print as U+FFFD instead of throwing.
  return j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

namespace {

// The SVG page's frame: three charts (the peak bar, the live-memory
// timeline, the simulated step's streams) over one horizontal extent.
constexpr int kSvgWidth = 980, kSvgHeight = 800, kSvgLeft = 80, kSvgRight = 280,
              kPlotWidth = kSvgWidth - kSvgLeft - kSvgRight;
constexpr int kTimelineY = 170, kTimelineHeight = 380;

// Stack order: static at the bottom, optimizer state (held outside the
// program) first.
constexpr std::array<int, kNumBufferCategories + 1> kStackOrder = {
    kOptimizerIndex,
    static_cast<int>(BufferCategory::kParameters),
    static_cast<int>(BufferCategory::kGradients),
    static_cast<int>(BufferCategory::kSaved),
    static_cast<int>(BufferCategory::kCollectives),
    static_cast<int>(BufferCategory::kTemporaries),
    static_cast<int>(BufferCategory::kInputs)};

std::string CategoryName(int c) {
  return c == kOptimizerIndex ? "optimizer state"
                              : std::string(analysis::BufferCategoryName(BufferCategory(c)));
}

// What the memory charts share: per-category bytes at the peak (optimizer
// state last) and the byte scale (GB ticks up to the largest of the peak,
// HBM and the timeline).
struct MemoryScale {
  explicit MemoryScale(const StepPlan& p) {
    for (int c = 0; c < kNumBufferCategories; ++c) at_peak[c] = p.memory.peak_by_category[c];
    at_peak[kOptimizerIndex] = static_cast<double>(p.optimizer_bytes);
    double max_bytes = std::max(static_cast<double>(p.peak_bytes()), p.hbm_bytes());
    for (const analysis::TimelinePoint& tp : p.memory.timeline) {
      max_bytes = std::max(max_bytes, static_cast<double>(tp.total + p.optimizer_bytes));
    }
    ticks = NiceTicks(0, max_bytes / 1e9, 6);
    top_gb = ticks.empty() ? max_bytes / 1e9 : ticks.back();
  }
  std::array<double, kNumBufferCategories + 1> at_peak{};
  std::vector<double> ticks;
  double top_gb = 0;
};

// The breakdown bar at the peak, with the HBM line.
std::string SvgPeakBar(const StepPlan& p, const MemoryScale& m) {
  auto x_of = [&](double bytes) { return kSvgLeft + kPlotWidth * (bytes / 1e9) / m.top_gb; };
  const int bar_y = 60, bar_h = 36;
  std::string s = fmt::format(
      "<text x=\"{}\" y=\"{}\">Memory per chip at the peak ({}, {})</text>\n", kSvgLeft, bar_y - 8,
      EscapeXml(p.memory.peak_instruction), FormatBytes(static_cast<double>(p.peak_bytes())));
  double x = 0;
  for (int c : kStackOrder) {
    if (m.at_peak[c] <= 0) continue;
    s += fmt::format(
        "<rect x=\"{:.1f}\" y=\"{}\" width=\"{:.1f}\" height=\"{}\" fill=\"{}\"><title>{}: "
        "{}</title></rect>\n",
        x_of(x), bar_y, x_of(x + m.at_peak[c]) - x_of(x), bar_h, kColors[c],
        EscapeXml(CategoryName(c)), FormatBytes(m.at_peak[c]));
    x += m.at_peak[c];
  }
  const double hbm_x = x_of(p.hbm_bytes());
  s += fmt::format(
      "<line x1=\"{:.1f}\" y1=\"{}\" x2=\"{:.1f}\" y2=\"{}\" stroke=\"black\" "
      "stroke-dasharray=\"5,3\"/><text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">HBM "
      "{}</text>\n",
      hbm_x, bar_y - 4, hbm_x, bar_y + bar_h + 4, hbm_x, bar_y + bar_h + 18,
      FormatBytes(p.hbm_bytes()));
  return s;
}

// The timeline: stacked areas over the executed instructions, the HBM line,
// axes and the legend.
std::string SvgTimeline(const StepPlan& p, const MemoryScale& m) {
  const int left = kSvgLeft, plot_w = kPlotWidth, plot_y = kTimelineY, plot_h = kTimelineHeight;
  const int64_t total_steps = std::max<int64_t>(1, p.memory.total_steps);
  auto tx = [&](double step) { return left + plot_w * step / static_cast<double>(total_steps); };
  auto ty = [&](double bytes) { return plot_y + plot_h - plot_h * (bytes / 1e9) / m.top_gb; };
  std::string s =
      fmt::format("<text x=\"{}\" y=\"{}\">Live memory over the step (GB per chip)</text>\n", left,
                  plot_y - 10);
  for (double tick : m.ticks) {
    const double y = ty(tick * 1e9);
    s += fmt::format(
        "<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"#ddd\"/><text x=\"{}\" "
        "y=\"{:.1f}\" text-anchor=\"end\">{:g}</text>\n",
        left, y, left + plot_w, y, left - 6, y + 4, tick);
  }
  const std::vector<analysis::TimelinePoint>& tl = p.memory.timeline;
  std::vector<double> below(tl.size(), 0.0);
  for (int c : kStackOrder) {
    std::vector<double> above(tl.size());
    bool any = false;
    for (size_t i = 0; i < tl.size(); ++i) {
      const double v = c == kOptimizerIndex ? static_cast<double>(p.optimizer_bytes)
                                            : static_cast<double>(tl[i].by_category[c]);
      above[i] = below[i] + v;
      any = any || v > 0;
    }
    if (any && !tl.empty()) {
      std::string points;
      double prev = 0;
      for (size_t i = 0; i < tl.size(); ++i) {
        points += fmt::format("{:.1f},{:.1f} {:.1f},{:.1f} ", tx(prev), ty(above[i]),
                              tx(static_cast<double>(tl[i].step)), ty(above[i]));
        prev = static_cast<double>(tl[i].step);
      }
      for (size_t i = tl.size(); i-- > 0;) {
        const double from = i == 0 ? 0 : static_cast<double>(tl[i - 1].step);
        points += fmt::format("{:.1f},{:.1f} {:.1f},{:.1f} ", tx(static_cast<double>(tl[i].step)),
                              ty(below[i]), tx(from), ty(below[i]));
      }
      s += fmt::format(
          "<polygon points=\"{}\" fill=\"{}\" stroke=\"none\"><title>{}</title></polygon>\n",
          points, kColors[c], EscapeXml(CategoryName(c)));
    }
    below = std::move(above);
  }
  const double hbm_y = ty(p.hbm_bytes());
  s += fmt::format(
      "<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"black\" "
      "stroke-dasharray=\"5,3\"/><text x=\"{}\" y=\"{:.1f}\">HBM</text>\n",
      left, hbm_y, left + plot_w, hbm_y, left + plot_w + 4, hbm_y + 4);
  s += fmt::format(
      "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/><line x1=\"{}\" y1=\"{}\" "
      "x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n",
      left, plot_y, left, plot_y + plot_h, left, plot_y + plot_h, left + plot_w, plot_y + plot_h);
  s += fmt::format(
      "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">executed instructions (0 .. {}), peak at "
      "{}</text>\n",
      left + plot_w / 2, plot_y + plot_h + 24, total_steps, p.memory.peak_step);
  // Legend.
  int ly = plot_y + 10;
  for (auto it = kStackOrder.rbegin(); it != kStackOrder.rend(); ++it) {
    const int c = *it;
    s += fmt::format(
        "<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\"/><text x=\"{}\" "
        "y=\"{}\">{} {}</text>\n",
        left + plot_w + 40, ly, kColors[c], left + plot_w + 58, ly + 11, EscapeXml(CategoryName(c)),
        FormatBytes(m.at_peak[c]));
    ly += 20;
  }
  return s;
}

// The simulated step: when each stream is busy (analysis/step_sim.h).
std::string SvgSimulatedStep(const StepPlan& p) {
  const int left = kSvgLeft, plot_w = kPlotWidth;
  const analysis::StepTime& t = p.time;
  const int sim_y = kTimelineY + kTimelineHeight + 60, lane_h = 26;
  const double micro_s = t.step_s / static_cast<double>(std::max<int64_t>(1, p.grad_accum));
  std::string s = fmt::format(
      "<text x=\"{}\" y=\"{}\">Simulated step{}: {} (compute {}, exposed ICI {}, DCN {}, host "
      "{}), MFU {:.1f}%</text>\n",
      left, sim_y - 10,
      p.grad_accum > 1 ? fmt::format(" (one of {} micro-steps)", p.grad_accum) : "",
      Seconds(t.step_s), Seconds(t.compute_s), Seconds(t.exposed_ici_s), Seconds(t.exposed_dcn_s),
      Seconds(t.exposed_host_s), 100 * t.mfu);
  const std::array<const char*, analysis::kNumStreams> lane_colors = {"#4e79a7", "#f28e2b",
                                                                      "#e15759"};
  for (int lane = 0; lane < analysis::kNumStreams; ++lane) {
    const int y = sim_y + lane * (lane_h + 6);
    s += fmt::format(
        "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text><rect x=\"{}\" y=\"{}\" "
        "width=\"{}\" height=\"{}\" fill=\"#f4f4f4\"/>\n",
        left - 6, y + lane_h / 2 + 4, analysis::StreamName(analysis::Stream(lane)), left, y, plot_w,
        lane_h);
    for (const analysis::Interval& i : t.busy[lane]) {
      if (micro_s <= 0) break;
      const double x0 = left + plot_w * i.start / micro_s, x1 = left + plot_w * i.end / micro_s;
      s += fmt::format("<rect x=\"{:.1f}\" y=\"{}\" width=\"{:.2f}\" height=\"{}\" fill=\"{}\"/>\n",
                       x0, y, std::max(0.5, x1 - x0), lane_h, lane_colors[lane]);
    }
  }
  s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">time (0 .. {})</text>\n",
                   left + plot_w / 2, sim_y + analysis::kNumStreams * (lane_h + 6) + 14,
                   Seconds(micro_s));
  return s;
}

}  // namespace

std::string RenderPlanSvg(const StepPlan& p) {
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} "
      "{}\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      kSvgWidth, kSvgHeight, kSvgWidth, kSvgHeight);
  s += fmt::format(
      "<text x=\"{}\" y=\"24\" font-size=\"15\">{} on {} x {} ({}), remat {}, shard_as {}: "
      "{}</text>\n",
      kSvgLeft, EscapeXml(p.config_source), p.num_devices, EscapeXml(p.chip.name),
      EscapeXml(MeshText(p.mesh)), p.remat, p.shard_as ? "on" : "off",
      p.fits() ? "fits" : "does not fit");
  const MemoryScale scale(p);
  s += SvgPeakBar(p, scale);
  s += SvgTimeline(p, scale);
  s += SvgSimulatedStep(p);
  s += "</svg>\n";
  return s;
}

}  // namespace weft
