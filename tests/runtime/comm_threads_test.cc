// The in-process backend: every collective against a brute-force reference
// on random data, over many device counts and replica groups; byte counters;
// and failures that must release every device instead of hanging.
#include "weft/runtime/comm_threads.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstring>
#include <future>
#include <memory>
#include <random>
#include <stdexcept>
#include <thread>

#include "weft/base/error.h"
#include "weft/base/thread_pool.h"
#include "weft/runtime/config.h"

namespace weft::runtime {
namespace {

// --- References -------------------------------------------------------------

// bfloat16 conversion written independently of the library's.
float Bf16(uint16_t bits) {
  uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &wide, 4);
  return f;
}
uint16_t ToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint32_t lower = bits & 0xffff, upper = bits >> 16;
  const bool round_up = lower > 0x8000 || (lower == 0x8000 && (upper & 1));
  return static_cast<uint16_t>(upper + (round_up ? 1 : 0));
}

template <typename T>
T Combine(ReduceOp op, T a, T b) {
  if (op == ReduceOp::kMax) return a > b ? a : b;
  if (op == ReduceOp::kMin) return a < b ? a : b;
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}

// Element k reduced over `inputs` in order: what every backend must produce.
template <typename T>
T ReduceRef(ReduceOp op, const std::vector<const std::vector<T>*>& inputs, size_t k) {
  if constexpr (std::is_same_v<T, uint16_t>) {  // bf16: float accumulation, one rounding
    float acc = Bf16((*inputs[0])[k]);
    for (size_t m = 1; m < inputs.size(); ++m) acc = Combine(op, acc, Bf16((*inputs[m])[k]));
    return ToBf16(acc);
  } else {
    T acc = (*inputs[0])[k];
    for (size_t m = 1; m < inputs.size(); ++m) acc = Combine(op, acc, (*inputs[m])[k]);
    return acc;
  }
}

template <typename T>
std::vector<T> Random(std::mt19937& rng, size_t n) {
  std::vector<T> v(n);
  if constexpr (std::is_same_v<T, float>) {
    std::normal_distribution<float> dist;
    for (auto& x : v) x = dist(rng);
  } else if constexpr (std::is_same_v<T, uint16_t>) {
    std::normal_distribution<float> dist;
    for (auto& x : v) x = ToBf16(dist(rng));
  } else {
    std::uniform_int_distribution<T> dist;  // full range: sums wrap
    for (auto& x : v) x = dist(rng);
  }
  return v;
}

template <typename T>
bool SameBits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

struct GroupCase {
  int64_t n;
  ReplicaGroups groups;
};

std::string CaseName(const ::testing::TestParamInfo<GroupCase>& info) {
  std::string name =
      fmt::format("n{}_{}", info.param.n,
                  info.param.groups.empty() ? "all" : ReplicaGroupsToString(info.param.groups));
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return name;
}

class Collectives : public ::testing::TestWithParam<GroupCase> {
 protected:
  int64_t n() const { return GetParam().n; }
  const ReplicaGroups& groups() const { return GetParam().groups; }

  // Members of d's group, in group order, and d's position there.
  std::pair<std::vector<int64_t>, int64_t> GroupOf(int64_t d) const {
    for (const auto& g : NormalizeReplicaGroups(groups(), n())) {
      for (size_t i = 0; i < g.size(); ++i)
        if (g[i] == d) return {g, static_cast<int64_t>(i)};
    }
    return {{}, -1};
  }

  template <typename T>
  std::vector<std::vector<T>> Inputs(size_t count) {
    std::vector<std::vector<T>> in(n());
    for (auto& v : in) v = Random<T>(rng_, count);
    return in;
  }

  // Runs fn on every device (byte counters reset) and returns each output.
  template <typename T>
  std::vector<std::vector<T>> RunAll(
      const std::function<std::vector<T>(int64_t, Communicator&)>& fn) {
    std::vector<std::vector<T>> out(n());
    for (int64_t d = 0; d < n(); ++d) cluster_->communicator(d).ResetStats();
    cluster_->Run([&](int64_t d, Communicator& comm) { out[d] = fn(d, comm); });
    return out;
  }

  int64_t GroupSize() const { return static_cast<int64_t>(GroupOf(0).first.size()); }

  // `base` units, or (with min_total_bytes_) enough that the outputs of all
  // devices, `out_per_unit` elements of `bytes` each per unit, exceed it.
  size_t Scaled(size_t base, size_t out_per_unit, size_t bytes) const {
    if (min_total_bytes_ == 0) return base;
    return std::max(base, min_total_bytes_ / (out_per_unit * bytes * n()) + 1);
  }

  template <typename T>
  void CheckAllReduce(ReduceOp op) {
    const size_t count = Scaled(1003, 1, sizeof(T));  // not a multiple of the group: uneven
    auto in = Inputs<T>(count);
    auto out =
        RunAll<T>([&](int64_t d, Communicator& c) { return c.AllReduce(in[d], op, groups()); });
    for (int64_t d = 0; d < n(); ++d) {
      std::vector<const std::vector<T>*> members;
      for (int64_t m : GroupOf(d).first) members.push_back(&in[m]);
      std::vector<T> ref(count);
      for (size_t k = 0; k < count; ++k) ref[k] = ReduceRef(op, members, k);
      ASSERT_TRUE(SameBits(out[d], ref)) << "device " << d << " op " << ReduceOpName(op);
      const int64_t bytes = count * sizeof(T);
      EXPECT_EQ(cluster_->communicator(d).stats().BytesSent(CollectiveKind::kAllReduce),
                CollectiveBytesSent(CollectiveKind::kAllReduce, members.size(), bytes));
    }
  }

