// Hugging Face Llama directories: the name and layout mapping is exact both
// ways (f32 bit for bit; bf16 and f16 widened exactly); the q/k row
// permutation makes Hugging Face's rotate-half RoPE give weft's interleaved
// RoPE attention scores (checked in float64 on random weights); config.json
// round-trips and what weft cannot compute is refused by field; directories
// are written whole (one file or shards with an index) and read back; bad
// directories are refused naming the file and the tensor or field.
#include "weft/train/hf_checkpoint.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "error_of.h"
#include "weft/base/atomic_file.h"
#include "weft/base/bfloat16.h"
#include "weft/base/error.h"
#include "weft/data/kjv.h"
#include "weft/data/tokenizer.h"
#include "weft/models/llama.h"
#include "weft/models/llama_config.h"
#include "weft/train/checkpoint.h"

namespace weft {
namespace {

namespace fs = std::filesystem;
using runtime::HostTensor;

fs::path TempDir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("weft_hf_checkpoint_test_" + name);
  fs::remove_all(dir);
  return dir;
}

using testing::ExpectError;

LlamaConfig Small(bool tie) {
  LlamaConfig c;
  c.vocab_size = 400;
  c.dim = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_dim = 48;
  c.seq_len = 16;
  c.rope_theta = 500.0;
  c.norm_eps = 1e-6;
  c.tie_embeddings = tie;
  return c;
}

// Random weights by weft name (norms around 1, never 0).
TensorMap RandomWeights(const LlamaConfig& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  TensorMap out;
  for (const LlamaWeight& w : LlamaWeights(c)) {
    std::vector<float> v(w.shape.ElementsCount());
    const bool norm = w.name.find("norm") != std::string::npos;
    for (float& x : v) x = norm ? 1.0f + normal(rng) : normal(rng);
    out[w.name] = F32Tensor(w.shape.dimensions(), v);
  }
  return out;
}

// A tokenizer of 384 pieces (weft's), trained once.
const std::string& TokenizerModel() {
  static const std::string model = [] {
    std::vector<Document> docs = LoadKjvBible(KjvUnit::kBook);
    docs.resize(2);
    TokenizerOptions o;
    o.vocab_size = 384;
    o.cache_dir = fs::temp_directory_path() / "weft_hf_checkpoint_test_cache";
    return Tokenizer::TrainOrLoad(docs, o).serialized_model();
  }();
  return model;
}

TEST(HfCheckpoint, NamesAndLayoutsRoundTripBitForBit) {
  for (bool tie : {false, true}) {
    const LlamaConfig c = Small(tie);
    const TensorMap weights = RandomWeights(c, tie ? 1 : 2);
    const TensorMap hf = ToHfTensors(c, weights, PrimitiveType::kF32);
    // 1 embedding + 9 per layer + final norm (+ head).
    EXPECT_EQ(hf.size(), 2 + 9 * c.n_layers + (tie ? 0 : 1));
    EXPECT_EQ(hf.at("model.embed_tokens.weight").dimensions(), (std::vector<int64_t>{400, 32}));
    EXPECT_EQ(hf.at("model.layers.1.self_attn.q_proj.weight").dimensions(),
              (std::vector<int64_t>{32, 32}));
    EXPECT_EQ(hf.at("model.layers.1.self_attn.k_proj.weight").dimensions(),
              (std::vector<int64_t>{16, 32}));
    EXPECT_EQ(hf.at("model.layers.0.mlp.gate_proj.weight").dimensions(),
              (std::vector<int64_t>{48, 32}));
    EXPECT_EQ(hf.at("model.layers.0.mlp.down_proj.weight").dimensions(),
              (std::vector<int64_t>{32, 48}));
    EXPECT_EQ(hf.count("lm_head.weight"), tie ? 0u : 1u);
    // v and o are plain transposes: HF's [out, in] row r, column c is weft's [c, r].
    const std::vector<float> wv = TensorToF32(weights.at("layers.attention.wv"));
    const std::vector<float> v1 = TensorToF32(hf.at("model.layers.1.self_attn.v_proj.weight"));
    EXPECT_EQ(v1[5 * 32 + 7], wv[1 * 32 * 16 + 7 * 16 + 5]);
    EXPECT_TRUE(SameTensors(FromHfTensors(c, hf, "test"), weights)) << "tie " << tie;
  }
}

// Hugging Face's q.k after its rotate-half RoPE (rows as exported) equals
// weft's q.k after its interleaved-pair RoPE, in float64: the permutation is
// the one that makes the two conventions agree.
TEST(HfCheckpoint, RotateHalfOnExportedRowsGivesWeftsAttentionScores) {
  const LlamaConfig c = Small(false);
  const TensorMap weights = RandomWeights(c, 3);
  const TensorMap hf = ToHfTensors(c, weights, PrimitiveType::kF32);
  const int64_t D = c.dim, hd = c.head_dim(), half = hd / 2;
  std::mt19937 rng(4);
  std::normal_distribution<double> normal;
  const int64_t layer = 1, positions[2] = {3, 11};
  std::vector<double> x[2] = {std::vector<double>(D), std::vector<double>(D)};
  for (auto& v : x)
    for (double& e : v) e = normal(rng);
  const auto theta = [&](int64_t pos, int64_t j) {
    return pos * std::pow(c.rope_theta, -2.0 * j / hd);
  };
  // weft: x [D] . w [D, out] for columns of head h, then pairs (2j, 2j+1) rotate.
  const auto weft_head = [&](const std::string& name, int64_t out, int64_t h, int which) {
    const std::vector<float> w = TensorToF32(weights.at(name));
    std::vector<double> y(hd);
    for (int64_t i = 0; i < hd; ++i)
      for (int64_t k = 0; k < D; ++k)
        y[i] += x[which][k] * w[layer * D * out + k * out + h * hd + i];
    std::vector<double> r(hd);
    for (int64_t j = 0; j < half; ++j) {
      const double a = theta(positions[which], j);
      r[2 * j] = y[2 * j] * std::cos(a) - y[2 * j + 1] * std::sin(a);
      r[2 * j + 1] = y[2 * j] * std::sin(a) + y[2 * j + 1] * std::cos(a);
    }
    return r;
  };
  // HF: W [out, D] . x, then q * cos + rotate_half(q) * sin over halves.
  const auto hf_head = [&](const std::string& name, int64_t h, int which) {
    const std::vector<float> w = TensorToF32(hf.at(fmt::format("model.layers.{}.{}", layer, name)));
    std::vector<double> y(hd);
    for (int64_t i = 0; i < hd; ++i)
      for (int64_t k = 0; k < D; ++k) y[i] += w[(h * hd + i) * D + k] * x[which][k];
    std::vector<double> r(hd);
    for (int64_t i = 0; i < hd; ++i) {
      const double a = theta(positions[which], i % half);
      const double rotated = i < half ? -y[i + half] : y[i - half];
      r[i] = y[i] * std::cos(a) + rotated * std::sin(a);
    }
    return r;
  };
  const auto dot = [](const std::vector<double>& a, const std::vector<double>& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
    return s;
  };
  const int64_t q_out = c.n_heads * hd, kv_out = c.n_kv_heads * hd;
  for (int64_t h = 0; h < c.n_heads; ++h) {
    const int64_t g = h / (c.n_heads / c.n_kv_heads);  // the kv head of query head h
    const double weft = dot(weft_head("layers.attention.wq", q_out, h, 0),
                            weft_head("layers.attention.wk", kv_out, g, 1));
    const double ours =
        dot(hf_head("self_attn.q_proj.weight", h, 0), hf_head("self_attn.k_proj.weight", g, 1));
    EXPECT_GT(std::abs(weft), 1e-3);
    EXPECT_NEAR(ours, weft, 1e-9 * std::max(1.0, std::abs(weft))) << "head " << h;
  }
  // Without the permutation the scores differ: the test can fail.
  const std::vector<float> q = TensorToF32(weights.at("layers.attention.wq"));
  const std::vector<float> hq = TensorToF32(hf.at("model.layers.1.self_attn.q_proj.weight"));
  EXPECT_NE(hq[1 * D + 0], q[layer * D * q_out + 0 * q_out + 1]);
  EXPECT_EQ(hq[1 * D + 0], q[layer * D * q_out + 0 * q_out + 2]);     // HF row 1 = weft 2
  EXPECT_EQ(hq[half * D + 0], q[layer * D * q_out + 0 * q_out + 1]);  // HF row 4 = weft 1
}

TEST(HfCheckpoint, Bf16ExportRoundsToNearestEvenAndReadsBackWidened) {
  const LlamaConfig c = Small(true);
  const TensorMap weights = RandomWeights(c, 5);
  const TensorMap hf = ToHfTensors(c, weights, PrimitiveType::kBF16);
  const HostTensor& e = hf.at("model.embed_tokens.weight");
  ASSERT_EQ(e.element_type(), PrimitiveType::kBF16);
  const std::vector<float> f32 = TensorToF32(weights.at("tok_embeddings"));
  const std::vector<uint16_t> bits = TensorBF16Bits(e);
  for (size_t i = 0; i < bits.size(); ++i) ASSERT_EQ(bits[i], bf16::FromFloatBits(f32[i]));
  const TensorMap back = FromHfTensors(c, hf, "bf16");
  const std::vector<float> widened = TensorToF32(back.at("tok_embeddings"));
  for (size_t i = 0; i < bits.size(); ++i) ASSERT_EQ(widened[i], bf16::ToFloat(bits[i]));
  EXPECT_EQ(back.at("layers.attention.wq").element_type(), PrimitiveType::kF32);
}

TEST(HfCheckpoint, ConfigJsonRoundTripsAndRefusesWhatWeftCannotCompute) {
  const LlamaConfig c = Small(true);
  const std::string text = HfConfigJson(c, PrimitiveType::kBF16);
  const nlohmann::json j = nlohmann::json::parse(text);
  EXPECT_EQ(j["architectures"][0], "LlamaForCausalLM");
  EXPECT_EQ(j["model_type"], "llama");
  EXPECT_EQ(j["hidden_size"], 32);
  EXPECT_EQ(j["num_key_value_heads"], 2);
  EXPECT_EQ(j["max_position_embeddings"], 16);
  EXPECT_EQ(j["torch_dtype"], "bfloat16");
  EXPECT_EQ(j["bos_token_id"], Tokenizer::kBosId);
  EXPECT_EQ(j["eos_token_id"], Tokenizer::kEosId);
  const LlamaConfig back = LlamaConfigFromHfJson(text, "config.json");
  EXPECT_EQ(back.vocab_size, c.vocab_size);
  EXPECT_EQ(back.dim, c.dim);
  EXPECT_EQ(back.n_layers, c.n_layers);
  EXPECT_EQ(back.n_heads, c.n_heads);
  EXPECT_EQ(back.n_kv_heads, c.n_kv_heads);
  EXPECT_EQ(back.ffn_dim, c.ffn_dim);
  EXPECT_EQ(back.seq_len, c.seq_len);
  EXPECT_EQ(back.rope_theta, c.rope_theta);
  EXPECT_EQ(back.norm_eps, c.norm_eps);
  EXPECT_EQ(back.tie_embeddings, c.tie_embeddings);

  const auto with = [&](const char* key, nlohmann::json value) {
    nlohmann::json k = j;
    if (value.is_discarded()) {
      k.erase(key);
    } else {
      k[key] = value;
    }
    return k.dump();
  };
  const nlohmann::json gone = nlohmann::json::value_t::discarded;
  ExpectError([&] { LlamaConfigFromHfJson(with("model_type", "mistral"), "c.json"); },
              {"c.json", "\"model_type\" is \"mistral\""});
  ExpectError([&] { LlamaConfigFromHfJson(with("hidden_act", "gelu"), "c.json"); },
              {"c.json", "\"hidden_act\""});
  ExpectError(
      [&] {
        LlamaConfigFromHfJson(with("rope_scaling", {{"rope_type", "llama3"}}), "c.json");
      },
      {"c.json", "\"rope_scaling\"", "no scaling"});
  ExpectError([&] { LlamaConfigFromHfJson(with("attention_bias", true), "c.json"); },
              {"\"attention_bias\" is true"});
  ExpectError([&] { LlamaConfigFromHfJson(with("head_dim", 16), "c.json"); },
              {"\"head_dim\" is 16"});
  ExpectError([&] { LlamaConfigFromHfJson(with("hidden_size", gone), "c.json"); },
              {"c.json", "no \"hidden_size\""});
  ExpectError([&] { LlamaConfigFromHfJson(with("num_hidden_layers", "2"), "c.json"); },
              {"\"num_hidden_layers\" is \"2\", not an integer"});
  ExpectError([&] { LlamaConfigFromHfJson(with("num_attention_heads", 5), "c.json"); },
              {"c.json"});  // 32 is not divisible by 5: ValidateLlamaConfig
  ExpectError([&] { LlamaConfigFromHfJson("{not json", "c.json"); }, {"c.json", "not valid JSON"});

  LlamaConfig other = c;
  other.dim = 64;
  ExpectError([&] { CheckModelMatchesHf(other, "run.toml", c, "hf/config.json"); },
              {"run.toml", "model.dim = 64", "hf/config.json", "\"hidden_size\": 32"});
  other = c;
  other.tie_embeddings = false;
  ExpectError([&] { CheckModelMatchesHf(other, "run.toml", c, "hf/config.json"); },
              {"model.tie_embeddings = false", "\"tie_word_embeddings\": true"});
  other = c;
  other.seq_len = 1024;  // the window is the run's to choose
  CheckModelMatchesHf(other, "run.toml", c, "hf/config.json");
}

TEST(HfCheckpoint, DirectoriesAreWrittenWholeAndReadBack) {
  const LlamaConfig c = Small(false);
  const TensorMap weights = RandomWeights(c, 6);
  const fs::path one = TempDir("one");
  WriteHfDirectory(one, c, weights, TokenizerModel(), {});
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.model",
                        "tokenizer_config.json", "special_tokens_map.json"}) {
    EXPECT_TRUE(fs::is_regular_file(one / f)) << f;
  }
  EXPECT_FALSE(fs::exists(one / "model.safetensors.index.json"));
  const nlohmann::json tc = nlohmann::json::parse(ReadFileToString(one / "tokenizer_config.json"));
  EXPECT_EQ(tc["bos_token"], "<s>");
  EXPECT_EQ(tc["add_bos_token"], true);  // weft frames documents BOS + text + EOS
  EXPECT_EQ(tc["add_eos_token"], false);
  EXPECT_EQ(ReadSafetensors(one / "model.safetensors").metadata.at("format"), "pt");
  HfModel m = LoadHf(one);
  EXPECT_TRUE(SameTensors(m.weights, weights));
  EXPECT_EQ(m.tokenizer, one / "tokenizer.model");
  EXPECT_EQ(m.config.dim, c.dim);

  // Shards of at most 20 KiB (a tensor larger than that alone in its own).
  const fs::path sharded = TempDir("sharded");
  const int64_t limit = 20 << 10;
  WriteHfDirectory(sharded, c, weights, TokenizerModel(),
                   {.dtype = PrimitiveType::kBF16, .max_shard_bytes = limit});
  EXPECT_FALSE(fs::exists(sharded / "model.safetensors"));
  const nlohmann::json index =
      nlohmann::json::parse(ReadFileToString(sharded / "model.safetensors.index.json"));
  std::set<std::string> files;
  for (const auto& [name, file] : index["weight_map"].items()) files.insert(file);
  EXPECT_GT(files.size(), 2u);
  int64_t total = 0;
  for (const std::string& f : files) {
    EXPECT_TRUE(f.find("-of-" + fmt::format("{:05}", files.size())) != std::string::npos) << f;
    const SafetensorsFile shard = ReadSafetensors(sharded / f);
    int64_t bytes = 0;
    for (const auto& [name, t] : shard.tensors) {
      bytes += t.byte_size();
      EXPECT_EQ(index["weight_map"][name], f);
      EXPECT_EQ(t.element_type(), PrimitiveType::kBF16);
    }
    EXPECT_TRUE(bytes <= limit || shard.tensors.size() == 1) << f;
    total += bytes;
  }
  EXPECT_EQ(index["metadata"]["total_size"], total);
  const HfModel back = LoadHf(sharded);
  const TensorMap rounded = FromHfTensors(c, ToHfTensors(c, weights, PrimitiveType::kBF16), "x");
  EXPECT_TRUE(SameTensors(back.weights, rounded));
  EXPECT_EQ(back.stored_dtype, PrimitiveType::kBF16);

  // An existing, non-empty target is refused untouched.
  ExpectError([&] { WriteHfDirectory(one, c, weights, TokenizerModel(), {}); },
              {one.string(), "not an empty directory"});
  EXPECT_TRUE(fs::is_regular_file(one / "model.safetensors"));
  for (const auto& entry : fs::directory_iterator(one.parent_path())) {
    EXPECT_EQ(entry.path().filename().string().find("weft_hf_checkpoint_test_one.tmp-"),
              std::string::npos)
        << "a temporary directory was left behind: " << entry.path();
  }
}

