// A program for the MPI fault tests (run under mpirun by expect_failure.cmake
// or mpi_expect.sh):
//   throw       rank 1 fails (weft::Error) while the others wait in an all-reduce
//   hash        rank 1 has a different program hash
//   internal    rank 1 hits a broken invariant (weft::InternalError)
//   stop        rank 1 stops itself (SIGSTOP) before the second all-reduce
//   stop_group  rank 1 stops before its second all-reduce over groups
//               {{0,1},{2,..}}: rank 0 waits for it there, the others in the
//               next all-reduce over all ranks
//   stop_start  rank 1 stops after MPI_Init, before the communicator exists
// A stopping rank first writes its pid to $WEFT_STOPPED_PID_FILE (when set),
// so the test can kill it.
#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "weft/base/error.h"
#include "weft/runtime/comm_mpi.h"
#include "weft/runtime/topology.h"

namespace {

void StopThisProcess() {
  if (const char* file = std::getenv("WEFT_STOPPED_PID_FILE")) {
    if (FILE* f = std::fopen(file, "w")) {
      std::fprintf(f, "%d\n", static_cast<int>(getpid()));
      std::fclose(f);
    }
  }
  raise(SIGSTOP);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace weft::runtime;
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "stop_start") {
    Topology::InitMpi();
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 1) StopThisProcess();
  }
  return RunMpiMain([&](Communicator& comm) {
    const bool odd_one = comm.device_id() == 1;
    if (mode == "hash") comm.VerifySameHash(odd_one ? 0xbad : 0x600d, "program hash");
    std::vector<float> x(1024, 1.0f);
    for (int step = 0; step < 3; ++step) {
      if (mode == "throw" && odd_one && step == 1)
        weft::Fail("checkpoint shard {} is unreadable", comm.device_id());
      if (mode == "internal" && odd_one && step == 1)
        weft::FailInternal("buffer {} is freed twice", 7);
      if ((mode == "stop" || mode == "stop_group") && odd_one && step == 1) StopThisProcess();
      if (mode == "stop_group" && step < 2) {
        ReplicaGroups groups(2);
        for (int64_t d = 0; d < comm.num_devices(); ++d) groups[d < 2 ? 0 : 1].push_back(d);
        x = comm.AllReduce(x, ReduceOp::kSum, groups);
      } else {
        x = comm.AllReduce(x, ReduceOp::kSum);
      }
    }
    WEFT_CHECK(mode == "ok", "mode '{}' should have failed before this point", mode);
  });
}
