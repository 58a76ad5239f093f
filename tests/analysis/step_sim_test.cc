// The simulated step: each instruction's time by what bounds it (matrix
// tiles, memory, links), overlap where the dependencies allow it and not
// where they do not, loops with one trip of collective prefetch and
// deferred gradient reductions, torus links and DCN.
#include "weft/analysis/step_sim.h"

#include <gtest/gtest.h>

#include <string>

#include "weft/hlo/parser.h"

namespace weft::analysis {
namespace {

// Round numbers: 100 TFLOP/s bf16, 1 TB/s HBM, 100 GB/s ICI, 10 GB/s DCN.
Chip TestChip() {
  Chip c;
  c.name = "test";
  c.hbm_bytes = 100e9;
  c.peak_flops_bf16 = 100e12;
  c.peak_flops_f32 = 50e12;
  c.hbm_bytes_per_s = 1e12;
  c.ici_bytes_per_s = 100e9;
  c.dcn_bytes_per_s = 10e9;
  c.host_bytes_per_s = 20e9;
  c.max_slice_chips = 256;
  return c;
}

SimOptions Devices(int64_t n, int64_t slices = 1) {
  SimOptions o;
  o.num_devices = n;
  o.slices = slices;
  return o;
}

StepTime Simulate(const std::string& text, const Chip& chip, const SimOptions& o) {
  return SimulateStep(*ParseHloModule(text), chip, o);
}

constexpr const char* kSum = R"(
sum {
  a = bf16[] parameter(0)
  b = bf16[] parameter(1)
  ROOT s = bf16[] add(a, b)
}
)";

TEST(StepSimTest, DotIsTimedAtTheMatrixPeakWithItsTilesPadded) {
  // [1000, 4096] x [4096, 4096]: 2 x 1000 x 4096 x 4096 FLOPs.
  const std::string text = R"(HloModule m
ENTRY e {
  x = bf16[1000,4096] parameter(0)
  w = bf16[4096,4096] parameter(1)
  ROOT d = bf16[1000,4096] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
})";
  Chip chip = TestChip();
  const double flops = 2.0 * 1000 * 4096 * 4096;
  StepTime t = Simulate(text, chip, Devices(1));
  EXPECT_NEAR(t.step_s, flops / 100e12, 1e-12);
  EXPECT_NEAR(t.matrix_s, t.step_s, 1e-15);
  EXPECT_EQ(t.top.at(0).bound, "matrix");
  // M = 1000 runs as 1024 on 256-row tiles; N and K are whole tiles.
  chip.matrix_tile = {256, 256, 256};
  t = Simulate(text, chip, Devices(1));
  EXPECT_NEAR(t.step_s, flops * 1024 / 1000 / 100e12, 1e-12);
  // The fitted efficiency scales the matrix rate.
  chip.matrix_efficiency = 0.5;
  EXPECT_NEAR(Simulate(text, chip, Devices(1)).step_s, 2 * flops * 1024 / 1000 / 100e12, 1e-12);
  // f32 operands run at the f32 peak.
  chip.matrix_efficiency = 1;
  chip.matrix_tile = {1, 1, 1};
  std::string f32_text = text;
  for (size_t at = f32_text.find("bf16["); at != std::string::npos;
       at = f32_text.find("bf16[", at)) {
    f32_text.replace(at, 4, "f32");
  }
  EXPECT_NEAR(Simulate(f32_text, chip, Devices(1)).step_s, flops / 50e12, 1e-12);
}

