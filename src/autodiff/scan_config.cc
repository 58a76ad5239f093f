#include "weft/autodiff/scan_config.h"

#include <nlohmann/json.hpp>

#include "weft/base/error.h"

namespace weft {

std::string ScanConfig::ToJson() const {
  nlohmann::json j;
  j["scan"] = {{"length", length},
               {"carry", num_carry},
               {"xs", num_xs},
               {"consts", num_consts},
               {"ys", num_ys}};
  if (num_residuals > 0) j["scan"]["residuals"] = num_residuals;
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
    c.num_residuals = s.value("residuals", int64_t{0});
  } catch (const nlohmann::json::exception& e) {
    Fail(
        "{}: malformed scan backend_config ({}); expected {{\"scan\": {{\"length\", \"carry\", "
        "\"xs\", \"consts\", \"ys\"}}}}",
        instr.Describe(), e.what());
  }
  const Shape& state = instr.shape();
  WEFT_CHECK(
      c.length >= 1 && c.num_residuals >= 0 && state.IsTuple() &&
          static_cast<int64_t>(state.tuple_shapes().size()) == c.state_size() + c.num_residuals,
      "{}: scan config (length {}, {} carry, {} xs, {} consts, {} ys, {} residuals) does "
      "not match the while state {}",
      instr.Describe(), c.length, c.num_carry, c.num_xs, c.num_consts, c.num_ys, c.num_residuals,
      state.ToString());
  return c;
}

std::vector<int64_t> OffloadedStateOf(const HloInstruction& instr) {
  if (instr.opcode() != HloOpcode::kWhile || instr.attrs().backend_config.empty()) return {};
  const nlohmann::json j = nlohmann::json::parse(instr.attrs().backend_config, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("offload_state")) return {};
  try {
    return j.at("offload_state").get<std::vector<int64_t>>();
  } catch (const nlohmann::json::exception& e) {
    Fail(
        "{}: malformed \"offload_state\" in its backend_config ({}); expected a list of state "
        "indices",
        instr.Describe(), e.what());
  }
}

std::string WithOffloadedState(const std::string& backend_config,
                               const std::vector<int64_t>& state) {
  nlohmann::json j = backend_config.empty() ? nlohmann::json::object()
                                            : nlohmann::json::parse(backend_config, nullptr, false);
  WEFT_INTERNAL_CHECK(!j.is_discarded() && j.is_object(), "backend_config {} is not a JSON object",
                      backend_config);
  if (state.empty()) {
    j.erase("offload_state");
  } else {
    j["offload_state"] = state;
  }
  return j.dump();
}

}  // namespace weft
