// libFuzzer target for the HLO text parser (and the sharding syntax inside
// it). Bad input must end in weft::Error, never a crash, a hang or a
// sanitizer report; input that parses must print to text that parses back
// to the same text (the printer's round-trip promise).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "weft/base/error.h"
#include "weft/hlo/module.h"
#include "weft/hlo/parser.h"
#include "weft/hlo/printer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 4096) return 0;  // long inputs only slow the search down
  std::string text(reinterpret_cast<const char*>(data), size);
  std::string printed;
  try {
    auto module = weft::ParseHloModule(text);
    printed = weft::PrintModule(*module);
  } catch (const weft::Error&) {
    return 0;  // rejected with a message: fine
  }
  try {
    auto again = weft::ParseHloModule(printed);
    if (weft::PrintModule(*again) != printed) std::abort();  // not a fixed point
  } catch (const weft::Error&) {
    std::abort();  // the printer wrote text the parser rejects
  }
  return 0;
}
