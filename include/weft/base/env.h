// Reading configuration from environment variables, with clear errors: a
// malformed or out-of-range value is a weft::Error that names the variable,
// its value and the allowed range (never silently replaced by a default).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace weft {

// The variable's value, or nullopt when unset or empty.
std::optional<std::string> GetEnv(const std::string& name);

// Parses an integer variable: an optional '-' then decimal digits, nothing
// else (no spaces, signs '+', units or hex). Returns default_value when the
// variable is unset or empty; throws weft::Error naming the variable, its
// value and [min_value, max_value] when the value is malformed or outside it.
int64_t GetEnvInt(const std::string& name, int64_t default_value, int64_t min_value,
                  int64_t max_value);

// The largest byte size ParseByteSize accepts by default: 1 PiB.
inline constexpr int64_t kMaxByteSize = int64_t{1} << 50;

// Parses a byte size such as "8K", "512KiB", "2M", "1G" or "4096" (units are
// powers of 1024, case-insensitive). Throws weft::Error naming `what` (e.g.
// the variable) when malformed or outside [min_bytes, max_bytes].
int64_t ParseByteSize(const std::string& text, const std::string& what, int64_t min_bytes = 1,
                      int64_t max_bytes = kMaxByteSize);

}  // namespace weft
