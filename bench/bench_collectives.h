// `weft bench collectives`: bandwidth of all-reduce, all-gather,
// reduce-scatter and all-to-all (into another buffer, and in place) over
// message sizes, in the nccl-tests convention:
//   size   all-reduce, all-to-all: the buffer; all-gather: the gathered
//          output; reduce-scatter: the whole input (n times the output)
//   algbw  size / time
//   busbw  algbw * 2(n-1)/n for all-reduce, * (n-1)/n for the others: the
//          bandwidth each device's link would need with a ring algorithm,
//          comparable across device counts
// and, as a reference from the same process, a one-thread memcpy of `size`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weft/runtime/communicator.h"

namespace weft::bench {

struct CollectiveBenchResult {
  std::string collective;  // "all-reduce", "all-gather", "reduce-scatter", "all-to-all",
                           // "all-to-all in place"
  int64_t bytes = 0;       // the nccl-tests size above
  double seconds = 0;      // per call, slowest device
  double algbw_gbs = 0;
  double busbw_gbs = 0;
  double memcpy_gbs = 0;  // one thread copying `bytes`, same process
};

// Runs the measurements on every device of a communicator (all devices call
// it together) for sizes min_bytes, 4*min_bytes, ... <= max_bytes. Every
// device returns the same results.
std::vector<CollectiveBenchResult> MeasureCollectives(runtime::Communicator& comm,
                                                      int64_t min_bytes, int64_t max_bytes);

// In-process backend: num_devices threads. Prints a table, or JSON.
int RunCollectives(bool json, int num_devices = 4, int64_t min_bytes = 4 << 10,
                   int64_t max_bytes = 64 << 20);

// MPI backend: one device per rank; run it under mpirun (e.g. `mpirun -np 4
// weft bench collectives --mpi`). Rank 0 prints. A failure on any rank ends
// the job (RunMpiMain).
int RunCollectivesMpi(bool json, int64_t min_bytes = 4 << 10, int64_t max_bytes = 64 << 20);

}  // namespace weft::bench
