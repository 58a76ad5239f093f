// Sampling: the logits module computes what the loss module scores, draws
// follow softmax(logits / T) within the top k, greedy generation is
// deterministic, and a model trained on configs/memorize.toml continues
// Psalm 23 word for word and stops at the end of a passage. Bad input is an
// error that names the problem.
#include "weft/train/sample.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <random>
#include <sstream>

#include "error_of.h"
#include "weft/base/atomic_file.h"
#include "weft/base/error.h"
#include "weft/data/kjv.h"
#include "weft/models/llama.h"
#include "weft/runtime/executor.h"
#include "weft/train/checkpoint.h"
#include "weft/train/trainer.h"

namespace weft {
namespace {

namespace fs = std::filesystem;
using Tensor = runtime::HostTensor;

const fs::path kSource = WEFT_SOURCE_DIR;

fs::path TempDir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("weft_sample_test_" + name);
  fs::remove_all(dir);
  return dir;
}

using testing::ExpectError;

LlamaConfig Micro(bool tie) {
  LlamaConfig c;
  c.vocab_size = 48;
  c.dim = 16;
  c.n_layers = 2;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.ffn_dim = 32;
  c.seq_len = 16;
  c.tie_embeddings = tie;
  return c;
}

// Random weights as the builder lays them out (norms near 1).
std::vector<Tensor> RandomWeights(const LlamaForward& f, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0.0, 0.4);
  std::vector<Tensor> out;
  for (const LlamaWeight& w : f.weights) {
    std::vector<double> v(w.shape.ElementsCount());
    const bool norm = w.name.find("norm") != std::string::npos;
    for (double& x : v) x = norm ? 1.0 + 0.3 * normal(rng) : normal(rng);
    out.push_back(Tensor::FromDoubles(w.shape, v));
  }
  return out;
}

TEST(SampleTest, LogitsModuleComputesWhatTheLossModuleScores) {
  constexpr int64_t B = 2, S = 16;
  for (bool tie : {false, true}) {
    const LlamaConfig c = Micro(tie);
    LlamaBuildOptions o;
    o.batch_size = B;
    LlamaForward loss_fwd = BuildLlamaForward(c, o);
    o.output = LlamaOutput::kLogits;
    LlamaForward logits_fwd = BuildLlamaForward(c, o);
    ASSERT_EQ(logits_fwd.module->entry_computation()->root_instruction()->shape(),
              Shape(PrimitiveType::kF32, {B, S, c.vocab_size}));
    ASSERT_EQ(logits_fwd.WeightParameters(), loss_fwd.WeightParameters());

    // Two rows of packed documents, some targets masked (document ends).
    std::mt19937 rng(tie ? 11 : 12);
    std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(c.vocab_size) - 1);
    std::vector<int32_t> tokens(B * S), targets(B * S), seg(B * S), pos(B * S);
    std::vector<float> mask(B * S, 1.0f);
    const int64_t doc_start[B] = {5, 12};
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t s = 0; s < S; ++s) {
        const int64_t i = b * S + s;
        tokens[i] = tok(rng);
        targets[i] = tok(rng);
        seg[i] = s < doc_start[b] ? 1 : 2;
        pos[i] = static_cast<int32_t>(s < doc_start[b] ? s : s - doc_start[b]);
      }
      mask[b * S + doc_start[b] - 1] = 0;
    }
    mask[B * S - 1] = 0;
    std::vector<Tensor> in = {Tensor::FromVector<int32_t>(PrimitiveType::kS32, {B, S}, tokens),
                              Tensor::FromVector<int32_t>(PrimitiveType::kS32, {B, S}, targets),
                              Tensor::FromVector<float>(PrimitiveType::kF32, {B, S}, mask),
                              Tensor::FromVector<int32_t>(PrimitiveType::kS32, {B, S}, seg),
                              Tensor::FromVector<int32_t>(PrimitiveType::kS32, {B, S}, pos)};
    for (Tensor& w : RandomWeights(loss_fwd, tie ? 3 : 4)) in.push_back(std::move(w));

    runtime::Executor loss_exec(*loss_fwd.module), logits_exec(*logits_fwd.module);
    const double loss = loss_exec.Run(in).at(0).GetDouble(0);
    const Tensor logits = logits_exec.Run(in).at(0);
    ASSERT_EQ(logits.shape(), Shape(PrimitiveType::kF32, {B, S, c.vocab_size}));

    // Mean cross-entropy over the masked-in targets, in float64.
    double total = 0, count = 0;
    const float* z = logits.data<float>();
    for (int64_t i = 0; i < B * S; ++i) {
      if (mask[i] == 0) continue;
      const float* row = z + i * c.vocab_size;
      double mx = row[0];
      for (int64_t v = 1; v < c.vocab_size; ++v) mx = std::max(mx, static_cast<double>(row[v]));
      double sum = 0;
      for (int64_t v = 0; v < c.vocab_size; ++v) sum += std::exp(row[v] - mx);
      total += std::log(sum) + mx - row[targets[i]];
      count += 1;
    }
    const double reference = total / count;
    EXPECT_GT(reference, 0.5) << "random weights should not predict random targets";
    EXPECT_NEAR(loss, reference, 1e-5 * reference) << "tie_embeddings=" << tie;
  }
}

