#include "weft/models/llama_config.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <random>
#include <string>

#include "weft/base/error.h"
#include "weft/kernels/attention.h"

namespace weft {
namespace {

const std::string kConfigs = std::string(WEFT_SOURCE_DIR) + "/configs/";

constexpr const char* kMinimal = R"([model]
vocab_size = 300
dim = 64
n_layers = 2
n_heads = 4
ffn_dim = 96
seq_len = 32
)";

// kMinimal with one [model] key's line replaced.
std::string base_model_with(const std::string& line) {
  std::string text = kMinimal;
  const std::string key = line.substr(0, line.find(' '));
  const size_t at = text.find("\n" + key + " = ") + 1;
  const size_t end = text.find('\n', at);
  return text.substr(0, at) + line + text.substr(end);
}

// The message of the weft::Error that parsing `text` throws ("" if none).
std::string ErrorOf(const std::string& text) {
  try {
    ParseRunConfig(text, "cfg.toml");
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

// Expects an error that starts with the location and mentions `fragment`.
void ExpectError(const std::string& text, const std::string& location,
                 const std::string& fragment) {
  std::string message = ErrorOf(text);
  EXPECT_EQ(message.rfind(location + ":", 0), 0u) << message;
  EXPECT_NE(message.find(fragment), std::string::npos) << message;
}

TEST(LlamaConfig, TinyConfig) {
  RunConfig config = LoadRunConfig(kConfigs + "tiny.toml");
  EXPECT_EQ(config.model.vocab_size, 1024);
  EXPECT_EQ(config.model.dim, 128);
  EXPECT_EQ(config.model.n_layers, 4);
  EXPECT_EQ(config.model.n_kv_heads, 2);
  EXPECT_EQ(config.model.head_dim(), 32);
  EXPECT_TRUE(config.model.tie_embeddings);
  EXPECT_EQ(config.train.batch_size, 8);
  EXPECT_DOUBLE_EQ(config.train.lr, 3e-3);
  EXPECT_EQ(config.train.remat, RematPolicy{});
  EXPECT_EQ(config.data.source, "kjv");
  EXPECT_EQ(config.mesh.axis_names, (std::vector<std::string>{"fsdp", "tensor"}));
  EXPECT_EQ(config.mesh.num_devices(), 4);
  EXPECT_EQ(config.mesh.ToMesh().num_devices(), 4);
  // 1024*128 tied embeddings + 4 layers of (2*128*128 + 2*128*64 + 3*128*384 + 2*128) + 128.
  EXPECT_EQ(config.model.NumParameters(), 1024 * 128 + 4 * 196864 + 128);

  const ShardingRule* wo = config.RuleFor("layers.3.attention.wo");
  ASSERT_NE(wo, nullptr);
  EXPECT_EQ(wo->spec, (PartitionSpec{"tensor", "fsdp"}));
  // The rule's own line in the file, column 1.
  std::ifstream file(kConfigs + "tiny.toml");
  std::string text;
  int line = 0, wo_line = 0;
  while (std::getline(file, text)) {
    ++line;
    if (text.rfind("\"layers.*.attention.wo\"", 0) == 0) wo_line = line;
  }
  ASSERT_GT(wo_line, 0);
  EXPECT_EQ(wo->location, kConfigs + "tiny.toml:" + std::to_string(wo_line) + ":1");
  const ShardingRule* norm = config.RuleFor("layers.0.ffn_norm");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->spec.size(), 0);
  EXPECT_EQ(config.RuleFor("rotary_cache"), nullptr);
}

TEST(LlamaConfig, MemorizeConfig) {
  RunConfig config = LoadRunConfig(kConfigs + "memorize.toml");
  EXPECT_EQ(config.data.source, "inline");
  ASSERT_EQ(config.data.documents.size(), 3u);
  EXPECT_EQ(config.data.documents[1].rfind("The LORD is my shepherd", 0), 0u);
  EXPECT_EQ(config.data.tokenizer_corpus, "kjv");
  EXPECT_EQ(config.train.batch_size % config.mesh.num_devices(), 0);
  // The catch-all rule comes last in the file, so it does not shadow "*norm*".
  EXPECT_EQ(config.RuleFor("norm")->spec.size(), 0);
  EXPECT_EQ(config.RuleFor("layers.1.attention.wq")->spec, (PartitionSpec{"fsdp"}));
}

TEST(LlamaConfig, Llama405bConfig) {
  RunConfig config = LoadRunConfig(kConfigs + "llama3.1-405b.toml");
  EXPECT_EQ(config.model.n_layers, 126);
  EXPECT_EQ(config.model.dim, 16384);
  EXPECT_EQ(config.model.ffn_dim, 53248);
  EXPECT_EQ(config.model.n_heads, 128);
  EXPECT_EQ(config.model.n_kv_heads, 8);
  EXPECT_EQ(config.model.vocab_size, 128256);
  EXPECT_DOUBLE_EQ(config.model.rope_theta, 500000.0);
  EXPECT_DOUBLE_EQ(config.model.norm_eps, 1e-5);
  EXPECT_EQ(config.model.seq_len, 8192);
  EXPECT_EQ(config.train.remat.kind, Remat::kFull);
  // The published size: 405B parameters.
  EXPECT_NEAR(static_cast<double>(config.model.NumParameters()), 405.85e9, 0.1e9);
  EXPECT_EQ(config.mesh.num_devices(), 8192);
}

TEST(LlamaConfig, DefaultsAndHash) {
  RunConfig config = ParseRunConfig(kMinimal, "cfg.toml");
  EXPECT_EQ(config.model.n_kv_heads, 4);
  EXPECT_DOUBLE_EQ(config.model.rope_theta, 10000.0);
  EXPECT_FALSE(config.model.tie_embeddings);
  EXPECT_EQ(config.train.no_weight_decay, (std::vector<std::string>{"*norm*"}));
  EXPECT_TRUE(config.mesh.axis_names.empty());
  EXPECT_EQ(config.mesh.num_devices(), 1);

  std::string hash = config.Hash();
  EXPECT_EQ(hash.size(), 16u);
  // Comments, layout and spelled-out defaults do not change the hash …
  std::string same = std::string("# a comment\n") + kMinimal + "rope_theta = 10000\n\n[train]\n";
  EXPECT_EQ(ParseRunConfig(same, "other.toml").Hash(), hash);
  // … a setting does.
  EXPECT_NE(ParseRunConfig(std::string(kMinimal) + "norm_eps = 1e-6\n", "x").Hash(), hash);
  EXPECT_NE(ParseRunConfig(std::string(kMinimal) + "[train]\nseed = 1\n", "x").Hash(), hash);
}

// train.grad_accum_steps: how many micro-batches each step's batch is run
// as; it must divide train.batch_size.
TEST(LlamaConfig, GradAccumStepsDivideTheBatch) {
  const RunConfig plain = ParseRunConfig(kMinimal, "cfg.toml");
  EXPECT_EQ(plain.train.grad_accum_steps, 1);
  const std::string train = std::string(kMinimal) + "[train]\nbatch_size = 8\n";
  const RunConfig accum = ParseRunConfig(train + "grad_accum_steps = 4\n", "cfg.toml");
  EXPECT_EQ(accum.train.batch_size, 8);
  EXPECT_EQ(accum.train.grad_accum_steps, 4);
  EXPECT_NE(accum.CanonicalText().find("train.grad_accum_steps = 4"), std::string::npos);
  // It is a setting of the run (the hash changes); spelled-out 1 is the default.
  const RunConfig batch8 = ParseRunConfig(train, "cfg.toml");
  EXPECT_NE(accum.Hash(), batch8.Hash());
  EXPECT_EQ(ParseRunConfig(train + "grad_accum_steps = 1\n", "cfg.toml").Hash(), batch8.Hash());
  EXPECT_EQ(ParseRunConfig(train + "grad_accum_steps = 8\n", "cfg.toml").train.grad_accum_steps, 8);

  ExpectError(train + "grad_accum_steps = 0\n", "cfg.toml:10:20",
              "train.grad_accum_steps = 0 must be at least 1");
  ExpectError(train + "grad_accum_steps = -2\n", "cfg.toml:10:20",
              "train.grad_accum_steps = -2 must be at least 1");
  ExpectError(train + "grad_accum_steps = \"4\"\n", "cfg.toml:10:20",
              "train.grad_accum_steps must be an integer");
  ExpectError(train + "grad_accum_steps = 3\n", "cfg.toml:10:20",
              "train.batch_size = 8 is not divisible by train.grad_accum_steps = 3");
  ExpectError(std::string(kMinimal) + "[train]\ngrad_accum_steps = 16\n", "cfg.toml:9:20",
              "train.batch_size = 8 is not divisible by train.grad_accum_steps = 16");
  ExpectError(train + "grad_accum_step = 2\n", "cfg.toml:10:1",
              "unknown key 'grad_accum_step' in [train]; did you mean 'grad_accum_steps'?");
}

// train.precision: unset unless the config says (the trainer then picks the
// CPU's fastest, trainer_test); f32 configs keep the hash they had before
// the key existed (runs then trained in f32), bf16 ones the hash they had
// when bf16 was the default.
TEST(LlamaConfig, PrecisionIsUnsetUnlessTheConfigSays) {
  const RunConfig plain = ParseRunConfig(kMinimal, "cfg.toml");
  EXPECT_FALSE(plain.train.precision.has_value());
  EXPECT_NE(plain.CanonicalText().find("train.precision = auto"), std::string::npos);
  const std::string train = std::string(kMinimal) + "[train]\n";
  const RunConfig f32 = ParseRunConfig(train + "precision = \"f32\"\n", "cfg.toml");
  EXPECT_EQ(f32.train.precision, Precision::kF32);
  EXPECT_EQ(f32.CanonicalText().find("train.precision"), std::string::npos);
  EXPECT_NE(f32.Hash(), plain.Hash());
  const RunConfig bf16 = ParseRunConfig(train + "precision = \"bf16\"\n", "cfg.toml");
  EXPECT_EQ(bf16.train.precision, Precision::kBf16);
  EXPECT_NE(bf16.CanonicalText().find("train.precision = bf16"), std::string::npos);
  EXPECT_NE(bf16.Hash(), plain.Hash());
  EXPECT_NE(bf16.Hash(), f32.Hash());
  ExpectError(train + "precision = \"fp16\"\n", "cfg.toml:9:13",
              "train.precision = \"fp16\" is not one of: \"bf16\", \"f32\"");
  EXPECT_EQ(ParsePrecision("f32", "--precision"), Precision::kF32);
  EXPECT_EQ(PrecisionName(Precision::kBf16), "bf16");
  try {
    ParsePrecision("fp8", "--precision");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "--precision 'fp8': expected bf16 or f32");
  }
}

// A mesh axis weft gives no role (pipeline, context, a typo) would only run
// replicas: refused by name, at its line, listing the axes weft has; every
// axis that has a role is read.
TEST(LlamaConfig, MeshAxesWithoutARoleAreRefused) {
  const std::string mesh = std::string(kMinimal) + "[mesh]\n";
  for (const char* axis : {"pipeline", "context", "foo", "Tensor", "expert"}) {
    SCOPED_TRACE(axis);
    ExpectError(
        mesh + "fsdp = 2\n" + axis + " = 2\ntensor = 2\n", "cfg.toml:10:1",
        std::string("[mesh] ") + axis + ": weft gives a mesh axis named '" + axis + "' no role");
    EXPECT_NE(ErrorOf(mesh + axis + " = 2\n")
                  .find("The axes weft has are dcn (data parallelism across slices), data (data "
                        "parallelism), fsdp"),
              std::string::npos);
  }
  EXPECT_NE(ErrorOf(mesh + "pipeline = 2\n").find("weft has no pipeline or context parallelism"),
            std::string::npos);
  const RunConfig all =
      ParseRunConfig(mesh + "dcn = 2\ndata = 2\nfsdp = 2\ntensor = 2\n", "cfg.toml");
  EXPECT_EQ(all.mesh.axis_names, (std::vector<std::string>{"dcn", "data", "fsdp", "tensor"}));
  EXPECT_NO_THROW(CheckMeshAxisRole("fsdp", "x"));
  try {
    CheckMeshAxisRole("pipeline", "--mesh 'pipeline=2'");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(
                  "--mesh 'pipeline=2': weft gives a mesh axis named 'pipeline' no role", 0),
              0u)
        << e.what();
  }
}