// transformers' from_pretrained takes model.safetensors when a directory
// holds it beside an index (modeling_utils.py checks SAFE_WEIGHTS_NAME
// before SAFE_WEIGHTS_INDEX_NAME); weft loads the same weights.
TEST(HfCheckpoint, ASingleFileBesideAnIndexIsReadAsTransformersReadsIt) {
  const LlamaConfig c = Small(false);
  const TensorMap sharded_weights = RandomWeights(c, 8);
  const TensorMap single_weights = RandomWeights(c, 9);
  const fs::path dir = TempDir("both");
  WriteHfDirectory(dir, c, sharded_weights, TokenizerModel(), {.max_shard_bytes = 20 << 10});
  ASSERT_TRUE(fs::is_regular_file(dir / "model.safetensors.index.json"));
  EXPECT_TRUE(SameTensors(LoadHf(dir).weights, sharded_weights));
  WriteSafetensors(dir / "model.safetensors", ToHfTensors(c, single_weights, PrimitiveType::kF32));
  EXPECT_TRUE(SameTensors(LoadHf(dir).weights, single_weights));
  // The index is not read at all then, as in transformers.
  WriteFileAtomically(dir / "model.safetensors.index.json", "not json");
  EXPECT_TRUE(SameTensors(LoadHf(dir).weights, single_weights));
}

