// A program for the MPI fault tests (expect_failure.cmake runs it under
// mpirun): `throw` makes rank 1 fail while the other ranks wait in an
// all-reduce; `hash` gives rank 1 a different program hash.
#include <string>
#include <vector>

#include "weft/base/error.h"
#include "weft/runtime/comm_mpi.h"

int main(int argc, char** argv) {
  using namespace weft::runtime;
  const std::string mode = argc > 1 ? argv[1] : "";
  return RunMpiMain([&](Communicator& comm) {
    const bool odd_one = comm.device_id() == 1;
    if (mode == "hash") comm.VerifySameHash(odd_one ? 0xbad : 0x600d, "program hash");
    std::vector<float> x(1024, 1.0f);
    for (int step = 0; step < 3; ++step) {
      if (mode == "throw" && odd_one && step == 1)
        weft::Fail("checkpoint shard {} is unreadable", comm.device_id());
      x = comm.AllReduce(x, ReduceOp::kSum);
    }
    WEFT_CHECK(mode == "ok", "mode '{}' should have failed before this point", mode);
  });
}
