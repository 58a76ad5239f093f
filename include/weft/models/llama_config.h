// A training run's configuration, read from TOML: the Llama model, the
// training hyper-parameters, the data, the device mesh and the sharding rules.
//
//   [model]     vocab_size dim n_layers n_heads n_kv_heads ffn_dim rope_theta
//               norm_eps seq_len tie_embeddings
//   [train]     steps batch_size grad_accum_steps precision lr min_lr
//               warmup_steps weight_decay grad_clip seed remat checkpoint_every
//               beta1 beta2 eps no_weight_decay validation_documents
//               validation_every
//   [data]      source ("kjv" | "files" | "inline") kjv_unit files
//               split_on_blank_lines documents max_documents tokenizer_corpus
//   [mesh]      axis = size, in file order (major to minor), e.g. fsdp = 2;
//               the axes are dcn, data, fsdp and tensor (CheckMeshAxisRole)
//   [sharding]  "name pattern" = [per-dim entry, …]: an entry is a mesh axis
//               name, a list of axis names (split over several, major first),
//               or [] / "none" (not split). Patterns as in name_pattern.h; the
//               first rule in file order that matches a parameter wins.
//
// Every error names the file and line:col. Unknown keys are errors (with a
// suggestion), so a typo never silently falls back to a default.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "weft/autodiff/grad.h"
#include "weft/sharding/mesh.h"

namespace weft {

// The most devices a mesh may have: the bound every command shares
// (sharding/tile_assignment.h kMaxDevices, 65,536), checked as the mesh is
// read so a too-large mesh is refused by key, before any sharding is built.
inline constexpr int64_t kMaxMeshDevices = kMaxDevices;
// The most parameters a model may have (2^56, about 7.2e16): 16 bytes each
// (f32 weight, gradient, two AdamW moments) still fit int64 byte counts.
inline constexpr int64_t kMaxModelParameters = int64_t{1} << 56;

struct LlamaConfig {
  int64_t vocab_size = 0;
  int64_t dim = 0;
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;  // defaults to n_heads
  int64_t ffn_dim = 0;
  double rope_theta = 10000.0;
  double norm_eps = 1e-5;
  int64_t seq_len = 0;
  bool tie_embeddings = false;

