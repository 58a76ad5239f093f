// `weft bench executor`: interpretation overhead per instruction, and
// (--gemm) bf16 against f32 dots.
#include "bench_executor.h"

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>

#include "timer.h"
#include "weft/base/algorithm.h"
#include "weft/base/error.h"
#include "weft/compiler/compile.h"
#include "weft/hlo/parser.h"
#include "weft/kernels/simd.h"
#include "weft/runtime/executor.h"
#include "weft/runtime/run_command.h"

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

// One dot [m, k] x [k, n] -> [m, n] of `type` operands and result.
// [M,K] x [K,N], or with `transposed_lhs` the lhs stored [K,M] (x^T dy).
std::string DotModule(const GemmShape& s, std::string_view type, bool transposed_lhs = false) {
  return fmt::format(
      "HloModule gemm\n\nENTRY main {{\n  a = {0}[{1},{2}] parameter(0)\n"
      "  b = {0}[{3},{4}] parameter(1)\n  ROOT d = {0}[{5},{4}] dot(a, b), "
      "lhs_contracting_dims={{{6}}}, rhs_contracting_dims={{0}}\n}}\n",
      type, transposed_lhs ? s.k : s.m, transposed_lhs ? s.m : s.k, s.k, s.n, s.m,
      transposed_lhs ? 0 : 1);
}

runtime::HostTensor RandomMatrix(PrimitiveType type, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<double> values(static_cast<size_t>(rows * cols));
  for (double& v : values) v = u(rng);
  return runtime::HostTensor::FromDoubles(Shape(type, {rows, cols}), values);
}

struct DotTiming {
  double gflops = 0;
  int64_t unplanned_bytes = 0;
};

// The median time of the dot alone over `reps` runs (after one untimed run),
// as GFLOP/s.
DotTiming TimeDot(const GemmShape& s, PrimitiveType type, int reps, bool transposed_lhs = false) {
  auto module = ParseHloModule(DotModule(s, PrimitiveTypeName(type), transposed_lhs));
  runtime::ExecutorOptions options;
  options.profile = true;
  runtime::Executor executor(*module, options);
  const std::vector<runtime::HostTensor> inputs = {
      transposed_lhs ? RandomMatrix(type, s.k, s.m, 1) : RandomMatrix(type, s.m, s.k, 1),
      RandomMatrix(type, s.k, s.n, 2)};
  const int kDot = static_cast<int>(runtime::OpClass::kDot);
  executor.Run(inputs);
  std::vector<double> seconds;
  for (int r = 0; r < std::max(1, reps); ++r) {
    executor.Run(inputs);
    seconds.push_back(executor.stats().class_seconds[kDot]);
  }
  const double flops =
      2.0 * static_cast<double>(s.m) * static_cast<double>(s.k) * static_cast<double>(s.n);
  return {flops / Median(seconds) * 1e-9, executor.stats().unplanned_bytes};
}

}  // namespace

std::vector<GemmShape> DefaultGemmShapes() { return {{4096, 512, 1536}, {4096, 1536, 512}}; }

GemmShape ParseGemmShape(const std::string& text) {
  GemmShape s;
  char x1 = 0, x2 = 0;
  char rest = 0;
  const int got = std::sscanf(text.c_str(), "%" SCNd64 "%c%" SCNd64 "%c%" SCNd64 "%c", &s.m, &x1,
                              &s.k, &x2, &s.n, &rest);
  WEFT_CHECK(got == 5 && x1 == 'x' && x2 == 'x' && s.m > 0 && s.k > 0 && s.n > 0,
             "--gemm-shape '{}' must be MxKxN with positive sizes, e.g. 4096x512x1536", text);
  return s;
}

std::vector<ExecutorGemmResult> MeasureExecutorGemm(const std::vector<GemmShape>& shapes,
                                                    int reps) {
  std::vector<ExecutorGemmResult> results;
  for (const GemmShape& s : shapes) {
    ExecutorGemmResult r;
    r.shape = s;
    r.f32_gflops = TimeDot(s, PrimitiveType::kF32, reps).gflops;
    r.f32_transposed_lhs_gflops = TimeDot(s, PrimitiveType::kF32, reps, true).gflops;
    const DotTiming bf16 = TimeDot(s, PrimitiveType::kBF16, reps);
    r.bf16_gflops = bf16.gflops;
    r.bf16_native = bf16.unplanned_bytes == 0;
    kernels::simd::ScopedIsa widen("portable");  // no bf16 instructions: widening
    r.widened_gflops = TimeDot(s, PrimitiveType::kBF16, reps).gflops;
    results.push_back(r);
  }
  return results;
}

