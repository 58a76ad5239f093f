#include "commands.h"

#include <utility>

namespace weft::cli {

namespace {
std::function<int()>& Action() {
  static std::function<int()> action;
  return action;
}
}  // namespace

void SetAction(std::function<int()> action) { Action() = std::move(action); }

int RunSelected(CLI::App& app) {
  if (!Action()) {
    std::puts(app.help().c_str());
    return 2;
  }
  return Action()();
}

}  // namespace weft::cli
