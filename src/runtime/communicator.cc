// Communicator: validation, bookkeeping and the byte-counting rule shared by
// both backends; the backends only move data (DoCollective).
#include "weft/runtime/communicator.h"

#include <fmt/format.h>

#include <cstring>
#include <map>

namespace weft::runtime {

namespace {

// FNV-1a, to fingerprint a call for cross-device consistency checks.
struct Fnv {
  uint64_t h = 1469598103934665603ull;
  void Add(uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  }
};

bool Overlap(const void* a, int64_t a_bytes, const void* b, int64_t b_bytes) {
  auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && pa < pb + static_cast<uintptr_t>(b_bytes) &&
         pb < pa + static_cast<uintptr_t>(a_bytes);
}

bool AllowsInPlace(CollectiveKind kind) {
  return kind == CollectiveKind::kAllReduce || kind == CollectiveKind::kAllToAll ||
         kind == CollectiveKind::kCollectivePermute;
}

}  // namespace

void CheckCollectiveType(PrimitiveType dtype) {
  CheckSupportedType(
      dtype,
      {PrimitiveType::kF32, PrimitiveType::kBF16, PrimitiveType::kF64, PrimitiveType::kS32,
       PrimitiveType::kS64, PrimitiveType::kU16, PrimitiveType::kPred},
      "a collective");
}

std::string_view ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
  }
  return "?";
}

std::string_view CollectiveKindName(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce:
      return "AllReduce";
    case CollectiveKind::kAllGather:
      return "AllGather";
    case CollectiveKind::kReduceScatter:
      return "ReduceScatter";
    case CollectiveKind::kAllToAll:
      return "AllToAll";
    case CollectiveKind::kCollectivePermute:
      return "CollectivePermute";
    case CollectiveKind::kBarrier:
      return "Barrier";
    case CollectiveKind::kVerifyHash:
      return "VerifySameHash";
  }
  return "?";
}

int64_t CollectiveBytesSent(CollectiveKind kind, int64_t n, int64_t input_bytes) {
  if (n <= 1) return 0;
  switch (kind) {
    case CollectiveKind::kAllReduce:
      return 2 * (n - 1) * input_bytes / n;
    case CollectiveKind::kAllGather:
      return (n - 1) * input_bytes;
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllToAll:
      return (n - 1) * input_bytes / n;
    case CollectiveKind::kCollectivePermute:
      return input_bytes;
    case CollectiveKind::kBarrier:
    case CollectiveKind::kVerifyHash:
      return 0;
  }
  return 0;
}

std::string ReplicaGroupsToString(const ReplicaGroups& groups) {
  std::string out = "{";
  for (size_t g = 0; g < groups.size(); ++g)
    out += fmt::format("{}{{{}}}", g ? "," : "", fmt::join(groups[g], ","));
  return out + "}";
}

ReplicaGroups NormalizeReplicaGroups(const ReplicaGroups& groups, int64_t num_devices) {
  if (groups.empty()) {
    ReplicaGroups all(1);
    for (int64_t d = 0; d < num_devices; ++d) all[0].push_back(d);
    return all;
  }
  std::vector<bool> seen(num_devices, false);
  for (const auto& group : groups) {
    WEFT_CHECK(!group.empty(), "replica groups {} contain an empty group; remove it",
               ReplicaGroupsToString(groups));
    for (int64_t d : group) {
      WEFT_CHECK(d >= 0 && d < num_devices,
                 "replica groups {} name device {}, but there are {} devices (ids 0..{})",
                 ReplicaGroupsToString(groups), d, num_devices, num_devices - 1);
      WEFT_CHECK(!seen[d],
                 "replica groups {} name device {} twice; each device must be in exactly one "
                 "group",
                 ReplicaGroupsToString(groups), d);
      seen[d] = true;
    }
  }
  for (int64_t d = 0; d < num_devices; ++d) {
    WEFT_CHECK(seen[d],
               "replica groups {} leave out device {}; the groups must cover all {} devices (or "
               "be empty for one group of all)",
               ReplicaGroupsToString(groups), d, num_devices);
  }
  return groups;
}

int64_t CollectiveStats::TotalBytesSent() const {
  int64_t total = 0;
  for (int64_t b : bytes_sent) total += b;
  return total;
}

