// `weft topology`: the devices this process sees (discovered once), and how
// many discoveries have happened (always 1).
#include <fmt/core.h>

#include "commands.h"
#include "weft/runtime/topology.h"

namespace weft::cli {

void AddTopology(CLI::App& app) {
  auto* topo = app.add_subcommand(
      "topology",
      "Print the device topology (WEFT_NUM_DEVICES, WEFT_NUM_SLICES; one device per rank under "
      "mpirun, slices by host or WEFT_SLICE_SIZE)");
  topo->callback([] {
    SetAction([] {
      const auto& t = runtime::Topology::Global();
      fmt::print("{}", t.ToString());
      return 0;
    });
  });
}

}  // namespace weft::cli
