// The in-process backend: N devices run in this process, each on a fiber of
// its own, on one thread per core (or per device, when there are fewer
// devices than cores); collectives move data through shared memory.
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

  // Runs fn(device, comm) for every device and waits for all. Each device
  // runs on a fiber (base/fiber.h) of one of threads() new threads: device d
  // on thread d % threads(), except that a thread whose devices all wait
  // runs, for one stretch up to its next wait, a device of another thread
  // that could go on but waits for its thread's other device to yield. A
  // device gives its thread up only while it waits in a collective, so fn
  // must not wait for another device by any other means (a lock, a sleep
  // until another device acts): the other device may be on its thread; and
  // it must keep no thread-local state across a collective (it may resume
  // on another thread). A collective waits only
  // for the members of the device's replica group, not for other groups.
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
  // sequence number, groups) and the members of its group that did not
  // arrive. The
  // missing devices' threads are joined if they return within a short grace
  // (a slow device is released at its next collective); a thread that does
  // not (a hung device, and the devices waiting behind it on its thread) is
  // detached and keeps the cluster's state alive, and the cluster refuses
  // further runs. The caller should then end the process (the CLI does): the
  // hung thread still runs fn.
  void Run(const DeviceFn& fn);

  // The collective timeout of later runs. Unset (the default), each Run reads
  // ConfigKey::kCollectiveTimeout (WEFT_COLLECTIVE_TIMEOUT, or an override
  // such as the CLI's --collective-timeout; default 600 s). Throws weft::Error
  // unless positive.
  void set_collective_timeout(std::chrono::milliseconds timeout);

  // The threads that run the devices: set_threads(n) if called, else the
  // fewer of the devices and the pool's threads (ThreadPool::Global(): the
  // cores, or WEFT_NUM_THREADS). More devices than cores then share a core
  // by taking turns at collectives, never by the kernel preempting one for
  // another; and a thread whose devices all wait can spin.
  int64_t threads() const;
  // 1..num_devices(); a weft::Error otherwise.
  void set_threads(int64_t threads);

  // A device's communicator; its stats accumulate over runs.
  Communicator& communicator(int64_t device);

  struct Shared;  // implementation detail (comm_threads.cc)

 private:
  // Shared with the device threads: a detached (hung) thread keeps it alive.
  std::shared_ptr<Shared> shared_;
  std::optional<std::chrono::milliseconds> timeout_;
  std::optional<int64_t> threads_;
};

}  // namespace weft::runtime