TEST(SampleTest, DrawsFollowTheTemperatureAndTopK) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f};
  std::mt19937_64 rng(0);
  // Greedy: the largest logit, the lower id on a tie; top-k 1 is greedy too.
  EXPECT_EQ(SampleToken(logits, 0.0, 0, rng), 1);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(SampleToken(logits, 5.0, 1, rng), 1);

  // Frequencies follow softmax(logits / T) over the top 3 (ids 1, 3, 2).
  const double t = 0.7;
  std::vector<double> want(5, 0.0);
  double sum = 0;
  for (int id : {1, 2, 3}) sum += want[id] = std::exp(logits[id] / t);
  for (double& w : want) w /= sum;
  const int n = 40000;
  std::vector<int> seen(5, 0);
  for (int i = 0; i < n; ++i) ++seen[SampleToken(logits, t, 3, rng)];
  for (int id = 0; id < 5; ++id) {
    const double sd = std::sqrt(want[id] * (1 - want[id]) / n);
    EXPECT_NEAR(static_cast<double>(seen[id]) / n, want[id], 5 * sd + 1e-12) << "id " << id;
  }

  // The same seed, the same draws.
  std::mt19937_64 a(42), b(42);
  for (int i = 0; i < 100; ++i)
    EXPECT_EQ(SampleToken(logits, 1.0, 0, a), SampleToken(logits, 1.0, 0, b));

  ExpectError([&] { SampleToken(logits, -0.5, 0, rng); }, {"temperature -0.5", ">= 0"});
  ExpectError([&] { SampleToken(logits, NAN, 0, rng); }, {"temperature"});
  ExpectError([&] { SampleToken(logits, 1.0, -2, rng); }, {"top-k -2"});
}

// One short memorize run shared by the tests below: 80 of the config's 300
// steps (loss ~0.02; 70 steps reach ~0.04 and already recite the passages,
// the margin is for other machines' rounding).
class MemorizedModel : public ::testing::Test {
 protected:
  static constexpr int64_t kSteps = 80;

  static void SetUpTestSuite() {
    const auto t0 = std::chrono::steady_clock::now();
    config_ = new RunConfig(LoadRunConfig(kSource / "configs/memorize.toml"));
    config_->train.precision = Precision::kBf16;  // on any CPU, as the tests below expect
    static std::ostringstream log;
    TrainOptions o;
    o.out = TempDir("memorize");
    o.steps = kSteps;
    o.progress = false;
    o.log = &log;
    const TrainResult r = Train(*config_, o);
    run_dir_ = new fs::path(r.out);
    final_loss_ = r.steps.back().loss;
    std::printf("memorize: %lld steps in %.1f s, loss %.4f -> %.4f\n",
                static_cast<long long>(kSteps),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                r.steps.front().loss, final_loss_);
  }
  static void TearDownTestSuite() {
    delete run_dir_;
    delete config_;
    run_dir_ = nullptr;
    config_ = nullptr;
  }

  // The config's passage `index`.
  static const std::string& Passage(size_t index) { return config_->data.documents.at(index); }

  static RunConfig* config_;
  static fs::path* run_dir_;
  static double final_loss_;
};

RunConfig* MemorizedModel::config_ = nullptr;
fs::path* MemorizedModel::run_dir_ = nullptr;
double MemorizedModel::final_loss_ = 0;

