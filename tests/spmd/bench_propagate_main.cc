// Runs `weft bench propagate` without the CLI: spmd_bench_propagate [--json].
#include <cstring>

#include "bench_propagate.h"

int main(int argc, char** argv) {
  const bool json = argc > 1 && std::strcmp(argv[1], "--json") == 0;
  return weft::bench::RunPropagateBench(json);
}
