#include "weft/train/eval.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "weft/base/error.h"
#include "weft/base/memory.h"
#include "weft/compiler/compile.h"
#include "weft/data/corpus.h"
#include "weft/data/tokenizer.h"
#include "weft/models/llama.h"
#include "weft/runtime/comm_threads.h"
#include "weft/runtime/executor.h"
#include "weft/runtime/run_command.h"
#include "weft/sharding/hlo_sharding.h"
#include "weft/train/checkpoint.h"
#include "weft/train/hf_checkpoint.h"
#include "weft/train/program.h"
#include "weft/train/sample.h"

namespace weft {
namespace {

namespace fs = std::filesystem;
using Tensor = runtime::HostTensor;

// The program's five data inputs for windows [first, first + B) and the
// number of predicted tokens among them.
std::vector<Tensor> WindowBatch(const std::vector<std::vector<int32_t>>& windows, size_t first,
                                int64_t B, int64_t S, int64_t* predicted) {
  const Batch b = EvalBatch(windows, first, B, S, predicted);
  return {Tensor::FromVector<int32_t>(PrimitiveType::kS32, {B, S}, b.tokens),
          Tensor::FromVector<int32_t>(PrimitiveType::kS32, {B, S}, b.targets),
          Tensor::FromVector<float>(PrimitiveType::kF32, {B, S}, b.loss_mask),
          Tensor::FromVector<int32_t>(PrimitiveType::kS32, {B, S}, b.segment_ids),
          Tensor::FromVector<int32_t>(PrimitiveType::kS32, {B, S}, b.positions)};
}

// The forward loss program for `run` (model, mesh, rules) on [B, S],
// compiled as training compiles its step; `forward` keeps its weights' order.
compiler::CompiledProgram CompileEvalProgram(const RunConfig& run, int64_t B, int64_t S,
                                             Precision precision, LlamaForward* forward) {
  LlamaBuildOptions build;
  build.batch_size = B;
  build.seq_len = S;
  build.precision = precision;
  build.output = LlamaOutput::kLoss;
  if (!run.mesh.axis_names.empty()) build.run = &run;
  *forward = BuildLlamaForward(run.model, build);
  forward->module->entry_computation()->root_instruction()->set_sharding(HloSharding::Replicate());
  return compiler::CompileForDevices(
      *forward->module,
      {.num_devices = run.mesh.num_devices(), .fuse = true, .slices = run.mesh.num_slices()});
}

}  // namespace

Batch EvalBatch(const std::vector<std::vector<int32_t>>& windows, size_t first, int64_t batch_size,
                int64_t seq_len, int64_t* predicted) {
  Batch b = Batch::Zeros(batch_size, seq_len);
  *predicted = 0;
  for (int64_t r = 0; r < batch_size && first + r < windows.size(); ++r) {
    const std::vector<int32_t>& w = windows[first + r];
    const int64_t n = static_cast<int64_t>(w.size());
    WEFT_INTERNAL_CHECK(n <= seq_len, "a window of {} tokens in rows of {}", n, seq_len);
    for (int64_t t = 0; t < n; ++t) {
      const int64_t i = r * seq_len + t;
      b.tokens[i] = w[t];
      b.segment_ids[i] = 1;
      b.positions[i] = static_cast<int32_t>(t);
      if (t + 1 < n) {
        b.targets[i] = w[t + 1];
        b.loss_mask[i] = 1;
      }
    }
    *predicted += n - 1;
  }
  return b;
}

EvalModel LoadEvalModel(const fs::path& dir) {
  EvalModel m;
  std::error_code error;
  // A directory of Hugging Face weights without its config.json is one too
  // (LoadHf says what is missing).
  if (IsHfDirectory(dir) || fs::exists(dir / "model.safetensors", error) ||
      fs::exists(dir / "model.safetensors.index.json", error)) {
    HfModel hf = LoadHf(dir);
    WEFT_CHECK(!hf.tokenizer.empty(),
               "{} has no tokenizer.model; weft eval tokenizes the text with the model's "
               "SentencePiece model: copy it into the directory",
               dir.string());
    m.config = hf.config;
    m.weights = std::move(hf.weights);
    m.tokenizer = hf.tokenizer;
    m.what = fmt::format("Hugging Face model {}", dir.string());
    return m;
  }
  const RunFiles files = LocateRunFiles(dir);
  Checkpoint checkpoint = LoadCheckpoint(files.checkpoint);
  m.what = fmt::format("checkpoint {}", files.checkpoint.string());
  m.config = LlamaConfigFromExtras(checkpoint.state.extra, m.what);
  m.precision = TrainedPrecision(checkpoint.state.extra, m.what);
  m.weights = std::move(checkpoint.model);
  // Refused now, before any text is read, unless it is the run's own.
  LoadCheckpointTokenizer(files.tokenizer, checkpoint.state.extra, m.config.vocab_size, m.what);
  m.tokenizer = files.tokenizer;
  return m;
}

std::vector<std::vector<int32_t>> EvalWindows(const TokenizedCorpus& corpus, int64_t seq_len) {
  WEFT_CHECK(seq_len >= 2, "--seq {}: a window needs at least 2 tokens to predict one", seq_len);
  std::vector<std::vector<int32_t>> windows;
  for (int64_t d = 0; d < corpus.num_documents(); ++d) {
    const std::span<const int32_t> doc = corpus.document(d);
    for (size_t start = 0; start < doc.size(); start += static_cast<size_t>(seq_len)) {
      const size_t n = std::min(doc.size() - start, static_cast<size_t>(seq_len));
      if (n >= 2) windows.emplace_back(doc.begin() + start, doc.begin() + start + n);
    }
  }
  return windows;
}

void CheckEvalOptions(const EvalOptions& o) {
  WEFT_CHECK(!o.data_files.empty(), "no text to evaluate on; give --data FILE (one document each)");
  CheckTextFiles(o.data_files);  // exists, a regular file, under the limit: none is read
  WEFT_CHECK(!o.seq_len || *o.seq_len >= 2,
             "--seq {}: give a window of at least 2 tokens (leave it out for the model's seq_len)",
             o.seq_len.value_or(0));
  WEFT_CHECK(!o.batch_size || *o.batch_size >= 1,
             "--batch {}: give the windows per program run, at least 1 (leave it out for 8, "
             "rounded up to the mesh's batch axes)",
             o.batch_size.value_or(0));
}

EvalResult Evaluate(const EvalModel& model, const EvalOptions& o) {
  CheckEvalOptions(o);
  const Tokenizer tokenizer = Tokenizer::Load(model.tokenizer);
  WEFT_CHECK(tokenizer.vocab_size() <= model.config.vocab_size,
             "{}: the tokenizer {} has {} pieces but the model only {} embeddings; use the "
             "model's own tokenizer.model",
             model.what, model.tokenizer.string(), tokenizer.vocab_size(), model.config.vocab_size);
  const std::vector<Document> documents = LoadTextFiles(o.data_files);
  WEFT_CHECK(!documents.empty(), "the --data files are empty; give text to evaluate on");
  const std::vector<std::vector<int32_t>> windows = EvalWindows(
      TokenizeDocuments(documents, tokenizer), o.seq_len.value_or(model.config.seq_len));

  WEFT_CHECK(!windows.empty(), "the --data files give no token to predict");
  EvalResult r;
  r.windows = static_cast<int64_t>(windows.size());
  for (const auto& w : windows) r.seq_len = std::max<int64_t>(r.seq_len, w.size());
  RunConfig run = o.layout.value_or(RunConfig{});
  if (run.source.empty()) run.source = "weft eval";
  if (o.mesh) run.mesh = *o.mesh;
  run.model = model.config;
  run.model.seq_len = r.seq_len;
  const int64_t ways = run.mesh.batch_ways();
  r.batch_size = o.batch_size.value_or((8 + ways - 1) / ways * ways);
  r.num_devices = run.mesh.num_devices();
  StepProgramOptions shape;
  shape.batch_size = r.batch_size;
  shape.seq_len = r.seq_len;
  CheckStepProgram(run, shape);

  LlamaForward forward;
  const compiler::CompiledProgram program = CompileEvalProgram(
      run, r.batch_size, r.seq_len, o.precision.value_or(model.precision), &forward);
  // Before anything is allocated: the devices' memory plan, the weights and
  // a batch of inputs against the machine's memory.
  const runtime::RunMemoryEstimate memory =
      runtime::EstimateRunMemory(*forward.module, program, r.num_devices, /*check=*/false);
  const int64_t physical = PhysicalMemoryBytes();
  WEFT_CHECK(physical <= 0 || memory.total_bytes <= physical,
             "{}: a batch of {} windows of {} tokens (--batch, --seq) on {} device(s) needs {} "
             "at once ({} per device), more than this machine's {} of memory; nothing was "
             "allocated. Give a smaller --batch (the text makes {} windows) or --seq",
             model.what, r.batch_size, r.seq_len, r.num_devices, FormatBytes(memory.total_bytes),
             FormatBytes(memory.device_peak_bytes), FormatBytes(physical), r.windows);
  std::vector<Tensor> weights;
  for (const LlamaWeight& w : forward.weights) {
    const auto it = model.weights.find(w.name);
    WEFT_CHECK(it != model.weights.end() && it->second.dimensions() == w.shape.dimensions(),
               "{}: no weight '{}' {} (the model needs it)", model.what, w.name,
               w.shape.ToString());
    weights.push_back(AsF32Tensor(it->second));
  }
  runtime::ExecutorOptions exec;  // each device its share of the pool
  double nll = 0;                 // device 0's sum over the batches
  runtime::LocalCluster cluster(r.num_devices);
  cluster.Run([&](int64_t device, runtime::Communicator& comm) {
    std::vector<Tensor> local;
    for (size_t k = 0; k < weights.size(); ++k) {
      const size_t leaf = LlamaForward::kNumDataInputs + k;
      local.push_back(runtime::ShardTensor(weights[k], program.input_shardings[leaf], device,
                                           program.local_input_shapes[leaf]));
    }
    runtime::Executor executor(*program.program, exec);
    for (size_t first = 0; first < windows.size(); first += r.batch_size) {
      int64_t predicted = 0;
      std::vector<Tensor> data = WindowBatch(windows, first, r.batch_size, r.seq_len, &predicted);
      std::vector<Tensor> inputs;
      for (size_t i = 0; i < data.size(); ++i) {
        inputs.push_back(runtime::ShardTensor(data[i], program.input_shardings[i], device,
                                              program.local_input_shapes[i]));
      }
      for (const Tensor& w : local) inputs.push_back(w);  // shared: only read
      const std::vector<Tensor> out = executor.Run(std::move(inputs), comm);
      // The program's loss is the mean over the batch's predicted tokens.
      if (device == 0) nll += out.at(0).GetDouble(0) * static_cast<double>(predicted);
      if (device == 0) r.tokens += predicted;
    }
  });
  r.loss = nll / static_cast<double>(r.tokens);
  r.perplexity = std::exp(r.loss);
  return r;
}

}  // namespace weft
