// The float span kernels of elementwise_kernels.h, defined once
// (elementwise_spans.inc) and compiled twice:
//  - `streaming` (eval_elementwise.cc: whole buffers, mostly larger than the
//    caches): the baseline's SSE2 loops. Streaming a buffer from memory was
//    slower with wider vectors on the Zen 4 machine (a 6.3M-element multiply:
//    SSE2 2.26-2.35 ms, AVX2 2.50-2.61 ms, AVX-512 2.92-3.03 ms). The
//    f32 <-> bf16 / f16 conversions are the exception: their rounding is
//    arithmetic, and eval_elementwise.cc runs the `cached` ones;
//  - `cached` (eval_fusion.cc: 2048-element tiles that stay in L1/L2, where
//    the loops are bound by arithmetic): GCC's target_clones for
//    x86-64-v4 (AVX-512), v3 (AVX2 + FMA) and the baseline, one chosen when
//    the program loads, from cpuid.
// Every op is one IEEE operation per element or a call of the same libm
// function, so all of them give the same bits: fused and unfused programs
// agree.
#include "elementwise_kernels.h"

#include <cmath>

namespace weft::runtime::exec {

namespace streaming {
#define WEFT_SPAN_KERNEL
#include "elementwise_spans.inc"
#undef WEFT_SPAN_KERNEL
}  // namespace streaming

namespace cached {
#define WEFT_SPAN_KERNEL \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#include "elementwise_spans.inc"
#undef WEFT_SPAN_KERNEL
}  // namespace cached

}  // namespace weft::runtime::exec