  int64_t head_dim() const { return dim / n_heads; }
  // Weights of the model as the builder lays it out: embeddings, per layer
  // wq wk wv wo (GQA-sized k/v), w1 w2 w3, two norms; final norm; output
  // projection unless tied.
  int64_t NumParameters() const;
};

// The mixed-precision policy of a run (train.precision, --precision), one
// definition for the trainer, the sampler and the planner: it is how
// BuildLlamaForward types the program (models/llama.h), and every analysis
// sizes the program's own element types.
//   bf16  the usual mixed-precision recipe: float32 master weights (the
//         program's inputs, what the optimizer updates and checkpoints
//         hold) cast to bf16 where the layer uses them; bf16 activations
//         and their gradients; dots with bf16 operands and float32
//         accumulation; RMSNorm statistics, softmax statistics,
//         log-sum-exp, the loss and the optimizer in float32 (RoPE's
//         cos/sin computed in float32, rounded once); weight gradients
//         leave their dots in float32 and are reduced in float32.
//   f32   every floating value float32.
enum class Precision { kBf16, kF32 };
std::string_view PrecisionName(Precision precision);  // "bf16", "f32"
// "bf16" | "f32"; throws weft::Error naming `what` (e.g. "--precision").
Precision ParsePrecision(std::string_view text, std::string_view what);

// The named activations of a Llama layer (models/llama.cc names them in the
// scan body), which a selective remat policy saves instead of recomputing:
// the q, k, v projections, the attention's output (with its softmax
// statistics), the output projection, the MLP's gate, up and down
// projections. The layer's input is always saved (remat "full").
inline constexpr std::string_view kLayerActivations[] = {
    "q_proj", "k_proj", "v_proj", "attention", "out_proj", "mlp_gate", "mlp_up", "mlp_down"};

// What the forward saves for the backward of the layer scan (MaxText's
// remat_policy, JAX's save_only_these_names / offload policies):
//   "none"                   everything the backward reads (no recompute)
//   "full" / "minimal"       the layer input only; the backward recomputes the layer
//   "offload"                full, the saved layer inputs in host memory
//   "save_qkv_proj"          + q_proj, k_proj, v_proj
//   "save_out_proj"          + out_proj
//   "save_dot_except_mlp"    + q_proj, k_proj, v_proj, attention, out_proj
//   "save_dot_except_mlpwi"  + those and mlp_down (not the gate and up)
//   "save_dots"              + every named activation
//   a table, name=save|offload|recompute (a bare name: save), comma-separated
//                            per named activation, and layer_input=offload
// Offloaded values are stacked like saved ones and kept in host memory
// between the forward and the backward, which `weft plan` counts apart; on a
// CPU the executor keeps them in (host) memory where they are.
// The policy's name: "none", "full", "offload", the preset equal to it, or
// the table ("q_proj,out_proj=offload"); ParseRematPolicy reads it back.
std::string RematText(const RematPolicy& policy);

// A preset name or a table; throws weft::Error naming `where` (a flag or a
// config key) and the choices.
RematPolicy ParseRematPolicy(std::string_view text, std::string_view where);

struct TrainConfig {
  int64_t steps = 1000;
  int64_t batch_size = 8;  // sequences per optimizer step (the global batch)
  // Gradient accumulation: each step's batch is run as this many
  // consecutive micro-batches of batch_size / grad_accum_steps rows (the
  // step program's batch), their gradients summed weighted by their share of
  // the batch's loss tokens; clipping and the update happen once per step.
  // The same loss and gradient as the whole batch, in less memory.
  int64_t grad_accum_steps = 1;
  // Unset (a config that does not say): `weft train` and `weft bench train`
  // take the precision this CPU runs fastest (bf16 with a bf16 unit, else
  // f32; train/trainer.h FastestPrecision), a resume the one its run
  // recorded, `weft plan` bf16 (the target chip's).
  std::optional<Precision> precision;
  double lr = 3e-4;
  double min_lr = 3e-5;
  int64_t warmup_steps = 100;
  double weight_decay = 0.1;
  double grad_clip = 1.0;  // global norm; 0 disables clipping
  uint64_t seed = 0;
  RematPolicy remat;             // train.remat: a preset or a table (ParseRematPolicy)
  int64_t checkpoint_every = 0;  // steps; 0: only at the end
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  // Parameters matching any of these patterns get no weight decay.
  std::vector<std::string> no_weight_decay = {"*norm*"};
  // Validation: this many of the [data] documents (spread evenly over them)
  // are held out of training, and the mean cross-entropy per predicted token
  // over them is reported after every validation_every steps and the last
  // (0: only the last). 0 documents: no validation.
  int64_t validation_documents = 0;
  int64_t validation_every = 0;
};

struct DataConfig {
  std::string source = "kjv";     // "kjv" | "files" | "inline"
  std::string kjv_unit = "book";  // "book" | "chapter" | "verse"
  // source = "files": paths, made absolute relative to the config file's
  // directory.
  std::vector<std::filesystem::path> files;
  bool split_on_blank_lines = false;
  std::vector<std::string> documents;  // source = "inline": the documents
  int64_t max_documents = 0;           // use only the first N (0: all)
  // What the tokenizer is trained on: "data" (the documents above) or "kjv"
  // (the whole Bible, useful when the data is too small to train a vocab).
  std::string tokenizer_corpus = "data";
};

// What a mesh axis does is said by its name, here alone (the builder's
// shardings, the step program's checks, eval, the planner and its search read
// these): the batch is split over the batch axes the mesh has, in mesh order;
// "tensor" splits heads and the MLP's hidden units (Megatron's tensor and
// sequence parallelism, models/llama.cc); [sharding] rules split weights over
// any of them (fsdp: ZeRO-3). A mesh has no other axis.
inline constexpr std::string_view kBatchAxes[] = {"dcn", "data", "fsdp"};
inline constexpr std::string_view kTensorAxis = "tensor";
bool IsBatchAxis(std::string_view axis);
// Throws weft::Error when `axis` is none of the names above: weft gives any
// other axis no role, so devices along it would only run replicas (a mesh
// "pipeline" or "context" axis would not pipeline or split the context).
// `where` names the input ("--mesh 'pipeline=2,fsdp=2'", "cfg.toml:12:1").
void CheckMeshAxisRole(std::string_view axis, std::string_view where);

struct MeshConfig {
  std::vector<std::string> axis_names;  // major to minor
  std::vector<int64_t> axis_sizes;      // devices along each axis, over all slices
  // A multi-slice (hybrid) mesh, as JAX's create_hybrid_device_mesh builds
  // it: axis i spans dcn_sizes[i] slices with axis_sizes[i] / dcn_sizes[i]
  // devices in each (the DCN factor major to the ICI factor along the axis;
  // slices own consecutive device ids). Written [dcn] in a config and --dcn
  // on the command line, beside the per-slice [mesh] / --mesh. Empty: one
  // slice (or slices along a major axis named "dcn", or --slices).
  std::vector<int64_t> dcn_sizes = {};

