// `weft bench propagate`: sharding propagation over a 126-layer unrolled
// Llama-style training graph (forward and backward), on one core.
#pragma once

#include <cstdint>
#include <memory>

#include "weft/hlo/module.h"

namespace weft::bench {

struct PropagateBenchGraph {
  int64_t layers = 126;
  int64_t batch = 8, seq = 1024, d_model = 1024, heads = 8, kv_heads = 8, d_ff = 4096,
          vocab = 32000;
  int64_t fsdp = 4, tensor = 2;  // mesh: devices = fsdp * tensor
};

// The training-step module: parameters annotated (fsdp x tensor), everything
// else left for propagation.
std::unique_ptr<HloModule> BuildLlamaTrainingGraph(const PropagateBenchGraph& graph);

int RunPropagateBench(bool json);

// A chain of `n` elementwise instructions after a sharded parameter that
// every one of them also reads (a value with n users): the module is built,
// propagated, partitioned for 4 devices and destroyed at n/4, n/2 and n
// instructions, one thread. Prints microseconds per instruction for each
// pass and size, and the ratio of the per-instruction time at n to that at
// n/4: 1 for a linear pass, 4 for a quadratic one.
std::unique_ptr<HloModule> BuildShardedChain(int64_t n);
int RunPropagateChainBench(int64_t n, bool json);

}  // namespace weft::bench
