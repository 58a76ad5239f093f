// `weft bench executor`: interpretation overhead per instruction.
#include "bench_executor.h"

#include <fmt/core.h>

#include <nlohmann/json.hpp>
#include <string>

#include "timer.h"
#include "weft/hlo/parser.h"
#include "weft/runtime/executor.h"

namespace weft::bench {

namespace {

// p, then a_1 = add(p, p), a_i = add(a_{i-1}, p): every step allocates,
// reads two operands and frees its predecessor, like real programs.
std::string ChainModule(int64_t elements, int64_t length) {
  const std::string type = fmt::format("f32[{}]", elements);
  std::string text = "HloModule chain\n\nENTRY main {\n";
  text += fmt::format("  p = {} parameter(0)\n", type);
  std::string prev = "p";
  for (int64_t i = 1; i <= length; ++i) {
    const std::string name = fmt::format("a{}", i);
    text += fmt::format("  {}{} = {} add({}, p)\n", i == length ? "ROOT " : "", name, type, prev);
    prev = name;
  }
  return text + "}\n";
}

}  // namespace

std::vector<ExecutorOverheadResult> MeasureExecutorOverhead(const std::vector<int64_t>& elements,
                                                            int64_t chain_length) {
  std::vector<ExecutorOverheadResult> results;
  for (int64_t n : elements) {
    auto module = ParseHloModule(ChainModule(n, chain_length));
    runtime::Executor executor(*module);
    runtime::HostTensor p(Shape(PrimitiveType::kF32, {n}));
    for (int64_t i = 0; i < n; ++i) p.mutable_data<float>()[i] = 1e-3f * static_cast<float>(i + 1);
    executor.Run({p});  // warm up
    const double seconds = BestSeconds(5, [&] { executor.Run({p}); });

    // The same chain as a C++ loop over two buffers.
    const float* pp = p.data<float>();
    std::vector<float> a(pp, pp + n), b(n);
    const double direct = BestSeconds(5, [&] {
      for (int64_t i = 0; i < chain_length; ++i) {
        for (int64_t k = 0; k < n; ++k) b[k] = a[k] + pp[k];
        std::swap(a, b);
        asm volatile("" : : "r"(a.data()) : "memory");
      }
    });
    ExecutorOverheadResult r;
    r.elements = n;
    r.instructions = executor.stats().instructions;
    r.us_per_instruction = seconds / static_cast<double>(r.instructions) * 1e6;
    r.us_per_add_direct = direct / static_cast<double>(chain_length) * 1e6;
    results.push_back(r);
  }
  return results;
}

int RunExecutorOverhead(bool json) {
  const std::vector<ExecutorOverheadResult> results = MeasureExecutorOverhead();
  if (json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& r : results) {
      rows.push_back({{"elements", r.elements},
                      {"instructions", r.instructions},
                      {"us_per_instruction", r.us_per_instruction},
                      {"us_per_add_direct", r.us_per_add_direct}});
    }
    nlohmann::json j = {{"benchmark", "executor_overhead"}, {"results", rows}};
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print("executor overhead: a chain of dependent f32 adds\n");
  fmt::print("{:>9} {:>13} {:>12} {:>16}\n", "elements", "instructions", "us/instr",
             "us/add (direct)");
  for (const auto& r : results) {
    fmt::print("{:>9} {:>13} {:>12.3f} {:>16.4f}\n", r.elements, r.instructions,
               r.us_per_instruction, r.us_per_add_direct);
  }
  return 0;
}

}  // namespace weft::bench
