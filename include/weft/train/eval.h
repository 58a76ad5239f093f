// `weft eval`: the mean cross-entropy of a model on text files.
//
// The model comes from a run directory (its checkpoint and tokenizer.model)
// or a Hugging Face Llama directory (train/hf_checkpoint.h). Each file is one
// document, tokenized as weft trains (data/packing.h: BOS + the text's ids +
// EOS), and cut into consecutive windows of seq_len tokens (the last window
// of a document may be shorter; a window of one token predicts nothing and
// is dropped). Every token of a window after its first is predicted from the
// ones before it in the window (positions 0.. from the window's start, as
// training sees a document that continues from the previous row).
//
// The windows run through the forward loss program of the model builder
// (models/llama.h, LlamaOutput::kLoss), compiled for the mesh as training
// compiles its step (sharding rules, propagation, partitioning, fusion) and
// executed on one thread per device, batch_size windows at a time (the last
// batch padded with empty rows). The loss is the sum of the batches'
// per-token losses over the predicted tokens, in double.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "weft/data/packing.h"
#include "weft/models/llama_config.h"
#include "weft/train/safetensors.h"

namespace weft {

// A model to evaluate, from either kind of directory.
struct EvalModel {
  LlamaConfig config;
  TensorMap weights;                      // weft names and layouts
  std::filesystem::path tokenizer;        // tokenizer.model
  Precision precision = Precision::kF32;  // the run's train.precision; f32 for HF
  std::string what;                       // names the source in messages
};

// A run directory (or its checkpoint/) or a Hugging Face directory (one
// with config.json); throws weft::Error naming the directory otherwise, or
// when the Hugging Face directory has no tokenizer.model.
EvalModel LoadEvalModel(const std::filesystem::path& dir);

struct EvalOptions {
  std::vector<std::filesystem::path> data_files;  // one document each
  // --seq: the window, at least 2 tokens; unset: the model's seq_len.
  std::optional<int64_t> seq_len;
  // --batch: windows per program run, at least 1; unset: 8, rounded up to
  // the batch axes.
  std::optional<int64_t> batch_size;
  // The mesh and sharding rules ([mesh], [sharding] of a run config; its
  // [model] and [train] are not used); unset: one device.
  std::optional<RunConfig> layout;
  std::optional<MeshConfig> mesh;      // --mesh: replaces the layout's [mesh]
  std::optional<Precision> precision;  // unset: EvalModel::precision
};

// Throws weft::Error naming the flag for a --seq below 2 or a --batch below
// 1 (0 is not "the default": that is leaving the flag out), and naming the
// file for no --data or a --data file LoadTextFiles would refuse (missing, a
// directory or device, over 1 GiB; none is read). Evaluate checks them too;
// a caller checks first to refuse before reading the model.
void CheckEvalOptions(const EvalOptions& options);

struct EvalResult {
  double loss = 0;        // mean cross-entropy per predicted token (nats)
  double perplexity = 0;  // exp(loss)
  int64_t tokens = 0;     // predicted tokens
  int64_t windows = 0, batch_size = 0, seq_len = 0, num_devices = 1;
};

// Each document of `corpus` cut into consecutive windows of at most
// `seq_len` tokens (windows of one token dropped).
std::vector<std::vector<int32_t>> EvalWindows(const TokenizedCorpus& corpus, int64_t seq_len);

// Windows [first, first + batch_size) as one batch of [batch_size, seq_len]
// rows (each window from position 0, one segment; rows past the last window
// are padding: no segment, no loss) and, in *predicted, the tokens it
// predicts: what Evaluate runs, and the trainer's validation (trainer.h).
Batch EvalBatch(const std::vector<std::vector<int32_t>>& windows, size_t first, int64_t batch_size,
                int64_t seq_len, int64_t* predicted);

// Throws weft::Error for no files, unreadable or empty files, a window below
// 2 tokens, a batch the mesh's batch axes do not divide, sharding rules that
// do not fit the model.
EvalResult Evaluate(const EvalModel& model, const EvalOptions& options);

}  // namespace weft
