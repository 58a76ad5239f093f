// What this machine's memory is: read when asked (cheap), never cached.
#pragma once

#include <cstdint>
#include <string>

namespace weft {

// Physical memory of the machine in bytes (sysconf), or 0 if unknown.
int64_t PhysicalMemoryBytes();

// "1.50 GiB", "730.0 MiB", "12 KiB", "100 B": for messages.
std::string FormatBytes(int64_t bytes);

}  // namespace weft
