// The collectives one step of a per-device program makes, per device:
// calls and bytes sent per kind, counted as the communicator counts them
// (runtime/communicator.h: CollectiveBytesSent, the ring model, one call per
// all-reduce operand, a call in a loop body once per trip), with the input
// sizes of the program's own element types.
//
// ICI or DCN: with `slices` > 1 the devices form a hybrid mesh of equal
// slices, slice-major (device d is in slice d / (N / slices), as
// runtime/hybrid_mesh.h orders them); a collective whose replica group holds
// devices of two slices — or a collective-permute pair that crosses — goes
// over the data-center network, all its bytes counted there (a flat ring;
// hierarchical algorithms would send fewer DCN bytes).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "weft/hlo/module.h"
#include "weft/runtime/communicator.h"

namespace weft::analysis {

// The kinds an HLO program can issue, in runtime::CollectiveKind order.
inline constexpr int kNumProgramCollectiveKinds = 5;

struct KindTraffic {
  int64_t calls = 0;
  int64_t bytes = 0;      // sent by this device
  int64_t dcn_calls = 0;  // calls whose group crosses slices
  int64_t dcn_bytes = 0;  // of `bytes`
};

struct DeviceTraffic {
  std::array<KindTraffic, kNumProgramCollectiveKinds> by_kind{};
  int64_t calls() const;
  int64_t bytes() const;
  int64_t dcn_bytes() const;
  int64_t ici_bytes() const { return bytes() - dcn_bytes(); }
};

// One collective instruction, as device 0 runs it.
struct CollectiveSite {
  std::string instruction, computation;
  runtime::CollectiveKind kind = runtime::CollectiveKind::kAllReduce;
  int64_t runs = 0;        // per step (loop trips)
  int64_t group_size = 1;  // device 0's group
  bool crosses_slices = false;
  int64_t bytes_per_run = 0;  // sent by device 0 per run
  int64_t bytes() const { return runs * bytes_per_run; }
};

struct CollectivePlanOptions {
  int64_t num_devices = 1;
  int64_t slices = 1;
};

struct CollectivePlan {
  int64_t num_devices = 1, slices = 1;
  std::vector<DeviceTraffic> per_device;  // [device]
  std::vector<CollectiveSite> sites;      // most bytes first
  int64_t busiest_device = 0;             // the device sending the most bytes
};

// One collective instruction as `device` runs it once: its group (a
// collective-permute: the device and the device it sends to, or only
// itself when it sends nothing), the bytes it sends and whether the group
// crosses slices.
struct DeviceCollective {
  runtime::CollectiveKind kind = runtime::CollectiveKind::kAllReduce;
  std::vector<int64_t> group;
  int64_t bytes_sent = 0;
  bool crosses_slices = false;
};
DeviceCollective CollectiveOnDevice(const HloModule& program, const HloInstruction& instr,
                                    int64_t device, const CollectivePlanOptions& options);

// For programs weft partitioned (`weft plan`): replica groups that do not
// fit num_devices, or slices that do not divide it, are weft's own bugs
// (weft::InternalError); the planner checks the mesh and slices first.
CollectivePlan PlanCollectives(const HloModule& program, const CollectivePlanOptions& options);

}  // namespace weft::analysis