int RunExecutorGemm(bool json, const std::vector<GemmShape>& shapes, int reps) {
  const std::vector<ExecutorGemmResult> results = MeasureExecutorGemm(shapes, reps);
  if (json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& r : results) {
      rows.push_back({{"m", r.shape.m},
                      {"k", r.shape.k},
                      {"n", r.shape.n},
                      {"f32_gflops", r.f32_gflops},
                      {"f32_transposed_lhs_gflops", r.f32_transposed_lhs_gflops},
                      {"bf16_gflops", r.bf16_gflops},
                      {"bf16_widened_gflops", r.widened_gflops},
                      {"bf16_over_f32", r.bf16_gflops / r.f32_gflops},
                      {"bf16_native", r.bf16_native}});
    }
    nlohmann::json j = {{"benchmark", "executor_gemm"}, {"reps", reps}, {"results", rows}};
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print(
      "executor dots [M,K] x [K,N]: GFLOP/s of the dot alone, median of {} runs; f32 x^T = the "
      "f32 product with the lhs stored [K,M] (a weight gradient: weft's register block where N "
      "is a multiple of 16, else oneDNN), bf16 = bf16 operands and result, widened = the same "
      "forced onto f32 copies\n",
      reps);
  fmt::print("{:>6} {:>6} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8}\n", "M", "K", "N", "f32",
             "f32 x^T", "bf16", "widened", "bf16/f32", "bf16 via");
  for (const auto& r : results) {
    fmt::print("{:>6} {:>6} {:>6} {:>9.1f} {:>9.1f} {:>9.1f} {:>9.1f} {:>9.2f} {:>8}\n", r.shape.m,
               r.shape.k, r.shape.n, r.f32_gflops, r.f32_transposed_lhs_gflops, r.bf16_gflops,
               r.widened_gflops, r.bf16_gflops / r.f32_gflops, r.bf16_native ? "bf16" : "f32");
  }
  return 0;
}

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

std::string OpcodeAndFusedOps(const HloInstruction& instr) {
  std::string what(HloOpcodeString(instr.opcode()));
  if (instr.opcode() != HloOpcode::kFusion || instr.called_computations().empty()) return what;
  std::vector<std::string> ops;
  for (const HloInstruction* fused : instr.called_computations()[0]->instructions()) {
    const std::string op(HloOpcodeString(fused->opcode()));
    if (fused->opcode() == HloOpcode::kParameter) continue;
    if (!Contains(ops, op)) ops.push_back(op);
  }
  return fmt::format("{}({}: {})", what, FusionKindString(instr.attrs().fusion_kind),
                     fmt::join(ops, ","));
}

int RunExecutorModule(bool json, const std::string& path, int reps, int top) {
  std::unique_ptr<HloModule> module = ParseHloModuleFile(path);
  const compiler::CompiledProgram program =
      compiler::CompileForDevices(*module, {.num_devices = 1, .fuse = true});
  runtime::ExecutorOptions options;
  options.profile = true;
  runtime::Executor executor(*program.program, options);
  const std::vector<Shape> shapes = executor.InputShapes();
  const std::vector<runtime::HostTensor> inputs =
      runtime::RandomInputs(shapes, /*seed=*/0, runtime::InputIntegerRanges(*program.program));
  executor.Run(inputs);  // the arena's first touch, caches
  std::vector<double> totals;
  std::unordered_map<const HloInstruction*, std::vector<double>> per_instruction;
  for (int r = 0; r < std::max(1, reps); ++r) {
    executor.Run(inputs);
    totals.push_back(executor.stats().seconds);
    for (const auto& [instr, sec] : executor.stats().instruction_seconds) {
      per_instruction[instr].push_back(sec);
    }
  }
  std::vector<std::pair<double, const HloInstruction*>> rows;
  for (auto& [instr, secs] : per_instruction) rows.push_back({Median(secs), instr});
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a > b; });
  if (static_cast<int>(rows.size()) > top) rows.resize(static_cast<size_t>(top));
  const double total = Median(totals);
  if (json) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& [sec, instr] : rows) {
      list.push_back({{"instruction", instr->name()}, {"seconds", sec}});
    }
    nlohmann::json j = {{"benchmark", "executor_module"},
                        {"module", path},
                        {"reps", reps},
                        {"seconds", total},
                        {"instructions", list}};
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print("{}: one device, fused; median of {} runs: {:.6f} s\n", path, reps, total);
  for (const auto& [sec, instr] : rows) {
    fmt::print("  {:10.6f} s {:5.1f}%  {} = {} {}\n", sec, 100.0 * sec / total, instr->name(),
               instr->shape().ToString(), OpcodeAndFusedOps(*instr));
  }
  return 0;
}

}  // namespace weft::bench
