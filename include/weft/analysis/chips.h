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
//   default_precision = "bf16"   # "bf16" or "f32"
//   source = "https://..."       # where the numbers come from
//
// Every key is required except description and default_precision (bf16);
// unknown keys are errors naming file:line:col, so a typo never falls back
// to a default.
#pragma once

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
  std::string default_precision = "bf16";
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
