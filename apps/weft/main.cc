// weft: the command line. Subcommands are added here as capabilities land;
// each lives in its own file (cmd_*.cc) and registers itself below.
#include <fmt/core.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <exception>
#include <new>

#include "commands.h"
#include "weft/base/error.h"

namespace {

// libgomp reads its spin count once, when it is loaded, before main; so a
// weft started without GOMP_SPINCOUNT or OMP_WAIT_POLICY starts itself again
// with GOMP_SPINCOUNT=2000 (one exec, a few milliseconds). A team then spins
// at most ~2,000 pauses (tens of microseconds) at a barrier before it
// sleeps: long enough to catch the interpreter's next parallel region,
// short enough not to hold a core another thread needs. libgomp's default
// (300,000) made a quarter of tiny's one-device runs on a KVM guest 20%
// slower than the rest; its own fallback when it counts more threads than
// CPUs (100) sleeps at nearly every barrier (docs/DESIGN.md, "Threads";
// docs/PERFORMANCE.md). Either variable in the environment wins; where
// /proc/self/exe cannot be executed, weft runs on with libgomp's choice.
void ChooseOpenMpSpin(char** argv) {
  if (std::getenv("GOMP_SPINCOUNT") != nullptr || std::getenv("OMP_WAIT_POLICY") != nullptr) {
    return;
  }
  if (setenv("GOMP_SPINCOUNT", "2000", 0) != 0) return;
  execv("/proc/self/exe", argv);
}

}  // namespace

int main(int argc, char** argv) {
  ChooseOpenMpSpin(argv);
  CLI::App app{
      "weft: SPMD training of transformers on a mesh of devices, with a flexible flash "
      "attention."};
  app.require_subcommand(1);
  weft::cli::AddDemo(app);
  weft::cli::AddBench(app);
  weft::cli::AddTopology(app);
  weft::cli::AddCompile(app);
  weft::cli::AddTune(app);
  weft::cli::AddRun(app);
  weft::cli::AddTrain(app);
  weft::cli::AddPlan(app);
  weft::cli::AddSample(app);
  weft::cli::AddExport(app);
  weft::cli::AddEval(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    return weft::cli::RunSelected(app);
  } catch (const weft::Error& e) {  // the user's input: named in the message
    fmt::print(stderr, "error: {}\n", e.what());
    return 2;
  } catch (const std::bad_alloc&) {
    fmt::print(stderr,
               "internal error: out of memory in a step weft did not size beforehand "
               "(please report, with the command)\n");
    return 1;
  } catch (const std::exception& e) {  // weft::InternalError, or a library's exception
    fmt::print(stderr, "internal error: {} (please report)\n", e.what());
    return 1;
  }
}