// [train] validation_documents and validation_every: read, at least 0, in
// the hash only when validation is on (the hashes of other configs stay).
TEST(LlamaConfig, ValidationSettings) {
  const RunConfig plain = ParseRunConfig(kMinimal, "cfg.toml");
  EXPECT_EQ(plain.train.validation_documents, 0);
  EXPECT_EQ(plain.train.validation_every, 0);
  EXPECT_EQ(plain.CanonicalText().find("validation"), std::string::npos);
  const std::string train = std::string(kMinimal) + "[train]\n";
  const RunConfig on =
      ParseRunConfig(train + "validation_documents = 4\nvalidation_every = 50\n", "cfg.toml");
  EXPECT_EQ(on.train.validation_documents, 4);
  EXPECT_EQ(on.train.validation_every, 50);
  EXPECT_NE(on.Hash(), plain.Hash());
  ExpectError(train + "validation_documents = -1\n", "cfg.toml:9:24",
              "train.validation_documents = -1 must be at least 0");
  ExpectError(train + "validation_every = -5\n", "cfg.toml:9:20",
              "train.validation_every = -5 must be at least 0");
}

TEST(LlamaConfig, MeshAxesAndRulesKeepFileOrder) {
  RunConfig config = ParseRunConfig(std::string(kMinimal) + R"(
[mesh]
tensor = 2
fsdp = 4
[sharding]
"z*" = ["tensor", []]
"*" = [["fsdp", "tensor"], "none"]
"zeta" = ["fsdp"]
)",
                                    "cfg.toml");
  EXPECT_EQ(config.mesh.axis_names, (std::vector<std::string>{"tensor", "fsdp"}));
  EXPECT_EQ(config.mesh.axis_sizes, (std::vector<int64_t>{2, 4}));
  ASSERT_EQ(config.sharding.size(), 3u);
  EXPECT_EQ(config.RuleFor("zeta")->spec, (PartitionSpec{"tensor", std::nullopt}));
  EXPECT_EQ(config.RuleFor("alpha")->spec,
            (PartitionSpec{AxisSpec{"fsdp", "tensor"}, std::nullopt}));
}