std::string CollectiveCall::Describe() const {
  const bool reduces = kind == CollectiveKind::kAllReduce || kind == CollectiveKind::kReduceScatter;
  const bool bytes_only = kind == CollectiveKind::kBarrier || kind == CollectiveKind::kVerifyHash;
  std::string text =
      fmt::format("{} #{} ({}{}{} bytes in", CollectiveKindName(kind), sequence,
                  reduces ? fmt::format("{} ", ReduceOpName(op)) : "",
                  bytes_only ? "" : fmt::format("{}, ", PrimitiveTypeName(dtype)), in_bytes);
  if (outer > 1) text += fmt::format(", {} outer rows", outer);
  if (out_outer != outer) text += fmt::format(", {} output rows", out_outer);
  if (kind == CollectiveKind::kCollectivePermute) {
    text += ", pairs {";
    for (size_t i = 0; i < pairs.size(); ++i)
      text += fmt::format("{}{{{},{}}}", i ? "," : "", pairs[i].source, pairs[i].target);
    text += "}";
  } else if (!bytes_only) {
    std::string g = groups != nullptr ? ReplicaGroupsToString(*groups) : "{}";
    if (g.size() > 120) g = g.substr(0, 117) + "...";
    text += ", groups " + g;
  }
  return text + ")";
}

int64_t Communicator::GroupSize(const ReplicaGroups& groups) const {
  if (groups.empty()) return num_devices();
  for (const auto& group : NormalizeReplicaGroups(groups, num_devices())) {
    for (int64_t d : group)
      if (d == device_id()) return static_cast<int64_t>(group.size());
  }
  FailInternal("device {} is in none of the normalized replica groups {}", device_id(),
               ReplicaGroupsToString(groups));
}

CollectiveCall Communicator::Prepare(CollectiveKind kind, PrimitiveType dtype, ReduceOp op,
                                     const void* in, void* out, int64_t in_count,
                                     const ReplicaGroups& groups, int64_t outer) {
  CollectiveCall call;
  call.kind = kind;
  call.dtype = dtype;
  call.op = op;
  call.in = static_cast<const std::byte*>(in);
  call.out = static_cast<std::byte*>(out);
  call.sequence = sequence_ + 1;
  const std::string_view name = CollectiveKindName(kind);
  WEFT_INTERNAL_CHECK(in_count >= 0, "{}: element count {} is negative", name, in_count);
  CheckCollectiveType(dtype);
  call.in_bytes = in_count * ByteWidth(dtype);
  call.groups = &Normalized(groups);
  for (size_t g = 0; g < call.groups->size(); ++g) {
    for (size_t i = 0; i < (*call.groups)[g].size(); ++i) {
      if ((*call.groups)[g][i] != device_id()) continue;
      call.group_index = static_cast<int64_t>(g);
      call.position = static_cast<int64_t>(i);
    }
  }
  const int64_t n = call.group_size();
  switch (kind) {
    case CollectiveKind::kAllGather:
    case CollectiveKind::kVerifyHash:
      call.out_bytes = call.in_bytes * n;
      break;
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllToAll:
      WEFT_CHECK(in_count % n == 0,
                 "{}: the input has {} elements, which does not split into {} equal chunks (the "
                 "group size); pad or reshape it to a multiple of {}",
                 name, in_count, n, n);
      call.out_bytes = kind == CollectiveKind::kAllToAll ? call.in_bytes : call.in_bytes / n;
      break;
    default:
      call.out_bytes = call.in_bytes;
  }
  // The executor derives `outer` from a shape: a bad one is a bug.
  const bool chunked_in =
      kind == CollectiveKind::kReduceScatter || kind == CollectiveKind::kAllToAll;
  const int64_t chunks = chunked_in ? n : 1;
  WEFT_INTERNAL_CHECK(outer == 1 || ((chunked_in || kind == CollectiveKind::kAllGather) &&
                                     outer > 1 && in_count % (outer * chunks) == 0),
                      "{}: {} elements do not split into {} outer rows of {} chunks", name,
                      in_count, outer, chunks);
  call.outer = outer;
  call.out_outer = outer;
  // The buffers come from weft's own code (the executor, the trainer), never
  // from a user: a bad one is a bug.
  WEFT_INTERNAL_CHECK(call.in_bytes == 0 || in != nullptr, "{}: the input buffer is null", name);
  WEFT_INTERNAL_CHECK(call.out_bytes == 0 || out != nullptr, "{}: the output buffer is null", name);
  if (!(AllowsInPlace(kind) && in == out)) {
    WEFT_INTERNAL_CHECK(!Overlap(in, call.in_bytes, out, call.out_bytes),
                        "{}: the input and output buffers overlap; use separate buffers{}", name,
                        AllowsInPlace(kind) ? " or the same pointer for in place" : "");
  }
  return call;
}

const ReplicaGroups& Communicator::Normalized(const ReplicaGroups& groups) {
  for (const auto& [given, normalized] : normalized_) {
    if (given == groups) return *normalized;
  }
  auto normalized =
      std::make_unique<const ReplicaGroups>(NormalizeReplicaGroups(groups, num_devices()));
  normalized_.emplace_back(groups, std::move(normalized));
  return *normalized_.back().second;
}

