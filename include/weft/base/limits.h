// Limits every command shares, so that no input can make weft allocate or
// spin in proportion to a number it does not bound.
#pragma once

#include <cstdint>

namespace weft {

// The most devices weft addresses, for every command: a tile assignment,
// mesh or replica group holds at most this many and device ids are below it
// (sharding/), and so are a module's num_partitions and replica_count (the
// HLO parser), `weft run --num-devices`, `weft partition --num-partitions`,
// WEFT_NUM_DEVICES (runtime/config.cc) and the meshes `weft plan` and
// `weft train` build. Checked before anything is expanded, so a sharding
// that names a billion devices is an error, not an allocation.
inline constexpr int64_t kMaxDevices = int64_t{1} << 16;

}  // namespace weft