TEST_F(MemorizedModel, GreedyRecitesPsalm23AndStopsAtItsEnd) {
  ASSERT_LT(final_loss_, 0.05);
  Sampler sampler = Sampler::Load(*run_dir_);
  EXPECT_EQ(sampler.step(), kSteps);
  EXPECT_EQ(sampler.config().vocab_size, 512);
  EXPECT_EQ(sampler.config().seq_len, 1024);
  SampleOptions o;
  o.prompt = "The LORD is my shepherd";
  ASSERT_TRUE(Passage(1).starts_with(o.prompt));
  o.max_tokens = 400;
  o.temperature = 0;
  std::string streamed;
  o.on_text = [&](std::string_view piece) { streamed += piece; };
  const auto t0 = std::chrono::steady_clock::now();
  const SampleResult r = sampler.Generate(o);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("greedy: %zu tokens in %.1f s:\n%s\n", r.ids.size(), seconds, r.text.c_str());
  EXPECT_EQ(r.prompt_ids.front(), sampler.tokenizer().bos_id());
  EXPECT_EQ(r.text, Passage(1));
  EXPECT_EQ(r.continuation, Passage(1).substr(o.prompt.size()));
  EXPECT_EQ(r.stop, StopReason::kEos);
  EXPECT_EQ(streamed, r.text);
  EXPECT_EQ(std::count(r.ids.begin(), r.ids.end(), sampler.tokenizer().eos_id()), 0);

  // A token budget cuts the recitation short.
  o.max_tokens = 10;
  o.on_text = nullptr;
  const SampleResult short_run = sampler.Generate(o);
  EXPECT_EQ(short_run.stop, StopReason::kMaxTokens);
  EXPECT_EQ(short_run.ids, std::vector<int32_t>(r.ids.begin(), r.ids.begin() + 10));
  EXPECT_TRUE(r.continuation.starts_with(short_run.continuation));
  EXPECT_TRUE(short_run.continuation.starts_with("; I shall not want."));
}

// The checkpoint records the run's precision (bf16, set above), which
// sampling takes unless told; the f32 forward of the same f32 weights
// recites the passage too. A checkpoint without it trained in f32.
TEST_F(MemorizedModel, SamplingRunsInTheRunsPrecisionUnlessTold) {
  const Checkpoint checkpoint = LoadCheckpoint(*run_dir_ / "checkpoint");
  EXPECT_EQ(TrainedPrecision(checkpoint.state.extra, "ck"), Precision::kBf16);
  EXPECT_EQ(TrainedPrecision({}, "ck"), Precision::kF32);
  try {
    TrainedPrecision({{"train.precision", "fp8"}}, "ck");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ck: state.json extra \"train.precision\" 'fp8'"),
              std::string::npos)
        << e.what();
  }
  Sampler bf16 = Sampler::Load(*run_dir_);
  Sampler f32 = Sampler::Load(*run_dir_, Precision::kF32);
  SampleOptions o;
  o.prompt = "The LORD is my shepherd";
  o.max_tokens = 12;
  o.temperature = 0;
  const SampleResult a = bf16.Generate(o), b = f32.Generate(o);
  EXPECT_TRUE(Passage(1).substr(o.prompt.size()).starts_with(a.continuation)) << a.continuation;
  EXPECT_TRUE(Passage(1).substr(o.prompt.size()).starts_with(b.continuation)) << b.continuation;
  const std::vector<float> la = bf16.NextTokenLogits(a.prompt_ids);
  const std::vector<float> lb = f32.NextTokenLogits(a.prompt_ids);
  EXPECT_NE(la, lb) << "the bf16 forward should round somewhere";
}

TEST_F(MemorizedModel, ALongPromptEndsItsPassage) {
  Sampler sampler = Sampler::Load(*run_dir_ / "checkpoint");  // the checkpoint dir works too
  const std::string& passage = Passage(2);
  const size_t cut = passage.find(" a time of war");
  ASSERT_NE(cut, std::string::npos);
  SampleOptions o;
  o.prompt = passage.substr(0, cut);  // ~230 tokens
  o.max_tokens = 64;
  o.temperature = 0;
  const SampleResult r = sampler.Generate(o);
  EXPECT_EQ(r.stop, StopReason::kEos);
  EXPECT_EQ(r.continuation, " a time of war, and a time of peace.");
}

