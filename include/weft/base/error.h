// weft::Error: the one exception type for bad input and failed checks.
// Messages name the input and say what to do about it.
#pragma once

#include <fmt/core.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace weft {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Throws weft::Error with a fmt-formatted message.
template <typename... Args>
[[noreturn]] void Fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace weft

// WEFT_CHECK(cond, "format", args...): throws weft::Error when cond is false.
#define WEFT_CHECK(cond, ...)        \
  do {                               \
    if (!(cond)) ::weft::Fail(__VA_ARGS__); \
  } while (0)
