// `weft bench collectives`: collective bandwidth on the threads backend (or,
// with RunCollectivesMpi, on MPI ranks), nccl-tests style.
#include "bench_collectives.h"

#include <fmt/core.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "timer.h"
#include "weft/base/env.h"
#include "weft/base/error.h"
#include "weft/runtime/comm_mpi.h"
#include "weft/runtime/comm_threads.h"

namespace weft::bench {

namespace {

using runtime::Communicator;
using runtime::ReduceOp;

enum class Op { kAllReduce, kAllGather, kReduceScatter, kAllToAll, kAllToAllInPlace };

const char* OpName(Op op) {
  switch (op) {
    case Op::kAllReduce:
      return "all-reduce";
    case Op::kAllGather:
      return "all-gather";
    case Op::kReduceScatter:
      return "reduce-scatter";
    case Op::kAllToAll:
      return "all-to-all";
    case Op::kAllToAllInPlace:
      return "all-to-all in place";
  }
  return "?";
}

// Ring-algorithm traffic per device relative to the size (nccl-tests).
double BusFactor(Op op, int64_t n) {
  if (op == Op::kAllReduce) return 2.0 * (n - 1) / n;
  return static_cast<double>(n - 1) / n;
}

// Input and output in one allocation, half a page apart modulo 4 KiB: glibc's
// memcpy runs ~10x slower when source and destination are 4K-aliased at a
// short distance, which two consecutive heap blocks often are.
class Buffers {
 public:
  // 4-byte floats: out - in is congruent to 2 KiB modulo 4 KiB.
  Buffers(int64_t in_count, int64_t out_count)
      : gap_((in_count + 1023) / 1024 * 1024 + 512), arena_(gap_ + out_count) {}
  float* in() { return arena_.data(); }
  float* out() { return arena_.data() + gap_; }

