#include "weft/analysis/collective_plan.h"

#include <algorithm>

#include "weft/analysis/loops.h"
#include "weft/base/algorithm.h"
#include "weft/base/error.h"

namespace weft::analysis {
namespace {

using runtime::CollectiveKind;
using runtime::ReplicaGroups;

CollectiveKind KindOf(HloOpcode op) {
  switch (op) {
    case HloOpcode::kAllReduce:
      return CollectiveKind::kAllReduce;
    case HloOpcode::kAllGather:
      return CollectiveKind::kAllGather;
    case HloOpcode::kReduceScatter:
      return CollectiveKind::kReduceScatter;
    case HloOpcode::kAllToAll:
      return CollectiveKind::kAllToAll;
    default:
      return CollectiveKind::kCollectivePermute;
  }
}

// executor.cc MakeDeviceIds / eval_collectives.cc DeviceGroups, DevicePairs:
// the instruction's groups as device ids.
struct IdModes {
  int64_t partitions = 1, replicas = 1;
  bool xla_modes = false;  // both > 1: XLA's replica/partition id modes
};

IdModes ModesOf(const HloModule& module, int64_t num_devices) {
  IdModes m;
  const int64_t p = module.num_partitions(), r = module.replica_count();
  if (p == 1 && r == 1) {
    m.partitions = num_devices;
    return m;
  }
  WEFT_INTERNAL_CHECK(
      p * r == num_devices,
      "module '{}' has num_partitions={} and replica_count={} ({} devices) but is planned "
      "for {} devices",
      module.name(), p, r, p * r, num_devices);
  m.partitions = p;
  m.replicas = r;
  m.xla_modes = p > 1 && r > 1;
  return m;
}

ReplicaGroups DeviceGroups(const HloInstruction& instr, const IdModes& ids, int64_t n) {
  const HloAttributes& a = instr.attrs();
  if (!ids.xla_modes || a.use_global_device_ids) {
    return runtime::NormalizeReplicaGroups(a.replica_groups, n);
  }
  const bool cross_partition = a.channel_id.has_value();
  ReplicaGroups groups = a.replica_groups;
  if (groups.empty()) {
    groups.emplace_back();
    for (int64_t i = 0; i < (cross_partition ? ids.partitions : ids.replicas); ++i) {
      groups[0].push_back(i);
    }
  }
  ReplicaGroups out;
  for (int64_t fixed = 0; fixed < (cross_partition ? ids.replicas : ids.partitions); ++fixed) {
    for (const auto& g : groups) {
      std::vector<int64_t> devices;
      for (int64_t id : g) {
        devices.push_back(cross_partition ? fixed * ids.partitions + id
                                          : id * ids.partitions + fixed);
      }
      out.push_back(std::move(devices));
    }
  }
  return runtime::NormalizeReplicaGroups(out, n);
}

std::vector<std::pair<int64_t, int64_t>> DevicePairs(const HloInstruction& instr,
                                                     const IdModes& ids) {
  const HloAttributes& a = instr.attrs();
  if (!ids.xla_modes) return a.source_target_pairs;
  std::vector<std::pair<int64_t, int64_t>> pairs;
  const bool cross_partition = a.channel_id.has_value();
  for (int64_t fixed = 0; fixed < (cross_partition ? ids.replicas : ids.partitions); ++fixed) {
    for (auto [s, t] : a.source_target_pairs) {
      if (cross_partition) {
        pairs.push_back({fixed * ids.partitions + s, fixed * ids.partitions + t});
      } else {
        pairs.push_back({s * ids.partitions + fixed, t * ids.partitions + fixed});
      }
    }
  }
  return pairs;
}

}  // namespace

int64_t DeviceTraffic::calls() const {
  int64_t n = 0;
  for (const KindTraffic& k : by_kind) n += k.calls;
  return n;
}

int64_t DeviceTraffic::bytes() const {
  int64_t n = 0;
  for (const KindTraffic& k : by_kind) n += k.bytes;
  return n;
}

int64_t DeviceTraffic::dcn_bytes() const {
  int64_t n = 0;
  for (const KindTraffic& k : by_kind) n += k.dcn_bytes;
  return n;
}

DeviceCollective CollectiveOnDevice(const HloModule& program, const HloInstruction& instr,
                                    int64_t device, const CollectivePlanOptions& options) {
  const int64_t n = options.num_devices;
  WEFT_INTERNAL_CHECK(IsCollective(instr.opcode()), "{} is not a collective", instr.Describe());
  WEFT_INTERNAL_CHECK(device >= 0 && device < n && options.slices >= 1 && n % options.slices == 0,
                      "device {} of {} in {} slices", device, n, options.slices);
  const int64_t per_slice = n / options.slices;
  const IdModes ids = ModesOf(program, n);
  DeviceCollective out;
  out.kind = KindOf(instr.opcode());
  if (out.kind == CollectiveKind::kCollectivePermute) {
    out.group = {device};
    for (auto [s, t] : DevicePairs(instr, ids)) {
      if (s == device && t != device) out.group.push_back(t);
    }
    const int64_t bytes = instr.operand(0)->shape().ByteSize();
    out.bytes_sent = runtime::CollectiveBytesSent(out.kind, out.group.size() > 1 ? 2 : 1, bytes);
  } else {
    ReplicaGroups groups;
    try {
      groups = DeviceGroups(instr, ids, n);
    } catch (const Error& e) {
      FailInternal("{}: {}", instr.Describe(), e.what());
    }
    for (const auto& g : groups) {
      if (Contains(g, device)) out.group = g;
    }
    if (out.group.empty()) out.group = {device};
    // One communicator call per operand (variadic: several, in one batch).
    for (int64_t i = 0; i < instr.operand_count(); ++i) {
      out.bytes_sent += runtime::CollectiveBytesSent(
          out.kind, static_cast<int64_t>(out.group.size()), instr.operand(i)->shape().ByteSize());
    }
  }
  for (int64_t d : out.group) {
    out.crosses_slices = out.crosses_slices || d / per_slice != device / per_slice;
  }
  return out;
}

CollectivePlan PlanCollectives(const HloModule& program, const CollectivePlanOptions& options) {
  const int64_t n = options.num_devices;
  // The planner built the program and checked the mesh and the slices.
  WEFT_INTERNAL_CHECK(n >= 1, "the plan needs at least one device, got {}", n);
  WEFT_INTERNAL_CHECK(options.slices >= 1 && n % options.slices == 0,
                      "--slices {} does not divide the {} devices into equal slices",
                      options.slices, n);
  CollectivePlan plan;
  plan.num_devices = n;
  plan.slices = options.slices;
  plan.per_device.resize(n);
  const int64_t per_slice = n / options.slices;
  auto slice_of = [&](int64_t d) { return d / per_slice; };
  const IdModes ids = ModesOf(program, n);

  const auto runs = ComputationRunCounts(program);
  for (const HloComputation* c : program.MakeComputationPostOrder()) {
    auto found = runs.find(c);
    if (found == runs.end()) continue;
    const int64_t times = found->second;
    // Only what the executor schedules: instructions reachable from the root.
    for (const HloInstruction* instr : c->MakeInstructionPostOrder()) {
      if (!IsCollective(instr->opcode())) continue;
      const CollectiveKind kind = KindOf(instr->opcode());
      const int k = static_cast<int>(kind);
      CollectiveSite site;
      site.instruction = instr->name();
      site.computation = c->name();
      site.kind = kind;
      site.runs = times;
      if (kind == CollectiveKind::kCollectivePermute) {
        const auto pairs = DevicePairs(*instr, ids);
        const int64_t bytes = instr->operand(0)->shape().ByteSize();
        std::vector<int64_t> sends(n, 0);
        std::vector<bool> crosses(n, false);
        for (auto [s, t] : pairs) {
          WEFT_INTERNAL_CHECK(s >= 0 && s < n && t >= 0 && t < n,
                              "{}: source-target pair {{{},{}}} is outside the {} devices",
                              instr->Describe(), s, t, n);
          if (s != t) {
            sends[s] = 1;
            crosses[s] = crosses[s] || slice_of(s) != slice_of(t);
          }
        }
        for (int64_t d = 0; d < n; ++d) {
          KindTraffic& kt = plan.per_device[d].by_kind[k];
          const int64_t sent = times * runtime::CollectiveBytesSent(kind, sends[d] ? 2 : 1, bytes);
          kt.calls += times;
          kt.bytes += sent;
          if (crosses[d]) {
            kt.dcn_calls += times;
            kt.dcn_bytes += sent;
          }
        }
        site.group_size = sends[0] ? 2 : 1;
        site.crosses_slices = crosses[0];
        site.bytes_per_run = runtime::CollectiveBytesSent(kind, site.group_size, bytes);
        plan.sites.push_back(std::move(site));
        continue;
      }
      ReplicaGroups groups;
      try {
        groups = DeviceGroups(*instr, ids, n);
      } catch (const Error& e) {
        FailInternal("{}: {}", instr->Describe(), e.what());
      }
      // One communicator call per operand (a variadic collective has several,
      // moved in one batch).
      const int64_t operands = instr->operand_count();
      for (const auto& g : groups) {
        const int64_t size = static_cast<int64_t>(g.size());
        bool crosses = false;
        for (int64_t d : g) crosses = crosses || slice_of(d) != slice_of(g[0]);
        int64_t sent = 0;
        for (int64_t i = 0; i < operands; ++i) {
          sent += runtime::CollectiveBytesSent(kind, size, instr->operand(i)->shape().ByteSize());
        }
        for (int64_t d : g) {
          KindTraffic& kt = plan.per_device[d].by_kind[k];
          kt.calls += times * operands;
          kt.bytes += times * sent;
          if (crosses) {
            kt.dcn_calls += times * operands;
            kt.dcn_bytes += times * sent;
          }
          if (d == 0) {
            site.group_size = size;
            site.crosses_slices = crosses;
            site.bytes_per_run = sent;
          }
        }
      }
      plan.sites.push_back(std::move(site));
    }
  }
  std::stable_sort(
      plan.sites.begin(), plan.sites.end(),
      [](const CollectiveSite& a, const CollectiveSite& b) { return a.bytes() > b.bytes(); });
  for (int64_t d = 1; d < n; ++d) {
    if (plan.per_device[d].bytes() > plan.per_device[plan.busiest_device].bytes()) {
      plan.busiest_device = d;
    }
  }
  return plan;
}

}  // namespace weft::analysis