// [dcn]: a [mesh] axis spans slices; its [mesh] size is per slice. The
// mesh's device order is then slice-major (JAX's create_hybrid_device_mesh).
TEST(LlamaConfig, DcnAxesSpanSlices) {
  const RunConfig config = ParseRunConfig(std::string(kMinimal) + R"(
[mesh]
data = 2
fsdp = 1
tensor = 2
[dcn]
fsdp = 2
)",
                                          "cfg.toml");
  EXPECT_EQ(config.mesh.axis_sizes, (std::vector<int64_t>{2, 2, 2}));
  EXPECT_EQ(config.mesh.dcn_sizes, (std::vector<int64_t>{1, 2, 1}));
  EXPECT_EQ(config.mesh.num_devices(), 8);
  EXPECT_EQ(config.mesh.num_slices(), 2);
  const Mesh mesh = config.mesh.ToMesh();
  // Mesh coordinate (data d, fsdp f, tensor t) is device f * 4 + d * 2 + t:
  // the slice f holds devices 4f .. 4f + 3.
  for (int64_t d = 0; d < 2; ++d) {
    for (int64_t f = 0; f < 2; ++f) {
      for (int64_t t = 0; t < 2; ++t) {
        const std::vector<int64_t> index = {d, f, t};
        EXPECT_EQ(mesh.device(index), f * 4 + d * 2 + t);
        EXPECT_EQ(mesh.SliceOf(mesh.device(index)), f);
      }
    }
  }
  EXPECT_NE(config.CanonicalText().find("dcn.fsdp = 2"), std::string::npos);
  EXPECT_NE(
      config.Hash(),
      ParseRunConfig(std::string(kMinimal) + "[mesh]\ndata = 2\nfsdp = 2\ntensor = 2\n", "cfg.toml")
          .Hash());
  ExpectError(std::string(kMinimal) + "[mesh]\nfsdp = 2\n[dcn]\ndata = 2\n", "cfg.toml:11:1",
              "[dcn] names axis 'data', which [mesh] does not define (axes: fsdp)");
  ExpectError(std::string(kMinimal) + "[mesh]\nfsdp = 2\n[dcn]\nfsdp = 0\n", "cfg.toml:11:8",
              "positive integer number of slices");
}

