// Collectives through the Communicator: all-reduce, all-gather,
// reduce-scatter, all-to-all, collective-permute, plus partition-id and
// replica-id.
//
// An HLO collective along dimension d views its array as [outer, n * c,
// inner] (n = group size): the communicator's strided chunks with `outer`
// rows (communicator.h), moved where they lie by the threads backend.
#include <cstring>

#include "executor_eval.h"
#include "weft/base/error.h"
#include "weft/compiler/all_to_all_layout.h"

namespace weft::runtime::exec {
namespace {

// One device alone: every group has one member.
class SelfCommunicator final : public Communicator {
 public:
  int64_t device_id() const override { return 0; }
  int64_t num_devices() const override { return 1; }
  std::string_view backend() const override { return "self"; }

 protected:
  void DoCollective(const CollectiveCall& call) override {
    if (call.kind == CollectiveKind::kBarrier) return;
    if (call.kind == CollectiveKind::kCollectivePermute) {
      bool self_pair = false;
      for (const SourceTargetPair& p : call.pairs) self_pair |= p.source == 0 && p.target == 0;
      if (!self_pair) {
        std::memset(call.out, 0, static_cast<size_t>(call.out_bytes));
        return;
      }
    }
    if (call.out != call.in) std::memmove(call.out, call.in, static_cast<size_t>(call.out_bytes));
  }
};

// The type a collective of `t` travels as: the communicator's own types as
// they are, u32 and u64 as s32 and s64 (the same bits; sums wrap alike), f16
// as 2-byte words and the f8 types as 1-byte ones (moved, never reduced).
PrimitiveType CommType(PrimitiveType t, bool reduces) {
  switch (t) {
    case PrimitiveType::kF32:
    case PrimitiveType::kBF16:
    case PrimitiveType::kF64:
    case PrimitiveType::kS32:
    case PrimitiveType::kS64:
    case PrimitiveType::kU16:
    case PrimitiveType::kPred:
      return t;
    case PrimitiveType::kF16:
      WEFT_CHECK(!reduces, "reductions of f16 are not supported; convert to f32 or bf16");
      return PrimitiveType::kBF16;
    case PrimitiveType::kF8E4M3FN:
    case PrimitiveType::kF8E8M0FNU:
      WEFT_CHECK(!reduces, "reductions of {} are not supported; convert to f32 or bf16",
                 PrimitiveTypeName(t));
      return PrimitiveType::kPred;
    case PrimitiveType::kU32:
      return PrimitiveType::kS32;
    case PrimitiveType::kU64:
      return PrimitiveType::kS64;
    default:
      Fail("collectives of {} are not supported", PrimitiveTypeName(t));
  }
}

ReduceOp CommReduceOp(const HloInstruction& instr, PrimitiveType t) {
  const ReducerKind kind = ClassifyReducer(*instr.to_apply());
  const bool pred = t == PrimitiveType::kPred;
  // Unsigned max/min would compare as signed on the wire.
  const bool ordered = t != PrimitiveType::kU32 && t != PrimitiveType::kU64;
  switch (kind) {
    case ReducerKind::kAdd:
      if (!pred) return ReduceOp::kSum;
      break;
    case ReducerKind::kMaximum:
      if (ordered) return ReduceOp::kMax;
      break;
    case ReducerKind::kMinimum:
      if (ordered) return ReduceOp::kMin;
      break;
    case ReducerKind::kOr:  // pred values are 0/1 bytes
      if (pred) return ReduceOp::kMax;
      break;
    case ReducerKind::kAnd:
      if (pred) return ReduceOp::kMin;
      break;
    default:
      break;
  }
  Fail(
      "{} with to_apply '{}' on {} is not supported: the reducer must be add, maximum or "
      "minimum (and/or on pred)",
      HloOpcodeString(instr.opcode()), instr.to_apply()->name(), PrimitiveTypeName(t));
}

// The instruction's replica groups as communicator device ids (executor.h):
// its own when they are already, else made in `storage`.
const ReplicaGroups& DeviceGroups(const HloInstruction& instr, const DeviceIds& ids,
                                  ReplicaGroups& storage) {
  const HloAttributes& a = instr.attrs();
  const bool xla_modes = ids.num_partitions > 1 && ids.num_replicas > 1;
  if (!xla_modes || a.use_global_device_ids) return a.replica_groups;
  const int64_t p_count = ids.num_partitions, r_count = ids.num_replicas;
  const bool cross_partition = a.channel_id.has_value();
  ReplicaGroups groups = a.replica_groups;
  if (groups.empty()) {
    groups.emplace_back();
    for (int64_t i = 0; i < (cross_partition ? p_count : r_count); ++i) groups[0].push_back(i);
  }
  storage.clear();
  for (int64_t fixed = 0; fixed < (cross_partition ? r_count : p_count); ++fixed) {
    for (const auto& g : groups) {
      std::vector<int64_t> devices;
      for (int64_t id : g) {
        devices.push_back(cross_partition ? fixed * p_count + id : id * p_count + fixed);
      }
      storage.push_back(std::move(devices));
    }
  }
  return storage;
}

std::vector<SourceTargetPair> DevicePairs(const HloInstruction& instr, const DeviceIds& ids) {
  const HloAttributes& a = instr.attrs();
  std::vector<SourceTargetPair> pairs;
  const bool xla_modes = ids.num_partitions > 1 && ids.num_replicas > 1;
  if (!xla_modes) {
    for (auto [s, t] : a.source_target_pairs) pairs.push_back({s, t});
    return pairs;
  }
  const int64_t p_count = ids.num_partitions;
  const bool cross_partition = a.channel_id.has_value();
  for (int64_t fixed = 0; fixed < (cross_partition ? ids.num_replicas : p_count); ++fixed) {
    for (auto [s, t] : a.source_target_pairs) {
      if (cross_partition) {
        pairs.push_back({fixed * p_count + s, fixed * p_count + t});
      } else {
        pairs.push_back({s * p_count + fixed, t * p_count + fixed});
      }
    }
  }
  return pairs;
}

int64_t Outer(const Shape& s, int64_t d) {
  int64_t outer = 1;
  for (int64_t i = 0; i < d; ++i) outer *= s.dimensions(i);
  return outer;
}

// A variadic collective (several operands, a tuple of results: what
// compiler/collective_combiner.h makes) is one communicator batch: the
// devices meet once for all its operands. One operand needs no batch.
class Batch {
 public:
  Batch(Communicator& comm, int64_t calls) : comm_(calls > 1 ? &comm : nullptr) {
    if (comm_ != nullptr) comm_->BeginBatch();
  }
  // Runs the batch's calls; the outputs are ready after it.
  void End() {
    if (comm_ != nullptr) comm_->EndBatch();
  }

