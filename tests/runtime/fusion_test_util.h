// Helpers of the fusion evaluator's tests (eval_fusion_test.cc,
// fusion_plan_test.cc, fusion_tiles_test.cc): a fused computation's body as
// an unfused module and as one fusion, run on never-zero random inputs and
// compared bit for bit; refusals by the executor.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "executor_test_util.h"
#include "weft/base/error.h"

namespace weft::runtime::fusion_testing {

// The executor refuses `text` with an error that contains every one of `parts`.
inline void ExpectRefused(const std::string& text, const std::vector<std::string>& parts) {
  try {
    Executor executor(*testing::Parse(text));
    ADD_FAILURE() << "ran: " << text;
  } catch (const Error& e) {
    for (const std::string& part : parts) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  }
}

// A fused computation's body (parameters p0, p1, ... of `params`; the last
// line is the ROOT) as an unfused entry and as one loop fusion.
struct Case {
  std::vector<std::string> params;  // shapes
  std::vector<std::string> body;
  std::string result;  // the root's shape
  std::string kind = "kLoop";
};

inline std::string ParamLines(const Case& c) {
  std::string text;
  for (size_t i = 0; i < c.params.size(); ++i) {
    text += fmt::format("  p{} = {} parameter({})\n", i, c.params[i], i);
  }
  return text;
}

inline std::string Body(const Case& c) {
  std::string text;
  for (const std::string& line : c.body) text += "  " + line + "\n";
  return text;
}

inline std::string Unfused(const Case& c) {
  return "HloModule unfused\nENTRY main {\n" + ParamLines(c) + Body(c) + "}\n";
}

inline std::string Fused(const Case& c) {
  std::vector<std::string> names;
  for (size_t i = 0; i < c.params.size(); ++i) names.push_back(fmt::format("p{}", i));
  return "HloModule fused\nfused_computation {\n" + ParamLines(c) + Body(c) + "}\nENTRY main {\n" +
         ParamLines(c) +
         fmt::format("  ROOT f = {} fusion({}), kind={}, calls=fused_computation\n}}\n", c.result,
                     fmt::join(names, ", "), c.kind);
}

// Never-zero inputs.
inline std::vector<HostTensor> Inputs(const Case& c, std::mt19937& rng) {
  std::vector<HostTensor> inputs;
  for (const std::string& shape : c.params) {
    HostTensor t = testing::Random(shape, rng, 0.25, 2.0);
    if (t.element_type() != PrimitiveType::kPred) {
      std::vector<double> v = t.ToDoubles();
      for (double& x : v) x = (rng() & 1) ? x : -x;
      t = HostTensor::FromDoubles(t.shape(), v);
    }
    inputs.push_back(std::move(t));
  }
  return inputs;
}

inline void ExpectSameBits(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  const std::vector<HostTensor> inputs = Inputs(c, rng);
  std::vector<HostTensor> a, b;
  for (const HostTensor& t : inputs) {
    a.push_back(t.Clone());
    b.push_back(t.Clone());
  }
  const HostTensor want = testing::Run(*testing::Parse(Unfused(c)), std::move(a)).at(0);
  const HostTensor got = testing::Run(*testing::Parse(Fused(c)), std::move(b)).at(0);
  ASSERT_EQ(want.shape(), got.shape());
  const int64_t width = ByteWidth(want.element_type());
  for (int64_t k = 0; k < want.element_count(); ++k) {
    if (std::memcmp(static_cast<const std::byte*>(want.raw_data()) + k * width,
                    static_cast<const std::byte*>(got.raw_data()) + k * width, width) != 0) {
      FAIL() << "element " << k << ": unfused " << want.GetDouble(k) << ", fused "
             << got.GetDouble(k) << "\n"
             << Fused(c);
    }
  }
}

}  // namespace weft::runtime::fusion_testing