TEST(LlamaConfig, ActivationShardingNamesTheResidualStream) {
  const RunConfig config = ParseRunConfig(std::string(kMinimal) + R"(
[mesh]
fsdp = 2
tensor = 2
[activations]
residual = ["fsdp", "none", "tensor"]
)",
                                          "cfg.toml");
  ASSERT_NE(config.ActivationRule("residual"), nullptr);
  EXPECT_EQ(config.ActivationRule("residual")->spec,
            (PartitionSpec{"fsdp", std::nullopt, "tensor"}));
  EXPECT_EQ(config.ActivationRule("logits"), nullptr);
  EXPECT_NE(config.CanonicalText().find("activations.residual"), std::string::npos);
  const std::string mesh = std::string(kMinimal) + "[mesh]\nfsdp = 2\n[activations]\n";
  ExpectError(mesh + "logits = [\"fsdp\"]\n", "cfg.toml:11:1",
              "unknown activation 'logits' in [activations] (known: residual");
  ExpectError(mesh + "residual = [\"tensor\"]\n", "cfg.toml:11:13",
              "activation sharding 'residual' names mesh axis 'tensor', which [mesh] does not "
              "define");
  ExpectError(mesh + "residual = [[], [], [], \"fsdp\"]\n", "cfg.toml:11:1",
              "the residual stream is [batch, seq, dim]: give at most 3");
}