  // The chunked collectives take `outer` rows (communicator.h): buffers
  // [outer, n, row], chunk i the slice [:, i, :]; outer 1 is the plain case.
  template <typename T>
  void CheckReduceScatter(ReduceOp op, int64_t outer = 1) {
    const int64_t size = GroupSize(), row = Scaled(37, outer, sizeof(T));
    auto in = Inputs<T>(outer * size * row);
    auto out = RunAll<T>([&](int64_t d, Communicator& c) {
      std::vector<T> result(outer * row);
      c.ReduceScatter(in[d].data(), result.data(), in[d].size(), ElementTypeOf<T>(), op, groups(),
                      outer);
      return result;
    });
    for (int64_t d = 0; d < n(); ++d) {
      auto [group, p] = GroupOf(d);
      std::vector<const std::vector<T>*> members;
      for (int64_t m : group) members.push_back(&in[m]);
      std::vector<T> ref(outer * row);
      for (int64_t o = 0; o < outer; ++o) {
        for (int64_t k = 0; k < row; ++k)
          ref[o * row + k] = ReduceRef(op, members, (o * size + p) * row + k);
      }
      ASSERT_TRUE(SameBits(out[d], ref)) << "device " << d << " outer " << outer;
    }
  }

  template <typename T>
  void CheckAllGather(int64_t outer = 1) {
    const int64_t size = GroupSize(), row = Scaled(29, size * outer, sizeof(T));
    auto in = Inputs<T>(outer * row);
    auto out = RunAll<T>([&](int64_t d, Communicator& c) {
      std::vector<T> result(outer * size * row);
      c.AllGather(in[d].data(), result.data(), in[d].size(), ElementTypeOf<T>(), groups(), outer);
      return result;
    });
    for (int64_t d = 0; d < n(); ++d) {
      const std::vector<int64_t> group = GroupOf(d).first;
      std::vector<T> ref;
      for (int64_t o = 0; o < outer; ++o) {
        for (int64_t m : group)
          ref.insert(ref.end(), in[m].begin() + o * row, in[m].begin() + (o + 1) * row);
      }
      ASSERT_TRUE(SameBits(out[d], ref)) << "device " << d << " outer " << outer;
      EXPECT_EQ(cluster_->communicator(d).stats().BytesSent(CollectiveKind::kAllGather),
                (size - 1) * outer * row * static_cast<int64_t>(sizeof(T)));
    }
  }

  // In place on every device (the members swap chunks where they lie), on
  // none, or (only_even) on the even devices alone (those stage theirs).
  template <typename T>
  void CheckAllToAll(bool in_place, int64_t outer = 1, bool only_even = false) {
    const int64_t size = GroupSize(), row = Scaled(11, size * outer, sizeof(T));
    auto in = Inputs<T>(outer * size * row);
    auto out = RunAll<T>([&](int64_t d, Communicator& c) {
      const bool here = in_place && (!only_even || d % 2 == 0);
      std::vector<T> buffer = in[d], result(buffer.size());
      T* dst = here ? buffer.data() : result.data();
      c.AllToAll(buffer.data(), dst, buffer.size(), ElementTypeOf<T>(), groups(), outer);
      return here ? buffer : result;
    });
    for (int64_t d = 0; d < n(); ++d) {
      auto [group, p] = GroupOf(d);
      std::vector<T> ref;
      for (int64_t o = 0; o < outer; ++o) {
        for (int64_t m : group) {  // chunk p of member i lands at position i
          auto chunk = in[m].begin() + (o * size + p) * row;
          ref.insert(ref.end(), chunk, chunk + row);
        }
      }
      ASSERT_TRUE(SameBits(out[d], ref)) << "device " << d << " outer " << outer;
    }
  }

  // Into output rows of another length ([out_outer, n, out_row]): each
  // chunk's elements keep their order, cut into the output's rows.
  template <typename T>
  void CheckAllToAllIntoRows(int64_t outer, int64_t out_outer) {
    const int64_t size = GroupSize(), chunk = Scaled(outer * out_outer * 2, size, sizeof(T));
    const int64_t rounded = chunk / (outer * out_outer) * (outer * out_outer);
    const int64_t row = rounded / outer, out_row = rounded / out_outer;
    auto in = Inputs<T>(size * rounded);
    auto out = RunAll<T>([&](int64_t d, Communicator& c) {
      std::vector<T> result(in[d].size());
      c.AllToAll(in[d].data(), result.data(), in[d].size(), ElementTypeOf<T>(), groups(), outer,
                 out_outer);
      return result;
    });
    for (int64_t d = 0; d < n(); ++d) {
      auto [group, p] = GroupOf(d);
      std::vector<T> ref(in[d].size());
      for (int64_t i = 0; i < size; ++i) {  // chunk p of member i, in order
        for (int64_t k = 0; k < rounded; ++k) {
          const T x = in[group[i]][((k / row) * size + p) * row + k % row];
          ref[((k / out_row) * size + i) * out_row + k % out_row] = x;
        }
      }
      ASSERT_TRUE(SameBits(out[d], ref))
          << "device " << d << " outer " << outer << " output rows " << out_outer;
    }
  }

  template <typename T>
  void CheckPermute(const std::vector<SourceTargetPair>& pairs, bool in_place) {
    const size_t count = Scaled(17, 1, sizeof(T));
    auto in = Inputs<T>(count);
    auto out = RunAll<T>([&](int64_t d, Communicator& c) {
      if (!in_place) return c.CollectivePermute(in[d], pairs);
      std::vector<T> buffer = in[d];
      c.CollectivePermute(buffer.data(), buffer.data(), buffer.size(), ElementTypeOf<T>(), pairs);
      return buffer;
    });
    for (int64_t d = 0; d < n(); ++d) {
      std::vector<T> ref(count, T(0));
      int64_t sent = 0;
      for (const auto& pair : pairs) {
        if (pair.target == d) ref = in[pair.source];
        if (pair.source == d && pair.target != d) sent = count * sizeof(T);
      }
      ASSERT_TRUE(SameBits(out[d], ref)) << "device " << d;
      EXPECT_EQ(cluster_->communicator(d).stats().BytesSent(CollectiveKind::kCollectivePermute),
                sent);
    }
  }

  void SetUp() override { cluster_ = std::make_unique<LocalCluster>(n()); }

