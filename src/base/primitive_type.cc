#include "weft/base/primitive_type.h"

#include <fmt/format.h>

#include <array>
#include <string>

#include "weft/base/error.h"

namespace weft {
namespace {

struct TypeInfo {
  PrimitiveType type;
  std::string_view name;
  int64_t bytes;
};

constexpr std::array<TypeInfo, 14> kTypes = {{
    {PrimitiveType::kPred, "pred", 1},
    {PrimitiveType::kS32, "s32", 4},
    {PrimitiveType::kS64, "s64", 8},
    {PrimitiveType::kU16, "u16", 2},
    {PrimitiveType::kU32, "u32", 4},
    {PrimitiveType::kU64, "u64", 8},
    {PrimitiveType::kF16, "f16", 2},
    {PrimitiveType::kBF16, "bf16", 2},
    {PrimitiveType::kF32, "f32", 4},
    {PrimitiveType::kF64, "f64", 8},
    {PrimitiveType::kF8E4M3FN, "f8e4m3fn", 1},
    {PrimitiveType::kF8E8M0FNU, "f8e8m0fnu", 1},
    {PrimitiveType::kC64, "c64", 8},
    {PrimitiveType::kToken, "token", 0},
}};

}  // namespace

std::string_view PrimitiveTypeName(PrimitiveType type) {
  if (type == PrimitiveType::kTuple) return "tuple";
  for (const TypeInfo& info : kTypes) {
    if (info.type == type) return info.name;
  }
  return "invalid";
}

std::optional<PrimitiveType> PrimitiveTypeFromName(std::string_view name) {
  for (const TypeInfo& info : kTypes) {
    if (info.name == name) return info.type;
  }
  return std::nullopt;
}

std::string_view SupportedPrimitiveTypeNames() {
  return "pred, s32, s64, u16, u32, u64, f16, bf16, f32, f64, f8e4m3fn, f8e8m0fnu, c64, token";
}

bool IsFloatingPoint(PrimitiveType type) {
  return type == PrimitiveType::kF32 || type == PrimitiveType::kBF16 ||
         type == PrimitiveType::kF16 || type == PrimitiveType::kF64 || IsFloat8(type);
}

bool IsFloat8(PrimitiveType type) {
  return type == PrimitiveType::kF8E4M3FN || type == PrimitiveType::kF8E8M0FNU;
}

bool IsInteger(PrimitiveType type) {
  return type == PrimitiveType::kS32 || type == PrimitiveType::kS64 ||
         type == PrimitiveType::kU16 || type == PrimitiveType::kU32 || type == PrimitiveType::kU64;
}

bool IsComplex(PrimitiveType type) { return type == PrimitiveType::kC64; }

bool IsSignedInteger(PrimitiveType type) {
  return type == PrimitiveType::kS32 || type == PrimitiveType::kS64;
}

int64_t ByteWidth(PrimitiveType type) {
  for (const TypeInfo& info : kTypes) {
    if (info.type == type) return info.bytes;
  }
  Fail("element type {} has no byte width", PrimitiveTypeName(type));
}

void CheckSupportedType(PrimitiveType type, std::initializer_list<PrimitiveType> supported,
                        std::string_view what) {
  std::string names;
  for (PrimitiveType s : supported) {
    if (s == type) return;
    if (!names.empty()) names += ", ";
    names += PrimitiveTypeName(s);
  }
  Fail("{} does not support element type {} (it supports {})", what, PrimitiveTypeName(type),
       names);
}

}  // namespace weft
