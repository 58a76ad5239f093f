// Communicator: the collectives one device runs with the others, over XLA
// replica groups. Two backends implement it with bit-identical results:
// threads of one process (comm_threads.h) and MPI ranks (comm_mpi.h).
//
// Semantics (XLA's):
//   replica groups  lists of global device ids, e.g. {{0,1},{2,3}}; they must
//                   partition all devices; an empty list means one group of
//                   all devices in id order. "Position" is the index of a
//                   device within its group.
//   AllReduce       out = in_0 op in_1 op ... op in_{n-1}, combined left to
//                   right in group-member order (fixed, so every backend gives
//                   the same bits). Sum, max or min; max/min propagate NaN.
//   AllGather       out = the inputs of the group's members concatenated in
//                   member order (n equal chunks along the leading dimension).
//   ReduceScatter   the input is n equal chunks; member i receives the
//                   reduction (as AllReduce) of chunk i over all members.
//   AllToAll        the input is n equal chunks; chunk j of member i becomes
//                   chunk i of member j's output.
//   CollectivePermute  source -> target pairs (each device a source at most
//                   once and a target at most once); a device that no pair
//                   targets receives zeros.
// Strided chunks: AllGather, ReduceScatter and AllToAll take `outer` (1 by
// default). With outer > 1 their chunked buffers (AllGather's output,
// ReduceScatter's input, both of AllToAll's) are [outer, n, inner] and chunk
// i is the slice [:, i, :]; AllGather's input and ReduceScatter's output are
// [outer, inner]. This is a collective along a dimension that is not the
// leading one. AllToAll may cut its output into other rows than its input:
// with `out_outer` the output is [out_outer, n, out_inner], each chunk's
// elements in the order they had in the input (what an all-to-all writing
// straight into a transpose's layout needs, compiler/all_to_all_layout.h).
// A backend that moves strided chunks itself says so (MovesStridedChunks);
// for the others Communicator packs the chunks contiguously around the call.
//
// Every device must call the same collectives in the same order with the same
// element type, op, groups and input size (SPMD); a communicator is used by
// one thread at a time. Buffers: `in` and `out` may
// be the same pointer (in place) for AllReduce, AllToAll and
// CollectivePermute, and must otherwise not overlap.
//
// Bytes sent (CollectiveStats::bytes_sent) follow the ring-algorithm model
// of XLA's cost analysis and nccl-tests, computed per device from its INPUT
// size B in bytes and its group size n, identically in both backends whatever
// they move on the wire (see CollectiveBytesSent):
//   AllReduce          2 * (n-1) * B / n   (integer division)
//   AllGather          (n-1) * B           (B is this device's shard)
//   ReduceScatter      (n-1) * B / n       (B is the whole input)
//   AllToAll           (n-1) * B / n       (the device's own chunk stays)
//   CollectivePermute  B if this device sends to another device, else 0
//   Barrier, VerifySameHash   0 (control traffic is not counted)
// A group of one sends nothing.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "weft/base/error.h"
#include "weft/base/primitive_type.h"

namespace weft::runtime {

// Collectives move and reduce f32, bf16, f64, s32, s64, u16 and pred (one
// byte per element; raw bytes travel as pred too); any other element type is
// refused by name (CheckCollectiveType). Reductions are done in the type's own
// arithmetic (bf16 widened to f32 and rounded back; pred and u16 as unsigned).
void CheckCollectiveType(PrimitiveType dtype);

// The element type of a C++ type; bfloat16 values travel as uint16_t bits,
// bytes as pred.
template <typename T>
constexpr PrimitiveType ElementTypeOf() {
  if constexpr (std::is_same_v<T, float>) {
    return PrimitiveType::kF32;
  } else if constexpr (std::is_same_v<T, uint16_t>) {
    return PrimitiveType::kBF16;
  } else if constexpr (std::is_same_v<T, int32_t>) {
    return PrimitiveType::kS32;
  } else if constexpr (std::is_same_v<T, int64_t>) {
    return PrimitiveType::kS64;
  } else if constexpr (std::is_same_v<T, double>) {
    return PrimitiveType::kF64;
  } else {
    static_assert(std::is_same_v<T, uint8_t>, "unsupported collective element type");
    return PrimitiveType::kPred;
  }
}

enum class ReduceOp : uint8_t { kSum, kMax, kMin };
std::string_view ReduceOpName(ReduceOp op);  // "sum", "max", "min"

using ReplicaGroups = std::vector<std::vector<int64_t>>;

struct SourceTargetPair {
  int64_t source = 0;
  int64_t target = 0;
};

enum class CollectiveKind : uint8_t {
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kAllToAll,
  kCollectivePermute,
  kBarrier,
  kVerifyHash,
};
inline constexpr int kNumCollectiveKinds = 7;
std::string_view CollectiveKindName(CollectiveKind kind);  // "AllReduce", ...

// The counting rule above: bytes one device sends for a collective with group
// size n and input size input_bytes. For CollectivePermute, n is 2 when the
// device sends to another device and 1 otherwise.
int64_t CollectiveBytesSent(CollectiveKind kind, int64_t n, int64_t input_bytes);

// "{{0,1},{2,3}}".
std::string ReplicaGroupsToString(const ReplicaGroups& groups);

// The groups with an empty list expanded to {{0..num_devices-1}}. Throws
// weft::Error unless they partition [0, num_devices).
ReplicaGroups NormalizeReplicaGroups(const ReplicaGroups& groups, int64_t num_devices);

struct CollectiveStats {
  std::array<int64_t, kNumCollectiveKinds> calls{};
  std::array<int64_t, kNumCollectiveKinds> bytes_sent{};
  // In-process devices sharing a thread (LocalCluster): the seconds this
  // device's thread ran its other devices while this one waited in a
  // collective. Their work, not this device's; 0 under MPI.
  double seconds_others_ran = 0;

