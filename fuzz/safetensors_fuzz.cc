// libFuzzer target for the safetensors reader: the 8-byte header length,
// the JSON header and the tensors' offsets checked against the data
// (ParseSafetensorsHeader), and the tensors made from them
// (ParseSafetensors, as ReadSafetensors fills them from a file). Bad input
// must end in weft::Error, never a crash, a hang, an allocation larger than
// the input promises or a sanitizer report; a file that parses must write
// back (SerializeSafetensors) to bytes that parse to the same tensors and
// metadata.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "weft/base/error.h"
#include "weft/train/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 65536) return 0;  // long inputs only slow the search down
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  weft::SafetensorsFile file;
  try {
    const weft::SafetensorsHeader header = weft::ParseSafetensorsHeader(bytes, size, "fuzz");
    for (const auto& [name, entry] : header.tensors) {
      // Offsets are absolute, inside the input, and span the tensor's bytes.
      if (entry.begin > entry.end || entry.end > size ||
          static_cast<uint64_t>(entry.spec.num_bytes()) != entry.end - entry.begin) {
        std::abort();
      }
    }
    file = weft::ParseSafetensors(bytes, "fuzz");
  } catch (const weft::Error&) {
    return 0;  // refused with a message: fine
  }
  std::string written;
  try {
    written = weft::SerializeSafetensors(file.tensors, file.metadata, "fuzz");
  } catch (const weft::Error&) {
    return 0;  // a name or metadata weft does not write (refused by name): fine
  }
  try {
    const weft::SafetensorsFile again = weft::ParseSafetensors(written, "fuzz");
    if (!weft::SameTensors(again.tensors, file.tensors) || again.metadata != file.metadata) {
      std::abort();  // written back to other tensors
    }
  } catch (const weft::Error&) {
    std::abort();  // weft wrote a file it cannot read
  }
  return 0;
}
