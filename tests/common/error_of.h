// What tests ask of weft's errors (any test target can include it).
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "weft/base/error.h"

namespace weft::testing {

// The message of the weft::Error `fn` throws; "" when it throws none.
inline std::string ErrorOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

// Whether `text` (a message) mentions `part`.
inline bool Mentions(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}

// `f` throws a weft::Error whose message mentions every one of `parts`.
template <typename F>
void ExpectError(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning " << parts.front();
  } catch (const Error& e) {
    for (const std::string& p : parts) {
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
          << "'" << e.what() << "' does not mention '" << p << "'";
    }
  }
}

}  // namespace weft::testing