  int64_t num_devices() const;
  bool is_hybrid() const { return !dcn_sizes.empty(); }
  int64_t num_slices() const;  // the product of dcn_sizes (1 when not hybrid)
  // The batch axes among axis_names (kBatchAxes), in mesh order, and the
  // product of their sizes: how many ways the batch is split, which must
  // divide it (CheckStepProgram).
  std::vector<std::string> batch_axes() const;
  int64_t batch_ways() const;
  // A single-device mesh with no axes when the config has no [mesh];
  // Mesh::Hybrid's device order when is_hybrid().
  Mesh ToMesh() const;
};

struct ShardingRule {
  std::string pattern;
  PartitionSpec spec;
  std::string location;  // "file:line:col" of the rule, for later errors
};

struct RunConfig {
  std::string source;  // the file (or name) it was read from
  LlamaConfig model;
  TrainConfig train;
  DataConfig data;
  MeshConfig mesh;
  std::vector<ShardingRule> sharding;  // in file order
  // [activations]: PartitionSpecs of named activations (pattern = the name).
  // "residual": the [batch, seq, dim] stream between and inside the blocks
  // (the embedding's rows, each residual add, the layer outputs the scan
  // saves). Unset: split along batch over the batch axes (dcn, data, fsdp)
  // and, where the mesh has a "tensor" axis, along seq over it (Megatron's
  // sequence parallelism: all-gathered before the column-parallel matmuls,
  // reduce-scattered after the row-parallel ones).
  std::vector<ShardingRule> activations;

  // The first rule matching `parameter`; nullopt when none does.
  const ShardingRule* RuleFor(std::string_view parameter) const;
  // The [activations] entry named `name`, or nullptr.
  const ShardingRule* ActivationRule(std::string_view name) const;
  // Every setting as "section.key = value" lines, in a fixed order.
  std::string CanonicalText() const;
  // 16 hex digits over CanonicalText(): equal for configs that differ only in
  // comments, layout or spelling of defaults.
  std::string Hash() const;
};

// Checks a model's sizes against each other and against what weft builds
// and runs, so a bad config is refused by key before any compile: sizes at
// least 1, n_heads a multiple of n_kv_heads (0: n_heads), dim divisible by
// n_heads, an even head dim within the attention kernel's limit
// (kernels/attention.h kMaxHeadDim), vocab_size and seq_len within s32 token
// ids and positions, at most kMaxModelParameters parameters, rope_theta
// finite and positive, norm_eps in (0, 1). Throws weft::Error naming the
// [model] keys, their values and `source`. ParseRunConfig runs the same
// checks, with each key's line:col.
void ValidateLlamaConfig(const LlamaConfig& model, std::string_view source);

// The [model] section as ("model.<key>", value) pairs, in the order of the
// section's keys: the one serialization of a LlamaConfig besides the config
// file, used by checkpoints (state.json's extra), the config hash and resume
// checks. ParseModelConfigFields reads it back through the same reader and
// checks as a config file's [model] (a field missing from `fields` is an
// error naming it and `what`).
std::vector<std::pair<std::string, std::string>> ModelConfigFields(const LlamaConfig& model);
LlamaConfig ParseModelConfigFields(const std::map<std::string, std::string>& fields,
                                   std::string_view what);

RunConfig LoadRunConfig(const std::filesystem::path& path);
// `source_name` names the text in errors; relative data files are resolved
// against `base_dir`.
RunConfig ParseRunConfig(std::string_view toml_text, std::string_view source_name,
                         const std::filesystem::path& base_dir = ".");

}  // namespace weft
