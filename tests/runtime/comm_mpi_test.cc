// The MPI backend, run by CTest under `mpirun -np N`. Every rank runs the
// same program of collectives on seeded data through MPI, then runs it again
// for all N devices on a LocalCluster of N threads inside the rank, and
// checks that its MPI results and byte counters equal the threads backend's
// bit for bit. Only non-fatal EXPECTs: every rank must make the same calls.
#include "weft/runtime/comm_mpi.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "weft/base/env.h"
#include "weft/runtime/comm_threads.h"
#include "weft/runtime/config.h"
#include "weft/runtime/topology.h"

namespace weft::runtime {
namespace {

Communicator* g_comm = nullptr;  // this rank's MPI communicator (set in main)

using Bytes = std::vector<std::byte>;

template <typename T>
Bytes ToBytes(const std::vector<T>& v) {
  Bytes b(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// Device d's input for step `step`: the same on every rank.
template <typename T>
std::vector<T> Data(int64_t d, int step, size_t count) {
  std::mt19937 rng(static_cast<uint32_t>(1000 * step + d + 1));
  std::vector<T> v(count);
  if constexpr (std::is_same_v<T, float>) {
    std::normal_distribution<float> dist(0.0f, 100.0f);
    for (auto& x : v) x = dist(rng);
  } else if constexpr (std::is_same_v<T, uint16_t>) {  // bf16 bits of normal values
    std::normal_distribution<float> dist;
    for (auto& x : v) {
      float f = dist(rng);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      x = static_cast<uint16_t>(bits >> 16);
    }
  } else {
    std::uniform_int_distribution<T> dist;
    for (auto& x : v) x = dist(rng);
  }
  return v;
}

std::vector<ReplicaGroups> GroupSets(int64_t n) {
  std::vector<ReplicaGroups> sets = {{}};
  ReplicaGroups reversed(1);
  for (int64_t d = n - 1; d >= 0; --d) reversed[0].push_back(d);
  sets.push_back(reversed);
  if (n % 2 == 0 && n > 2) {
    ReplicaGroups halves(2), strided(2);
    for (int64_t d = 0; d < n; ++d) {
      halves[d / (n / 2)].push_back(d);
      strided[d % 2].push_back(d);
    }
    sets.push_back(halves);
    sets.push_back(strided);
  }
  return sets;
}

// One step's output per collective, in order; the same calls on every device.
std::vector<Bytes> Program(int64_t d, int64_t n, Communicator& c) {
  std::vector<Bytes> out;
  int step = 0;
  for (const ReplicaGroups& groups : GroupSets(n)) {
    const int64_t size = groups.empty() ? n : static_cast<int64_t>(groups[0].size());
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
      out.push_back(ToBytes(c.AllReduce(Data<float>(d, ++step, 1003), op, groups)));
      out.push_back(ToBytes(c.AllReduce(Data<int32_t>(d, ++step, 77), op, groups)));
      out.push_back(ToBytes(c.AllReduce(Data<uint16_t>(d, ++step, 300), op, groups)));
      out.push_back(ToBytes(c.ReduceScatter(Data<float>(d, ++step, 41 * size), op, groups)));
    }
    out.push_back(ToBytes(c.AllReduce(Data<int64_t>(d, ++step, 5), ReduceOp::kSum, groups)));
    out.push_back(
        ToBytes(c.ReduceScatter(Data<uint16_t>(d, ++step, 8 * size), ReduceOp::kSum, groups)));
    std::vector<float> in_place = Data<float>(d, ++step, 2 * size + 1);
    c.AllReduce(in_place.data(), in_place.data(), in_place.size(), PrimitiveType::kF32,
                ReduceOp::kSum, groups);
    out.push_back(ToBytes(in_place));
    out.push_back(ToBytes(c.AllGather(Data<float>(d, ++step, 33), groups)));
    out.push_back(ToBytes(c.AllGather(Data<uint8_t>(d, ++step, 3), groups)));
    out.push_back(ToBytes(c.AllToAll(Data<int32_t>(d, ++step, 13 * size), groups)));
    std::vector<uint16_t> a2a = Data<uint16_t>(d, ++step, 5 * size);
    c.AllToAll(a2a.data(), a2a.data(), a2a.size(), PrimitiveType::kBF16, groups);
    out.push_back(ToBytes(a2a));
    // Strided chunks ([outer, n, row]): MPI packs them around the call, the
    // threads backend moves them where they lie.
    std::vector<float> rs = Data<float>(d, ++step, 3 * size * 7), rs_out(3 * 7);
    c.ReduceScatter(rs.data(), rs_out.data(), rs.size(), PrimitiveType::kF32, ReduceOp::kSum,
                    groups, 3);
    out.push_back(ToBytes(rs_out));
    std::vector<int32_t> ag = Data<int32_t>(d, ++step, 3 * 5), ag_out(3 * size * 5);
    c.AllGather(ag.data(), ag_out.data(), ag.size(), PrimitiveType::kS32, groups, 3);
    out.push_back(ToBytes(ag_out));
    std::vector<uint16_t> strided = Data<uint16_t>(d, ++step, 2 * size * 4);
    c.AllToAll(strided.data(), strided.data(), strided.size(), PrimitiveType::kBF16, groups, 2);
    out.push_back(ToBytes(strided));
    // Into output rows of another length (an all-to-all writing straight
    // into a transpose's layout): 12-element input rows, 8-element output rows.
    std::vector<float> rows = Data<float>(d, ++step, 2 * 3 * size * 4), rows_out(rows.size());
    c.AllToAll(rows.data(), rows_out.data(), rows.size(), PrimitiveType::kF32, groups, 2, 3);
    out.push_back(ToBytes(rows_out));
    // A batch (what a variadic collective runs): outputs are ready at
    // EndBatch; a strided call inside it is packed around the call by MPI.
    std::vector<float> b_ar = Data<float>(d, ++step, 101), b_ar_out(101);
    std::vector<float> b_rs = Data<float>(d, ++step, 2 * size * 3), b_rs_out(2 * 3);
    std::vector<uint16_t> b_ag = Data<uint16_t>(d, ++step, 9), b_ag_out(9 * size);
    c.BeginBatch();
    c.AllReduce(b_ar.data(), b_ar_out.data(), b_ar.size(), PrimitiveType::kF32, ReduceOp::kSum,
                groups);
    c.ReduceScatter(b_rs.data(), b_rs_out.data(), b_rs.size(), PrimitiveType::kF32, ReduceOp::kMax,
                    groups, 2);
    c.AllGather(b_ag.data(), b_ag_out.data(), b_ag.size(), PrimitiveType::kBF16, groups);
    c.EndBatch();
    out.push_back(ToBytes(b_ar_out));
    out.push_back(ToBytes(b_rs_out));
    out.push_back(ToBytes(b_ag_out));
  }
  std::vector<SourceTargetPair> ring, partial = {{n - 1, 0}}, self = {{0, 0}};
  for (int64_t i = 0; i < n; ++i) ring.push_back({i, (i + 1) % n});
  for (const auto& pairs : {ring, partial, self}) {
    out.push_back(ToBytes(c.CollectivePermute(Data<float>(d, ++step, 19), pairs)));
    std::vector<int64_t> buffer = Data<int64_t>(d, ++step, 7);
    c.CollectivePermute(buffer.data(), buffer.data(), buffer.size(), PrimitiveType::kS64, pairs);
    out.push_back(ToBytes(buffer));
  }
  c.Barrier();
  c.VerifySameHash(0x5eed, "program hash");
  return out;
}

TEST(MpiCommunicator, SameBitsAndBytesAsTheThreadsBackend) {
  Communicator& comm = *g_comm;
  const int64_t n = comm.num_devices(), rank = comm.device_id();
  comm.ResetStats();
  const std::vector<Bytes> mpi = Program(rank, n, comm);
  const CollectiveStats mpi_stats = comm.stats();

  LocalCluster cluster(n);
  std::vector<Bytes> threads;
  cluster.Run([&](int64_t d, Communicator& c) {
    auto out = Program(d, n, c);
    if (d == rank) threads = std::move(out);
  });
  ASSERT_EQ(mpi.size(), threads.size());
  for (size_t i = 0; i < mpi.size(); ++i)
    EXPECT_EQ(mpi[i], threads[i]) << "rank " << rank << ": step " << i << " differs";
  const CollectiveStats& thread_stats = cluster.communicator(rank).stats();
  EXPECT_EQ(mpi_stats.calls, thread_stats.calls);
  EXPECT_EQ(mpi_stats.bytes_sent, thread_stats.bytes_sent);
  EXPECT_GT(mpi_stats.TotalBytesSent(), 0);
}

TEST(MpiCommunicator, SumsAreExactOnIntegers) {
  Communicator& comm = *g_comm;
  const int64_t n = comm.num_devices();
  auto sum = comm.AllReduce(std::vector<int32_t>{static_cast<int32_t>(comm.device_id()), 1},
                            ReduceOp::kSum);
  EXPECT_EQ(sum,
            (std::vector<int32_t>{static_cast<int32_t>(n * (n - 1) / 2), static_cast<int32_t>(n)}));
}

// The collective timeout comes from WEFT_COLLECTIVE_TIMEOUT (CTest sets 45 for
// np 3) or its default; a rank that arrives late but within it is waited for,
// and the polled nonblocking collectives give the exact result.
TEST(MpiCommunicator, LateRanksWithinTheTimeoutAreWaitedFor) {
  auto& comm = dynamic_cast<MpiCommunicator&>(*g_comm);
  const int64_t configured = GetEnvInt("WEFT_COLLECTIVE_TIMEOUT", 600, 1, 1 << 30);
  EXPECT_EQ(comm.collective_timeout(), std::chrono::seconds(configured));
  EXPECT_THROW(comm.set_collective_timeout(std::chrono::milliseconds(-5)), Error);
  comm.set_collective_timeout(std::chrono::seconds(20));
  const int64_t n = comm.num_devices(), rank = comm.device_id();
  if (rank == n - 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto sum = comm.AllReduce(std::vector<int64_t>(3, rank + 1), ReduceOp::kSum);
  EXPECT_EQ(sum, std::vector<int64_t>(3, n * (n + 1) / 2));
  if (rank == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  comm.Barrier();
  comm.set_collective_timeout(std::chrono::seconds(configured));
}

TEST(MpiTopology, OneDevicePerRankDiscoveredOnce) {
  Communicator& comm = *g_comm;
  const Topology& t = Topology::Global();
  Topology::Global();
  EXPECT_EQ(Topology::DiscoveryCount(), 1);
  EXPECT_EQ(t.backend(), Backend::kMpi);
  EXPECT_EQ(t.num_devices(), comm.num_devices());
  EXPECT_EQ(t.num_processes(), comm.num_devices());
  EXPECT_EQ(t.device(comm.device_id()).process, comm.device_id());
  const int64_t slice_size = GetEnvInt("WEFT_SLICE_SIZE", 0, 0, 1 << 16);
  // Without WEFT_SLICE_SIZE all ranks share this host: one slice.
  EXPECT_EQ(t.num_slices(), slice_size > 0 ? comm.num_devices() / slice_size : 1);
  if (comm.device_id() == 0) fmt::print("{}", t.ToString());
}

}  // namespace
}  // namespace weft::runtime

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  return weft::runtime::RunMpiMain([](weft::runtime::Communicator& comm) {
    weft::runtime::g_comm = &comm;
    const int32_t failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
    // Every rank learns whether any failed, so all exit with the same status.
    const auto any = comm.AllReduce(std::vector<int32_t>{failed}, weft::runtime::ReduceOp::kMax);
    WEFT_CHECK(any[0] == 0, "MPI tests failed on at least one rank; see the output above");
  });
}