TEST(StepSimTest, LoopsAreTimedByTheirBytesOrTheirVectorWork) {
  // add of two bf16 [4096, 4096]: 3 x 32 MiB moved.
  const std::string text = R"(HloModule m
ENTRY e {
  x = bf16[4096,4096] parameter(0)
  y = bf16[4096,4096] parameter(1)
  ROOT a = bf16[4096,4096] add(x, y)
})";
  Chip chip = TestChip();
  const double bytes = 3.0 * 4096 * 4096 * 2;
  StepTime t = Simulate(text, chip, Devices(1));
  EXPECT_NEAR(t.step_s, bytes / 1e12, 1e-15);
  EXPECT_EQ(t.top.at(0).bound, "memory");
  EXPECT_EQ(t.matrix_s, 0);
  // Within a cache level, at the cache's rate; beyond it, at HBM's.
  chip.cache_bytes = bytes;
  chip.cache_bytes_per_s = 4e12;
  EXPECT_NEAR(Simulate(text, chip, Devices(1)).step_s, bytes / 4e12, 1e-15);
  chip.cache_bytes = bytes - 1;
  EXPECT_NEAR(Simulate(text, chip, Devices(1)).step_s, bytes / 1e12, 1e-15);
  chip.vector_flops = 1e9;  // a slow vector unit: one FLOP per element
  t = Simulate(text, chip, Devices(1));
  EXPECT_NEAR(t.step_s, 4096.0 * 4096 / 1e9, 1e-12);
  EXPECT_EQ(t.top.at(0).bound, "vector");
}

// A dot and an all-reduce of as many elements on 2 devices; `dependent`
// makes the all-reduce wait for the dot.
std::string DotAndAllReduce(bool dependent) {
  return std::string("HloModule m\n") + kSum + R"(
ENTRY e {
  x = bf16[8192,8192] parameter(0)
  w = bf16[8192,8192] parameter(1)
  g = bf16[67108864] parameter(2)
  d = bf16[8192,8192] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  d2 = bf16[67108864] reshape(d)
  r = bf16[67108864] all-reduce()" +
         std::string(dependent ? "d2" : "g") + R"(), replica_groups={{0,1}}, to_apply=sum
  ROOT t = (bf16[8192,8192], bf16[67108864]) tuple(d, r)
})";
}

TEST(StepSimTest, CollectivesOverlapIndependentComputeAndNotDependentCompute) {
  const Chip chip = TestChip();
  const double dot_s = 2.0 * 8192 * 8192 * 8192 / 100e12;
  // Ring all-reduce on 2 devices sends 2 x (1/2) x the input: 134 MB at 100 GB/s.
  const double ar_s = 67108864.0 * 2 / 100e9;
  const StepTime apart = Simulate(DotAndAllReduce(false), chip, Devices(2));
  EXPECT_NEAR(apart.compute_s, dot_s, 1e-12);
  EXPECT_NEAR(apart.ici_s, ar_s, 1e-12);
  EXPECT_NEAR(apart.step_s, std::max(dot_s, ar_s), 1e-12);
  EXPECT_NEAR(apart.serial_s, dot_s + ar_s, 1e-12);
  EXPECT_NEAR(apart.exposed_ici_s, std::max(0.0, ar_s - dot_s), 1e-12);
  const StepTime chained = Simulate(DotAndAllReduce(true), chip, Devices(2));
  EXPECT_NEAR(chained.step_s, dot_s + ar_s, 1e-12);
  EXPECT_NEAR(chained.exposed_ici_s, ar_s, 1e-12);
  EXPECT_NEAR(chained.step_s, chained.compute_s + chained.exposed_ici_s, 1e-12);
}

TEST(StepSimTest, ComputeRunsOtherWorkWhileACollectiveIsInFlight) {
  // In schedule order: all-gather, its consumer, then an independent dot.
  // The dot runs while the all-gather is in flight.
  const std::string text = R"(HloModule m
ENTRY e {
  x = bf16[4096,4096] parameter(0)
  w = bf16[2048,4096] parameter(1)
  ag = bf16[4096,4096] all-gather(w), replica_groups={{0,1}}, dimensions={0}
  a = bf16[4096,4096] dot(x, ag), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  b = bf16[4096,4096] dot(x, x), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT t = (bf16[4096,4096], bf16[4096,4096]) tuple(a, b)
})";
  const Chip chip = TestChip();
  const double dot_s = 2.0 * 4096 * 4096 * 4096 / 100e12;
  const double ag_s = 2048.0 * 4096 * 2 / 100e9;
  const StepTime t = Simulate(text, chip, Devices(2));
  EXPECT_NEAR(t.step_s, std::max(ag_s, dot_s) + dot_s, 1e-12);
}