 private:
  int64_t gap_;
  std::vector<float> arena_;
};

// GB/s of one thread copying `bytes` (best of a few).
double MemcpyGbs(int64_t bytes) {
  const int64_t count = (bytes + 3) / 4;
  Buffers buffers(count, count);
  std::fill(buffers.in(), buffers.in() + count, 1.0f);
  std::fill(buffers.out(), buffers.out() + count, 0.0f);
  const int reps = static_cast<int>(std::clamp<int64_t>((int64_t(1) << 28) / bytes, 3, 1000));
  const double best = BestSeconds(3, [&] {
    for (int r = 0; r < reps; ++r) {
      std::memcpy(buffers.out(), buffers.in(), bytes);
      asm volatile("" : : "r"(buffers.out()) : "memory");  // keep every copy
    }
  });
  return static_cast<double>(bytes) * reps / best / 1e9;
}

// Seconds per call on the slowest device: every device must agree on the
// iteration count, so it depends only on the size.
double TimeOp(Communicator& comm, Op op, int64_t bytes) {
  const int64_t n = comm.num_devices();
  const int64_t count = bytes / 4;  // float32 elements in the nccl-tests size
  const int64_t in_count = op == Op::kAllGather ? count / n : count;
  const int64_t out_count = op == Op::kReduceScatter ? count / n : count;
  Buffers buffers(in_count, out_count);
  float* in = buffers.in();
  float* out = buffers.out();
  std::fill(in, in + in_count, 1.0f);
  std::fill(out, out + out_count, 0.0f);
  auto call = [&] {
    switch (op) {
      case Op::kAllReduce:
        comm.AllReduce(in, out, in_count, PrimitiveType::kF32, ReduceOp::kSum);
        break;
      case Op::kAllGather:
        comm.AllGather(in, out, in_count, PrimitiveType::kF32);
        break;
      case Op::kReduceScatter:
        comm.ReduceScatter(in, out, in_count, PrimitiveType::kF32, ReduceOp::kSum);
        break;
      case Op::kAllToAll:
        comm.AllToAll(in, out, in_count, PrimitiveType::kF32);
        break;
      case Op::kAllToAllInPlace:  // what the executor runs for a dying operand
        comm.AllToAll(in, in, in_count, PrimitiveType::kF32);
        break;
    }
  };
  const int iters = static_cast<int>(std::clamp<int64_t>((int64_t(1) << 28) / bytes, 5, 200));
  call();  // warm up: page in buffers, create sub-communicators
  double best = 1e300;
  for (int rep = 0; rep < 3; ++rep) {
    comm.Barrier();
    const double t0 = NowSeconds();
    for (int i = 0; i < iters; ++i) call();
    comm.Barrier();
    best = std::min(best, (NowSeconds() - t0) / iters);
  }
  // The slowest device's time, in nanoseconds.
  const auto slowest =
      comm.AllReduce(std::vector<int64_t>{static_cast<int64_t>(best * 1e9)}, ReduceOp::kMax);
  return static_cast<double>(slowest[0]) / 1e9;
}

// The sizes measured: min_bytes, 4 * min_bytes, ... <= max_bytes, rounded to
// whole float32 chunks per device.
std::vector<int64_t> Sizes(int64_t n, int64_t min_bytes, int64_t max_bytes) {
  std::vector<int64_t> sizes;
  const int64_t quantum = 4 * n;
  for (int64_t size = std::max<int64_t>(min_bytes, 1); size <= max_bytes; size *= 4)
    sizes.push_back(std::max(quantum, size / quantum * quantum));
  return sizes;
}

std::map<int64_t, double> MemcpyReference(const std::vector<int64_t>& sizes) {
  std::map<int64_t, double> gbs;
  for (int64_t bytes : sizes) gbs[bytes] = MemcpyGbs(bytes);
  return gbs;
}

void Print(bool json, const std::string& backend, int64_t devices,
           const std::vector<CollectiveBenchResult>& results) {
  if (json) {
    nlohmann::json j;
    j["backend"] = backend;
    j["devices"] = devices;
    j["dtype"] = "f32";
    j["results"] = nlohmann::json::array();
    for (const auto& r : results) {
      j["results"].push_back({{"collective", r.collective},
                              {"bytes", r.bytes},
                              {"time_us", r.seconds * 1e6},
                              {"algbw_gbs", r.algbw_gbs},
                              {"busbw_gbs", r.busbw_gbs},
                              {"memcpy_gbs", r.memcpy_gbs}});
    }
    fmt::print("{}\n", j.dump(2));
    return;
  }
  fmt::print(
      "Collectives: {} backend, {} devices, float32 (nccl-tests sizes and bus bandwidth; "
      "reference: one-thread memcpy of the same size)\n",
      backend, devices);
  fmt::print("{:<19} {:>10} {:>12} {:>12} {:>12} {:>12} {:>9}\n", "collective", "size", "time (us)",
             "algbw GB/s", "busbw GB/s", "memcpy GB/s", "bus/copy");
  for (const auto& r : results) {
    const std::string size = r.bytes >= (1 << 20) ? fmt::format("{} MiB", r.bytes >> 20)
                                                  : fmt::format("{} KiB", r.bytes >> 10);
    fmt::print("{:<19} {:>10} {:>12.1f} {:>12.2f} {:>12.2f} {:>12.2f} {:>9.2f}\n", r.collective,
               size, r.seconds * 1e6, r.algbw_gbs, r.busbw_gbs, r.memcpy_gbs,
               r.busbw_gbs / r.memcpy_gbs);
  }
}

}  // namespace

std::vector<CollectiveBenchResult> MeasureCollectives(Communicator& comm, int64_t min_bytes,
                                                      int64_t max_bytes) {
  const int64_t n = comm.num_devices();
  WEFT_CHECK(min_bytes >= 1 && min_bytes <= max_bytes,
             "bench collectives: sizes {}..{} bytes are not a range; use 1 <= min <= max",
             min_bytes, max_bytes);
  std::vector<CollectiveBenchResult> results;
  for (Op op :
       {Op::kAllReduce, Op::kAllGather, Op::kReduceScatter, Op::kAllToAll, Op::kAllToAllInPlace}) {
    for (int64_t bytes : Sizes(n, min_bytes, max_bytes)) {
      CollectiveBenchResult r;
      r.collective = OpName(op);
      r.bytes = bytes;
      r.seconds = TimeOp(comm, op, bytes);
      r.algbw_gbs = static_cast<double>(bytes) / r.seconds / 1e9;
      r.busbw_gbs = r.algbw_gbs * BusFactor(op, n);
      results.push_back(r);
    }
  }
  return results;
}

int RunCollectives(bool json, int num_devices, int64_t min_bytes, int64_t max_bytes) {
  // Measured first, while nothing else of ours runs.
  auto reference = MemcpyReference(Sizes(num_devices, min_bytes, max_bytes));
  runtime::LocalCluster cluster(num_devices);
  std::vector<CollectiveBenchResult> results;
  cluster.Run([&](int64_t device, Communicator& comm) {
    auto mine = MeasureCollectives(comm, min_bytes, max_bytes);
    if (device == 0) results = std::move(mine);
  });
  for (auto& r : results) r.memcpy_gbs = reference[r.bytes];
  Print(json, "threads", num_devices, results);
  return 0;
}

int RunCollectivesMpi(bool json, int64_t min_bytes, int64_t max_bytes) {
  // Rank 0 measures the reference before MPI starts, so no rank is busy
  // polling meanwhile (the others wait for it in MPI_Init).
  std::map<int64_t, double> reference;
  const auto rank = GetEnv("OMPI_COMM_WORLD_RANK");
  const auto size = GetEnvInt("OMPI_COMM_WORLD_SIZE", 1, 1, 1 << 20);
  if (!rank || *rank == "0") reference = MemcpyReference(Sizes(size, min_bytes, max_bytes));
  return runtime::RunMpiMain([&](Communicator& comm) {
    auto results = MeasureCollectives(comm, min_bytes, max_bytes);
    if (comm.device_id() != 0) return;
    for (auto& r : results) r.memcpy_gbs = reference.count(r.bytes) ? reference[r.bytes] : 0.0;
    Print(json, "mpi", comm.num_devices(), results);
  });
}

}  // namespace weft::bench
