// reduce-window and select-and-scatter in the executor against float64
// references computed here: strides, low/high padding, base (lhs) and
// window (rhs) dilation, variadic reduce-window, overlapping windows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "executor_test_util.h"

namespace weft::runtime {
namespace {

using testing::ExpectNear;
using testing::Random;
using testing::Ravel;
using testing::RunText;
using testing::Unravel;

struct Win {
  std::vector<int64_t> size, stride, lo, hi, base, dil;
};

// The flat operand indices the window at output position `at` covers
// (padding and base-dilation holes hold none).
std::vector<int64_t> Covered(const std::vector<int64_t>& dims, const Win& w,
                             const std::vector<int64_t>& at) {
  std::vector<std::vector<int64_t>> per_dim(dims.size());
  for (size_t d = 0; d < dims.size(); ++d) {
    for (int64_t k = 0; k < w.size[d]; ++k) {
      const int64_t padded = at[d] * w.stride[d] + k * w.dil[d];  // in the padded, dilated base
      const int64_t p = padded - w.lo[d];
      if (p >= 0 && p % w.base[d] == 0 && p / w.base[d] < dims[d])
        per_dim[d].push_back(p / w.base[d]);
    }
  }
  std::vector<int64_t> out;
  std::vector<int64_t> index(dims.size());
  std::function<void(size_t)> walk = [&](size_t d) {
    if (d == dims.size()) {
      out.push_back(Ravel(index, dims));
      return;
    }
    for (int64_t i : per_dim[d]) {
      index[d] = i;
      walk(d + 1);
    }
  };
  walk(0);
  return out;
}

std::vector<int64_t> OutDims(const std::vector<int64_t>& dims, const Win& w) {
  std::vector<int64_t> out;
  for (size_t d = 0; d < dims.size(); ++d) {
    const int64_t base = (dims[d] - 1) * w.base[d] + 1 + w.lo[d] + w.hi[d];
    const int64_t span = (w.size[d] - 1) * w.dil[d] + 1;
    out.push_back(base < span ? 0 : (base - span) / w.stride[d] + 1);
  }
  return out;
}

std::string Times(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "x" : "") + std::to_string(v[i]);
  return s;
}

std::string WindowText(const Win& w) {
  std::string pad;
  for (size_t i = 0; i < w.lo.size(); ++i) {
    pad += (i ? "x" : "") + std::to_string(w.lo[i]) + "_" + std::to_string(w.hi[i]);
  }
  return "{size=" + Times(w.size) + " stride=" + Times(w.stride) + " pad=" + pad +
         " lhs_dilate=" + Times(w.base) + " rhs_dilate=" + Times(w.dil) + "}";
}

std::string DimsText(const std::vector<int64_t>& d) {
  std::string s;
  for (size_t i = 0; i < d.size(); ++i) s += (i ? "," : "") + std::to_string(d[i]);
  return s;
}

const std::vector<Win> kWindows = {
    {{2, 2}, {2, 2}, {0, 0}, {0, 0}, {1, 1}, {1, 1}},  // pooling
    {{3, 2}, {2, 1}, {1, 0}, {1, 1}, {1, 2}, {2, 1}},  // padding, both dilations
    {{1, 3}, {1, 2}, {0, 2}, {0, 1}, {1, 1}, {1, 2}},  // one dim untouched
};

TEST(EvalWindowTest, ReduceWindowFoldsTheCoveredElements) {
  const std::vector<int64_t> dims = {7, 6};
  std::mt19937 rng(21);
  for (const char* type : {"f32", "f64"}) {
    for (const Win& w : kWindows) {
      const std::vector<int64_t> out_dims = OutDims(dims, w);
      SCOPED_TRACE(std::string(type) + " window=" + WindowText(w));
      const std::string t = type;
      const std::string text =
          "HloModule r\nadd {\n  a = " + t + "[] parameter(0)\n  b = " + t +
          "[] parameter(1)\n  ROOT s = " + t + "[] add(a, b)\n}\nmax {\n  a = " + t +
          "[] parameter(0)\n  b = " + t + "[] parameter(1)\n  ROOT m = " + t +
          "[] maximum(a, b)\n}\nENTRY e {\n  x = " + t +
          "[7,6] parameter(0)\n"
          "  init = " +
          t + "[] parameter(1)\n  lo = " + t + "[] constant(-inf)\n  s = " + t + "[" +
          DimsText(out_dims) + "] reduce-window(x, init), window=" + WindowText(w) +
          ", to_apply=add\n  m = " + t + "[" + DimsText(out_dims) +
          "] reduce-window(x, lo), window=" + WindowText(w) +
          ", to_apply=max\n  ROOT r = tuple(s, m)\n}\n";
      const HostTensor x = Random(t + "[7,6]", rng);
      const HostTensor init = Random(t + "[]", rng);
      const std::vector<double> v = x.ToDoubles();
      std::vector<double> sums, maxes;
      for (int64_t o = 0; o < out_dims[0] * out_dims[1]; ++o) {
        double s = init.GetDouble(0), m = -INFINITY;
        for (int64_t e : Covered(dims, w, Unravel(o, out_dims))) {
          s += v[e];
          m = std::max(m, v[e]);
        }
        sums.push_back(s);
        maxes.push_back(m);
      }
      const std::vector<HostTensor> out = RunText(text, {x, init});
      const double tol = t == "f32" ? 1e-6 : 1e-14;
      ExpectNear(out.at(0), sums, tol, tol, "sum");
      ExpectNear(out.at(1), maxes, 0, 0, "max");
    }
  }
}

TEST(EvalWindowTest, VariadicReduceWindowKeepsTheArgmax) {
  // (value, index) pairs reduced by "larger value, then lower index".
  const std::string text = R"(HloModule r
argmax {
  av = f32[] parameter(0)
  ai = s32[] parameter(1)
  bv = f32[] parameter(2)
  bi = s32[] parameter(3)
  gt = pred[] compare(av, bv), direction=GT
  eq = pred[] compare(av, bv), direction=EQ
  lt = pred[] compare(ai, bi), direction=LT
  tie = pred[] and(eq, lt)
  a_wins = pred[] or(gt, tie)
  v = f32[] select(a_wins, av, bv)
  i = s32[] select(a_wins, ai, bi)
  ROOT r = (f32[], s32[]) tuple(v, i)
}
ENTRY e {
  x = f32[9] parameter(0)
  idx = s32[9] iota(), iota_dimension=0
  lo = f32[] constant(-inf)
  none = s32[] constant(-1)
  ROOT r = (f32[4], s32[4]) reduce-window(x, idx, lo, none), window={size=3 stride=2}, to_apply=argmax
}
)";
  std::mt19937 rng(2);
  const HostTensor x = Random("f32[9]", rng);
  const std::vector<double> v = x.ToDoubles();
  std::vector<double> values, indices;
  for (int64_t o = 0; o < 4; ++o) {
    const int64_t best =
        2 * o + (std::max_element(v.begin() + 2 * o, v.begin() + 2 * o + 3) - (v.begin() + 2 * o));
    values.push_back(v[best]);
    indices.push_back(static_cast<double>(best));
  }
  const std::vector<HostTensor> out = RunText(text, {x});
  ExpectNear(out.at(0), values, 0, 0, "values");
  ExpectNear(out.at(1), indices, 0, 0, "indices");
}