// A loop of `trips` layers: each all-gathers its weight slice and runs two
// dots with it; with `grad`, a third dot makes a gradient that is
// reduce-scattered into a stacked accumulator at the end of the trip.
std::string LayerLoop(int trips, bool grad) {
  std::string body_grad, state = "(s32[], bf16[4096,4096], bf16[16,1024,4096], bf16[16,1024,4096])";
  if (grad) {
    // The gradient comes last in the trip, from the trip's output.
    body_grad = R"(
  acc = bf16[16,1024,4096] get-tuple-element(s), index=3
  gy0 = bf16[4096,2048] dot(x2, agt), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  gy = bf16[2048,4096] reshape(gy0)
  rs = bf16[1024,4096] reduce-scatter(gy), replica_groups={{0,1}}, dimensions={0}, to_apply=sum
  rs3 = bf16[1,1024,4096] reshape(rs)
  z = s32[] constant(0)
  acc2 = bf16[16,1024,4096] dynamic-update-slice(acc, rs3, i, z, z))";
  } else {
    body_grad = R"(
  acc2 = bf16[16,1024,4096] get-tuple-element(s), index=3)";
  }
  std::string text = std::string("HloModule m\n") + kSum + R"(
cond {
  s = )" + state + R"( parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant()" +
                     std::to_string(trips) + R"()
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  s = )" + state + R"( parameter(0)
  i = s32[] get-tuple-element(s), index=0
  x = bf16[4096,4096] get-tuple-element(s), index=1
  ws = bf16[16,1024,4096] get-tuple-element(s), index=2
  z0 = s32[] constant(0)
  w1 = bf16[1,1024,4096] dynamic-slice(ws, i, z0, z0), dynamic_slice_sizes={1,1024,4096}
  w = bf16[1024,4096] reshape(w1)
  ag = bf16[2048,4096] all-gather(w), replica_groups={{0,1}}, dimensions={0}
  agt = bf16[4096,2048] reshape(ag)
  h = bf16[4096,2048] dot(x, agt), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  x2 = bf16[4096,4096] dot(h, ag), lhs_contracting_dims={1}, rhs_contracting_dims={0})" +
                     body_grad + R"(
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  ROOT t = )" + state +
                     R"( tuple(i2, x2, ws, acc2)
}
ENTRY e {
  x = bf16[4096,4096] parameter(0)
  ws = bf16[16,1024,4096] parameter(1)
  acc = bf16[16,1024,4096] parameter(2)
  zero = s32[] constant(0)
  init = )" + state + R"( tuple(zero, x, ws, acc)
  loop = )" + state + R"( while(init), condition=cond, body=body
  ROOT r = bf16[16,1024,4096] get-tuple-element(loop), index=3
})";
  return text;
}

TEST(StepSimTest, LoopsPrefetchTheNextTripsAllGather) {
  const int trips = 8;
  const Chip chip = TestChip();
  const StepTime t = Simulate(LayerLoop(trips, false), chip, Devices(2));
  const double ag_s = 1024.0 * 4096 * 2 / 100e9;  // 84 us
  ASSERT_GT(t.compute_s, 0);
  const double per_trip = t.compute_s / trips;  // two dots, the slice
  ASSERT_LT(ag_s, per_trip);
  // Only the first trip's all-gather is exposed (less the second trip's
  // weight slice, which runs meanwhile); the rest overlap the previous
  // trip's compute.
  const double slice_s = 2.0 * 1024 * 4096 * 2 / 1e12;
  EXPECT_NEAR(t.ici_s, trips * ag_s, 1e-12);
  EXPECT_NEAR(t.exposed_ici_s, ag_s - slice_s, 1e-9);
  EXPECT_NEAR(t.step_s, t.compute_s + ag_s - slice_s, 1e-9);
  EXPECT_EQ(t.top.at(0).runs, trips);
}

