// The MPI backend (Open MPI): one device per rank, device id = rank in
// MPI_COMM_WORLD. Start the program with mpirun.
#pragma once

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
class MpiCommunicator final : public Communicator {
 public:
  // Initializes MPI if needed (Topology::InitMpi) and duplicates
  // MPI_COMM_WORLD, so this traffic never mixes with the program's own.
  MpiCommunicator();
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int64_t device_id() const override;
  int64_t num_devices() const override;
  std::string_view backend() const override { return "mpi"; }

  struct Impl;  // implementation detail (comm_mpi.cc)

 protected:
  void DoCollective(const CollectiveCall& call) override;

 private:
  std::unique_ptr<Impl> impl_;
};

// The body of an MPI program's main: runs fn with this rank's communicator.
// If fn throws on any rank, that rank prints "rank R: <cause>" to stderr and
// calls MPI_Abort, so mpirun ends every rank with a non-zero exit code (2 for
// bad input, a weft::Error, as the CLI exits; 1 otherwise) instead
// of leaving the others waiting in a collective. Returns 0 after success (MPI
// is finalized at exit).
int RunMpiMain(const std::function<void(Communicator& comm)>& fn);

}  // namespace weft::runtime