TEST(EvalWindowTest, SelectAndScatterAddsEachSourceAtItsWindowsMaximum) {
  const std::vector<int64_t> dims = {7, 6};
  std::mt19937 rng(4);
  for (const Win& w : kWindows) {
    const std::vector<int64_t> src_dims = OutDims(dims, w);
    SCOPED_TRACE("window=" + WindowText(w));
    const std::string text = R"(HloModule s
ge {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = pred[] compare(a, b), direction=GE
}
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[7,6] parameter(0)
  src = f32[)" + DimsText(src_dims) +
                             R"(] parameter(1)
  init = f32[] parameter(2)
  ROOT s = f32[7,6] select-and-scatter(x, src, init), window=)" +
                             WindowText(w) + R"(, select=ge, scatter=add
}
)";
    // Values from a few levels: ties, where the first covered element wins.
    HostTensor x = Random("f32[7,6]", rng, 0, 4);
    std::vector<double> xv = x.ToDoubles();
    for (double& e : xv) e = std::floor(e);
    x = HostTensor::FromDoubles(x.shape(), xv);
    const HostTensor src = Random("f32[" + DimsText(src_dims) + "]", rng);
    const HostTensor init = Random("f32[]", rng);
    std::vector<double> want(xv.size(), init.GetDouble(0));
    const std::vector<double> sv = src.ToDoubles();
    for (int64_t s = 0; s < src.element_count(); ++s) {
      const std::vector<int64_t> covered = Covered(dims, w, Unravel(s, src_dims));
      if (covered.empty()) continue;
      int64_t chosen = covered[0];
      for (int64_t e : covered) {
        if (xv[e] > xv[chosen]) chosen = e;
      }
      want[chosen] += sv[s];
    }
    ExpectNear(RunText(text, {x, src, init}).at(0), want, 1e-6, 1e-6);
  }
}

}  // namespace
}  // namespace weft::runtime
