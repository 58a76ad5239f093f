#include "weft/autodiff/stop_gradient.h"

#include <string>
#include <string_view>

namespace weft {
namespace {

constexpr std::string_view kFrontendAttributes = "frontend_attributes";
constexpr std::string_view kMark = R"(weft_stop_gradient="true")";

// Whether the raw `{key="value",...}` text holds the mark as one of its
// entries (not inside another entry's quoted value).
bool HasMark(std::string_view attributes) {
  bool quoted = false;
  for (size_t i = 0; i < attributes.size(); ++i) {
    const char c = attributes[i];
    if (c == '"' && (i == 0 || attributes[i - 1] != '\\')) quoted = !quoted;
    if (quoted || (c != '{' && c != ',')) continue;
    size_t start = i + 1;
    while (start < attributes.size() && attributes[start] == ' ') ++start;
    if (attributes.substr(start, kMark.size()) == kMark) {
      const size_t end = start + kMark.size();
      if (end < attributes.size() &&
          (attributes[end] == ',' || attributes[end] == '}' || attributes[end] == ' ')) {
        return true;
      }
    }
  }
  return false;
}

}  // namespace

HloInstruction* StopGradient(HloInstruction* value) {
  if (IsGradientStopped(*value)) return value;
  auto& passthrough = value->mutable_attrs().passthrough;
  for (auto& [key, raw] : passthrough) {
    if (key != kFrontendAttributes) continue;
    // {a="x"} becomes {weft_stop_gradient="true",a="x"}; {} gets the mark alone.
    const size_t open = raw.find('{');
    if (open == std::string::npos) {
      raw = "{" + std::string(kMark) + "}";
      return value;
    }
    const bool empty = raw.find_first_not_of(" ", open + 1) == raw.find('}', open + 1);
    raw.insert(open + 1, std::string(kMark) + (empty ? "" : ","));
    return value;
  }
  passthrough.emplace_back(std::string(kFrontendAttributes), "{" + std::string(kMark) + "}");
  return value;
}

bool IsGradientStopped(const HloInstruction& instr) {
  for (const auto& [key, raw] : instr.attrs().passthrough) {
    if (key == kFrontendAttributes && HasMark(raw)) return true;
  }
  return false;
}

}  // namespace weft