// OUT_DIR is the user's path: a link to an empty directory is followed (the
// link stays); a dangling link, or a place no directory can be made, is a
// clear error; nothing is left behind.
TEST(HfCheckpoint, ExportsFollowTheUsersLinkAndNameWhatCannotBeCreated) {
  const LlamaConfig c = Small(true);
  const TensorMap weights = RandomWeights(c, 10);
  const fs::path root = TempDir("links");
  const fs::path real = root / "real";
  fs::create_directories(real);
  const fs::path link = root / "link";
  fs::create_symlink("real", link);
  WriteHfDirectory(link, c, weights, TokenizerModel(), {});
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(real / "model.safetensors")));
  EXPECT_TRUE(SameTensors(LoadHf(link).weights, weights));
  const fs::path dangling = root / "dangling";
  fs::create_symlink(root / "absent", dangling);
  ExpectError([&] { WriteHfDirectory(dangling, c, weights, TokenizerModel(), {}); },
              {dangling.string(), "does not exist"});
  EXPECT_FALSE(fs::exists(root / "absent"));
  ExpectError([&] { WriteHfDirectory("/proc/weft-export", c, weights, TokenizerModel(), {}); },
              {"/proc/weft-export", "cannot create"});
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(root)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"dangling", "link", "real"}));
}