  std::mt19937 rng_{12345};
  std::unique_ptr<LocalCluster> cluster_;
  size_t min_total_bytes_ = 0;
};

TEST_P(Collectives, AllReduceEveryTypeAndOp) {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
    CheckAllReduce<float>(op);
    CheckAllReduce<int32_t>(op);
    CheckAllReduce<int64_t>(op);
    CheckAllReduce<uint16_t>(op);
  }
}

TEST_P(Collectives, AllReduceSumIsCloseToFloat64) {
  auto in = Inputs<float>(500);
  auto out = RunAll<float>(
      [&](int64_t d, Communicator& c) { return c.AllReduce(in[d], ReduceOp::kSum, groups()); });
  for (int64_t d = 0; d < n(); ++d) {
    for (size_t k = 0; k < 500; ++k) {
      double ref = 0, mag = 0;
      for (int64_t m : GroupOf(d).first) ref += in[m][k], mag += std::fabs(in[m][k]);
      ASSERT_NEAR(out[d][k], ref, 1e-6 * mag) << "device " << d << " element " << k;
    }
  }
}

TEST_P(Collectives, AllReduceInPlace) {
  auto in = Inputs<float>(1003);
  auto expected = RunAll<float>(
      [&](int64_t d, Communicator& c) { return c.AllReduce(in[d], ReduceOp::kSum, groups()); });
  auto out = RunAll<float>([&](int64_t d, Communicator& c) {
    std::vector<float> buffer = in[d];
    c.AllReduce(buffer.data(), buffer.data(), buffer.size(), PrimitiveType::kF32, ReduceOp::kSum,
                groups());
    return buffer;
  });
  for (int64_t d = 0; d < n(); ++d) EXPECT_TRUE(SameBits(out[d], expected[d])) << d;
}

TEST_P(Collectives, ReduceScatterEveryTypeAndOp) {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
    CheckReduceScatter<float>(op);
    CheckReduceScatter<int32_t>(op);
    CheckReduceScatter<uint16_t>(op);
  }
}

TEST_P(Collectives, AllGatherConcatenatesInGroupOrder) {
  CheckAllGather<float>();
  CheckAllGather<uint16_t>();
  CheckAllGather<int64_t>();
}

TEST_P(Collectives, AllToAllTransposesChunks) {
  CheckAllToAll<float>(false);
  CheckAllToAll<float>(true);
  CheckAllToAll<int32_t>(false);
  CheckAllToAll<uint8_t>(true);
  CheckAllToAll<uint16_t>(true, 1, /*only_even=*/true);
}

// A collective along a dimension that is not leading: the chunks are
// strided, and the threads backend moves them where they lie.
TEST_P(Collectives, StridedChunksAlongAnInnerDimension) {
  for (int64_t outer : {2, 3}) {
    CheckReduceScatter<float>(ReduceOp::kSum, outer);
    CheckReduceScatter<uint16_t>(ReduceOp::kMax, outer);
    CheckAllGather<float>(outer);
    CheckAllGather<uint8_t>(outer);
    CheckAllToAll<float>(false, outer);
    CheckAllToAll<int32_t>(true, outer);
    CheckAllToAll<float>(true, outer, /*only_even=*/true);
  }
}

// What an all-to-all writing into a transpose's layout runs: rows that
// divide each other either way, and rows of unrelated lengths.
TEST_P(Collectives, AllToAllIntoOtherOutputRows) {
  for (auto [outer, out_outer] : {std::pair<int64_t, int64_t>{1, 4}, {4, 1}, {2, 3}, {3, 2}}) {
    CheckAllToAllIntoRows<float>(outer, out_outer);
    CheckAllToAllIntoRows<uint16_t>(outer, out_outer);
  }
  min_total_bytes_ = size_t{3} << 19;  // each device moves its own share
  CheckAllToAllIntoRows<float>(1, 8);
  CheckAllToAllIntoRows<int32_t>(3, 2);
}

TEST_P(Collectives, CollectivePermute) {
  std::vector<SourceTargetPair> ring, partial, self = {{0, 0}};
  for (int64_t d = 0; d < n(); ++d) ring.push_back({d, (d + 1) % n()});
  partial.push_back({n() - 1, 0});  // everyone else receives zeros
  for (bool in_place : {false, true}) {
    CheckPermute<float>(ring, in_place);
    CheckPermute<float>(partial, in_place);
    CheckPermute<int32_t>(self, in_place);
    CheckPermute<uint16_t>({}, in_place);
  }
}

// The tests above move a few kilobytes, which the last device to arrive moves
// for all. Over 32 KiB in all (here 1.5 MiB), every device moves its own
// share between two barriers: the same results.
TEST_P(Collectives, LargeMessagesGiveTheSameResults) {
  min_total_bytes_ = size_t{3} << 19;
  CheckAllReduce<float>(ReduceOp::kSum);
  CheckAllReduce<uint16_t>(ReduceOp::kMax);
  CheckReduceScatter<float>(ReduceOp::kSum);
  CheckAllGather<uint16_t>();
  CheckAllToAll<float>(true);
  CheckAllToAll<int32_t>(false);
  std::vector<SourceTargetPair> ring;
  for (int64_t d = 0; d < n(); ++d) ring.push_back({d, (d + 1) % n()});
  CheckPermute<float>(ring, true);
  CheckReduceScatter<float>(ReduceOp::kSum, 3);
  CheckAllGather<float>(2);
  CheckAllToAll<float>(true, 3);
}

