#include "weft/train/svg_plot.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <regex>

#include "scratch_dir.h"
#include "weft/base/atomic_file.h"
#include "weft/base/error.h"

namespace weft {
namespace {

namespace fs = std::filesystem;

PlotOptions Titled(std::string title) {
  PlotOptions options;
  options.title = std::move(title);
  return options;
}

// The points of every <polyline>, in order.
std::vector<std::vector<std::pair<double, double>>> Polylines(const std::string& svg) {
  std::vector<std::vector<std::pair<double, double>>> lines;
  std::regex polyline("<polyline[^>]*points=\"([^\"]*)\"");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), polyline);
       it != std::sregex_iterator(); ++it) {
    std::vector<std::pair<double, double>> points;
    std::string text = (*it)[1];
    std::regex point("([-0-9.]+),([-0-9.]+)");
    for (auto p = std::sregex_iterator(text.begin(), text.end(), point);
         p != std::sregex_iterator(); ++p) {
      points.emplace_back(std::stod((*p)[1]), std::stod((*p)[2]));
    }
    lines.push_back(points);
  }
  return lines;
}

// Opening and closing tags balance (self-closing ones count as both).
bool TagsBalance(const std::string& svg) {
  std::vector<std::string> stack;
  std::regex tag("<(/?)([a-z]+)[^>]*?(/?)>");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), tag); it != std::sregex_iterator();
       ++it) {
    bool closing = (*it)[1] == "/", self = (*it)[3] == "/";
    std::string name = (*it)[2];
    if (self) continue;
    if (!closing) {
      stack.push_back(name);
    } else if (stack.empty() || stack.back() != name) {
      return false;
    } else {
      stack.pop_back();
    }
  }
  return stack.empty();
}

// An affine map keeps ratios of differences: the plotted points are the data
// up to scale and offset (within the 0.01-pixel rounding).
void ExpectAffineImage(const std::vector<double>& data, const std::vector<double>& pixels,
                       double pixel_span) {
  ASSERT_EQ(data.size(), pixels.size());
  double d0 = data.front(), d1 = data.back(), p0 = pixels.front(), p1 = pixels.back();
  ASSERT_NE(d0, d1);
  for (size_t i = 0; i < data.size(); ++i) {
    double expected = p0 + (data[i] - d0) / (d1 - d0) * (p1 - p0);
    EXPECT_NEAR(pixels[i], expected, 0.02 + 1e-4 * pixel_span) << i;
  }
}

TEST(NiceTicks, StepsOfOneTwoFiveCoveringTheRange) {
  EXPECT_EQ(NiceTicks(0, 1, 5), (std::vector<double>{0, 0.2, 0.4, 0.6000000000000001, 0.8, 1}));
  std::mt19937_64 rng(8);
  std::uniform_real_distribution<double> exponent(-6, 6), unit(-1, 1);
  for (int trial = 0; trial < 500; ++trial) {
    double scale = std::pow(10.0, exponent(rng));
    double lo = unit(rng) * scale, hi = lo + (0.01 + std::abs(unit(rng))) * scale;
    auto ticks = NiceTicks(lo, hi, 5);
    ASSERT_GE(ticks.size(), 3u);
    ASSERT_LE(ticks.size(), 12u);
    EXPECT_LE(ticks.front(), lo);
    EXPECT_GE(ticks.back(), hi);
    double step = ticks[1] - ticks[0];
    double mantissa = step / std::pow(10.0, std::floor(std::log10(step) + 1e-9));
    EXPECT_TRUE(std::abs(mantissa - 1) < 1e-6 || std::abs(mantissa - 2) < 1e-6 ||
                std::abs(mantissa - 5) < 1e-6 || std::abs(mantissa - 10) < 1e-6)
        << step;
  }
  EXPECT_THROW(NiceTicks(1, 1), Error);
}

TEST(RenderSvgPlot, PlotsEverySeriesAffinely) {
  std::mt19937_64 rng(4);
  std::normal_distribution<double> noise(0, 0.05);
  PlotSeries loss{"train loss", {}, {}, ""}, eval{"eval loss", {}, {}, "black"};
  for (int step = 0; step < 200; ++step) {
    loss.x.push_back(step);
    loss.y.push_back(5.0 * std::exp(-step / 60.0) + 0.3 + noise(rng));
    if (step % 20 == 0) {
      eval.x.push_back(step);
      eval.y.push_back(5.0 * std::exp(-step / 60.0) + 0.5);
    }
  }
  std::vector<PlotSeries> series = {loss, eval};
  PlotOptions options = Titled("tiny <kjv> & co");
  options.x_label = "step";
  options.y_label = "loss";
  std::string svg = RenderSvgPlot(series, options);
  EXPECT_TRUE(TagsBalance(svg));
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_NE(svg.find("tiny &lt;kjv&gt; &amp; co"), std::string::npos);
  EXPECT_NE(svg.find(">train loss</text>"), std::string::npos);
  EXPECT_NE(svg.find(">step</text>"), std::string::npos);
  EXPECT_NE(svg.find("stroke=\"black\""), std::string::npos);
  auto lines = Polylines(svg);
  ASSERT_EQ(lines.size(), 2u);
  for (size_t s = 0; s < 2; ++s) {
    std::vector<double> px, py;
    for (auto [a, b] : lines[s]) px.push_back(a), py.push_back(b);
    ExpectAffineImage(series[s].x, px, 720);
    ExpectAffineImage(series[s].y, py, 420);
    // Larger y is higher up (smaller pixel y); x grows to the right.
    EXPECT_GT(px.back(), px.front());
    EXPECT_GT(py.back(), py.front());  // the loss falls
    for (auto [a, b] : lines[s]) {
      EXPECT_GE(a, 0);
      EXPECT_LE(a, 720);
      EXPECT_GE(b, 0);
      EXPECT_LE(b, 420);
    }
  }
}

