#include "commands.h"

#include <utility>

#include "weft/base/error.h"

namespace weft::cli {

namespace {
std::function<int()>& Action() {
  static std::function<int()> action;
  return action;
}
}  // namespace

void SetAction(std::function<int()> action) { Action() = std::move(action); }

void AddCollectiveTimeoutFlag(CLI::App* command, std::optional<int64_t>* seconds) {
  command->add_option("--collective-timeout", *seconds,
                      "Seconds a device waits for the others at a collective before the run "
                      "fails, naming who did not arrive (default: WEFT_COLLECTIVE_TIMEOUT, else "
                      "600)");
}

void HoldCollectiveTimeout(std::optional<int64_t> seconds,
                           std::optional<runtime::ScopedConfigOverride>& hold) {
  if (!seconds) return;
  const auto key = runtime::ConfigKey::kCollectiveTimeout;
  WEFT_CHECK(*seconds >= runtime::ConfigMinValue(key) && *seconds <= runtime::ConfigMaxValue(key),
             "--collective-timeout {}: give seconds in [{}, {}]", *seconds,
             runtime::ConfigMinValue(key), runtime::ConfigMaxValue(key));
  hold.emplace(key, *seconds);
}

int RunSelected(CLI::App& app) {
  if (!Action()) {
    std::puts(app.help().c_str());
    return 2;
  }
  return Action()();
}

}  // namespace weft::cli