  int64_t Calls(CollectiveKind kind) const { return calls[static_cast<int>(kind)]; }
  int64_t BytesSent(CollectiveKind kind) const { return bytes_sent[static_cast<int>(kind)]; }
  int64_t TotalBytesSent() const;
};

// One collective as a backend sees it, validated by Communicator.
struct CollectiveCall {
  CollectiveKind kind = CollectiveKind::kBarrier;
  PrimitiveType dtype = PrimitiveType::kPred;
  ReduceOp op = ReduceOp::kSum;
  const std::byte* in = nullptr;
  std::byte* out = nullptr;
  int64_t in_bytes = 0;   // this device's input
  int64_t out_bytes = 0;  // this device's output
  // Normalized (a partition of all devices); the communicator keeps them
  // while it lives, so a call never copies them.
  const ReplicaGroups* groups = nullptr;
  int64_t group_index = 0;
  int64_t position = 0;                 // this device's index in groups[group_index]
  std::vector<SourceTargetPair> pairs;  // CollectivePermute only
  int64_t outer = 1;                    // strided chunks: [outer, n, inner] (see above)
  int64_t out_outer = 1;                // AllToAll's output rows: [out_outer, n, out_inner]
  uint64_t fingerprint = 0;             // hash of kind, dtype, op, sizes, groups, pairs
  int64_t sequence = 0;                 // 1 for this communicator's first call, then 2, ...

  const std::vector<int64_t>& members() const { return (*groups)[group_index]; }
  int64_t group_size() const { return static_cast<int64_t>(members().size()); }
  // "AllReduce #3 (sum f32, 4096 bytes, groups {{0,1},{2,3}})".
  std::string Describe() const;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int64_t device_id() const = 0;         // global device id
  virtual int64_t num_devices() const = 0;       // devices taking part
  virtual std::string_view backend() const = 0;  // "threads" or "mpi"

  // Counts are in elements of `dtype`. For AllGather `count` is this
  // device's shard and `out` holds count * n; for ReduceScatter `count` is the
  // whole input (a multiple of n) and `out` holds count / n; for AllToAll
  // `count` is the whole input (a multiple of n) and the output is as large.
  void AllReduce(const void* in, void* out, int64_t count, PrimitiveType dtype, ReduceOp op,
                 const ReplicaGroups& groups = {});
  // `outer`: strided chunks (above); `count` must be a multiple of it.
  void AllGather(const void* in, void* out, int64_t count, PrimitiveType dtype,
                 const ReplicaGroups& groups = {}, int64_t outer = 1);
  void ReduceScatter(const void* in, void* out, int64_t count, PrimitiveType dtype, ReduceOp op,
                     const ReplicaGroups& groups = {}, int64_t outer = 1);
  // `out_outer`: the output's rows (0: as the input's); not in place unless
  // it is the input's.
  void AllToAll(const void* in, void* out, int64_t count, PrimitiveType dtype,
                const ReplicaGroups& groups = {}, int64_t outer = 1, int64_t out_outer = 0);
  void CollectivePermute(const void* in, void* out, int64_t count, PrimitiveType dtype,
                         const std::vector<SourceTargetPair>& pairs);
  // Waits until every device reaches its Barrier.
  void Barrier();
  // A batch: the collectives called between BeginBatch and EndBatch are
  // independent (none reads a buffer an earlier one of the batch writes), and
  // every device batches the same ones. A backend may then move them
  // together — the threads backend meets once for the whole batch instead of
  // once per call — so an output is only ready after EndBatch, and every
  // buffer must stay valid until then. Each call still counts in stats() and
  // numbers its own sequence. Batches do not nest, and Barrier and
  // VerifySameHash are not called inside one. A strided call on a backend
  // that packs (MPI) runs at once, through its pack buffer.
  void BeginBatch();
  void EndBatch();
  // Exchanges a 64-bit hash (e.g. of the program) among all devices; throws
  // weft::Error naming `what`, the hashes and the devices holding each when
  // they differ. Every device throws, so none runs a mismatched program.
  void VerifySameHash(uint64_t hash, const std::string& what);

