#include "weft/train/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "weft/base/atomic_file.h"
#include "weft/base/error.h"

namespace weft {
namespace {

constexpr const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                    "#9467bd", "#8c564b", "#e377c2", "#17becf"};
constexpr double kLeft = 72, kRight = 24, kTop = 44, kBottom = 56;

std::string Label(double value) {
  if (std::abs(value) < 1e-12) value = 0;  // no "-0" or "1e-17" at the origin
  return fmt::format("{:g}", value);
}

// An axis: data range, ticks and the data → pixel map.
struct Axis {
  bool log = false;
  std::vector<double> ticks;  // in data units
  double lo = 0, hi = 1;      // in transformed units (log10 when log)
  double pixel_lo = 0, pixel_hi = 1;

  double Transform(double v) const { return log ? std::log10(v) : v; }
  bool Usable(double v) const { return std::isfinite(v) && (!log || v > 0); }
  double ToPixel(double v) const {
    return pixel_lo + (Transform(v) - lo) / (hi - lo) * (pixel_hi - pixel_lo);
  }
};

Axis MakeAxis(const std::vector<double>& values, bool log, double pixel_lo, double pixel_hi) {
  Axis axis;
  axis.log = log;
  axis.pixel_lo = pixel_lo;
  axis.pixel_hi = pixel_hi;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (double v : values) {
    if (!axis.Usable(v)) continue;
    lo = std::min(lo, axis.Transform(v));
    hi = std::max(hi, axis.Transform(v));
  }
  if (lo > hi) lo = 0, hi = 1;  // no data
  if (lo == hi) {
    double pad = log ? 0.5 : (lo == 0 ? 1.0 : std::abs(lo) * 0.5);
    lo -= pad, hi += pad;
  }
  if (!log) {
    axis.ticks = NiceTicks(lo, hi);
    axis.lo = axis.ticks.front();
    axis.hi = axis.ticks.back();
    return axis;
  }
  // Log axis: whole decades, with 2 and 5 in between when they are few.
  double first = std::floor(lo), last = std::ceil(hi);
  if (first == last) last += 1;
  const bool fine = last - first <= 2;
  for (double d = first; d <= last; d += 1) {
    axis.ticks.push_back(std::pow(10.0, d));
    if (fine && d < last) {
      axis.ticks.push_back(2 * std::pow(10.0, d));
      axis.ticks.push_back(5 * std::pow(10.0, d));
    }
  }
  axis.lo = first;
  axis.hi = last;
  return axis;
}

}  // namespace

std::vector<double> NiceTicks(double lo, double hi, int target) {
  WEFT_CHECK(std::isfinite(lo) && std::isfinite(hi) && lo < hi && target >= 1,
             "NiceTicks needs a finite range lo < hi, got [{}, {}]", lo, hi);
  double raw = (hi - lo) / target;
  double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double factor : {1.0, 2.0, 5.0, 10.0}) {
    step = factor * magnitude;
    if (step >= raw) break;
  }
  // Ticks are integer multiples of the step, so labels do not drift.
  double first = std::floor(lo / step + 1e-9), last = std::ceil(hi / step - 1e-9);
  std::vector<double> ticks;
  for (double k = first; k <= last; k += 1) ticks.push_back(k * step);
  return ticks;
}

