// weft eval: documents are framed as training frames them and cut into
// consecutive windows; the loss is the float64 mean cross-entropy of the
// logits module (models/llama.h) over every predicted token, on one device
// and sharded; a run directory and its Hugging Face export evaluate alike;
// bad input is refused naming it.
#include "weft/train/eval.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "error_of.h"
#include "weft/base/atomic_file.h"
#include "weft/base/crc32c.h"
#include "weft/base/error.h"
#include "weft/data/kjv.h"
#include "weft/data/tokenizer.h"
#include "weft/models/llama.h"
#include "weft/models/llama_config.h"
#include "weft/train/checkpoint.h"
#include "weft/train/hf_checkpoint.h"
#include "weft/train/program.h"
#include "weft/train/sample.h"

namespace weft {
namespace {

namespace fs = std::filesystem;

fs::path TempDir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("weft_eval_test_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

using testing::ExpectError;

TEST(EvalTest, DocumentsAreCutIntoConsecutiveWindows) {
  TokenizedCorpus corpus;
  corpus.Add(std::vector<int32_t>{10, 11, 12, 13, 14}, 2, 3);  // 7 framed tokens
  corpus.Add(std::vector<int32_t>{20, 21}, 2, 3);              // 4
  corpus.Add(std::vector<int32_t>{30, 31, 32}, 2, 3);          // 5: the last window is 1 token
  const auto windows = EvalWindows(corpus, 4);
  const std::vector<std::vector<int32_t>> want = {
      {2, 10, 11, 12}, {13, 14, 3}, {2, 20, 21, 3}, {2, 30, 31, 32}};
  EXPECT_EQ(windows, want);
  EXPECT_EQ(EvalWindows(corpus, 100).size(), 3u);
  ExpectError([&] { EvalWindows(corpus, 1); }, {"--seq 1", "at least 2 tokens"});
}

// A small random model with a real tokenizer, written where Evaluate reads it.
struct Model {
  EvalModel model;
  fs::path text_a, text_b;
};

Model MakeModel(const fs::path& dir) {
  std::vector<Document> docs = LoadKjvBible(KjvUnit::kBook);
  docs.resize(2);
  TokenizerOptions to;
  to.vocab_size = 384;
  to.cache_dir = dir / "cache";
  const Tokenizer tokenizer = Tokenizer::TrainOrLoad(docs, to);
  Model m;
  m.model.tokenizer = dir / "tokenizer.model";
  WriteFileAtomically(m.model.tokenizer, tokenizer.serialized_model());
  LlamaConfig& c = m.model.config;
  c.vocab_size = 388;  // more embeddings than pieces, as padded vocabularies have
  c.dim = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_dim = 64;
  c.seq_len = 24;
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  for (const LlamaWeight& w : LlamaWeights(c)) {
    std::vector<float> v(w.shape.ElementsCount());
    const bool norm = w.name.find("norm") != std::string::npos;
    for (float& x : v) x = norm ? 1.0f + normal(rng) : normal(rng);
    m.model.weights[w.name] = F32Tensor(w.shape.dimensions(), v);
  }
  m.model.what = "test model";
  m.text_a = dir / "a.txt";
  m.text_b = dir / "b.txt";
  WriteFileAtomically(m.text_a, docs[0].text.substr(0, 400));
  WriteFileAtomically(m.text_b, docs[1].text.substr(0, 150));
  return m;
}

// The mean cross-entropy of the logits module over `windows`, in float64.
double ReferenceLoss(const EvalModel& m, const std::vector<std::vector<int32_t>>& windows,
                     int64_t* tokens) {
  LlamaConfig c = m.config;
  Sampler sampler(c, m.weights, Tokenizer::Load(m.tokenizer), Precision::kF32);
  double total = 0;
  *tokens = 0;
  for (const std::vector<int32_t>& w : windows) {
    const std::vector<float> logits = sampler.WindowLogits(w);
    for (size_t t = 0; t + 1 < w.size(); ++t) {
      const float* row = logits.data() + t * c.vocab_size;
      double mx = row[0];
      for (int64_t v = 1; v < c.vocab_size; ++v) mx = std::max(mx, static_cast<double>(row[v]));
      double sum = 0;
      for (int64_t v = 0; v < c.vocab_size; ++v) sum += std::exp(row[v] - mx);
      total += std::log(sum) + mx - row[w[t + 1]];
      ++*tokens;
    }
  }
  return total / static_cast<double>(*tokens);
}

TEST(EvalTest, LossIsTheMeanCrossEntropyOfEveryPredictedToken) {
  const fs::path dir = TempDir("loss");
  const Model m = MakeModel(dir);
  const Tokenizer tokenizer = Tokenizer::Load(m.model.tokenizer);
  const std::vector<Document> docs = LoadTextFiles(std::vector<fs::path>{m.text_a, m.text_b});
  for (int64_t seq : {int64_t{24}, int64_t{10}}) {
    const auto windows = EvalWindows(TokenizeDocuments(docs, tokenizer), seq);
    int64_t tokens = 0;
    const double reference = ReferenceLoss(m.model, windows, &tokens);
    EvalOptions o;
    o.data_files = {m.text_a, m.text_b};
    if (seq != 24) o.seq_len = seq;  // unset: the model's seq_len
    o.batch_size = 3;                // the last batch padded
    const EvalResult r = Evaluate(m.model, o);
    EXPECT_EQ(r.tokens, tokens);
    EXPECT_EQ(r.windows, static_cast<int64_t>(windows.size()));
    EXPECT_GT(reference, 1.0);
    EXPECT_NEAR(r.loss, reference, 1e-5 * reference) << "seq " << seq;
    EXPECT_DOUBLE_EQ(r.perplexity, std::exp(r.loss));

    // Sharded as training shards: data and tensor parallel, with rules.
    o.layout = ParseRunConfig(R"(
      [model]
      vocab_size = 8
      dim = 8
      n_layers = 1
      n_heads = 1
      ffn_dim = 8
      seq_len = 8
      [mesh]
      fsdp = 2
      tensor = 2
      [sharding]
      "tok_embeddings" = ["tensor", "fsdp"]
      "layers.*.attention.wq" = ["fsdp", "tensor"]
      "layers.*.attention.wk" = ["fsdp", "tensor"]
      "layers.*.attention.wv" = ["fsdp", "tensor"]
      "layers.*.attention.wo" = ["tensor", "fsdp"]
      "layers.*.feed_forward.w1" = ["fsdp", "tensor"]
      "layers.*.feed_forward.w3" = ["fsdp", "tensor"]
      "layers.*.feed_forward.w2" = ["tensor", "fsdp"]
      "*norm*" = []
      "output" = ["fsdp", "tensor"]
    )",
                              "layout.toml");
    o.batch_size = 4;
    const EvalResult sharded = Evaluate(m.model, o);
    EXPECT_EQ(sharded.num_devices, 4);
    EXPECT_EQ(sharded.tokens, tokens);
    EXPECT_NEAR(sharded.loss, reference, 1e-5 * reference) << "seq " << seq;
  }
}

TEST(EvalTest, AHuggingFaceExportEvaluatesLikeTheModel) {
  const fs::path dir = TempDir("hf");
  Model m = MakeModel(dir);
  WriteHfDirectory(dir / "hf", m.model.config, m.model.weights, ReadFileToString(m.model.tokenizer),
                   {});
  const EvalModel hf = LoadEvalModel(dir / "hf");
  EXPECT_EQ(hf.precision, Precision::kF32);
  EXPECT_TRUE(SameTensors(hf.weights, m.model.weights));
  EvalOptions o;
  o.data_files = {m.text_a};
  const EvalResult a = Evaluate(m.model, o), b = Evaluate(hf, o);
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(a.tokens, b.tokens);

  fs::remove(dir / "hf" / "tokenizer.model");
  ExpectError([&] { LoadEvalModel(dir / "hf"); }, {"hf", "no tokenizer.model"});
  ExpectError([&] { LoadEvalModel(dir / "nothing"); }, {"nothing", "does not exist"});
}

TEST(EvalTest, BadInputIsRefusedNamingIt) {
  const fs::path dir = TempDir("bad");
  const Model m = MakeModel(dir);
  EvalOptions o;
  ExpectError([&] { Evaluate(m.model, o); }, {"--data"});
  o.data_files = {dir / "missing.txt"};
  ExpectError([&] { Evaluate(m.model, o); }, {"missing.txt"});
  WriteFileAtomically(dir / "empty.txt", "");
  o.data_files = {dir / "empty.txt"};
  ExpectError([&] { Evaluate(m.model, o); }, {"empty"});
  o.data_files = {m.text_a};
  o.mesh = ParseMeshFlag("fsdp=2");
  o.batch_size = 3;
  ExpectError([&] { Evaluate(m.model, o); }, {"batch", "not divisible by the 2 devices"});
  // 0 read as "the default" while negatives were refused; both are refused
  // by name (the default is leaving the flag out).
  o.mesh.reset();
  for (int64_t n : {int64_t{0}, int64_t{-1}}) {
    o.batch_size = n;
    ExpectError([&] { CheckEvalOptions(o); }, {fmt::format("--batch {}:", n), "at least 1"});
    ExpectError([&] { Evaluate(m.model, o); }, {fmt::format("--batch {}:", n)});
    o.batch_size.reset();
    o.seq_len = n;
    ExpectError([&] { Evaluate(m.model, o); }, {fmt::format("--seq {}:", n), "at least 2"});
    o.seq_len.reset();
  }
  // The --data files are checked with the flags, before the model is read
  // (weft eval loaded the model first): missing, a directory, a device or
  // over 1 GiB is refused by name, and none is read.
  o.batch_size.reset();
  WriteFileAtomically(dir / "sparse.txt", "");
  fs::resize_file(dir / "sparse.txt", int64_t{2} << 30);
  for (const fs::path& bad :
       {dir / "missing.txt", dir, fs::path("/dev/zero"), dir / "sparse.txt"}) {
    o.data_files = {m.text_a, bad};
    ExpectError([&] { CheckEvalOptions(o); }, {bad.string()});
  }
  o.data_files.clear();
  ExpectError([&] { CheckEvalOptions(o); }, {"no text to evaluate on; give --data FILE"});
  o.data_files = {m.text_a};
  EXPECT_NO_THROW(CheckEvalOptions(o));
  // A batch no machine holds was a bad_alloc (exit 1); it is refused,
  // naming the flag, before anything is allocated.
  o.batch_size = 1000000000;
  ExpectError([&] { Evaluate(m.model, o); },
              {"a batch of 1000000000 windows", "--batch", "nothing was allocated"});
}

// Hostile input: `weft sample` (and eval) used another run's
// tokenizer.model without a check and produced garbage. A checkpoint
// records its tokenizer (state.json's "tokenizer.crc32c" and
// "tokenizer.vocab_size", as weft train writes them); another file is
// refused naming it and both records. A checkpoint from before the record:
// the tokenizer must at least fit the model's embeddings.
TEST(EvalTest, ACheckpointsTokenizerMustBeItsOwn) {
  const fs::path dir = TempDir("tokenizer");
  const Model m = MakeModel(dir);
  const std::string own = ReadFileToString(m.model.tokenizer);
  Checkpoint checkpoint;
  checkpoint.model = m.model.weights;
  for (const auto& [key, value] : ModelConfigFields(m.model.config)) {
    checkpoint.state.extra[key] = value;
  }
  checkpoint.state.extra["tokenizer.crc32c"] = Crc32cText(Crc32c(own));
  checkpoint.state.extra["tokenizer.vocab_size"] = "384";
  const fs::path run = dir / "run";
  SaveCheckpoint(run / "checkpoint", checkpoint);
  WriteFileAtomically(run / "tokenizer.model", own);
  EXPECT_EQ(LoadEvalModel(run).tokenizer, run / "tokenizer.model");

  // Another run's tokenizer: other pieces, another checksum.
  std::vector<Document> docs = LoadKjvBible(KjvUnit::kBook);
  docs.resize(2);
  TokenizerOptions to;
  to.vocab_size = 360;
  to.cache_dir = dir / "cache";
  const std::string other = Tokenizer::TrainOrLoad(docs, to).serialized_model();
  WriteFileAtomically(run / "tokenizer.model", other);
  ExpectError([&] { LoadEvalModel(run); },
              {(run / "tokenizer.model").string(), "is not the tokenizer",
               (run / "checkpoint").string(), "records 384 pieces, " + Crc32cText(Crc32c(own)),
               "this file has 360 pieces, " + Crc32cText(Crc32c(other))});
  ExpectError([&] { Sampler::Load(run); }, {"is not the tokenizer", "records 384 pieces"});

  // A checkpoint written before the record: the vocabulary sizes decide.
  checkpoint.state.extra.erase("tokenizer.crc32c");
  checkpoint.state.extra.erase("tokenizer.vocab_size");
  SaveCheckpoint(run / "checkpoint", checkpoint);
  EXPECT_NO_THROW(LoadEvalModel(run));  // 360 pieces fit 388 embeddings
  checkpoint.state.extra["model.vocab_size"] = "350";
  SaveCheckpoint(run / "checkpoint", checkpoint);
  ExpectError([&] { LoadEvalModel(run); },
              {(run / "tokenizer.model").string(), "has 360 pieces but the model only 350"});
}

}  // namespace
}  // namespace weft
