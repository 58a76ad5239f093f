// The in-process backend: N devices are N threads of this process, and
// collectives move data through shared memory.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "weft/runtime/communicator.h"
#include "weft/runtime/topology.h"

namespace weft::runtime {

class LocalCluster {
 public:
  // Devices 0..num_devices-1. Creating a cluster never discovers the topology.
  explicit LocalCluster(int64_t num_devices);
  // One device per device of `topology` (its ids are 0..n-1).
  explicit LocalCluster(const Topology& topology);
  ~LocalCluster();
  LocalCluster(const LocalCluster&) = delete;
  LocalCluster& operator=(const LocalCluster&) = delete;

  int64_t num_devices() const;

  using DeviceFn = std::function<void(int64_t device, Communicator& comm)>;

  // Runs fn(device, comm) on one new thread per device and waits for all.
  // When a device throws, the devices blocked in (or later entering) a
  // collective are released, every thread is joined, and the first error is
  // rethrown as weft::Error "device D: <cause>". A device that returns while
  // others wait in a collective, or devices that call different collectives,
  // are errors too (the program is not SPMD). One Run at a time.
  void Run(const DeviceFn& fn);

  // A device's communicator; its stats accumulate over runs.
  Communicator& communicator(int64_t device);

  struct Shared;  // implementation detail (comm_threads.cc)

 private:
  std::unique_ptr<Shared> shared_;
};

}  // namespace weft::runtime