std::string RenderSvgPlot(std::span<const PlotSeries> series, const PlotOptions& options) {
  WEFT_CHECK(options.width >= 200 && options.height >= 150,
             "plot '{}' is {}x{} pixels; make it at least 200x150", options.title, options.width,
             options.height);
  std::vector<double> xs, ys;
  for (const auto& s : series) {
    WEFT_CHECK(s.x.size() == s.y.size(), "plot series '{}' has {} x values but {} y values", s.name,
               s.x.size(), s.y.size());
    xs.insert(xs.end(), s.x.begin(), s.x.end());
    ys.insert(ys.end(), s.y.begin(), s.y.end());
  }
  const double w = options.width, h = options.height;
  const Axis x = MakeAxis(xs, false, kLeft, w - kRight);
  const Axis y = MakeAxis(ys, options.log_y, h - kBottom, kTop);

  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" "
      "viewBox=\"0 0 {0} {1}\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n",
      options.width, options.height);
  // Grid and tick labels.
  for (double t : x.ticks) {
    double px = x.ToPixel(t);
    svg += fmt::format(
        "<line x1=\"{0:.2f}\" y1=\"{1:.2f}\" x2=\"{0:.2f}\" y2=\"{2:.2f}\" stroke=\"#e5e5e5\"/>\n"
        "<text x=\"{0:.2f}\" y=\"{3:.2f}\" text-anchor=\"middle\">{4}</text>\n",
        px, kTop, h - kBottom, h - kBottom + 16, Label(t));
  }
  for (double t : y.ticks) {
    double py = y.ToPixel(t);
    svg += fmt::format(
        "<line x1=\"{1:.2f}\" y1=\"{0:.2f}\" x2=\"{2:.2f}\" y2=\"{0:.2f}\" stroke=\"#e5e5e5\"/>\n"
        "<text x=\"{3:.2f}\" y=\"{4:.2f}\" text-anchor=\"end\">{5}</text>\n",
        py, kLeft, w - kRight, kLeft - 6, py + 4, Label(t));
  }
  svg += fmt::format(
      "<rect x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" height=\"{:.2f}\" fill=\"none\" "
      "stroke=\"#333\"/>\n",
      kLeft, kTop, w - kLeft - kRight, h - kTop - kBottom);
  // Title and labels.
  if (!options.title.empty()) {
    svg += fmt::format(
        "<text x=\"{:.2f}\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">{}</text>\n", w / 2,
        EscapeXml(options.title));
  }
  if (!options.x_label.empty()) {
    svg += fmt::format("<text x=\"{:.2f}\" y=\"{:.2f}\" text-anchor=\"middle\">{}</text>\n",
                       (kLeft + w - kRight) / 2, h - 14, EscapeXml(options.x_label));
  }
  if (!options.y_label.empty()) {
    double cy = (kTop + h - kBottom) / 2;
    svg += fmt::format(
        "<text x=\"18\" y=\"{0:.2f}\" text-anchor=\"middle\" transform=\"rotate(-90 18 {0:.2f})\">"
        "{1}</text>\n",
        cy, EscapeXml(options.y_label));
  }
  // Series: one polyline per run of usable points.
  for (size_t i = 0; i < series.size(); ++i) {
    const PlotSeries& s = series[i];
    std::string color = s.color.empty() ? kPalette[i % std::size(kPalette)] : EscapeXml(s.color);
    std::string points;
    auto flush = [&] {
      if (!points.empty()) {
        svg += fmt::format(
            "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" points=\"{}\"/>\n", color,
            points);
      }
      points.clear();
    };
    std::string dots;
    for (size_t k = 0; k < s.x.size(); ++k) {
      if (!x.Usable(s.x[k]) || !y.Usable(s.y[k])) {
        flush();
        continue;
      }
      if (!points.empty()) points += ' ';
      points += fmt::format("{:.2f},{:.2f}", x.ToPixel(s.x[k]), y.ToPixel(s.y[k]));
      if (s.markers) {
        dots += fmt::format("<circle cx=\"{:.2f}\" cy=\"{:.2f}\" r=\"3\" fill=\"{}\"/>\n",
                            x.ToPixel(s.x[k]), y.ToPixel(s.y[k]), color);
      }
    }
    flush();
    svg += dots;
  }
  // Legend, top right inside the plot.
  double ly = kTop + 16;
  for (size_t i = 0; i < series.size(); ++i) {
    if (series[i].name.empty()) continue;
    std::string color =
        series[i].color.empty() ? kPalette[i % std::size(kPalette)] : EscapeXml(series[i].color);
    double lx = w - kRight - 150;
    svg += fmt::format(
        "<line x1=\"{:.2f}\" y1=\"{:.2f}\" x2=\"{:.2f}\" y2=\"{:.2f}\" stroke=\"{}\" "
        "stroke-width=\"2\"/>\n<text x=\"{:.2f}\" y=\"{:.2f}\">{}</text>\n",
        lx, ly - 4, lx + 20, ly - 4, color, lx + 26, ly, EscapeXml(series[i].name));
    ly += 16;
  }
  svg += "</svg>\n";
  return svg;
}

void WriteSvgPlot(const std::filesystem::path& path, std::span<const PlotSeries> series,
                  const PlotOptions& options) {
  WriteFileAtomically(path, RenderSvgPlot(series, options));
}

std::string EscapeXml(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace weft