// A second export into a directory another export is writing is refused by
// name (it holds the directory's lock); of two at once, one wins and the
// other is a clear error.
TEST(HfCheckpoint, ConcurrentExportsIntoOneDirectoryAreRefusedByName) {
  const LlamaConfig c = Small(true);
  const TensorMap weights = RandomWeights(c, 11);
  const fs::path dir = TempDir("concurrent");
  fs::create_directories(dir);
  const int held = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(held, 0);
  ASSERT_EQ(::flock(held, LOCK_EX | LOCK_NB), 0);  // as an export in progress holds it
  ExpectError([&] { WriteHfDirectory(dir, c, weights, TokenizerModel(), {}); },
              {dir.string(), "being written by another weft export"});
  EXPECT_TRUE(fs::is_empty(dir));
  ::close(held);
  fs::remove(dir);
  std::atomic<int> wrote{0}, refused{0};
  std::vector<std::thread> exports;
  for (int k = 0; k < 3; ++k) {
    exports.emplace_back([&] {
      try {
        WriteHfDirectory(dir, c, weights, TokenizerModel(), {});
        ++wrote;
      } catch (const Error&) {
        ++refused;
      }
    });
  }
  for (auto& t : exports) t.join();
  EXPECT_EQ(wrote, 1);
  EXPECT_EQ(refused, 2);
  EXPECT_TRUE(SameTensors(LoadHf(dir).weights, weights));
  for (const auto& entry : fs::directory_iterator(dir.parent_path())) {
    EXPECT_EQ(entry.path().filename().string().find("weft_hf_checkpoint_test_concurrent.tmp-"),
              std::string::npos)
        << "a temporary directory was left behind: " << entry.path();
  }
}