void Communicator::Finish(CollectiveCall& call) {
  Fnv fnv;
  fnv.Add(static_cast<uint64_t>(call.kind));
  fnv.Add(static_cast<uint64_t>(call.dtype));
  fnv.Add(static_cast<uint64_t>(call.op));
  fnv.Add(static_cast<uint64_t>(call.in_bytes));
  for (const auto& group : *call.groups) {
    fnv.Add(~0ull);  // separator: {{0,1},{2}} differs from {{0},{1,2}}
    for (int64_t d : group) fnv.Add(static_cast<uint64_t>(d));
  }
  for (const auto& p : call.pairs) {
    fnv.Add(static_cast<uint64_t>(p.source));
    fnv.Add(static_cast<uint64_t>(p.target));
  }
  fnv.Add(static_cast<uint64_t>(call.outer));
  fnv.Add(static_cast<uint64_t>(call.out_outer));
  call.fingerprint = fnv.h;
  ++sequence_;
  if ((call.outer > 1 || call.out_outer > 1) && call.group_size() > 1 && !MovesStridedChunks()) {
    RunPacked(call);  // through pack_: never waits for the batch's end
  } else if (batching_) {
    WEFT_INTERNAL_CHECK(
        call.kind != CollectiveKind::kBarrier && call.kind != CollectiveKind::kVerifyHash,
        "{} inside a collective batch; end the batch first", call.Describe());
    batch_.push_back(call);
  } else {
    DoCollective(call);
  }

  int64_t n = call.group_size();
  if (call.kind == CollectiveKind::kCollectivePermute) {
    n = 1;
    for (const auto& p : call.pairs)
      if (p.source == device_id() && p.target != device_id()) n = 2;
  }
  const int k = static_cast<int>(call.kind);
  stats_.calls[k] += 1;
  stats_.bytes_sent[k] += CollectiveBytesSent(call.kind, n, call.in_bytes);
}

namespace {

// [outer, n, inner] <-> [n, outer, inner], inner in bytes.
void SwapLeading(const std::byte* in, std::byte* out, int64_t outer, int64_t n, int64_t inner,
                 bool to_chunk_major) {
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t strided = (o * n + i) * inner, chunk_major = (i * outer + o) * inner;
      if (to_chunk_major) {
        std::memcpy(out + chunk_major, in + strided, inner);
      } else {
        std::memcpy(out + strided, in + chunk_major, inner);
      }
    }
  }
}

}  // namespace

void Communicator::RunPacked(const CollectiveCall& call) {
  const int64_t n = call.group_size(), outer = call.outer;
  CollectiveCall packed = call;
  packed.outer = 1;
  packed.out_outer = 1;
  switch (call.kind) {
    case CollectiveKind::kAllGather: {
      pack_.resize(call.out_bytes);
      packed.out = pack_.data();
      DoCollective(packed);
      SwapLeading(pack_.data(), call.out, outer, n, call.in_bytes / outer, false);
      return;
    }
    case CollectiveKind::kReduceScatter: {
      pack_.resize(call.in_bytes);
      SwapLeading(call.in, pack_.data(), outer, n, call.out_bytes / outer, true);
      packed.in = pack_.data();
      DoCollective(packed);
      return;
    }
    case CollectiveKind::kAllToAll: {
      pack_.resize(call.in_bytes);
      const int64_t inner = call.in_bytes / (outer * n);
      SwapLeading(call.in, pack_.data(), outer, n, inner, true);
      packed.in = pack_.data();
      packed.out = pack_.data();
      DoCollective(packed);
      SwapLeading(pack_.data(), call.out, call.out_outer, n, call.out_bytes / (call.out_outer * n),
                  false);
      return;
    }
    default:
      FailInternal("{} has no strided chunks", call.Describe());
  }
}

void Communicator::AllReduce(const void* in, void* out, int64_t count, PrimitiveType dtype,
                             ReduceOp op, const ReplicaGroups& groups) {
  CollectiveCall call = Prepare(CollectiveKind::kAllReduce, dtype, op, in, out, count, groups);
  Finish(call);
}

void Communicator::AllGather(const void* in, void* out, int64_t count, PrimitiveType dtype,
                             const ReplicaGroups& groups, int64_t outer) {
  CollectiveCall call =
      Prepare(CollectiveKind::kAllGather, dtype, ReduceOp::kSum, in, out, count, groups, outer);
  Finish(call);
}

