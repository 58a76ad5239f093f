// A small self-contained SVG line plot (loss curves): axes with "nice" ticks,
// grid, title, axis labels, one or more series and a legend. Non-finite
// points (and non-positive ones on a log axis) break a line instead of
// bending it.
#pragma once

#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace weft {

struct PlotSeries {
  std::string name;  // legend entry; "" for none
  std::vector<double> x, y;
  std::string color;     // any SVG color; "" picks from a palette
  bool markers = false;  // a dot at each point too (a sparse series shows single points)
};

struct PlotOptions {
  std::string title;
  std::string x_label;
  std::string y_label;
  int width = 720;
  int height = 420;
  bool log_y = false;
};

// Tick values at multiples of 1, 2 or 5 × 10^k covering [lo, hi] with about
// `target` intervals: the first tick ≤ lo, the last ≥ hi.
std::vector<double> NiceTicks(double lo, double hi, int target = 5);

// Text made safe for SVG/XML content and attribute values (< > & ").
std::string EscapeXml(std::string_view text);

std::string RenderSvgPlot(std::span<const PlotSeries> series, const PlotOptions& options);
// Renders and writes atomically (temporary sibling, then rename).
void WriteSvgPlot(const std::filesystem::path& path, std::span<const PlotSeries> series,
                  const PlotOptions& options);

}  // namespace weft