// A directory written by hand (as a user's model would be), then damaged.
class BadHfDirectory : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = Small(true);
    dir_ = TempDir("bad");
    fs::create_directories(dir_);
    WriteFileAtomically(dir_ / "config.json", HfConfigJson(config_, PrimitiveType::kF32));
    hf_ = ToHfTensors(config_, RandomWeights(config_, 7), PrimitiveType::kF32);
  }
  void Write(const TensorMap& tensors) { WriteSafetensors(dir_ / "model.safetensors", tensors); }
  LlamaConfig config_;
  fs::path dir_;
  TensorMap hf_;
};

TEST_F(BadHfDirectory, EachProblemIsNamedWithTheFileAndTheTensorOrField) {
  const std::string file = (dir_ / "model.safetensors").string();
  ExpectError([&] { LoadHf(dir_); }, {dir_.string(), "neither model.safetensors"});

  TensorMap missing = hf_;
  missing.erase("model.layers.1.mlp.up_proj.weight");
  Write(missing);
  ExpectError([&] { LoadHf(dir_); },
              {"no tensor 'model.layers.1.mlp.up_proj.weight' [48, 32]", "config.json"});

  TensorMap shape = hf_;
  shape["model.layers.0.self_attn.k_proj.weight"] = F32Tensor({32, 16}, std::vector<float>(512));
  Write(shape);
  ExpectError([&] { LoadHf(dir_); },
              {file, "'model.layers.0.self_attn.k_proj.weight' is [32, 16]", "needs [16, 32]"});

  TensorMap dtype = hf_;
  dtype["model.norm.weight"] = I32Tensor({32}, std::vector<int32_t>(32, 1));
  Write(dtype);
  ExpectError([&] { LoadHf(dir_); }, {file, "'model.norm.weight' is I32", "unsupported dtype"});

  TensorMap extra = hf_;
  extra["model.layers.0.self_attn.q_proj.bias"] = F32Tensor({32}, std::vector<float>(32));
  Write(extra);
  ExpectError([&] { LoadHf(dir_); }, {file, "'model.layers.0.self_attn.q_proj.bias' has no place"});

  TensorMap nan = hf_;
  std::vector<float> values = TensorToF32(nan.at("model.norm.weight"));
  values[3] = NAN;
  nan["model.norm.weight"] = F32Tensor({32}, values);
  Write(nan);
  ExpectError([&] { LoadHf(dir_); }, {file, "'model.norm.weight' holds nan at element 3"});

  // Tied: an lm_head.weight in the file is transformers' to ignore, and ours.
  TensorMap tied = hf_;
  tied["lm_head.weight"] = hf_.at("model.embed_tokens.weight");
  Write(tied);
  EXPECT_EQ(LoadHf(dir_).weights.size(), LlamaWeights(config_).size());

  fs::remove(dir_ / "model.safetensors");
  WriteFileAtomically(
      dir_ / "model.safetensors.index.json",
      R"({"metadata": {}, "weight_map": {"model.norm.weight": "model-1.safetensors"}})");
  ExpectError([&] { LoadHf(dir_); },
              {"model.safetensors.index.json", "model-1.safetensors", "does not exist"});
  WriteFileAtomically(dir_ / "model.safetensors.index.json", R"({"metadata": {}})");
  ExpectError([&] { LoadHf(dir_); }, {"model.safetensors.index.json", "no \"weight_map\""});

  fs::remove(dir_ / "config.json");
  ExpectError([&] { LoadHf(dir_); }, {dir_.string(), "has no config.json"});
  ExpectError([&] { LoadHf(dir_ / "nowhere"); }, {"nowhere", "not a directory"});
}

