// The MPI backend (Open MPI): one device per rank, device id = rank in
// MPI_COMM_WORLD. Start the program with mpirun.
#pragma once

#include <chrono>
#include <functional>
#include <memory>

#include "weft/runtime/communicator.h"

namespace weft::runtime {

// Reductions gather each element's values in group-member order and reduce
// them locally with the same code as the threads backend (never MPI's own
// reductions, whose order is unspecified), so results are bit-identical.
// A sub-communicator per distinct replica-group list is made once (with
// MPI_Comm_split, a collective call every rank makes at the same point) and
// cached. Calls must come from one thread at a time.
//
// Every wait is bounded by the collective timeout (ConfigKey::
// kCollectiveTimeout: WEFT_COLLECTIVE_TIMEOUT or the CLI's
// --collective-timeout, default 600 s): the collectives are MPI's nonblocking
// ones, polled. A rank that waits longer asks the ranks it waits for where
// they are and throws weft::Error "collective timeout: rank(s) R did not
// arrive at <Kind> #<sequence> (..., groups ...) within T while ranks ...
// waited there; rank R does not answer (stopped, hung, ...)". Every other
// waiting rank, asked, reports the same way at once. Under RunMpiMain each
// prints its message and the job aborts. (One blocking call remains: the
// MPI_Comm_split that makes a group's communicator, the first time a group
// list is used, right after a bounded barrier that found every rank there.)
class MpiCommunicator final : public Communicator {
 public:
  // Initializes MPI if needed (Topology::InitMpi), checks within the
  // collective timeout that every rank has started (naming those that have
  // not), and duplicates MPI_COMM_WORLD, so this traffic never mixes with the
  // program's own. Reads the collective timeout once, here.
  MpiCommunicator();
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int64_t device_id() const override;
  int64_t num_devices() const override;
  std::string_view backend() const override { return "mpi"; }

  // Replaces the collective timeout read at construction (every rank should
  // use the same). Throws weft::Error unless positive.
  void set_collective_timeout(std::chrono::milliseconds timeout);
  std::chrono::milliseconds collective_timeout() const;

  struct Impl;  // implementation detail (comm_mpi.cc)

 protected:
  void DoCollective(const CollectiveCall& call) override;

 private:
  friend int RunMpiMain(const std::function<void(Communicator& comm)>& fn);
  std::unique_ptr<Impl> impl_;
};

// The body of an MPI program's main: runs fn with this rank's communicator.
// If fn throws on any rank, that rank prints to stderr and calls MPI_Abort, so
// mpirun ends every rank with a non-zero exit code instead of leaving the
// others waiting in a collective. As in the CLI: a weft::Error (bad input, or
// a collective timeout) prints "rank R: <cause>" and exits 2; anything else
// (weft::InternalError, another exception) prints "rank R: internal error:
// <cause> (please report)" and exits 1. After a collective timeout the rank
// keeps answering the other ranks for a short grace before the abort, so
// every waiting rank prints its report. Returns 0 after success (MPI is
// finalized at exit).
int RunMpiMain(const std::function<void(Communicator& comm)>& fn);

}  // namespace weft::runtime
