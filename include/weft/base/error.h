// Errors. Two kinds, kept apart so a user is never told a bug is their fault:
//   weft::Error          bad input or a refused request: the message names the
//                        input and says what to do. The CLI exits 2.
//   weft::InternalError  a broken invariant of weft itself (a bug). The CLI
//                        prints "internal error: … (please report)" and exits 1.
// Fail / WEFT_CHECK raise the first; FailInternal / WEFT_INTERNAL_CHECK the second.
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

// Not derived from Error: a `catch (const Error&)` that turns bad input into a
// message must never swallow a bug.
class InternalError : public std::logic_error {
 public:
  explicit InternalError(const std::string& message) : std::logic_error(message) {}
};

// Throws weft::Error with a fmt-formatted message.
template <typename... Args>
[[noreturn]] void Fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

// Throws weft::InternalError with a fmt-formatted message.
template <typename... Args>
[[noreturn]] void FailInternal(fmt::format_string<Args...> format, Args&&... args) {
  throw InternalError(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace weft

// WEFT_CHECK(cond, "format", args...): throws weft::Error when cond is false.
// For conditions the user's input decides.
#define WEFT_CHECK(cond, ...)               \
  do {                                      \
    if (!(cond)) ::weft::Fail(__VA_ARGS__); \
  } while (0)

// WEFT_INTERNAL_CHECK(cond, "format", args...): throws weft::InternalError.
// For invariants no input can break.
#define WEFT_INTERNAL_CHECK(cond, ...)              \
  do {                                              \
    if (!(cond)) ::weft::FailInternal(__VA_ARGS__); \
  } while (0)