TEST(LlamaConfig, RematIsAPresetOrAListOfActivations) {
  const auto remat = [](const std::string& value) {
    return ParseRunConfig(std::string(kMinimal) + "[train]\nremat = " + value + "\n", "cfg.toml")
        .train;
  };
  EXPECT_EQ(remat("\"none\"").remat.kind, Remat::kNone);
  EXPECT_EQ(remat("\"full\"").remat.kind, Remat::kFull);
  EXPECT_TRUE(remat("\"minimal\"").remat.save.empty());
  EXPECT_EQ(remat("\"save_qkv_proj\"").remat.save,
            (std::vector<std::string>{"q_proj", "k_proj", "v_proj"}));
  // A list, in any order, is kept in the layer's order.
  const TrainConfig listed = remat("[\"out_proj\", \"q_proj\"]");
  EXPECT_EQ(listed.remat.kind, Remat::kFull);
  EXPECT_EQ(listed.remat.save, (std::vector<std::string>{"q_proj", "out_proj"}));
  EXPECT_EQ(RematText(RematPolicy{Remat::kFull, listed.remat.save, {}}), "q_proj,out_proj");
  EXPECT_EQ(RematText(ParseRematPolicy("q_proj,k_proj,v_proj", "--remat")), "save_qkv_proj");
  EXPECT_EQ(ParseRematPolicy("offload", "--remat").offload,
            (std::vector<std::string>{"layer_input"}));
  EXPECT_EQ(RematText(ParseRematPolicy("layer_input=offload", "--remat")), "offload");
  // A table: save, offload or recompute per activation.
  const RematPolicy table =
      ParseRematPolicy("mlp_up=offload,q_proj=save,k_proj,out_proj=recompute", "--remat");
  EXPECT_EQ(table.save, (std::vector<std::string>{"q_proj", "k_proj"}));
  EXPECT_EQ(table.offload, (std::vector<std::string>{"mlp_up"}));
  EXPECT_EQ(RematText(table), "q_proj,k_proj,mlp_up=offload");
  const TrainConfig toml = remat("{ layer_input = \"offload\", attention = \"save\" }");
  EXPECT_EQ(toml.remat.save, (std::vector<std::string>{"attention"}));
  EXPECT_EQ(toml.remat.offload, (std::vector<std::string>{"layer_input"}));
  EXPECT_THROW(ParseRematPolicy("q_proj=keep", "--remat"), Error);
  ExpectError(std::string(kMinimal) + "[train]\nremat = \"partial\"\n", "cfg.toml:9:9",
              "neither a remat preset");
  ExpectError(std::string(kMinimal) + "[train]\nremat = [3]\n", "cfg.toml:9:10",
              "names activations to save");
}

TEST(LlamaConfig, DataFilesResolveAgainstTheConfigDirectory) {
  RunConfig config = ParseRunConfig(std::string(kMinimal) + R"(
[data]
source = "files"
files = ["notes/a.txt", "/abs/b.txt"]
split_on_blank_lines = true
)",
                                    "cfg.toml", "/work/runs");
  ASSERT_EQ(config.data.files.size(), 2u);
  EXPECT_EQ(config.data.files[0], std::filesystem::path("/work/runs/notes/a.txt"));
  EXPECT_EQ(config.data.files[1], std::filesystem::path("/abs/b.txt"));
  EXPECT_TRUE(config.data.split_on_blank_lines);
}

