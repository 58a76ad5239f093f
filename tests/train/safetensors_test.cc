#include "weft/train/safetensors.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/resource.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "scratch_dir.h"
#include "weft/base/error.h"

namespace weft {
namespace {

namespace fs = std::filesystem;
using runtime::HostTensor;

TensorMap RandomTensors(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  auto floats = [&](size_t n) {
    std::vector<float> v(n);
    for (auto& x : v) x = normal(rng);
    return v;
  };
  std::vector<uint16_t> bf16(15);
  for (auto& bits : bf16) bits = static_cast<uint16_t>(std::bit_cast<uint32_t>(normal(rng)) >> 16);
  std::vector<int32_t> i32(7);
  for (auto& x : i32) x = static_cast<int32_t>(rng());
  std::vector<int64_t> i64(3);
  for (auto& x : i64) x = static_cast<int64_t>(rng());
  TensorMap tensors;
  tensors["layers.0.attention.wq"] = F32Tensor({6, 5}, floats(30));
  tensors["norm"] = F32Tensor({7}, floats(7));
  tensors["bf16"] = BF16Tensor({3, 5}, bf16);
  tensors["tokens"] = I32Tensor({7}, i32);
  tensors["step"] = I64Tensor({3}, i64);
  tensors["scalar"] = F32Tensor({}, floats(1));
  tensors["empty"] = F32Tensor({0, 4}, {});
  return tensors;
}

// A file assembled by hand from the format description: length prefix,
// JSON header, data.
std::string HandMade(const std::string& header, const std::string& data) {
  uint64_t n = header.size();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + header + data;
}

std::string FloatBytes(std::initializer_list<float> values) {
  std::string out;
  for (float v : values) out.append(reinterpret_cast<const char*>(&v), 4);
  return out;
}

std::string ErrorOf(std::string_view bytes) {
  try {
    ParseSafetensors(bytes, "model.safetensors");
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

void ExpectInvalid(std::string_view bytes, const std::string& fragment) {
  std::string message = ErrorOf(bytes);
  EXPECT_EQ(message.rfind("model.safetensors is not a valid safetensors file: ", 0), 0u) << message;
  EXPECT_NE(message.find(fragment), std::string::npos) << message;
}

TEST(Safetensors, RoundTripsEveryDtype) {
  TensorMap tensors = RandomTensors(1);
  Metadata metadata = {{"format", "pt"}, {"step", "42"}, {"note", "ünïcode"}};
  std::string bytes = SerializeSafetensors(tensors, metadata);
  SafetensorsFile file = ParseSafetensors(bytes, "memory");
  EXPECT_TRUE(SameTensors(file.tensors, tensors));
  EXPECT_EQ(file.metadata, metadata);
  // The header starts with '{' and the data section is 8-byte aligned.
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(bytes[8], '{');
  EXPECT_EQ((8 + n) % 8, 0u);
}

TEST(Safetensors, WritesAndReadsFiles) {
  const weft::testing::ScratchDir scratch("weft_st");
  const fs::path& dir = scratch.path();
  TensorMap tensors = RandomTensors(2);
  WriteSafetensors(dir / "x.safetensors", tensors, {{"k", "v"}});
  SafetensorsFile file = ReadSafetensors(dir / "x.safetensors");
  EXPECT_TRUE(SameTensors(file.tensors, tensors));
  EXPECT_EQ(file.metadata.at("k"), "v");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
  try {
    ReadSafetensors(dir / "missing.safetensors");
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("missing.safetensors"), std::string::npos);
  }
}

// Peak resident memory of this process so far (Linux: KiB).
int64_t PeakRssBytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return int64_t{usage.ru_maxrss} * 1024;
}

TEST(Safetensors, ReadsTheHeaderFirstAndNeverTheFileWhole) {
  const weft::testing::ScratchDir scratch("weft_st_big");
  const fs::path& dir = scratch.path();
  // A 1 GiB sparse file: a valid header for one f32 tensor of 2^28 values,
  // then holes. Read whole before its header was checked (a copy of the
  // file and the tensors: twice its size); now each tensor is read into
  // place.
  const int64_t n = int64_t{1} << 28;
  const std::string header = fmt::format(
      R"({{"w": {{"dtype": "F32", "shape": [{}], "data_offsets": [0, {}]}}}})", n, 4 * n);
  {
    std::ofstream out(dir / "big.safetensors", std::ios::binary);
    out << HandMade(header, "");
  }
  fs::resize_file(dir / "big.safetensors", 8 + header.size() + 4 * n);
  const SafetensorsFile file = ReadSafetensors(dir / "big.safetensors");
  ASSERT_EQ(file.tensors.at("w").element_count(), n);
  float last = 1.0f;
  std::memcpy(&last, static_cast<const char*>(file.tensors.at("w").raw_data()) + 4 * (n - 1), 4);
  EXPECT_EQ(last, 0.0f);
  EXPECT_LT(PeakRssBytes(), int64_t{3} << 29);  // 1.5 GiB
  // A header that covers less than the data is refused before any data is
  // read (it was read whole first).
  const std::string short_header =
      R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})";
  {
    std::ofstream out(dir / "bad.safetensors", std::ios::binary);
    out << HandMade(short_header, "");
  }
  fs::resize_file(dir / "bad.safetensors", int64_t{64} << 30);
  const int64_t before = PeakRssBytes();
  try {
    ReadSafetensors(dir / "bad.safetensors");
    ADD_FAILURE() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("data bytes 4.."), std::string::npos) << error.what();
  }
  EXPECT_LT(PeakRssBytes(), before + (int64_t{1} << 30));
  // A device is refused by name, unread.
  try {
    ReadSafetensors("/dev/zero");
    ADD_FAILURE() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("/dev/zero is not a regular file"), std::string::npos)
        << error.what();
  }
}

