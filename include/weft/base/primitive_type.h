// PrimitiveType: weft's one element-type enum, from the HLO IR down to the
// kernels, the communicators and the checkpoint files. Names are XLA's
// ("f32", "bf16", "pred", ...); file formats with names of their own
// (safetensors' "F32", torch's "float32") convert at their edge.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string_view>

namespace weft {

// c64 is parsed, printed and sized (two f32s) but no pass computes with it:
// the executor refuses it by name. token (zero bytes, `token[]`) orders
// side effects (after-all, infeed, outfeed) and carries no data.
// f8e4m3fn and f8e8m0fnu (base/float8.h), the MX formats' elements and block
// scales, are storage types: converted, moved, sliced and read by XLA's
// block-scaled dot; elementwise arithmetic on them is refused.
enum class PrimitiveType {
  kInvalid,
  kPred,
  kS32,
  kS64,
  kU16,
  kU32,
  kU64,
  kF16,
  kBF16,
  kF32,
  kF64,
  kF8E4M3FN,
  kF8E8M0FNU,
  kC64,
  kToken,
  kTuple
};

// "f32", "bf16", "pred", ...; "tuple" for kTuple, "invalid" for kInvalid.
std::string_view PrimitiveTypeName(PrimitiveType type);
// nullopt for names weft does not support.
std::optional<PrimitiveType> PrimitiveTypeFromName(std::string_view name);
// The element type names weft supports, for error messages.
std::string_view SupportedPrimitiveTypeNames();
bool IsFloatingPoint(PrimitiveType type);  // f16, bf16, f32, f64, the f8 types
bool IsFloat8(PrimitiveType type);         // f8e4m3fn, f8e8m0fnu
bool IsInteger(PrimitiveType type);        // s32, s64, u16, u32, u64
bool IsComplex(PrimitiveType type);        // c64
bool IsSignedInteger(PrimitiveType type);
// Bytes per element (pred 1, token 0); throws weft::Error for tuple and
// invalid, which have none.
int64_t ByteWidth(PrimitiveType type);

// For a component that handles only some element types: throws weft::Error
// "<what> does not support element type <name> (it supports f32, bf16)"
// unless `type` is one of `supported`.
void CheckSupportedType(PrimitiveType type, std::initializer_list<PrimitiveType> supported,
                        std::string_view what);

}  // namespace weft