TEST(LlamaConfig, ErrorsNameFileLineAndColumn) {
  std::string base = kMinimal;
  // Typo protection, with a suggestion.
  ExpectError("[model]\nvocab_size = 300\nn_layer = 2\n", "cfg.toml:3:1",
              "unknown key 'n_layer' in [model]; did you mean 'n_layers'?");
  ExpectError(base + "[train]\nlearning_rate = 1e-3\n", "cfg.toml:9:1",
              "unknown key 'learning_rate'");
  ExpectError(base + "[optimizer]\n", "cfg.toml:8:1", "unknown section 'optimizer'");
  // Types.
  ExpectError("[model]\nvocab_size = 300\ndim = \"64\"\n", "cfg.toml:3:7",
              "model.dim must be an integer, not a string");
  ExpectError(base + "[train]\nlr = \"fast\"\n", "cfg.toml:9:6", "train.lr must be a number");
  ExpectError(base + "tie_embeddings = 1\n", "cfg.toml:8:18", "true or false");
  // Shapes that cannot work.
  ExpectError(base + "n_kv_heads = 3\n", "cfg.toml:8:14",
              "model.n_heads = 4 is not a multiple of model.n_kv_heads = 3");
  ExpectError(
      "[model]\nvocab_size = 300\ndim = 66\nn_layers = 2\nn_heads = 4\nffn_dim = 9\n"
      "seq_len = 8\n",
      "cfg.toml:5:11", "model.dim = 66 is not divisible by model.n_heads = 4");
  ExpectError(
      "[model]\nvocab_size = 300\ndim = 12\nn_layers = 2\nn_heads = 4\nffn_dim = 9\n"
      "seq_len = 8\n",
      "cfg.toml:3:7", "must be even");
  ExpectError("[model]\nvocab_size = 300\ndim = 64\nn_layers = 0\n", "cfg.toml:4:12",
              "model.n_layers = 0 must be at least 1");
  ExpectError("[model]\nvocab_size = 300\n", "cfg.toml:1:1", "missing the required key 'dim'");
  ExpectError(base + "[train]\nlr = 1e-3\nmin_lr = 1e-2\n", "cfg.toml:10:10", "min_lr");
  ExpectError(base + "[train]\nsteps = 10\nwarmup_steps = 20\n", "cfg.toml:10:16", "exceeds steps");
  ExpectError(base + "[train]\nremat = \"partial\"\n", "cfg.toml:9:9", "none, full, minimal");
  // Mesh and sharding.
  ExpectError(base + "[mesh]\nfsdp = 0\n", "cfg.toml:9:8", "positive integer size");
  ExpectError(base + "[mesh]\nfsdp = 2\n[sharding]\n\"wq\" = [\"fsdp\", \"tensr\"]\n",
              "cfg.toml:11:17", "mesh axis 'tensr', which [mesh] does not define (axes: fsdp)");
  ExpectError(base + "[mesh]\nfsdp = 2\n[sharding]\n\"wq\" = [\"fsdp\", [\"fsdp\"]]\n",
              "cfg.toml:11:18", "uses mesh axis 'fsdp' twice");
  ExpectError(base + "[mesh]\nfsdp = 2\n[sharding]\n\"wq\" = \"fsdp\"\n", "cfg.toml:11:8",
              "must be a list");
  ExpectError(base + "[mesh]\nfsdp = 2\n[sharding]\n\"wq\" = [3]\n", "cfg.toml:11:9",
              "each entry is an axis name");
  // Data.
  ExpectError(base + "[data]\nsource = \"files\"\n", "cfg.toml:9:10", "needs files");
  ExpectError(base + "[data]\nsource = \"web\"\n", "cfg.toml:9:10", "\"kjv\", \"files\"");
  // TOML syntax.
  ExpectError(base + "[train\n", "cfg.toml:8", "");
  EXPECT_NE(ErrorOf("[model]\nvocab_size = = 3\n").find("cfg.toml:2:"), std::string::npos);
}