  // Typed conveniences over the calls above, returning the output.
  template <typename T>
  std::vector<T> AllReduce(const std::vector<T>& in, ReduceOp op,
                           const ReplicaGroups& groups = {}) {
    std::vector<T> out(in.size());
    AllReduce(in.data(), out.data(), Count(in), ElementTypeOf<T>(), op, groups);
    return out;
  }
  template <typename T>
  std::vector<T> AllGather(const std::vector<T>& in, const ReplicaGroups& groups = {}) {
    std::vector<T> out(in.size() * GroupSize(groups));
    AllGather(in.data(), out.data(), Count(in), ElementTypeOf<T>(), groups);
    return out;
  }
  template <typename T>
  std::vector<T> ReduceScatter(const std::vector<T>& in, ReduceOp op,
                               const ReplicaGroups& groups = {}) {
    std::vector<T> out(in.size() / GroupSize(groups));
    ReduceScatter(in.data(), out.data(), Count(in), ElementTypeOf<T>(), op, groups);
    return out;
  }
  template <typename T>
  std::vector<T> AllToAll(const std::vector<T>& in, const ReplicaGroups& groups = {}) {
    std::vector<T> out(in.size());
    AllToAll(in.data(), out.data(), Count(in), ElementTypeOf<T>(), groups);
    return out;
  }
  template <typename T>
  std::vector<T> CollectivePermute(const std::vector<T>& in,
                                   const std::vector<SourceTargetPair>& pairs) {
    std::vector<T> out(in.size());
    CollectivePermute(in.data(), out.data(), Count(in), ElementTypeOf<T>(), pairs);
    return out;
  }

  // The size of the group holding this device (validates the groups).
  int64_t GroupSize(const ReplicaGroups& groups) const;

  // Counters of the calls this communicator completed.
  const CollectiveStats& stats() const { return stats_; }
  void ResetStats() { stats_ = {}; }

 protected:
  void AddSecondsOthersRan(double seconds) { stats_.seconds_others_ran += seconds; }
  // Moves the data of one validated call. Backends throw weft::Error on
  // failure. kVerifyHash is an all-gather of 8 bytes over all devices.
  virtual void DoCollective(const CollectiveCall& call) = 0;
  // Moves the data of a batch (BeginBatch); by default one call after the
  // other.
  virtual void DoCollectives(std::span<const CollectiveCall> calls) {
    for (const CollectiveCall& call : calls) DoCollective(call);
  }
  // Whether DoCollective moves strided chunks (call.outer > 1) itself;
  // otherwise it only ever sees outer == 1.
  virtual bool MovesStridedChunks() const { return false; }
  // Numbers the next call 1 again and drops a batch a failed program left
  // open (a backend starting a new program).
  void RestartSequence() {
    sequence_ = 0;
    batching_ = false;
    batch_.clear();
  }

 private:
  template <typename T>
  static int64_t Count(const std::vector<T>& v) {
    return static_cast<int64_t>(v.size());
  }
  CollectiveCall Prepare(CollectiveKind kind, PrimitiveType dtype, ReduceOp op, const void* in,
                         void* out, int64_t in_count, const ReplicaGroups& groups,
                         int64_t outer = 1);
  void Finish(CollectiveCall& call);
  // Runs a strided call as a contiguous one, packing through pack_.
  void RunPacked(const CollectiveCall& call);

  // The groups normalized, each kept once for the communicator's life (a
  // program names a few distinct groups): calls point at them.
  const ReplicaGroups& Normalized(const ReplicaGroups& groups);

  CollectiveStats stats_;
  std::vector<std::pair<ReplicaGroups, std::unique_ptr<const ReplicaGroups>>> normalized_;
  std::vector<std::byte> pack_;
  int64_t sequence_ = 0;
  bool batching_ = false;
  std::vector<CollectiveCall> batch_;  // calls waiting for EndBatch
};

}  // namespace weft::runtime
