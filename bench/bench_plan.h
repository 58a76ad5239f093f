// `weft bench plan`: planning Llama 3.1 405B's training step on 256 v6e chips
// (fsdp=64 x tensor=4, batch 64 x seq 8192): build, autodiff, propagate,
// partition and analyse, one thread; target < 3 s. Then the same step on
// 65,536 chips (fsdp=8192 x tensor=8, batch 8192), one run; target < 2 s.
#pragma once

namespace weft::bench {

int RunPlanBench(bool json);

}  // namespace weft::bench