 private:
  Communicator* comm_;
};

Value AllReduce(const HloInstruction& instr, EvalArgs& args, const ReplicaGroups& groups) {
  Value out;
  Communicator& comm = args.ctx().comm();
  Batch batch(comm, args.size());
  for (int64_t i = 0; i < args.size(); ++i) {
    const HostTensor& x = args.array(i);
    const PrimitiveType t = x.element_type();
    HostTensor result = args.ReuseOrAllocate(x.shape(), {i});  // in place when x dies
    comm.AllReduce(x.raw_data(), result.mutable_raw_data(), x.element_count(), CommType(t, true),
                   CommReduceOp(instr, t), groups);
    out.push_back(std::move(result));
  }
  batch.End();
  return out;
}

// The i-th result's shape: the instruction's, or its i-th tuple element.
const Shape& ResultShape(const HloInstruction& instr, int64_t i) {
  return instr.shape().IsTuple() ? instr.shape().tuple_shapes(i) : instr.shape();
}

// all-gather and reduce-scatter: each operand along the instruction's
// dimension.
Value GatherOrScatter(const HloInstruction& instr, EvalArgs& args, const ReplicaGroups& groups) {
  const bool gather = instr.opcode() == HloOpcode::kAllGather;
  Value out;
  Communicator& comm = args.ctx().comm();
  Batch batch(comm, args.size());
  for (int64_t i = 0; i < args.size(); ++i) {
    const HostTensor& x = args.array(i);
    const PrimitiveType t = x.element_type();
    HostTensor result = args.ctx().Allocate(ResultShape(instr, i));
    const int64_t outer = Outer(x.shape(), instr.dimensions()[0]);
    if (gather) {
      comm.AllGather(x.raw_data(), result.mutable_raw_data(), x.element_count(), CommType(t, false),
                     groups, outer);
    } else {
      comm.ReduceScatter(x.raw_data(), result.mutable_raw_data(), x.element_count(),
                         CommType(t, true), CommReduceOp(instr, t), groups, outer);
    }
    out.push_back(std::move(result));
  }
  batch.End();
  return out;
}

Value AllToAll(const HloInstruction& instr, EvalArgs& args, const ReplicaGroups& groups) {
  const HostTensor& x = args.array(0);
  // In place when x dies here: the threads backend then swaps chunks where
  // they lie. Never when the chunks go straight into the layout of the
  // transpose that reads them (compiler/all_to_all_layout.h).
  HostTensor out = args.ReuseOrAllocate(instr.shape(), {0});
  const int64_t outer = Outer(x.shape(), instr.dimensions()[0]);
  const HloInstruction* transpose = compiler::TransposeWrittenByAllToAll(instr);
  args.ctx().comm().AllToAll(
      x.raw_data(), out.mutable_raw_data(), x.element_count(), CommType(x.element_type(), false),
      groups, outer, transpose != nullptr ? compiler::TransposedOuterRows(*transpose) : outer);
  return Value{std::move(out)};
}

}  // namespace

std::unique_ptr<Communicator> MakeSelfCommunicator() {
  return std::make_unique<SelfCommunicator>();
}

void CheckCollective(const HloInstruction& instr) {
  for (const HloInstruction* operand : instr.operands()) {
    const Shape& s = operand->shape();
    WEFT_CHECK(s.IsArray(), "{} of a tuple operand is not supported",
               HloOpcodeString(instr.opcode()));
    const bool reduces =
        instr.opcode() == HloOpcode::kAllReduce || instr.opcode() == HloOpcode::kReduceScatter;
    CommType(s.element_type(), reduces);
    if (reduces) CommReduceOp(instr, s.element_type());
  }
}

Value EvalCollective(const HloInstruction& instr, EvalArgs& args) {
  ReplicaGroups storage;
  const ReplicaGroups& groups = DeviceGroups(instr, args.ctx().ids(), storage);
  switch (instr.opcode()) {
    case HloOpcode::kAllReduce:
      return AllReduce(instr, args, groups);
    case HloOpcode::kAllGather:
    case HloOpcode::kReduceScatter:
      return GatherOrScatter(instr, args, groups);
    case HloOpcode::kAllToAll:
      return AllToAll(instr, args, groups);
    case HloOpcode::kCollectivePermute: {
      const HostTensor& x = args.array(0);
      HostTensor out = args.ReuseOrAllocate(x.shape(), {0});
      args.ctx().comm().CollectivePermute(x.raw_data(), out.mutable_raw_data(), x.element_count(),
                                          CommType(x.element_type(), false),
                                          DevicePairs(instr, args.ctx().ids()));
      return Value{std::move(out)};
    }
    default:
      Fail("{} is not a collective", HloOpcodeString(instr.opcode()));
  }
}

Value EvalPartitionOrReplicaId(const HloInstruction& instr, EvalArgs& args) {
  const DeviceIds& ids = args.ctx().ids();
  const int64_t id = instr.opcode() == HloOpcode::kPartitionId ? ids.partition : ids.replica;
  HostTensor out = args.ctx().Allocate(instr.shape());
  StoreDouble(instr.shape().element_type(), out.mutable_raw_data(), 0, static_cast<double>(id));
  return Value{std::move(out)};
}

}  // namespace weft::runtime::exec
