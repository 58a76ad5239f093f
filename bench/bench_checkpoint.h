// `weft bench checkpoint [CONFIG]`: saving and loading a config's model and
// AdamW state as `weft train` does (train/checkpoint.h), on in-process
// devices of a mesh (default configs/small.toml on fsdp=2,tensor=2), each
// device writing the tiles it owns:
//
//   - save: the whole collective save (shards, index, fsyncs, the swap), in
//     bytes per second, against this disk's sequential write speed measured
//     in the same run (one stream of the same number of bytes in 4 MiB
//     writes, then fsync, in the same directory);
//   - load: every device reading its tiles, on the same mesh and on another
//     (--load-mesh, default all devices on fsdp), against a sequential read
//     of that file in 4 MiB reads. Both read what the page cache holds (the
//     files were just written), so the ratio measures weft's own work
//     (checksums, cutting boxes), not the disk.
//
// Each figure is the best of --reps runs.
#pragma once

#include <cstdint>
#include <string>

namespace weft::bench {

struct CheckpointBenchOptions {
  std::string config = "configs/small.toml";
  std::string mesh = "fsdp=2,tensor=2";  // the saving mesh
  std::string load_mesh;                 // the resharding load; empty: fsdp=<devices>,tensor=1
  std::string dir;                       // where to write; empty: a fresh temporary directory
  int reps = 3;
  bool json = false;
};

int RunCheckpointBench(const CheckpointBenchOptions& options);

}  // namespace weft::bench
