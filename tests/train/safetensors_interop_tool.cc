// Helper for python/tests/test_safetensors_interop.py: writes a safetensors
// file with known contents, or reads one and prints its tensors as JSON, so an
// independent Python reader/writer can check our files both ways.
//   safetensors_interop_tool write <path>
//   safetensors_interop_tool read <path>     (exit 1 with the error on stderr)
#include <bit>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string_view>

#include "weft/base/error.h"
#include "weft/train/safetensors.h"

namespace {

using weft::BF16Tensor;
using weft::F32Tensor;
using weft::I32Tensor;
using weft::I64Tensor;
using weft::PrimitiveType;
using weft::runtime::HostTensor;

// Contents the Python side recomputes from the same formulas.
weft::TensorMap KnownTensors() {
  std::vector<float> f32(12);
  for (size_t i = 0; i < f32.size(); ++i) f32[i] = static_cast<float>(i) * 0.25f - 1.5f;
  std::vector<uint16_t> bf16(5);
  for (size_t i = 0; i < bf16.size(); ++i) {
    float value = static_cast<float>(i) - 2.5f;  // exact in bfloat16
    bf16[i] = static_cast<uint16_t>(std::bit_cast<uint32_t>(value) >> 16);
  }
  std::vector<int32_t> i32(6);
  for (size_t i = 0; i < i32.size(); ++i) i32[i] = static_cast<int32_t>(i) * 7 - 20;
  std::vector<int64_t> i64(4);
  for (size_t i = 0; i < i64.size(); ++i) i64[i] = (int64_t{1} << 40) + static_cast<int64_t>(i);
  weft::TensorMap tensors;
  tensors["layers.0.attention.wq"] = F32Tensor({3, 4}, f32);
  tensors["bf16"] = BF16Tensor({5}, bf16);
  tensors["tokens"] = I32Tensor({2, 3}, i32);
  tensors["positions"] = I64Tensor({4}, i64);
  tensors["scalar"] = F32Tensor({}, std::vector<float>{3.0f});
  tensors["empty"] = F32Tensor({0, 3}, {});
  return tensors;
}

nlohmann::json Describe(const weft::SafetensorsFile& file) {
  nlohmann::json out = {{"metadata", file.metadata}, {"tensors", nlohmann::json::object()}};
  for (const auto& [name, tensor] : file.tensors) {
    nlohmann::json values;
    switch (tensor.element_type()) {
      case PrimitiveType::kF32:
      case PrimitiveType::kBF16:
      case PrimitiveType::kF16:
        values = weft::TensorToF32(tensor);
        break;
      case PrimitiveType::kS32:
        values = weft::TensorToI32(tensor);
        break;
      case PrimitiveType::kS64:
        values = weft::TensorToI64(tensor);
        break;
      default:
        break;
    }
    out["tensors"][name] = {{"dtype", weft::SafetensorsDTypeName(tensor.element_type())},
                            {"shape", tensor.dimensions()},
                            {"values", values}};
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 || (std::string_view(argv[1]) != "write" && std::string_view(argv[1]) != "read")) {
    std::fprintf(stderr, "usage: %s write|read <path>\n", argv[0]);
    return 2;
  }
  try {
    if (std::string_view(argv[1]) == "write") {
      weft::WriteSafetensors(argv[2], KnownTensors(), {{"format", "pt"}, {"source", "weft"}});
    } else {
      std::printf("%s\n", Describe(weft::ReadSafetensors(argv[2])).dump().c_str());
    }
  } catch (const weft::Error& error) {
    std::fprintf(stderr, "error: %s\n", error.what());
    return 1;
  }
  return 0;
}