TEST(Safetensors, ReadsFilesWrittenByOthers) {
  // Unsorted names, offsets out of name order, no padding, spaces in the JSON.
  std::string header = R"({ "b": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                       R"( "a": {"shape": [2], "data_offsets": [4, 12], "dtype": "F32"},)"
                       R"( "__metadata__": {"format": "pt"} })";
  SafetensorsFile file = ParseSafetensors(HandMade(header, FloatBytes({7.0f, 1.5f, -2.0f})), "x");
  EXPECT_EQ(TensorToF32(file.tensors.at("a")), (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(TensorToF32(file.tensors.at("b")), (std::vector<float>{7.0f}));
  EXPECT_EQ(file.metadata.at("format"), "pt");
}

TEST(Safetensors, Bf16WidensExactly) {
  std::vector<uint16_t> bits = {0x3F80, 0xC000, 0x3E20, 0x7F80};  // 1, -2, 0.15625, inf
  HostTensor tensor = BF16Tensor({4}, bits);
  std::vector<float> values = TensorToF32(tensor);
  EXPECT_EQ(values[0], 1.0f);
  EXPECT_EQ(values[1], -2.0f);
  EXPECT_EQ(values[2], 0.15625f);
  EXPECT_TRUE(std::isinf(values[3]));
  EXPECT_THROW(TensorToI32(tensor), Error);
  EXPECT_THROW(F32Tensor({2, 2}, std::vector<float>(3)), Error);
}

// Hugging Face checkpoints in float16: read as written, widened exactly.
TEST(Safetensors, F16ReadsAndWidensExactly) {
  // 1, -2, 0.333251953125 (0x3555), 2^-24 (the smallest subnormal), 65504 (the largest), -inf
  const std::vector<uint16_t> bits = {0x3C00, 0xC000, 0x3555, 0x0001, 0x7BFF, 0xFC00};
  const std::string header = R"({"h":{"dtype":"F16","shape":[2,3],"data_offsets":[0,12]}})";
  std::string data(reinterpret_cast<const char*>(bits.data()), bits.size() * 2);
  const SafetensorsFile file = ParseSafetensors(HandMade(header, data), "half.safetensors");
  const HostTensor& tensor = file.tensors.at("h");
  EXPECT_EQ(tensor.element_type(), PrimitiveType::kF16);
  EXPECT_EQ(tensor.dimensions(), (std::vector<int64_t>{2, 3}));
  const std::vector<float> values = TensorToF32(tensor);
  EXPECT_EQ(values[0], 1.0f);
  EXPECT_EQ(values[1], -2.0f);
  EXPECT_EQ(values[2], 0.333251953125f);
  EXPECT_EQ(values[3], std::ldexp(1.0f, -24));
  EXPECT_EQ(values[4], 65504.0f);
  EXPECT_TRUE(std::isinf(values[5]) && values[5] < 0);
  EXPECT_THROW(TensorBF16Bits(tensor), Error);
  // Written back, the same bytes.
  EXPECT_EQ(SerializeSafetensors(file.tensors, {}, "half"),
            SerializeSafetensors({{"h", F16Tensor({2, 3}, bits)}}, {}, "half"));
}

TEST(Safetensors, RejectsBrokenFilesNamingTheProblem) {
  const std::string data = FloatBytes({1, 2, 3, 4});
  const std::string good = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})";
  ASSERT_EQ(ErrorOf(HandMade(good, data)), "");

  ExpectInvalid("abc", "truncated: 3 bytes");
  ExpectInvalid(HandMade(good, data).substr(0, 40), "truncated: the header length is");
  ExpectInvalid(HandMade(good, data).substr(0, HandMade(good, data).size() - 4),
                "data_offsets end at 16 but the data section has 12 bytes");
  std::string huge(8, '\xff');
  ExpectInvalid(huge + "{}", "implausible");
  ExpectInvalid(HandMade(R"({"a": {"dtype": "F32",)", data),
                "its JSON header is malformed near byte");
  ExpectInvalid(HandMade(R"([1, 2])", ""), "does not start with '{'");
  ExpectInvalid(HandMade(R"({"a":{"dtype":"F64","shape":[2],"data_offsets":[0,16]}})", data),
                "tensor 'a': unknown dtype 'F64' (weft reads F32, BF16, F16, I32, I64)");
  ExpectInvalid(HandMade(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                         data.substr(0, 12)),
                "tensors 'a' and 'b' overlap");
  ExpectInvalid(HandMade(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})",
                         data),
                "data bytes 8..12 belong to no tensor");
  ExpectInvalid(HandMade(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data),
                "data bytes 8..16 belong to no tensor");
  ExpectInvalid(
      HandMade(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data.substr(0, 8)),
      "shape [3] of F32 needs 12 bytes but data_offsets span 8");
  ExpectInvalid(
      HandMade(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", data.substr(0, 8)),
      "not a non-negative integer");
  ExpectInvalid(
      HandMade(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", data.substr(0, 8)),
      "reversed");
  ExpectInvalid(HandMade(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})",
                         data.substr(0, 8)),
                "unexpected field 'x'");
  ExpectInvalid(HandMade(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                         data),
                "names 'a' twice");
  ExpectInvalid(HandMade(R"({"__metadata__":{"step":3}})", ""),
                "__metadata__ 'step' is not a string");
  ExpectInvalid(HandMade(R"({"a":{"shape":[2],"data_offsets":[0,8]}})", data.substr(0, 8)),
                "no dtype");
}

