// Reading configuration from environment variables, with clear errors.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace weft {

// The variable's value, or nullopt when unset or empty.
std::optional<std::string> GetEnv(const std::string& name);

// Parses an integer variable; throws weft::Error naming the variable when the
// value is not an integer in [min_value, max_value].
int64_t GetEnvInt(const std::string& name, int64_t default_value, int64_t min_value,
                  int64_t max_value);

// Parses a byte size such as "8K", "512KiB", "2M", "1G" or "4096".
// Throws weft::Error naming `what` when malformed.
int64_t ParseByteSize(const std::string& text, const std::string& what);

}  // namespace weft