TEST(RenderSvgPlot, BreaksLinesAtUnusablePoints) {
  PlotSeries s{"", {0, 1, 2, 3, 4, 5}, {1.0, 0.5, NAN, 0.25, -1.0, 0.1}, ""};
  auto linear = Polylines(RenderSvgPlot(std::span(&s, 1), {}));
  ASSERT_EQ(linear.size(), 2u);  // broken once, at the NaN
  EXPECT_EQ(linear[0].size(), 2u);
  EXPECT_EQ(linear[1].size(), 3u);
  PlotOptions log_y;
  log_y.log_y = true;
  std::string log_svg = RenderSvgPlot(std::span(&s, 1), log_y);
  auto log = Polylines(log_svg);
  ASSERT_EQ(log.size(), 3u);  // and on a log axis at the negative value too
  // Log axis: equal ratios are equal distances.
  EXPECT_NEAR(log[0][0].second - log[0][1].second, log[0][1].second - log[1][0].second, 0.02);
  EXPECT_NE(log_svg.find(">0.1</text>"), std::string::npos);
  EXPECT_TRUE(TagsBalance(log_svg));
}

// A series with markers gets a dot at each usable point, on its line's
// pixels (a validation loss every N steps: one point shows too); others none.
TEST(RenderSvgPlot, MarkersDotEveryUsablePoint) {
  PlotSeries loss{"loss", {1, 2, 3, 4}, {4, 3, 2.5, 2}, ""};
  PlotSeries validation{"validation loss", {2, 4}, {3.5, NAN}, "red", true};
  const std::vector<PlotSeries> both = {loss, validation};
  const std::string svg = RenderSvgPlot(both, {});
  EXPECT_TRUE(TagsBalance(svg));
  std::regex circle("<circle cx=\"([-0-9.]+)\" cy=\"([-0-9.]+)\" r=\"3\" fill=\"red\"/>");
  std::vector<std::pair<double, double>> dots;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), circle); it != std::sregex_iterator();
       ++it) {
    dots.emplace_back(std::stod((*it)[1]), std::stod((*it)[2]));
  }
  ASSERT_EQ(dots.size(), 1u);  // the NaN has none
  const auto lines = Polylines(svg);
  ASSERT_EQ(lines.size(), 2u);
  ASSERT_EQ(lines[1].size(), 1u);
  EXPECT_EQ(dots[0], lines[1][0]);
  // Step 2 of the loss line is at the same x.
  EXPECT_DOUBLE_EQ(dots[0].first, lines[0][1].first);
  EXPECT_EQ(svg.find("<circle", 0), svg.rfind("<circle"));  // the loss has no dots
}

TEST(RenderSvgPlot, EdgeCasesAndErrors) {
  EXPECT_TRUE(TagsBalance(RenderSvgPlot({}, Titled("empty"))));
  PlotSeries flat{"flat", {1, 2, 3}, {2, 2, 2}, ""};
  EXPECT_EQ(Polylines(RenderSvgPlot(std::span(&flat, 1), {})).at(0).size(), 3u);
  PlotSeries bad{"bad", {1, 2}, {1}, ""};
  EXPECT_THROW(RenderSvgPlot(std::span(&bad, 1), {}), Error);
  PlotOptions narrow;
  narrow.width = 10;
  EXPECT_THROW(RenderSvgPlot({}, narrow), Error);
}

TEST(WriteSvgPlot, WritesAtomically) {
  const weft::testing::ScratchDir scratch("weft_svg");
  const fs::path& dir = scratch.path();
  PlotSeries s{"loss", {0, 1, 2}, {3, 2, 1.5}, ""};
  WriteSvgPlot(dir / "loss.svg", std::span(&s, 1), Titled("first"));
  WriteSvgPlot(dir / "loss.svg", std::span(&s, 1), Titled("second"));
  std::string svg = ReadFileToString(dir / "loss.svg");
  EXPECT_NE(svg.find(">second</text>"), std::string::npos);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
  EXPECT_THROW(WriteSvgPlot(dir / "missing" / "loss.svg", std::span(&s, 1), {}), Error);
}

}  // namespace
}  // namespace weft