// A batch (BeginBatch ... EndBatch) of independent collectives of every
// kind, strided and in place among them, gives each call the bits it gives
// alone, small (the last device moves all) and large (every device its
// share), and counts every call.
TEST_P(Collectives, ABatchGivesTheBitsOfItsCallsOneByOne) {
  for (size_t scale : {size_t{1}, size_t{4096}}) {
    const int64_t size = GroupSize();
    const int64_t row = static_cast<int64_t>(7 * scale);
    auto ar = Inputs<float>(1003 * scale);
    auto rs = Inputs<uint16_t>(3 * size * row);
    auto ag = Inputs<float>(2 * row);
    auto a2a = Inputs<int32_t>(size * row);
    auto perm = Inputs<float>(5 * scale);
    std::vector<SourceTargetPair> ring;
    for (int64_t d = 0; d < n(); ++d) ring.push_back({d, (d + 1) % n()});
    // All five outputs of a device, one after the other as raw bytes.
    auto run = [&](bool batched) {
      return RunAll<std::byte>([&](int64_t d, Communicator& c) {
        std::vector<float> ar_out(ar[d].size()), ag_out(ag[d].size() * size);
        std::vector<uint16_t> rs_out(rs[d].size() / size);
        std::vector<int32_t> a2a_buffer = a2a[d];
        std::vector<float> perm_buffer = perm[d];
        if (batched) c.BeginBatch();
        c.AllReduce(ar[d].data(), ar_out.data(), ar_out.size(), PrimitiveType::kF32, ReduceOp::kSum,
                    groups());
        c.ReduceScatter(rs[d].data(), rs_out.data(), rs[d].size(), PrimitiveType::kBF16,
                        ReduceOp::kMax, groups(), 3);
        c.AllGather(ag[d].data(), ag_out.data(), ag[d].size(), PrimitiveType::kF32, groups(), 2);
        c.AllToAll(a2a_buffer.data(), a2a_buffer.data(), a2a_buffer.size(), PrimitiveType::kS32,
                   groups());
        c.CollectivePermute(perm_buffer.data(), perm_buffer.data(), perm_buffer.size(),
                            PrimitiveType::kF32, ring);
        if (batched) c.EndBatch();
        std::vector<std::byte> all;
        auto append = [&](const auto& v) {
          const auto* p = reinterpret_cast<const std::byte*>(v.data());
          all.insert(all.end(), p, p + v.size() * sizeof(v[0]));
        };
        append(ar_out);
        append(rs_out);
        append(ag_out);
        append(a2a_buffer);
        append(perm_buffer);
        return all;
      });
    };
    const auto alone = run(false);
    std::vector<CollectiveStats> alone_stats;
    for (int64_t d = 0; d < n(); ++d) alone_stats.push_back(cluster_->communicator(d).stats());
    const auto batched = run(true);
    for (int64_t d = 0; d < n(); ++d) {
      ASSERT_TRUE(SameBits(batched[d], alone[d])) << "device " << d << " scale " << scale;
      const CollectiveStats& s = cluster_->communicator(d).stats();
      EXPECT_EQ(s.calls, alone_stats[d].calls) << d;
      EXPECT_EQ(s.bytes_sent, alone_stats[d].bytes_sent) << d;
    }
  }
}

