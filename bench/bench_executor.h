// `weft bench executor`: the executor's per-instruction interpretation
// overhead, measured on a long chain of tiny adds (each add depends on the
// previous one, so nothing runs in parallel), as microseconds per
// instruction; the reference is the same adds as a plain C++ loop in the
// same process.
#pragma once

#include <cstdint>
#include <vector>

namespace weft::bench {

struct ExecutorOverheadResult {
  int64_t elements = 0;      // per add
  int64_t instructions = 0;  // executed per run
  double us_per_instruction = 0;
  double us_per_add_direct = 0;  // the same add as a C++ loop
};

// Runs a chain of `chain_length` adds of f32[elements] for each size.
std::vector<ExecutorOverheadResult> MeasureExecutorOverhead(
    const std::vector<int64_t>& elements = {1, 16, 256}, int64_t chain_length = 2000);

// Prints a table, or JSON.
int RunExecutorOverhead(bool json);

}  // namespace weft::bench
