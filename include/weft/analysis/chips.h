// Accelerator chips the planner can target, read from a TOML table
// (configs/chips.toml): memory, peak rate and link bandwidths, each chip
// with a `source` saying where its numbers come from.
//
//   [chips.v6e]
//   description = "Cloud TPU v6e (Trillium)"
//   hbm_gb = 32                  # or hbm_gib; capacity per chip
//   peak_tflops_bf16 = 918       # dense
//   peak_tflops_f32 = 918        # what f32 programs run at (the MXU's rate
//                                # for f32 inputs; CPUs: the FMA peak)
//   ici_gbytes_per_s = 400       # egress per chip within a slice
//   dcn_gbytes_per_s = 12.5      # egress per chip between slices
//   host_gbytes_per_s = 64       # chip <-> host memory (offloaded buffers)
//   max_slice_chips = 256        # largest ICI domain (pod / NVLink domain)
//   source = "https://..."       # where the numbers come from
//
// What the step-time simulation (analysis/step_sim.h) also reads:
//
//   hbm_gbytes_per_s = 1640      # memory bandwidth per chip
//   ici_topology = "torus2d"     # "switch" (NVLink: any group at the full
//                                # ici rate), "torus2d" or "torus3d"
//   ici_links = 4                # torus links per chip (ici_gbytes_per_s
//                                # is their sum); required with a torus
//   matrix_tile = [8, 256, 256]  # a dot's [M, N, K] run padded to these
//                                # multiples (default [1, 1, 1])
//   matrix_efficiency = 0.8      # the fraction of the matrix peak a large
//                                # dot reaches: one fitted number per chip
//                                # (default 1)
//   vector_tflops = 60           # elementwise work (default: none, loops
//                                # are timed by their bytes alone)
//   ici_latency_us = 2           # per ring step of a collective (default 0)
//   dcn_latency_us = 20
//   cache_mb = 8                 # an instruction moving at most this many
//   cache_gbytes_per_s = 90      # bytes runs at this rate instead of HBM's
//                                # (CPUs: the caches; default: none)
//
// Every key is required except description and those whose default is given above; unknown keys are
// errors naming file:line:col, so a typo never falls back to a default.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace weft::analysis {

struct Chip {
  std::string name;  // the table key: "v6e", "h100", "local-cpu", ...
  std::string description;
  double hbm_bytes = 0;
  double peak_flops_bf16 = 0;  // FLOP/s
  double peak_flops_f32 = 0;   // FLOP/s
  double ici_bytes_per_s = 0;
  double dcn_bytes_per_s = 0;
  double host_bytes_per_s = 0;
  int64_t max_slice_chips = 0;
  double hbm_bytes_per_s = 0;
  enum class Topology { kSwitch, kTorus2d, kTorus3d };
  Topology ici_topology = Topology::kSwitch;
  int64_t ici_links = 0;                        // torus links per chip
  std::array<int64_t, 3> matrix_tile{1, 1, 1};  // [M, N, K]
  double matrix_efficiency = 1;
  double vector_flops = 0;  // FLOP/s; 0: not given
  double ici_latency_s = 0, dcn_latency_s = 0;
  double cache_bytes = 0, cache_bytes_per_s = 0;  // 0: no cache level
  std::string source;
};

struct ChipTable {
  std::string file;         // where it was read from (for messages)
  std::vector<Chip> chips;  // in file order

  // Throws weft::Error naming the file and listing the known chips.
  const Chip& Find(std::string_view name) const;
};

ChipTable LoadChipTable(const std::filesystem::path& path);
ChipTable ParseChipTable(std::string_view toml_text, std::string_view source_name);

// Where configs/chips.toml is looked for when no file is given: beside the
// run config, then ./configs/, then the source tree weft was built from.
std::filesystem::path FindChipTable(const std::filesystem::path& config_file);

}  // namespace weft::analysis
