#include "weft/autodiff/scan_config.h"

#include <nlohmann/json.hpp>

#include "weft/base/error.h"

namespace weft {

std::string ScanConfig::ToJson() const {
  nlohmann::json j;
  j["scan"] = {{"length", length},  {"carry", num_carry}, {"xs", num_xs},
               {"consts", num_consts}, {"ys", num_ys}};
  return j.dump();
}

std::optional<ScanConfig> ScanConfigOf(const HloInstruction& instr) {
  if (instr.opcode() != HloOpcode::kWhile || instr.attrs().backend_config.empty()) {
    return std::nullopt;
  }
  nlohmann::json j = nlohmann::json::parse(instr.attrs().backend_config, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("scan")) return std::nullopt;
  const nlohmann::json& s = j["scan"];
  ScanConfig c;
  try {
    c.length = s.at("length").get<int64_t>();
    c.num_carry = s.at("carry").get<int64_t>();
    c.num_xs = s.at("xs").get<int64_t>();
    c.num_consts = s.at("consts").get<int64_t>();
    c.num_ys = s.at("ys").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    Fail("{}: malformed scan backend_config ({}); expected {{\"scan\": {{\"length\", \"carry\", "
         "\"xs\", \"consts\", \"ys\"}}}}",
         instr.Describe(), e.what());
  }
  const Shape& state = instr.shape();
  WEFT_CHECK(c.length >= 1 && state.IsTuple() &&
                 static_cast<int64_t>(state.tuple_shapes().size()) == c.state_size(),
             "{}: scan config (length {}, {} carry, {} xs, {} consts, {} ys) does not match the "
             "while state {}",
             instr.Describe(), c.length, c.num_carry, c.num_xs, c.num_consts, c.num_ys,
             state.ToString());
  return c;
}

}  // namespace weft