TEST(StepSimTest, GradientReduceScattersFinishDuringTheNextTrip) {
  const int trips = 8;
  const Chip chip = TestChip();
  const StepTime t = Simulate(LayerLoop(trips, true), chip, Devices(2));
  const double ag_s = 1024.0 * 4096 * 2 / 100e9;
  const double rs_s = 2048.0 * 4096 * 2 / 2 / 100e9;
  EXPECT_NEAR(t.ici_s, trips * (ag_s + rs_s), 1e-12);
  // Exposed: the first all-gather and the last reduce-scatter; every other
  // trip's reduce-scatter (and its accumulation) finishes during the next
  // trip, which waits for nothing but the previous trip's output.
  const double slice_s = 2.0 * 1024 * 4096 * 2 / 1e12;
  EXPECT_NEAR(t.exposed_ici_s, ag_s - slice_s + rs_s, 1e-9);
  EXPECT_NEAR(t.step_s, t.compute_s + ag_s - slice_s + rs_s, 1e-9);
}

TEST(StepSimTest, TorusGroupsUseTwoLinksPerAxisTheySpan) {
  // 16 devices in one slice: a 4 x 4 torus, device d at (d / 4, d % 4).
  std::string row = "{{0,1,2,3},{4,5,6,7},{8,9,10,11},{12,13,14,15}}";
  std::string all = "{{0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15}}";
  auto gather = [&](const std::string& groups, int n) {
    return std::string(R"(HloModule m
ENTRY e {
  w = bf16[1000000] parameter(0)
  ROOT ag = bf16[)") +
           std::to_string(1000000 * n) + R"(] all-gather(w), replica_groups=)" + groups +
           ", dimensions={0}\n}";
  };
  Chip chip = TestChip();
  chip.ici_topology = Chip::Topology::kTorus2d;
  chip.ici_links = 4;  // 25 GB/s each
  const double bytes_row = 3.0 * 2e6, bytes_all = 15.0 * 2e6;
  EXPECT_NEAR(Simulate(gather(row, 4), chip, Devices(16)).step_s, bytes_row / 50e9, 1e-12);
  EXPECT_NEAR(Simulate(gather(all, 16), chip, Devices(16)).step_s, bytes_all / 100e9, 1e-12);
  chip.ici_topology = Chip::Topology::kSwitch;
  EXPECT_NEAR(Simulate(gather(row, 4), chip, Devices(16)).step_s, bytes_row / 100e9, 1e-12);
  // Latency per ring step.
  chip.ici_latency_s = 1e-6;
  EXPECT_NEAR(Simulate(gather(row, 4), chip, Devices(16)).step_s, 3e-6 + bytes_row / 100e9, 1e-12);
  // The same groups across 4 slices of 4: DCN.
  const StepTime dcn =
      Simulate(gather("{{0,4,8,12},{1,5,9,13},{2,6,10,14},{3,7,11,15}}", 4), chip, Devices(16, 4));
  EXPECT_NEAR(dcn.dcn_s, bytes_row / 10e9, 1e-12);
  EXPECT_EQ(dcn.ici_s, 0);
  EXPECT_NEAR(dcn.exposed_dcn_s, dcn.step_s, 1e-15);
}

TEST(StepSimTest, HostTransfersAreExposedOnlyBeyondTheRestOfTheStep) {
  const std::string text = R"(HloModule m
ENTRY e {
  x = bf16[4096,4096] parameter(0)
  ROOT d = bf16[4096,4096] dot(x, x), lhs_contracting_dims={1}, rhs_contracting_dims={0}
})";
  const Chip chip = TestChip();
  const double dot_s = 2.0 * 4096 * 4096 * 4096 / 100e12;
  SimOptions o = Devices(1);
  o.host_bytes = static_cast<int64_t>(dot_s * 20e9 / 2);  // half the dot
  EXPECT_NEAR(Simulate(text, chip, o).step_s, dot_s, 1e-12);
  o.host_bytes = static_cast<int64_t>(dot_s * 20e9 * 3);
  const StepTime t = Simulate(text, chip, o);
  EXPECT_NEAR(t.step_s, 3 * dot_s, 1e-9);
  EXPECT_NEAR(t.exposed_host_s, 2 * dot_s, 1e-9);
  o.model_flops = 2.0 * 4096 * 4096 * 4096;
  EXPECT_NEAR(Simulate(text, chip, o).mfu, 1.0 / 3, 1e-6);
}

}  // namespace
}  // namespace weft::analysis