TEST(Safetensors, DTypeNamesAreTheFormats) {
  const std::pair<PrimitiveType, std::string_view> names[] = {{PrimitiveType::kF32, "F32"},
                                                              {PrimitiveType::kBF16, "BF16"},
                                                              {PrimitiveType::kF16, "F16"},
                                                              {PrimitiveType::kS32, "I32"},
                                                              {PrimitiveType::kS64, "I64"}};
  for (const auto& [type, name] : names) {
    EXPECT_EQ(SafetensorsDTypeName(type), name);
    EXPECT_EQ(PrimitiveTypeFromSafetensorsName(name), type);
  }
  EXPECT_FALSE(PrimitiveTypeFromSafetensorsName("f32").has_value());
  EXPECT_FALSE(PrimitiveTypeFromSafetensorsName("U8").has_value());
  EXPECT_THROW(SafetensorsDTypeName(PrimitiveType::kPred), Error);
}

TEST(Safetensors, WriterRejectsBadTensors) {
  TensorMap tensors;
  tensors["x"] = runtime::HostTensor(Shape(PrimitiveType::kU32, {2}));  // no safetensors name
  try {
    SerializeSafetensors(tensors, {});
    FAIL() << "a u32 tensor was written";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not u32"), std::string::npos) << e.what();
  }
  TensorMap empty;
  empty["x"] = runtime::HostTensor();
  EXPECT_THROW(SerializeSafetensors(empty, {}), Error);
  TensorMap reserved;
  reserved["__metadata__"] = F32Tensor({1}, std::vector<float>{1});
  EXPECT_THROW(SerializeSafetensors(reserved, {}), Error);
  TensorMap latin1;
  latin1["caf\xE9"] = F32Tensor({1}, std::vector<float>{1});
  EXPECT_THROW(SerializeSafetensors(latin1, {}), Error);
}

}  // namespace
}  // namespace weft
