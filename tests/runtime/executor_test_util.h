// Helpers for the executor's tests: parse a text module, make random inputs,
// run, pick named instructions, compare with float64 references.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "weft/hlo/parser.h"
#include "weft/runtime/executor.h"

namespace weft::runtime::testing {

inline std::unique_ptr<HloModule> Parse(std::string_view text) { return ParseHloModule(text); }

// Uniform in [lo, hi) for floats, [lo, hi] for integers, random bits for
// pred. Values are rounded to the element type.
inline HostTensor Random(const Shape& shape, std::mt19937& rng, double lo = -1.0, double hi = 1.0) {
  HostTensor t = HostTensor::Uninitialized(shape);
  std::vector<double> values(static_cast<size_t>(t.element_count()));
  const PrimitiveType type = shape.element_type();
  for (double& v : values) {
    if (IsFloatingPoint(type)) {
      v = std::uniform_real_distribution<double>(lo, hi)(rng);
    } else if (type == PrimitiveType::kPred) {
      v = rng() & 1;
    } else {
      v = static_cast<double>(std::uniform_int_distribution<int64_t>(
          static_cast<int64_t>(lo), static_cast<int64_t>(hi))(rng));
    }
  }
  return HostTensor::FromDoubles(shape, values);
}

inline HostTensor Random(std::string_view shape, std::mt19937& rng, double lo = -1.0,
                         double hi = 1.0) {
  return Random(ParseShape(shape), rng, lo, hi);
}

// Runs the module on one device.
inline std::vector<HostTensor> Run(const HloModule& module, std::vector<HostTensor> inputs,
                                   ExecutorStats* stats = nullptr) {
  Executor executor(module);
  std::vector<HostTensor> out = executor.Run(std::move(inputs));
  if (stats != nullptr) *stats = executor.stats();
  return out;
}

// Parses HLO text and runs it on one device.
inline std::vector<HostTensor> RunText(std::string_view text, std::vector<HostTensor> inputs) {
  return Run(*Parse(text), std::move(inputs));
}

// Runs the module with its entry's root replaced by a tuple of the named
// instructions (arrays), and returns them by name: per-instruction results.
inline std::map<std::string, HostTensor> RunNamed(std::string_view text,
                                                  std::vector<HostTensor> inputs,
                                                  const std::vector<std::string>& names) {
  std::unique_ptr<HloModule> module = Parse(text);
  HloComputation* entry = module->entry_computation();
  std::vector<HloInstruction*> picked;
  std::vector<Shape> shapes;
  for (const std::string& name : names) {
    HloInstruction* instr = entry->GetInstruction(name);
    if (instr == nullptr) ADD_FAILURE() << "no instruction named " << name;
    picked.push_back(instr);
    shapes.push_back(instr->shape());
  }
  HloInstruction* root = entry->AddInstruction(
      HloInstruction::Create(HloOpcode::kTuple, Shape::Tuple(shapes), picked, {}, {}, "picked"));
  entry->set_root_instruction(root);
  std::vector<HostTensor> out = Run(*module, std::move(inputs));
  std::map<std::string, HostTensor> by_name;
  size_t next = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    // A tuple-shaped pick would take several leaves; the tests pick arrays.
    by_name[names[i]] = out.at(next);
    next += static_cast<size_t>(shapes[i].LeafCount());
  }
  return by_name;
}

// |got - want| <= atol + rtol * |want| elementwise, naming the first miss.
inline void ExpectNear(const HostTensor& got, const std::vector<double>& want, double rtol,
                       double atol, const std::string& what = "") {
  ASSERT_EQ(got.element_count(), static_cast<int64_t>(want.size())) << what;
  int64_t misses = 0;
  for (int64_t i = 0; i < got.element_count(); ++i) {
    const double g = got.GetDouble(i), w = want[i];
    const bool ok = (std::isnan(w) && std::isnan(g)) || (std::isinf(w) && g == w) ||
                    std::fabs(g - w) <= atol + rtol * std::fabs(w);
    if (!ok && misses++ < 5) {
      ADD_FAILURE() << what << " element " << i << ": got " << g << ", want " << w;
    }
  }
  EXPECT_EQ(misses, 0) << what << ": " << misses << " of " << got.element_count()
                       << " elements differ";
}

inline void ExpectEqual(const HostTensor& got, const std::vector<double>& want,
                        const std::string& what = "") {
  ExpectNear(got, want, 0, 0, what);
}

// Row-major multi-index helpers for the references.
inline std::vector<int64_t> Strides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (int64_t i = static_cast<int64_t>(dims.size()) - 2; i >= 0; --i)
    s[i] = s[i + 1] * dims[i + 1];
  return s;
}

inline std::vector<int64_t> Unravel(int64_t flat, const std::vector<int64_t>& dims) {
  std::vector<int64_t> index(dims.size());
  for (int64_t i = static_cast<int64_t>(dims.size()) - 1; i >= 0; --i) {
    index[i] = flat % dims[i];
    flat /= dims[i];
  }
  return index;
}

inline int64_t Ravel(const std::vector<int64_t>& index, const std::vector<int64_t>& dims) {
  int64_t flat = 0;
  for (size_t i = 0; i < dims.size(); ++i) flat = flat * dims[i] + index[i];
  return flat;
}

// Expects fn to throw weft::Error whose message contains every fragment.
template <typename Fn>
void ExpectErrorContaining(Fn&& fn, const std::vector<std::string>& fragments) {
  try {
    fn();
    ADD_FAILURE() << "expected a weft::Error";
  } catch (const Error& e) {
    const std::string message = e.what();
    for (const std::string& f : fragments) {
      EXPECT_NE(message.find(f), std::string::npos) << "'" << f << "' not in: " << message;
    }
  }
}

}  // namespace weft::runtime::testing
