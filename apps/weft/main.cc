// weft: the command line. Subcommands are added here as capabilities land;
// each lives in its own file (cmd_*.cc) and registers itself below.
#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <exception>
#include <new>

#include "commands.h"
#include "weft/base/error.h"

int main(int argc, char** argv) {
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
