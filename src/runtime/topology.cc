#include "weft/runtime/topology.h"

#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "mpi_util.h"
#include "weft/base/env.h"
#include "weft/base/error.h"

namespace weft::runtime {

namespace {

std::atomic<int64_t> g_discoveries{0};

std::string LocalHostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

// Devices per slice from the slice settings, or 0 when neither is set.
// `devices` describes where the device count came from, for error messages.
int64_t SliceSizeFromConfig(const RuntimeConfig& config, int64_t n, const std::string& devices) {
  int64_t per_slice = 0;
  if (config.num_slices > 0) {
    WEFT_CHECK(n % config.num_slices == 0,
               "WEFT_NUM_SLICES={} does not divide the {}; set WEFT_NUM_SLICES to a divisor of {}",
               config.num_slices, devices, n);
    per_slice = n / config.num_slices;
  }
  if (config.slice_size > 0) {
    WEFT_CHECK(n % config.slice_size == 0,
               "WEFT_SLICE_SIZE={} does not divide the {}; set WEFT_SLICE_SIZE to a divisor of {}",
               config.slice_size, devices, n);
    WEFT_CHECK(per_slice == 0 || per_slice == config.slice_size,
               "WEFT_NUM_SLICES={} and WEFT_SLICE_SIZE={} disagree for the {}; set only one of "
               "them",
               config.num_slices, config.slice_size, devices);
    per_slice = config.slice_size;
  }
  return per_slice;
}

constexpr int kDiscoveryTag = 7303;

// MPI topology: every rank contributes its processor name. Point-to-point
// with the collective timeout, so a rank that never comes is named instead of
// hanging discovery.
Topology DiscoverMpi(const RuntimeConfig& config) {
  int rank = 0, size = 0;
  CheckMpi(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "MPI_Comm_rank");
  CheckMpi(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size");
  // Static: a send to a missing rank may outlive this call (discovery runs once).
  static char name[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  CheckMpi(MPI_Get_processor_name(name, &length), "MPI_Get_processor_name");
  std::vector<char> all(static_cast<size_t>(size) * MPI_MAX_PROCESSOR_NAME);
  AllGatherPointToPoint(MPI_COMM_WORLD, kDiscoveryTag, name, MPI_MAX_PROCESSOR_NAME, all.data(),
                        std::chrono::seconds(config.collective_timeout_s),
                        "topology discovery (the exchange of host names)");
  std::vector<std::string> hosts(size);
  for (int r = 0; r < size; ++r) {
    const char* p = all.data() + static_cast<size_t>(r) * MPI_MAX_PROCESSOR_NAME;
    hosts[r] = std::string(p, strnlen(p, MPI_MAX_PROCESSOR_NAME));
  }
  return Topology::FromProcesses(hosts, config);
}

void FinalizeMpiAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace

Topology Topology::FromConfig(const RuntimeConfig& config) {
  const int64_t n = config.num_devices;
  WEFT_CHECK(n >= 1, "WEFT_NUM_DEVICES={} must be at least 1", n);
  int64_t per_slice =
      SliceSizeFromConfig(config, n, fmt::format("{} devices (WEFT_NUM_DEVICES={})", n, n));
  if (per_slice == 0) per_slice = n;
  Topology topology;
  topology.backend_ = Backend::kThreads;
  topology.num_processes_ = 1;
  topology.num_slices_ = n / per_slice;
  const std::string host = LocalHostName();
  for (int64_t d = 0; d < n; ++d)
    topology.devices_.push_back({d, 0, d / per_slice, d % per_slice, host});
  return topology;
}

Topology Topology::FromProcesses(const std::vector<std::string>& host_of_rank,
                                 const RuntimeConfig& config) {
  const int64_t n = static_cast<int64_t>(host_of_rank.size());
  WEFT_INTERNAL_CHECK(n >= 1, "Topology::FromProcesses needs at least one rank");
  Topology topology;
  topology.backend_ = Backend::kMpi;
  topology.num_processes_ = n;
  const int64_t per_slice = SliceSizeFromConfig(config, n, fmt::format("{} MPI ranks", n));
  if (per_slice > 0) {
    topology.num_slices_ = n / per_slice;
    for (int64_t r = 0; r < n; ++r)
      topology.devices_.push_back({r, r, r / per_slice, r % per_slice, host_of_rank[r]});
    return topology;
  }
  // One slice per host, hosts numbered by their lowest rank.
  std::map<std::string, int64_t> slice_of_host;
  std::vector<int64_t> ranks_in_slice;
  for (int64_t r = 0; r < n; ++r) {
    auto [it, inserted] =
        slice_of_host.emplace(host_of_rank[r], static_cast<int64_t>(ranks_in_slice.size()));
    if (inserted) ranks_in_slice.push_back(0);
    const int64_t slice = it->second;
    topology.devices_.push_back({r, r, slice, ranks_in_slice[slice]++, host_of_rank[r]});
  }
  topology.num_slices_ = static_cast<int64_t>(ranks_in_slice.size());
  for (int64_t s = 1; s < topology.num_slices_; ++s) {
    if (ranks_in_slice[s] == ranks_in_slice[0]) continue;
    std::string hosts;
    for (const auto& [host, slice] : slice_of_host)
      hosts +=
          fmt::format("{}{}: {} ranks", hosts.empty() ? "" : ", ", host, ranks_in_slice[slice]);
    Fail(
        "hosts run different numbers of MPI ranks ({}), but slices must be equal; launch the "
        "same number of ranks on every host or set WEFT_SLICE_SIZE",
        hosts);
  }
  return topology;
}

const Topology& Topology::Global() {
  static std::once_flag once;
  static const Topology* global = nullptr;
  // If discovery throws (bad configuration), the flag stays unset and the
  // error reaches the caller; a later call tries again.
  std::call_once(once, [] {
    const RuntimeConfig config = CurrentConfig();
    if (InsideMpi()) {
      InitMpi();
      global = new Topology(DiscoverMpi(config));
    } else {
      global = new Topology(FromConfig(config));
    }
    g_discoveries.fetch_add(1);
  });
  return *global;
}

int64_t Topology::DiscoveryCount() { return g_discoveries.load(); }

void Topology::InitMpi() {
  static std::once_flag once;
  std::call_once(once, [] {
    int initialized = 0;
    CheckMpi(MPI_Initialized(&initialized), "MPI_Initialized");
    if (initialized) return;  // the program owns MPI's lifetime
    int provided = 0;
    CheckMpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided),
             "MPI_Init_thread");
    std::atexit(FinalizeMpiAtExit);
  });
}

bool Topology::InsideMpi() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  return initialized != 0 || GetEnv("OMPI_COMM_WORLD_SIZE").has_value();
}

const Device& Topology::device(int64_t id) const {
  WEFT_CHECK(id >= 0 && id < num_devices(),
             "device id {} is out of range; this topology has {} "
             "devices (ids 0..{})",
             id, num_devices(), num_devices() - 1);
  return devices_[id];
}

std::vector<int64_t> Topology::SliceDevices(int64_t slice) const {
  WEFT_INTERNAL_CHECK(slice >= 0 && slice < num_slices_,
                      "slice {} is out of range; this topology has {} slices", slice, num_slices_);
  std::vector<int64_t> ids(devices_per_slice());
  for (const Device& d : devices_)
    if (d.slice == slice) ids[d.local_index] = d.id;
  return ids;
}

int64_t Topology::DevicesOnHostOf(int64_t id) const {
  const std::string& host = device(id).host;
  return std::count_if(devices_.begin(), devices_.end(),
                       [&](const Device& d) { return d.host == host; });
}

std::string Topology::ToString() const {
  std::string out = fmt::format(
      "{} devices ({} backend, {} process{}), {} slice{} of {}; discoveries so far: {}\n",
      num_devices(), backend_ == Backend::kMpi ? "mpi" : "threads", num_processes_,
      num_processes_ == 1 ? "" : "es", num_slices_, num_slices_ == 1 ? "" : "s",
      devices_per_slice(), DiscoveryCount());
  out +=
      fmt::format("{:>7} {:>8} {:>6} {:>6}  {}\n", "device", "process", "slice", "local", "host");
  for (const Device& d : devices_)
    out += fmt::format("{:>7} {:>8} {:>6} {:>6}  {}\n", d.id, d.process, d.slice, d.local_index,
                       d.host);
  return out;
}

}  // namespace weft::runtime
