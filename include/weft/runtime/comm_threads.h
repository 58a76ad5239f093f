// The in-process backend: N devices are N threads of this process, and
// collectives move data through shared memory.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

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
  // rethrown as "device D: <cause>" of the same kind: a weft::Error stays a
  // weft::Error (bad input), anything else (weft::InternalError, another
  // std::exception, a non-standard exception) becomes weft::InternalError. A
  // device that returns while others wait in a collective, or devices that
  // call different collectives, are weft::Errors too (the program is not
  // SPMD). One Run at a time.
  //
  // Watchdog: a device that waits in a collective longer than the collective
  // timeout fails the run with a weft::Error naming the collective (kind,
  // sequence number, groups) and the devices that did not arrive. The
  // missing devices' threads are joined if they return within a short grace
  // (a slow device is released at its next collective); a thread that does
  // not (a hung device) is detached and keeps the cluster's state alive, and
  // the cluster refuses further runs. The caller should then end the process
  // (the CLI does): the hung thread still runs fn.
  void Run(const DeviceFn& fn);

  // The collective timeout of later runs. Unset (the default), each Run reads
  // ConfigKey::kCollectiveTimeout (WEFT_COLLECTIVE_TIMEOUT, or an override
  // such as the CLI's --collective-timeout; default 600 s). Throws weft::Error
  // unless positive.
  void set_collective_timeout(std::chrono::milliseconds timeout);

  // A device's communicator; its stats accumulate over runs.
  Communicator& communicator(int64_t device);

  struct Shared;  // implementation detail (comm_threads.cc)

 private:
  // Shared with the device threads: a detached (hung) thread keeps it alive.
  std::shared_ptr<Shared> shared_;
  std::optional<std::chrono::milliseconds> timeout_;
};

}  // namespace weft::runtime
