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

}  // namespace weft::bench
