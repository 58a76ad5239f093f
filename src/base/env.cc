#include "weft/base/env.h"

#include <cctype>
#include <cstdlib>

#include "weft/base/error.h"

namespace weft {

namespace {

// Decimal digits only; false on an empty string, another character, or a
// value above INT64_MAX. Never throws.
bool ParseDigits(const std::string& digits, int64_t* value) {
  if (digits.empty()) return false;
  int64_t v = 0;
  for (char c : digits) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
    const int d = c - '0';
    if (v > (INT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  *value = v;
  return true;
}

}  // namespace

std::optional<std::string> GetEnv(const std::string& name) {
  const char* value = std::getenv(name.c_str());
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

int64_t GetEnvInt(const std::string& name, int64_t default_value, int64_t min_value,
                  int64_t max_value) {
  auto text = GetEnv(name);
  if (!text) return default_value;
  const bool negative = (*text)[0] == '-';
  int64_t magnitude = 0;
  if (!ParseDigits(negative ? text->substr(1) : *text, &magnitude)) {
    Fail(
        "environment variable {}='{}' is not an integer; set it to a whole number in [{}, {}] "
        "or unset it",
        name, *text, min_value, max_value);
  }
  const int64_t value = negative ? -magnitude : magnitude;
  if (value < min_value || value > max_value) {
    Fail("environment variable {}={} is out of range; set it to a value in [{}, {}] or unset it",
         name, *text, min_value, max_value);
  }
  return value;
}

int64_t ParseByteSize(const std::string& text, const std::string& what, int64_t min_bytes,
                      int64_t max_bytes) {
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  std::string unit = text.substr(i);
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  int64_t scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  if (unit == "K" || unit == "KB" || unit == "KIB") scale = 1024;
  if (unit == "M" || unit == "MB" || unit == "MIB") scale = 1024 * 1024;
  if (unit == "G" || unit == "GB" || unit == "GIB") scale = 1024LL * 1024 * 1024;
  if (unit == "T" || unit == "TB" || unit == "TIB") scale = 1024LL * 1024 * 1024 * 1024;
  int64_t number = 0;
  if (i == 0 || scale == 0 || !ParseDigits(text.substr(0, i), &number)) {
    Fail(
        "{}='{}' is not a byte size; write a number with an optional unit (K, M, G, T), e.g. "
        "8K, 512K, 2M, in [{}, {}] bytes",
        what, text, min_bytes, max_bytes);
  }
  if (number > max_bytes / scale || number * scale < min_bytes || number * scale > max_bytes) {
    Fail("{}='{}' is out of range; use a byte size in [{}, {}] bytes", what, text, min_bytes,
         max_bytes);
  }
  return number * scale;
}

}  // namespace weft