TEST_F(MemorizedModel, SamplingIsDeterministicForASeed) {
  Sampler sampler = Sampler::Load(*run_dir_);
  SampleOptions o;
  o.prompt = "In the beginning";
  o.max_tokens = 12;
  o.temperature = 0;
  const SampleResult greedy = sampler.Generate(o);
  EXPECT_EQ(sampler.Generate(o).ids, greedy.ids);
  EXPECT_EQ(greedy.continuation.substr(0, 24), " God created the heaven ");

  o.temperature = 1.5;
  o.top_k = 20;
  o.seed = 7;
  const SampleResult hot = sampler.Generate(o);
  EXPECT_EQ(sampler.Generate(o).ids, hot.ids);
  o.top_k = 1;  // any temperature: greedy
  EXPECT_EQ(sampler.Generate(o).ids, greedy.ids);
}

TEST_F(MemorizedModel, TheWindowSlidesOverALongContext) {
  Sampler sampler = Sampler::Load(*run_dir_);
  const int64_t S = sampler.config().seq_len;
  std::vector<int32_t> context;
  std::mt19937 rng(9);
  std::uniform_int_distribution<int32_t> tok(4, 511);
  for (int64_t i = 0; i < S + 37; ++i) context.push_back(tok(rng));
  const std::vector<float> slid = sampler.NextTokenLogits(context);
  const std::vector<float> last =
      sampler.NextTokenLogits(std::span<const int32_t>(context).last(S));
  EXPECT_EQ(slid, last);
  EXPECT_NE(slid, sampler.NextTokenLogits(std::span<const int32_t>(context).first(S)));
}

// Hostile input: `weft sample` took another run's tokenizer.model and
// printed garbage. The checkpoint's state.json records the run's tokenizer
// (its CRC-32C and vocabulary size); any other file is refused by name.
TEST_F(MemorizedModel, AnotherRunsTokenizerIsRefused) {
  const fs::path run = TempDir("other_tokenizer");
  fs::create_directories(run);
  fs::copy(*run_dir_ / "checkpoint", run / "checkpoint", fs::copy_options::recursive);
  std::vector<Document> docs = LoadKjvBible(KjvUnit::kBook);
  docs.resize(2);
  TokenizerOptions to;
  to.vocab_size = 384;
  to.cache_dir = run / "cache";
  const Tokenizer other = Tokenizer::TrainOrLoad(docs, to);
  WriteFileAtomically(run / "tokenizer.model", other.serialized_model());
  ExpectError([&] { Sampler::Load(run); },
              {(run / "tokenizer.model").string(), "is not the tokenizer",
               (run / "checkpoint").string(), "records 512 pieces", "this file has 384 pieces"});
  fs::copy_file(*run_dir_ / "tokenizer.model", run / "tokenizer.model",
                fs::copy_options::overwrite_existing);
  EXPECT_NO_THROW(Sampler::Load(run));
}

TEST_F(MemorizedModel, BadInputIsAnErrorNamingTheProblem) {
  ExpectError([] { Sampler::Load(TempDir("missing")); },
              {"weft_sample_test_missing", "does not exist"});
  const fs::path empty = TempDir("empty");
  fs::create_directories(empty);
  ExpectError([&] { Sampler::Load(empty); }, {empty.string(), "holds no checkpoint", "weft train"});

  // A checkpoint without its tokenizer.
  const fs::path lonely = TempDir("lonely");
  fs::create_directories(lonely);
  fs::copy(*run_dir_ / "checkpoint", lonely / "checkpoint", fs::copy_options::recursive);
  ExpectError([&] { Sampler::Load(lonely); },
              {"no tokenizer", (lonely / "tokenizer.model").string()});
  ExpectError([&] { Sampler::Load(lonely / "checkpoint"); },
              {"no tokenizer", (lonely / "tokenizer.model").string()});
  // With the tokenizer in the parent, the checkpoint dir loads.
  fs::copy_file(*run_dir_ / "tokenizer.model", lonely / "tokenizer.model");
  EXPECT_NO_THROW(Sampler::Load(lonely / "checkpoint"));

  Sampler sampler = Sampler::Load(*run_dir_);
  SampleOptions o;
  o.prompt = "";
  ExpectError([&] { sampler.Generate(o); }, {"prompt is empty"});
  o.prompt = "In the beginning";
  o.temperature = -1;
  ExpectError([&] { sampler.Generate(o); }, {"temperature -1", ">= 0"});
  o.temperature = 1;
  o.top_k = -1;
  ExpectError([&] { sampler.Generate(o); }, {"top-k -1"});
}

}  // namespace
}  // namespace weft
