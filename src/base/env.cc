#include "weft/base/env.h"

#include <cctype>
#include <cstdlib>

#include "weft/base/error.h"

namespace weft {

std::optional<std::string> GetEnv(const std::string& name) {
  const char* value = std::getenv(name.c_str());
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

int64_t GetEnvInt(const std::string& name, int64_t default_value, int64_t min_value,
                  int64_t max_value) {
  auto text = GetEnv(name);
  if (!text) return default_value;
  size_t used = 0;
  int64_t value = 0;
  try {
    value = std::stoll(*text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text->size()) {
    Fail("environment variable {}='{}' is not an integer; set it to a whole number in [{}, {}] "
         "or unset it",
         name, *text, min_value, max_value);
  }
  if (value < min_value || value > max_value) {
    Fail("environment variable {}={} is out of range; set it to a value in [{}, {}] or unset it",
         name, value, min_value, max_value);
  }
  return value;
}

int64_t ParseByteSize(const std::string& text, const std::string& what) {
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  std::string unit = text.substr(i);
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  int64_t scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  if (unit == "K" || unit == "KB" || unit == "KIB") scale = 1024;
  if (unit == "M" || unit == "MB" || unit == "MIB") scale = 1024 * 1024;
  if (unit == "G" || unit == "GB" || unit == "GIB") scale = 1024LL * 1024 * 1024;
  if (i == 0 || scale == 0 || i > 15) {
    Fail("{}: '{}' is not a byte size; write a number with an optional unit, e.g. 8K, 512K, 2M",
         what, text);
  }
  return std::stoll(text.substr(0, i)) * scale;
}

}  // namespace weft
