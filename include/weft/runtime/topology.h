// The devices this program runs on: a global id per device, the process
// (MPI rank) that owns it, the slice it belongs to and its index there.
//
// Topology::Global() discovers the topology exactly once per process
// (std::call_once) the first time it is called; nothing else discovers it,
// so building, compiling or tuning never does. Tests and tools that need a
// different topology build one directly: Topology::FromConfig is a pure
// function of a RuntimeConfig.
//
// In-process (the default): WEFT_NUM_DEVICES virtual devices (default 4), all
// in process 0, split into WEFT_NUM_SLICES equal slices (or slices of
// WEFT_SLICE_SIZE devices); device d is in slice d / per_slice.
// Under mpirun (OMPI_COMM_WORLD_SIZE is set, MPI is initialized, or the
// program called Topology::InitMpi()): one device per rank, device id = rank;
// ranks form slices of WEFT_SLICE_SIZE consecutive ranks (or WEFT_NUM_SLICES
// equal slices) when set, else one slice per host (MPI_Get_processor_name),
// hosts numbered in order of their lowest rank.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weft/runtime/config.h"

namespace weft::runtime {

struct Device {
  int64_t id = 0;           // global device id: the id replica groups use
  int64_t process = 0;      // MPI rank, or 0 in-process
  int64_t slice = 0;        // slice index
  int64_t local_index = 0;  // index within its slice (ICI position)
  std::string host;
};

enum class Backend { kThreads, kMpi };

class Topology {
 public:
  // In-process topology from a configuration (pure; does not count as a
  // discovery). Throws weft::Error naming the variable when the slice
  // settings do not divide the device count.
  static Topology FromConfig(const RuntimeConfig& config);

  // MPI topology from each rank's host name (pure; index = rank). Slices come
  // from config.slice_size / config.num_slices when set, else from hosts;
  // config.num_devices is ignored (one device per rank).
  static Topology FromProcesses(const std::vector<std::string>& host_of_rank,
                                const RuntimeConfig& config);

  // The process's topology, discovered on first call from CurrentConfig()
  // (thread-safe). Under MPI every rank must call it: discovery gathers host
  // names collectively.
  static const Topology& Global();

  // How many discoveries this process has made (0 before Global(), then 1).
  static int64_t DiscoveryCount();

  // Initializes MPI (MPI_Init_thread, once; MPI_Finalize runs at exit) so
  // that Global() discovers an MPI topology. Safe to call more than once and
  // after the program called MPI_Init itself.
  static void InitMpi();

  // True when this process runs under an MPI launcher or has initialized MPI.
  static bool InsideMpi();

  Backend backend() const { return backend_; }
  int64_t num_devices() const { return static_cast<int64_t>(devices_.size()); }
  int64_t num_processes() const { return num_processes_; }
  int64_t num_slices() const { return num_slices_; }
  int64_t devices_per_slice() const { return num_devices() / num_slices_; }
  const std::vector<Device>& devices() const { return devices_; }
  // Throws weft::Error for an id outside [0, num_devices()).
  const Device& device(int64_t id) const;
  // Device ids of one slice in local-index order.
  std::vector<int64_t> SliceDevices(int64_t slice) const;
  // Devices on the host of device `id` (itself included): the devices that
  // share that machine's cores (in-process: every device; under MPI: the
  // ranks on that host). Throws weft::Error for an id out of range.
  int64_t DevicesOnHostOf(int64_t id) const;

  // A summary line and a table of devices, with the discovery count so far.
  std::string ToString() const;

 private:
  Topology() = default;

  Backend backend_ = Backend::kThreads;
  int64_t num_processes_ = 1;
  int64_t num_slices_ = 1;
  std::vector<Device> devices_;
};

}  // namespace weft::runtime