// config.json and the index are read whole: a device (/dev/zero, read until
// memory ran out) or a file over 64 MiB is refused by name, unread; a
// device at config.json or model.safetensors is not taken for "none there".
TEST_F(BadHfDirectory, DevicesAndHugeJsonFilesAreRefusedUnread) {
  const fs::path config = dir_ / "config.json";
  const fs::path index = dir_ / "model.safetensors.index.json";
  fs::remove(config);
  fs::create_symlink("/dev/zero", config);
  EXPECT_TRUE(IsHfDirectory(dir_));
  ExpectError([&] { LoadHf(dir_); },
              {"Hugging Face config " + config.string(), "is a character device"});
  fs::remove(config);
  WriteFileAtomically(config, "");
  fs::resize_file(config, int64_t{2} << 30);  // sparse: nothing is written
  ExpectError([&] { LoadHf(dir_); }, {"Hugging Face config " + config.string(),
                                      "more than the 64.0 MiB (67108864 bytes)"});

  WriteFileAtomically(config, HfConfigJson(config_, PrimitiveType::kF32));
  fs::create_symlink("/dev/zero", index);
  ExpectError([&] { LoadHf(dir_); },
              {"safetensors index " + index.string(), "is a character device"});
  fs::remove(index);
  WriteFileAtomically(index, "");
  fs::resize_file(index, int64_t{2} << 30);
  ExpectError([&] { LoadHf(dir_); }, {"safetensors index " + index.string(), "more than"});

  // model.safetensors beside the index, but a device: refused, not skipped.
  fs::create_symlink("/dev/zero", dir_ / "model.safetensors");
  ExpectError([&] { LoadHf(dir_); }, {(dir_ / "model.safetensors").string(), "not a regular file"});
}

// weft export hf reads the run's tokenizer.model whole: one over 1 GiB
// (a sparse file planted there) is refused by name before it is read.
TEST(HfCheckpoint, ARunsTokenizerOverTheLimitIsNotReadForExport) {
  const LlamaConfig c = Small(true);
  Checkpoint checkpoint;
  checkpoint.model = RandomWeights(c, 3);
  for (const auto& [key, value] : ModelConfigFields(c)) checkpoint.state.extra[key] = value;
  const fs::path run = TempDir("huge_tokenizer");
  SaveCheckpoint(run / "checkpoint", checkpoint);
  WriteFileAtomically(run / "tokenizer.model", TokenizerModel());
  ExportRunToHf(run, run / "hf", {});
  EXPECT_TRUE(LoadHf(run / "hf").tokenizer == run / "hf" / "tokenizer.model");
  fs::resize_file(run / "tokenizer.model", (int64_t{1} << 30) + 1);  // sparse
  ExpectError([&] { ExportRunToHf(run, run / "hf2", {}); },
              {"tokenizer model " + (run / "tokenizer.model").string(), "more than the 1.00 GiB"});
  EXPECT_FALSE(fs::exists(run / "hf2"));
}

}  // namespace
}  // namespace weft