void Communicator::ReduceScatter(const void* in, void* out, int64_t count, PrimitiveType dtype,
                                 ReduceOp op, const ReplicaGroups& groups, int64_t outer) {
  CollectiveCall call =
      Prepare(CollectiveKind::kReduceScatter, dtype, op, in, out, count, groups, outer);
  Finish(call);
}

void Communicator::AllToAll(const void* in, void* out, int64_t count, PrimitiveType dtype,
                            const ReplicaGroups& groups, int64_t outer, int64_t out_outer) {
  CollectiveCall call =
      Prepare(CollectiveKind::kAllToAll, dtype, ReduceOp::kSum, in, out, count, groups, outer);
  if (out_outer > 0 && out_outer != outer) {
    // The executor derives both from shapes: a bad one is a bug.
    WEFT_INTERNAL_CHECK(count % (out_outer * call.group_size()) == 0,
                        "AllToAll: {} elements do not split into {} output rows of {} chunks",
                        count, out_outer, call.group_size());
    WEFT_INTERNAL_CHECK(in != out || count == 0,
                        "AllToAll: in place, the output must keep the input's {} rows", outer);
    call.out_outer = out_outer;
  }
  Finish(call);
}

void Communicator::CollectivePermute(const void* in, void* out, int64_t count, PrimitiveType dtype,
                                     const std::vector<SourceTargetPair>& pairs) {
  CollectiveCall call =
      Prepare(CollectiveKind::kCollectivePermute, dtype, ReduceOp::kSum, in, out, count, {});
  const int64_t n = num_devices();
  std::vector<bool> is_source(n, false), is_target(n, false);
  for (const auto& p : pairs) {
    WEFT_CHECK(p.source >= 0 && p.source < n && p.target >= 0 && p.target < n,
               "CollectivePermute: pair {{{},{}}} names a device outside 0..{}", p.source, p.target,
               n - 1);
    WEFT_CHECK(!is_source[p.source],
               "CollectivePermute: device {} is the source of two pairs; each device may send "
               "at most once",
               p.source);
    WEFT_CHECK(!is_target[p.target],
               "CollectivePermute: device {} is the target of two pairs; each device may receive "
               "at most once",
               p.target);
    is_source[p.source] = is_target[p.target] = true;
  }
  call.pairs = pairs;
  Finish(call);
}

void Communicator::BeginBatch() {
  WEFT_INTERNAL_CHECK(!batching_, "Communicator::BeginBatch inside a batch (batches do not nest)");
  batching_ = true;
}

void Communicator::EndBatch() {
  WEFT_INTERNAL_CHECK(batching_, "Communicator::EndBatch without BeginBatch");
  batching_ = false;
  if (batch_.empty()) return;
  // Cleared even when a device fails mid-batch: the next run starts afresh.
  // Its room is kept for the next batch.
  struct Clear {
    std::vector<CollectiveCall>& calls;
    ~Clear() { calls.clear(); }
  } clear{batch_};
  if (batch_.size() == 1) {
    DoCollective(batch_[0]);
  } else {
    DoCollectives(batch_);
  }
}

void Communicator::Barrier() {
  CollectiveCall call = Prepare(CollectiveKind::kBarrier, PrimitiveType::kPred, ReduceOp::kSum,
                                nullptr, nullptr, 0, {});
  Finish(call);
}

void Communicator::VerifySameHash(uint64_t hash, const std::string& what) {
  std::vector<uint64_t> hashes(num_devices());
  CollectiveCall call = Prepare(CollectiveKind::kVerifyHash, PrimitiveType::kPred, ReduceOp::kSum,
                                &hash, hashes.data(), sizeof(hash), {});
  Finish(call);
  bool same = true;
  for (uint64_t h : hashes) same = same && h == hashes[0];
  if (same) return;
  // Devices grouped by hash, in order of the first device holding each.
  std::map<uint64_t, std::vector<int64_t>> holders;
  std::vector<uint64_t> order;
  for (size_t d = 0; d < hashes.size(); ++d) {
    auto& list = holders[hashes[d]];
    if (list.empty()) order.push_back(hashes[d]);
    list.push_back(static_cast<int64_t>(d));
  }
  const char* unit = backend() == "mpi" ? "rank" : "device";
  std::string detail;
  for (uint64_t h : order) {
    const auto& list = holders[h];
    detail += fmt::format("{}{}{} {} {} {:#018x}", detail.empty() ? "" : "; ", unit,
                          list.size() > 1 ? "s" : "", fmt::join(list, ","),
                          list.size() > 1 ? "have" : "has", h);
  }
  Fail(
      "{} differs between {}s ({}); every {} must run the same program: start them all with "
      "the same inputs and build",
      what, unit, detail, unit);
}

}  // namespace weft::runtime
