// Which attributes each opcode accepts and which it requires, as the HLO
// text parser (parser.cc) checks them.
#pragma once

#include <map>
#include <string_view>
#include <vector>

#include "weft/hlo/opcode.h"

namespace weft::hlo {

// Which opcodes accept each attribute (empty list: every opcode).
const std::map<std::string_view, std::vector<HloOpcode>>& AttributeOpcodes();

// The attributes `op` must be given.
std::vector<std::string_view> RequiredAttributes(HloOpcode op);

}  // namespace weft::hlo