// Sizes that only a compile would have found (a custom call's head dim, an
// overflowing byte count) are refused at the keys that give them.
TEST(LlamaConfig, SizesTheBuildCannotUseAreRefusedByKey) {
  const std::string head = "[model]\nvocab_size = 300\nn_layers = 2\nffn_dim = 96\nseq_len = 32\n";
  // dim = 1000000 over 4 heads: a head dim of 250000, beyond the kernel's 256.
  std::string e = ErrorOf(head + "dim = 1000000\nn_heads = 4\n");
  EXPECT_EQ(e.rfind("cfg.toml:6:7:", 0), 0u) << e;
  EXPECT_NE(e.find("model.dim / model.n_heads = 1000000 / 4 = 250000"), std::string::npos) << e;
  EXPECT_NE(e.find("256 at most"), std::string::npos) << e;
  EXPECT_NE(e.find("raise n_heads to at least 3907"), std::string::npos) << e;
  // The largest head dim the kernel takes is accepted.
  EXPECT_EQ(ErrorOf(head + "dim = " + std::to_string(2 * kernels::kMaxHeadDim) + "\nn_heads = 2\n"),
            "");
  // Parameters past what int64 byte counts can hold.
  e = ErrorOf(
      "[model]\nvocab_size = 300\nn_layers = 4000000000\nffn_dim = 4000000000\nseq_len = 32\n"
      "dim = 4000000000\nn_heads = 15625000\n");
  EXPECT_EQ(e.rfind("cfg.toml:6:7:", 0), 0u) << e;
  EXPECT_NE(e.find("too large to size"), std::string::npos) << e;
  EXPECT_NE(e.find("n_layers = 4000000000"), std::string::npos) << e;
  // Token ids and positions are s32.
  e = ErrorOf(base_model_with("vocab_size = 3000000000"));
  EXPECT_NE(e.find("model.vocab_size = 3000000000 does not fit the s32 token ids"),
            std::string::npos)
      << e;
  e = ErrorOf(base_model_with("seq_len = 3000000000"));
  EXPECT_NE(e.find("model.seq_len = 3000000000 does not fit the s32 positions"), std::string::npos)
      << e;
  // Numbers must be finite.
  e = ErrorOf(std::string(kMinimal) + "rope_theta = inf\n");
  EXPECT_EQ(e.rfind("cfg.toml:8:14:", 0), 0u) << e;
  EXPECT_NE(e.find("model.rope_theta = inf must be a finite number"), std::string::npos) << e;
  e = ErrorOf(std::string(kMinimal) + "[train]\nlr = nan\n");
  EXPECT_NE(e.find("train.lr = nan must be a finite number"), std::string::npos) << e;
  // A mesh past the device bound (whose product would overflow int64).
  e = ErrorOf(std::string(kMinimal) + "[mesh]\ndata = 4294967296\nfsdp = 4294967296\n");
  EXPECT_EQ(e.rfind("cfg.toml:9:8:", 0), 0u) << e;
  EXPECT_NE(e.find("larger than 65536 devices"), std::string::npos) << e;
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "[mesh]\ndata = 256\nfsdp = 256\n"), "");
  e = ErrorOf(std::string(kMinimal) + "[mesh]\ndata = 256\nfsdp = 257\n");
  EXPECT_EQ(e.rfind("cfg.toml:10:8:", 0), 0u) << e;
}

// A config built in code gets the same checks, naming the source it is given.
TEST(LlamaConfig, ValidateLlamaConfigChecksConfigsBuiltInCode) {
  LlamaConfig m = ParseRunConfig(kMinimal, "cfg.toml").model;
  EXPECT_NO_THROW(ValidateLlamaConfig(m, "mine"));
  m.n_kv_heads = 0;  // n_heads
  EXPECT_NO_THROW(ValidateLlamaConfig(m, "mine"));
  m.dim = 1000000;
  try {
    ValidateLlamaConfig(m, "mine");
    FAIL() << "expected an error";
  } catch (const Error& error) {
    const std::string e = error.what();
    EXPECT_EQ(e.rfind("mine: ", 0), 0u) << e;
    EXPECT_NE(e.find("= 250000"), std::string::npos) << e;
  }
  m = ParseRunConfig(kMinimal, "cfg.toml").model;
  m.ffn_dim = 0;
  EXPECT_THROW(ValidateLlamaConfig(m, "mine"), Error);
  m = ParseRunConfig(kMinimal, "cfg.toml").model;
  m.n_kv_heads = -1;
  EXPECT_THROW(ValidateLlamaConfig(m, "mine"), Error);
}

TEST(LlamaConfig, MissingFileIsAClearError) {
  try {
    LoadRunConfig("/no/such/config.toml");
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("/no/such/config.toml"), std::string::npos);
  }
  try {
    LoadRunConfig(kConfigs);
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("is a directory"), std::string::npos) << error.what();
  }
}