TEST_P(Collectives, BarrierAndHashCountNoBytes) {
  cluster_->Run([](int64_t d, Communicator& c) {
    c.Barrier();
    c.VerifySameHash(0xfeed, "program");
  });
  for (int64_t d = 0; d < n(); ++d) {
    EXPECT_EQ(cluster_->communicator(d).stats().Calls(CollectiveKind::kBarrier), 1);
    EXPECT_EQ(cluster_->communicator(d).stats().Calls(CollectiveKind::kVerifyHash), 1);
    EXPECT_EQ(cluster_->communicator(d).stats().TotalBytesSent(), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Groups, Collectives,
                         ::testing::Values(GroupCase{1, {}}, GroupCase{2, {}}, GroupCase{3, {}},
                                           GroupCase{4, {}}, GroupCase{4, {{0, 1}, {2, 3}}},
                                           GroupCase{4, {{0, 2}, {1, 3}}},
                                           GroupCase{4, {{3, 1}, {2, 0}}}, GroupCase{5, {}},
                                           GroupCase{6, {{0, 2, 4}, {1, 3, 5}}}, GroupCase{7, {}},
                                           GroupCase{8, {}},
                                           GroupCase{8, {{0, 1, 2, 3}, {4, 5, 6, 7}}},
                                           GroupCase{8, {{0, 4}, {1, 5}, {2, 6}, {3, 7}}},
                                           GroupCase{8, {{7, 6, 5, 4, 3, 2, 1, 0}}}),
                         CaseName);

// --- Failures ------------------------------------------------------------------

std::string RunError(LocalCluster& cluster, const LocalCluster::DeviceFn& fn) {
  try {
    cluster.Run(fn);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(LocalCluster, ADeviceThatThrowsReleasesTheOthers) {
  LocalCluster cluster(4);
  const auto start = std::chrono::steady_clock::now();
  const std::string e = RunError(cluster, [](int64_t d, Communicator& c) {
    std::vector<float> x(64, 1.0f);
    for (int step = 0; step < 5; ++step) {
      if (d == 2 && step == 3) throw Error("shard file is truncated");
      x = c.AllReduce(x, ReduceOp::kSum);
      c.AllGather(x);
    }
  });
  EXPECT_EQ(e, "device 2: shard file is truncated");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

// "Error: <message>", "InternalError: <message>" or "" for what Run threw.
std::string RunOutcome(LocalCluster& cluster, const LocalCluster::DeviceFn& fn) {
  try {
    cluster.Run(fn);
  } catch (const Error& e) {
    return std::string("Error: ") + e.what();
  } catch (const InternalError& e) {
    return std::string("InternalError: ") + e.what();
  }
  return "";
}

TEST(LocalCluster, ErrorKindsSurviveTheDeviceThreads) {
  LocalCluster cluster(3);
  // Bad input stays bad input.
  EXPECT_EQ(RunOutcome(cluster,
                       [](int64_t d, Communicator& c) {
                         if (d == 2) Fail("config key '{}' is missing", "lr");
                         c.Barrier();
                       }),
            "Error: device 2: config key 'lr' is missing");
  // A broken invariant stays a bug, however the other devices are released.
  EXPECT_EQ(RunOutcome(cluster,
                       [](int64_t d, Communicator& c) {
                         c.Barrier();
                         WEFT_INTERNAL_CHECK(d != 1, "buffer {} freed twice", 7);
                         c.AllReduce(std::vector<float>(4), ReduceOp::kSum);
                       }),
            "InternalError: device 1: buffer 7 freed twice");
  // Exceptions weft did not raise on purpose are bugs too, never "bad input".
  EXPECT_EQ(RunOutcome(cluster,
                       [](int64_t d, Communicator& c) {
                         if (d == 0) throw std::out_of_range("index 9");
                         c.Barrier();
                       }),
            "InternalError: device 0: index 9");
  EXPECT_EQ(RunOutcome(cluster,
                       [](int64_t d, Communicator& c) {
                         if (d == 1) throw 42;
                         c.Barrier();
                       }),
            "InternalError: device 1: unknown exception");
  EXPECT_EQ(RunOutcome(cluster, [](int64_t, Communicator& c) { c.Barrier(); }), "");
}

// Once a hung device is released it returns and the cluster runs again:
// the outcome of the first run it accepts within 2 s.
std::string OutcomeOnceReleased(LocalCluster& cluster) {
  std::string outcome = "not run";
  for (int attempt = 0; attempt < 100 && !outcome.empty(); ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    outcome = RunOutcome(cluster, [](int64_t, Communicator& c) { c.Barrier(); });
  }
  return outcome;
}

// The watchdog: device 2 never reaches the second collective (it waits on a
// promise the test keeps). Devices 0 and 1 are a group of their own there
// and return; device 3 fails after the timeout (1 s, from the runtime
// configuration as the CLI's --collective-timeout sets it) with a
// weft::Error naming device 2 and the collective, instead of hanging.
TEST(LocalCluster, ADeviceThatNeverArrivesFailsTheOthersAfterTheTimeout) {
  ScopedConfigOverride timeout(ConfigKey::kCollectiveTimeout, 1);
  LocalCluster cluster(4);
  cluster.set_threads(4);  // one device a thread: only device 2 hangs
  auto release = std::make_shared<std::promise<void>>();
  std::shared_future<void> released = release->get_future().share();
  const auto start = std::chrono::steady_clock::now();
  const std::string e = RunOutcome(cluster, [released](int64_t d, Communicator& c) {
    c.AllReduce(std::vector<float>(16, 1.0f), ReduceOp::kSum);
    if (d == 2) released.wait();  // hung
    c.AllReduce(std::vector<float>(16, 1.0f), ReduceOp::kSum, {{0, 1}, {2, 3}});
  });
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_NE(e.find("Error: device "), std::string::npos) << e;
  EXPECT_EQ(e.find("InternalError"), std::string::npos) << e;
  EXPECT_NE(e.find("collective timeout: device 2 did not arrive at AllReduce #2 (sum f32, 64 "
                   "bytes in, groups {{0,1},{2,3}}) within 1 s while device 3 waited there"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("device 2 last entered collective #1"), std::string::npos) << e;
  EXPECT_NE(e.find("WEFT_COLLECTIVE_TIMEOUT"), std::string::npos) << e;
  EXPECT_GE(elapsed, std::chrono::milliseconds(950));
  EXPECT_LT(elapsed, std::chrono::seconds(8));  // 1 s timeout + at most 1 s grace
  // The hung thread still runs: the cluster refuses a new run until it returns.
  const std::string refused = RunOutcome(cluster, [](int64_t, Communicator& c) { c.Barrier(); });
  EXPECT_NE(refused.find("device 2 of an earlier run"), std::string::npos) << refused;
  // Released, device 2 reaches its collective, is told the run was aborted and
  // returns; then the cluster runs again.
  release->set_value();
  EXPECT_EQ(OutcomeOnceReleased(cluster), "");
}

// A device that is only slow arrives during the grace after the timeout: it
// is released at its collective and joined, so nothing is left running.
TEST(LocalCluster, ASlowDeviceIsReleasedAtItsNextCollectiveAndJoined) {
  LocalCluster cluster(3);
  cluster.set_threads(3);  // device 0's sleep holds up no other device
  cluster.set_collective_timeout(std::chrono::milliseconds(300));
  const std::string e = RunOutcome(cluster, [](int64_t d, Communicator& c) {
    if (d == 0) std::this_thread::sleep_for(std::chrono::milliseconds(400));
    c.Barrier();
  });
  EXPECT_NE(e.find("collective timeout: device 0 did not arrive at Barrier #1 (0 bytes in) "
                   "within 300 ms while devices 1,2 waited there; device 0 has entered no "
                   "collective in this run"),
            std::string::npos)
      << e;
  // Joined or (on a very loaded machine) detached and soon returned: a new run
  // is accepted at most shortly after.
  std::string again = "not run";
  for (int attempt = 0; attempt < 100 && !again.empty(); ++attempt) {
    again = RunOutcome(cluster, [](int64_t, Communicator& c) { c.Barrier(); });
    if (!again.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(again, "");
  EXPECT_THROW(cluster.set_collective_timeout(std::chrono::milliseconds(0)), Error);
}

// Devices on fewer threads than devices take turns at their collectives: a
// device that hangs holds up the devices behind it on its thread, and the
// watchdog still names the one that did not arrive.
TEST(LocalCluster, AHungDeviceOnASharedThreadIsNamedAndItsThreadIsRefused) {
  LocalCluster cluster(4);
  cluster.set_threads(2);  // devices 0 and 2 on one thread, 1 and 3 on the other
  cluster.set_collective_timeout(std::chrono::milliseconds(300));
  auto release = std::make_shared<std::promise<void>>();
  std::shared_future<void> released = release->get_future().share();
  const std::string e = RunOutcome(cluster, [released](int64_t d, Communicator& c) {
    // Device 2 hangs when its thread first runs it, after device 0 (its
    // thread's first device) has reached the all-reduce.
    if (d == 2) released.wait();
    c.AllReduce(std::vector<float>(8, 1.0f), ReduceOp::kSum);
  });
  EXPECT_NE(e.find("collective timeout: device 2 did not arrive at AllReduce #1 (sum f32, 32 "
                   "bytes in, groups {{0,1,2,3}}) within 300 ms while devices 0,1,3 waited "
                   "there; device 2 has entered no collective in this run"),
            std::string::npos)
      << e;
  // Device 0 waits behind device 2 on their thread: both are still out.
  const std::string refused = RunOutcome(cluster, [](int64_t, Communicator& c) { c.Barrier(); });
  EXPECT_NE(refused.find("devices 0,2 of an earlier run"), std::string::npos) << refused;
  release->set_value();
  EXPECT_EQ(OutcomeOnceReleased(cluster), "");
}

// The devices' results do not depend on how many threads run them: every
// kind of collective on random data, five devices on 1 to 5 threads.
TEST(LocalCluster, AnyNumberOfThreadsGivesTheSameBits) {
  constexpr int64_t kDevices = 5, kCount = 3000;
  std::mt19937 rng(20261128);
  std::normal_distribution<float> normal;
  std::vector<std::vector<float>> in(kDevices, std::vector<float>(kCount * kDevices));
  for (auto& v : in)
    for (float& x : v) x = normal(rng);
  auto run = [&](int64_t threads) {
    LocalCluster cluster(kDevices);
    cluster.set_threads(threads);
    EXPECT_EQ(cluster.threads(), threads);
    std::vector<std::vector<float>> out(kDevices);
    cluster.Run([&](int64_t d, Communicator& c) {
      std::vector<float>& o = out[d];
      for (int round = 0; round < 3; ++round) {
        std::vector<float> sum = c.AllReduce(in[d], ReduceOp::kSum);
        o.insert(o.end(), sum.begin(), sum.end());
        std::vector<float> gathered(kCount * kDevices), scattered(kCount), swapped(in[d].size());
        c.AllGather(in[d].data() + round, gathered.data(), kCount, PrimitiveType::kF32);
        c.ReduceScatter(in[d].data(), scattered.data(), in[d].size(), PrimitiveType::kF32,
                        ReduceOp::kMax);
        c.AllToAll(in[d].data(), swapped.data(), in[d].size(), PrimitiveType::kF32);
        std::vector<float> shifted =
            c.CollectivePermute(std::vector<float>(in[d].begin(), in[d].begin() + kCount),
                                {{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 0}});
        for (const auto* part : {&gathered, &scattered, &swapped, &shifted})
          o.insert(o.end(), part->begin(), part->end());
      }
    });
    return out;
  };
  const auto reference = run(kDevices);
  // One element of the all-reduce against a float64 sum, for scale.
  double sum = 0;
  for (int64_t d = 0; d < kDevices; ++d) sum += in[d][17];
  EXPECT_NEAR(reference[3][17], sum, 1e-5 * (1 + std::abs(sum)));
  for (int64_t threads = 1; threads < kDevices; ++threads) {
    const auto out = run(threads);
    for (int64_t d = 0; d < kDevices; ++d) {
      ASSERT_EQ(out[d].size(), reference[d].size());
      EXPECT_EQ(std::memcmp(out[d].data(), reference[d].data(), out[d].size() * sizeof(float)), 0)
          << threads << " threads, device " << d;
    }
  }
}

// A device's stats count the time its thread ran its other devices while it
// waited: device 0 waits at the barrier while device 1, on the same thread,
// takes 30 ms to arrive.
TEST(LocalCluster, StatsCountTheTimeAThreadRanItsOtherDevices) {
  for (int64_t threads : {1, 2}) {
    LocalCluster cluster(2);
    cluster.set_threads(threads);
    cluster.Run([](int64_t d, Communicator& c) {
      if (d == 1) std::this_thread::sleep_for(std::chrono::milliseconds(30));
      c.Barrier();
    });
    const double waited = cluster.communicator(0).stats().seconds_others_ran;
    if (threads == 1) {
      EXPECT_GE(waited, 0.029);
      EXPECT_LT(waited, 5.0);
    } else {
      EXPECT_EQ(waited, 0);
    }
    EXPECT_EQ(cluster.communicator(1).stats().seconds_others_ran, 0) << threads << " threads";
  }
}

// A device whose thread is busy with its other device goes on on a thread
// whose devices all wait. Devices 0 and 2 share a thread; device 2 computes
// until device 0 is done (at most 20 s), and device 0 meets device 1 five
// times meanwhile: the other thread (devices 1 and 3) runs it.
TEST(LocalCluster, AThreadWhoseDevicesWaitRunsADeviceWhoseThreadIsBusy) {
  LocalCluster cluster(4);
  cluster.set_threads(2);  // devices 0 and 2 on one thread, 1 and 3 on the other
  std::mt19937 rng(20261129);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<std::vector<float>> in(4, std::vector<float>(5));
  for (auto& v : in)
    for (float& x : v) x = uniform(rng);
  std::atomic<bool> zero_done{false};
  bool two_saw_zero_done = false;
  std::vector<std::vector<float>> sums(4);
  cluster.Run([&](int64_t d, Communicator& c) {
    if (d == 2) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (!zero_done.load() && std::chrono::steady_clock::now() < until) {
      }
      two_saw_zero_done = zero_done.load();
    }
    for (size_t round = 0; round < in[d].size(); ++round) {
      sums[d].push_back(
          c.AllReduce(std::vector<float>(2, in[d][round]), ReduceOp::kSum, {{0, 1}, {2, 3}})[1]);
    }
    if (d == 0) zero_done = true;
  });
  EXPECT_TRUE(two_saw_zero_done);
  for (int64_t d = 0; d < 4; ++d) {
    const int64_t partner = d ^ 1;
    for (size_t round = 0; round < in[d].size(); ++round) {
      const double sum = static_cast<double>(in[d][round]) + in[partner][round];
      EXPECT_NEAR(sums[d][round], sum, 1e-6) << "device " << d << ", round " << round;
    }
  }
}

TEST(LocalCluster, ThreadsDefaultToTheFewerOfDevicesAndCoresAndAreChecked) {
  LocalCluster one(1), many(4096);
  EXPECT_EQ(one.threads(), 1);
  EXPECT_EQ(many.threads(), std::min<int64_t>(4096, ThreadPool::Global().num_threads()));
  for (int64_t bad : {0, 5}) {
    LocalCluster cluster(4);
    try {
      cluster.set_threads(bad);
      ADD_FAILURE() << bad << " threads were accepted";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()),
                fmt::format("LocalCluster: {} threads for 4 devices; give 1..4", bad));
    }
  }
}

TEST(LocalCluster, CollectivesWellWithinTheTimeoutSucceed) {
  LocalCluster cluster(4);
  cluster.set_collective_timeout(std::chrono::milliseconds(2000));
  std::vector<std::vector<float>> out(4);
  cluster.Run([&](int64_t d, Communicator& c) {
    if (d == 3) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    out[d] = c.AllReduce(std::vector<float>{static_cast<float>(d)}, ReduceOp::kSum);
  });
  for (const auto& v : out) EXPECT_EQ(v, std::vector<float>{6.0f});
}

TEST(LocalCluster, CatchingStdExceptionDoesNotSwallowTheRelease) {
  LocalCluster cluster(2);
  const std::string e = RunError(cluster, [](int64_t d, Communicator& c) {
    if (d == 0) throw Error("bad input");
    for (int i = 0; i < 3; ++i) {
      try {
        c.Barrier();
      } catch (const std::exception&) {
      }
    }
  });
  EXPECT_EQ(e, "device 0: bad input");
}

TEST(LocalCluster, ADeviceReturningEarlyIsAnErrorNotAHang) {
  LocalCluster cluster(4);
  const std::string e = RunError(cluster, [](int64_t d, Communicator& c) {
    c.Barrier();
    if (d == 1) return;
    c.AllReduce(std::vector<float>(8, 1.0f), ReduceOp::kSum);
  });
  EXPECT_NE(e.find("device 1 returned from its program while device"), std::string::npos) << e;
  EXPECT_NE(e.find("AllReduce #2"), std::string::npos) << e;
}

TEST(LocalCluster, DifferentCollectivesOrShapesAreErrors) {
  LocalCluster cluster(4);
  std::string e = RunError(cluster, [](int64_t d, Communicator& c) {
    if (d == 3) {
      c.AllGather(std::vector<float>(8));
    } else {
      c.AllReduce(std::vector<float>(8), ReduceOp::kSum);
    }
  });
  EXPECT_NE(e.find("devices run different collectives"), std::string::npos) << e;
  EXPECT_NE(e.find("device 3 runs AllGather #1"), std::string::npos) << e;
  e = RunError(cluster, [](int64_t d, Communicator& c) {
    c.AllReduce(std::vector<float>(d == 1 ? 9 : 8), ReduceOp::kSum);
  });
  EXPECT_NE(e.find("36 bytes in"), std::string::npos) << e;
  e = RunError(cluster, [](int64_t d, Communicator& c) {
    c.AllReduce(std::vector<float>(8), ReduceOp::kSum,
                d == 0 ? ReplicaGroups{{0, 1}, {2, 3}} : ReplicaGroups{{0, 2}, {1, 3}});
  });
  EXPECT_NE(e.find("groups {{0,1},{2,3}}"), std::string::npos) << e;
}

// Each replica group meets on its own: devices 2 and 3 finish a collective
// of their group while device 0 (one thread a device here) waits, before
// its own group's collective, for them to have finished it.
TEST(LocalCluster, AGroupNeverWaitsForAnotherGroup) {
  LocalCluster cluster(4);
  cluster.set_threads(4);
  cluster.set_collective_timeout(std::chrono::seconds(20));
  auto done = std::make_shared<std::promise<void>>();
  std::shared_future<void> other_group_done = done->get_future().share();
  std::vector<std::vector<float>> results(4);
  cluster.Run([&](int64_t d, Communicator& c) {
    if (d == 0) other_group_done.wait();
    results[d] = c.AllReduce(std::vector<float>(4, static_cast<float>(d + 1)), ReduceOp::kSum,
                             {{0, 1}, {2, 3}});
    if (d == 2) done->set_value();
    // Then every device meets: the groups were not left apart.
    results[d].push_back(c.AllReduce(std::vector<float>(1, 1.0f), ReduceOp::kSum)[0]);
  });
  for (int64_t d = 0; d < 4; ++d) {
    const float group_sum = d < 2 ? 1.0f + 2.0f : 3.0f + 4.0f;
    EXPECT_EQ(results[d], (std::vector<float>{group_sum, group_sum, group_sum, group_sum, 4.0f}))
        << "device " << d;
  }
}

// Groups that never meet are still compared: the second group to pass a
// collective number finds that the first ran another collective there.
TEST(LocalCluster, GroupsRunningDifferentCollectivesAreErrors) {
  LocalCluster cluster(4);
  const std::string e = RunError(cluster, [](int64_t d, Communicator& c) {
    c.AllReduce(std::vector<float>(d < 2 ? 8 : 9, 1.0f), ReduceOp::kSum, {{0, 1}, {2, 3}});
  });
  EXPECT_NE(e.find("devices run different collectives"), std::string::npos) << e;
  EXPECT_NE(e.find("as its collective #1"), std::string::npos) << e;
  EXPECT_NE(e.find(" bytes in, groups {{0,1},{2,3}})"), std::string::npos) << e;
}

TEST(LocalCluster, DifferentBatchesAreErrors) {
  LocalCluster cluster(3);
  std::string e = RunError(cluster, [](int64_t d, Communicator& c) {
    std::vector<float> a(8, 1.0f), b(8, 2.0f);
    c.BeginBatch();
    c.AllReduce(a.data(), a.data(), 8, PrimitiveType::kF32, ReduceOp::kSum);
    if (d != 2) c.AllReduce(b.data(), b.data(), 8, PrimitiveType::kF32, ReduceOp::kSum);
    c.EndBatch();
  });
  EXPECT_NE(e.find("device 0 runs a batch of 2 (AllReduce #1"), std::string::npos) << e;
  EXPECT_NE(e.find("device 2 runs a batch of 1"), std::string::npos) << e;
  e = RunError(cluster, [](int64_t d, Communicator& c) {
    std::vector<float> a(8, 1.0f), b(8 * 3, 2.0f);
    c.BeginBatch();
    c.AllReduce(a.data(), a.data(), 8, PrimitiveType::kF32, ReduceOp::kSum);
    if (d == 1) {
      c.AllGather(a.data(), b.data(), 8, PrimitiveType::kF32);
    } else {
      c.AllReduce(b.data(), b.data(), 8, PrimitiveType::kF32, ReduceOp::kSum);
    }
    c.EndBatch();
  });
  EXPECT_NE(e.find("device 1 runs AllGather #2"), std::string::npos) << e;
  // The cluster runs again: a failed batch leaves nothing behind.
  cluster.Run([](int64_t, Communicator& c) {
    std::vector<float> a(8, 1.0f);
    c.BeginBatch();
    c.AllReduce(a.data(), a.data(), 8, PrimitiveType::kF32, ReduceOp::kSum);
    c.EndBatch();
    EXPECT_EQ(a[0], 3.0f);
  });
}

TEST(LocalCluster, InvalidGroupsFailOnEveryDevice) {
  LocalCluster cluster(4);
  const std::string e = RunError(cluster, [](int64_t, Communicator& c) {
    c.AllReduce(std::vector<float>(8), ReduceOp::kSum, {{0, 1}, {1, 2, 3}});
  });
  EXPECT_NE(e.find("name device 1 twice"), std::string::npos) << e;
}

TEST(LocalCluster, VerifySameHashNamesTheDifferingDevice) {
  LocalCluster cluster(4);
  cluster.Run([](int64_t, Communicator& c) { c.VerifySameHash(0xabc, "program"); });
  const std::string e = RunError(cluster, [](int64_t d, Communicator& c) {
    c.VerifySameHash(d == 1 ? 0x2 : 0x1, "program hash");
    c.AllReduce(std::vector<float>(4), ReduceOp::kSum);  // never reached
  });
  EXPECT_NE(e.find("program hash differs between devices (devices 0,2,3 have "
                   "0x0000000000000001; device 1 has 0x0000000000000002)"),
            std::string::npos)
      << e;
}

TEST(LocalCluster, RunsAgainAfterAFailure) {
  LocalCluster cluster(3);
  EXPECT_NE(RunError(cluster,
                     [](int64_t d, Communicator& c) {
                       if (d == 0) throw Error("first run fails");
                       c.Barrier();
                     }),
            "");
  std::vector<std::vector<int32_t>> out(3);
  cluster.Run([&](int64_t d, Communicator& c) {
    out[d] = c.AllReduce(std::vector<int32_t>{static_cast<int32_t>(d)}, ReduceOp::kSum);
  });
  for (const auto& v : out) EXPECT_EQ(v, std::vector<int32_t>{3});
}

TEST(LocalCluster, AnInputMayBeOverwrittenAsSoonAsItsCollectiveReturns) {
  // Large all-gathers, reduce-scatters and all-to-alls meet once: each
  // device pulls from the others' staged copies, so a device that returns
  // first and overwrites its input (as the executor reuses a dead buffer)
  // or runs its next collectives changes nothing a slower device reads.
  constexpr int64_t kDevices = 4, kCount = 1 << 16;  // 256 KiB a device
  LocalCluster cluster(kDevices);
  std::vector<int64_t> wrong(kDevices, 0);
  cluster.Run([&](int64_t d, Communicator& c) {
    std::vector<int32_t> in(kCount), out(kCount * kDevices), chunk(kCount / kDevices);
    for (int i = 0; i < 60; ++i) {
      for (int64_t k = 0; k < kCount; ++k) in[k] = static_cast<int32_t>(d * 1000003 + k + i);
      switch (i % 3) {
        case 0:
          c.AllGather(in.data(), out.data(), kCount, PrimitiveType::kS32);
          for (int64_t m = 0; m < kDevices; ++m) {
            wrong[d] += out[m * kCount + 5] != static_cast<int32_t>(m * 1000003 + 5 + i);
          }
          break;
        case 1:
          c.ReduceScatter(in.data(), chunk.data(), kCount, PrimitiveType::kS32, ReduceOp::kMax);
          wrong[d] +=
              chunk[3] != static_cast<int32_t>(3 * 1000003 + d * (kCount / kDevices) + 3 + i);
          break;
        default:
          c.AllToAll(in.data(), in.data(), kCount, PrimitiveType::kS32);
          for (int64_t m = 0; m < kDevices; ++m) {
            wrong[d] += in[m * (kCount / kDevices)] !=
                        static_cast<int32_t>(m * 1000003 + d * (kCount / kDevices) + i);
          }
          break;
      }
      std::fill(in.begin(), in.end(), -1);  // the input's buffer, reused at once
    }
  });
  EXPECT_EQ(wrong, std::vector<int64_t>(kDevices, 0));
}
TEST(LocalCluster, ManyCollectivesBackToBack) {
  // Exercises posts being reused call after call by fast and slow devices.
  LocalCluster cluster(5);
  std::vector<int64_t> sums(5);
  cluster.Run([&](int64_t d, Communicator& c) {
    int64_t sum = 0;
    for (int i = 0; i < 2000; ++i) {
      auto v = c.AllReduce(std::vector<int64_t>{d + i}, ReduceOp::kSum, {{0, 1, 2, 3, 4}});
      sum += v[0];
      if (i % 7 == 0) c.Barrier();
    }
    sums[d] = sum;
  });
  for (int64_t s : sums) EXPECT_EQ(s, 2000 * 10 + 5 * (1999 * 2000 / 2));
}

}  // namespace
}  // namespace weft::runtime
