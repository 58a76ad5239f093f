// Registration of weft's subcommands. Each Add* attaches a subcommand whose
// callback is stored and run by RunSelected after parsing (so errors thrown
// by a command are reported uniformly by main).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <optional>

#include "weft/runtime/config.h"

namespace weft::cli {

void AddDemo(CLI::App& app);
void AddBench(CLI::App& app);
void AddTopology(CLI::App& app);
void AddCompile(CLI::App& app);
void AddTune(CLI::App& app);
void AddRun(CLI::App& app);
void AddTrain(CLI::App& app);
void AddPlan(CLI::App& app);
void AddSample(CLI::App& app);
void AddExport(CLI::App& app);
void AddEval(CLI::App& app);

// `--collective-timeout SECONDS` for the commands that run devices: the
// flag, and the override it sets (validated, naming the flag), which the
// caller holds for the whole command so every device sees it.
void AddCollectiveTimeoutFlag(CLI::App* command, std::optional<int64_t>* seconds);
void HoldCollectiveTimeout(std::optional<int64_t> seconds,
                           std::optional<runtime::ScopedConfigOverride>& hold);

// Stores the action of the subcommand being parsed.
void SetAction(std::function<int()> action);
int RunSelected(CLI::App& app);

}  // namespace weft::cli