// A module given where a config belongs (weft plan model.hlo) is named as
// such, not reported as a TOML syntax error at line 1.
TEST(LlamaConfig, AProgramIsNotAConfig) {
  for (const char* text : {"HloModule m, num_partitions=4\n\nENTRY main {\n}\n",
                           "// jax export\n\nmodule @jit_step attributes {} {\n}\n"}) {
    try {
      ParseRunConfig(text, "step.hlo");
      FAIL() << "read a program as a config";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what())
                    .find("step.hlo is a program (HLO or MLIR text), not a "
                          "run config"),
                std::string::npos)
          << error.what();
    }
  }
  // A config whose comment mentions a module is still a config.
  EXPECT_NO_THROW(ParseRunConfig(std::string("# module notes\n") + kMinimal, "cfg.toml"));
}

// n_layers = 1e9 reached the planner, which refused a loop `while.1`
// naming neither the config nor the key.
TEST(LlamaConfig, AnAbsurdLayerCountIsRefusedAtItsKey) {
  try {
    ParseRunConfig(base_model_with("n_layers = 1000000000"), "big.toml");
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what())
                  .find("big.toml:4:12: model.n_layers = 1000000000 is more layers than weft "
                        "builds (at most 1048576)"),
              std::string::npos)
        << error.what();
  }
  LlamaConfig m = ParseRunConfig(kMinimal, "cfg.toml").model;
  m.n_layers = (int64_t{1} << 20) + 1;
  EXPECT_THROW(ValidateLlamaConfig(m, "mine"), Error);
  m.n_layers = int64_t{1} << 20;
  EXPECT_NO_THROW(ValidateLlamaConfig(m, "mine"));
}

TEST(LlamaConfig, ADeviceOrAHugeFileIsRefusedUnread) {
  // /dev/zero was read until memory ran out.
  try {
    LoadRunConfig("/dev/zero");
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("config /dev/zero is a character device"),
              std::string::npos)
        << error.what();
  }
  const std::filesystem::path sparse =
      std::filesystem::temp_directory_path() / fmt::format("weft_sparse_{}.toml", getpid());
  std::ofstream(sparse) << "[model]\n";
  std::filesystem::resize_file(sparse, int64_t{2} << 30);
  try {
    LoadRunConfig(sparse);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what())
                  .find("is 2.00 GiB (2147483648 bytes), more than the 16.0 "
                        "MiB (16777216 bytes) weft reads as a config"),
              std::string::npos)
        << error.what();
  }
  std::filesystem::remove(sparse);
}

}  // namespace
}  // namespace weft

namespace weft {
namespace {

// The one serialization of [model] besides the file: every field round-trips
// through the same reader and checks as a config file's.
TEST(LlamaConfig, ModelFieldsRoundTripThroughTheConfigReader) {
  std::mt19937_64 rng(std::random_device{}());
  LlamaConfig m;
  m.n_heads = 2 + static_cast<int64_t>(rng() % 6);
  m.n_kv_heads = 1;
  m.dim = 16 * m.n_heads;
  m.n_layers = 1 + static_cast<int64_t>(rng() % 4);
  m.vocab_size = 100 + static_cast<int64_t>(rng() % 1000);
  m.ffn_dim = 3 * m.dim + static_cast<int64_t>(rng() % 7);
  m.seq_len = 64 + static_cast<int64_t>(rng() % 100);
  m.rope_theta = 500000.0 + static_cast<double>(rng() % 1000) / 7;
  m.norm_eps = 1e-6 * (1 + static_cast<double>(rng() % 9));
  m.tie_embeddings = rng() % 2 == 0;
  const auto fields = ModelConfigFields(m);
  const std::map<std::string, std::string> map(fields.begin(), fields.end());
  const LlamaConfig back = ParseModelConfigFields(map, "state.json");
  EXPECT_EQ(ModelConfigFields(back), fields);
  EXPECT_EQ(back.rope_theta, m.rope_theta);
  EXPECT_EQ(back.norm_eps, m.norm_eps);

  std::map<std::string, std::string> missing = map;
  missing.erase("model.ffn_dim");
  EXPECT_THROW(
      {
        try {
          ParseModelConfigFields(missing, "ckpt/state.json");
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("\"model.ffn_dim\" is missing"), std::string::npos)
              << e.what();
          throw;
        }
      },
      Error);
  std::map<std::string, std::string> odd = map;
  odd["model.n_kv_heads"] = "3";  // does not divide n_heads unless it does
  odd["model.n_heads"] = "4";
  odd["model.dim"] = "64";
  EXPECT_THROW(ParseModelConfigFields(odd, "ckpt/state.json"), Error);
}

}  // namespace
}  // namespace weft
