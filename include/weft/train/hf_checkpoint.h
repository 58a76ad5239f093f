// Hugging Face Llama directories (`transformers`' LlamaForCausalLM), both
// ways: `weft export hf` writes one from a run's checkpoint, and
// `weft train --init-from` and `weft eval` read one. docs/HUGGINGFACE.md has
// the mapping; in short:
//
//   weft (stacked, [in, out])            Hugging Face ([out, in], per layer)
//   tok_embeddings [V, D]                model.embed_tokens.weight [V, D]
//   layers.attention_norm [L, D]         model.layers.{i}.input_layernorm.weight
//   layers.attention.wq [L, D, H*hd]     model.layers.{i}.self_attn.q_proj.weight *
//   layers.attention.wk [L, D, Hkv*hd]   model.layers.{i}.self_attn.k_proj.weight *
//   layers.attention.wv [L, D, Hkv*hd]   model.layers.{i}.self_attn.v_proj.weight
//   layers.attention.wo [L, H*hd, D]     model.layers.{i}.self_attn.o_proj.weight
//   layers.ffn_norm [L, D]               model.layers.{i}.post_attention_layernorm.weight
//   layers.feed_forward.w1 [L, D, F]     model.layers.{i}.mlp.gate_proj.weight
//   layers.feed_forward.w3 [L, D, F]     model.layers.{i}.mlp.up_proj.weight
//   layers.feed_forward.w2 [L, F, D]     model.layers.{i}.mlp.down_proj.weight
//   norm [D]                             model.norm.weight
//   output [D, V] (absent when tied)     lm_head.weight [V, D] (absent when tied)
//
// * weft's RoPE rotates interleaved pairs (x[2j], x[2j+1]) of each head (Meta's
//   convention); Hugging Face's rotates halves (x[j], x[j + hd/2]). The q and k
//   rows of each head are permuted so Hugging Face's row j is weft's 2j and its
//   row hd/2 + j is weft's 2j + 1 (what transformers' convert_llama_weights_to_hf
//   does to Meta's weights); q.k, and so the attention, is unchanged.
//
// Errors name the directory, the file and the field or tensor, and what to do.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>

#include "weft/models/llama_config.h"
#include "weft/train/safetensors.h"

namespace weft {

// Hugging Face's names and [out, in] layouts of the model's weights, in
// `dtype` (F32 or BF16, rounded to nearest even); `weights` by weft name,
// F32 or BF16 (widened), shaped as models/llama.h lays them out.
TensorMap ToHfTensors(const LlamaConfig& config, const TensorMap& weights, PrimitiveType dtype);
// The inverse: weft's names and layouts, F32 (F32, BF16 and F16 widened
// exactly). `what` names the source in errors (a missing tensor, a wrong
// shape or dtype, a tensor weft has no place for, a non-finite value);
// `file_of` the file each tensor came from, where known.
TensorMap FromHfTensors(const LlamaConfig& config, const TensorMap& hf, std::string_view what,
                        const std::map<std::string, std::string>& file_of = {});

// config.json's text for `config` (its seq_len as max_position_embeddings),
// torch_dtype from `dtype`, bos/eos/pad ids of weft's tokenizer.
std::string HfConfigJson(const LlamaConfig& config, PrimitiveType dtype);
// The model config.json describes (max_position_embeddings as seq_len).
// Refuses what weft's Llama does not compute (another model_type or
// architecture, hidden_act other than silu, rope_scaling, biases, a head_dim
// other than hidden_size / num_attention_heads), naming the field.
LlamaConfig LlamaConfigFromHfJson(std::string_view text, std::string_view what);

// Refuses (weft::Error, naming each side's field and value) a `config` whose
// [model] (from `source`) differs from the Hugging Face model's in anything
// the weights depend on (every field but seq_len / max_position_embeddings).
void CheckModelMatchesHf(const LlamaConfig& config, std::string_view source, const LlamaConfig& hf,
                         std::string_view hf_what);

struct HfModel {
  std::filesystem::path dir;
  LlamaConfig config;
  TensorMap weights;                                 // weft names and layouts, F32
  std::filesystem::path tokenizer;                   // dir/tokenizer.model, or empty when absent
  PrimitiveType stored_dtype = PrimitiveType::kF32;  // of the first weight read
};

// Whether `dir` looks like a Hugging Face directory (has config.json).
bool IsHfDirectory(const std::filesystem::path& dir);
// Reads config.json and model.safetensors, or model.safetensors.index.json
// and the shards its weight_map names. Reads only.
HfModel LoadHf(const std::filesystem::path& dir);

struct HfExportOptions {
  PrimitiveType dtype = PrimitiveType::kF32;  // F32 (exact) or BF16
  // Above this many bytes of weights, model-0000k-of-0000n.safetensors shards
  // of at most this size each (a larger tensor alone in its shard) and
  // model.safetensors.index.json; otherwise one model.safetensors.
  int64_t max_shard_bytes = int64_t{5} << 30;
};

// Writes `out` (which must not exist, or be an empty directory) atomically:
// everything into a temporary sibling, then one rename. `tokenizer_model`:
// the SentencePiece model's bytes, written as tokenizer.model with
// tokenizer_config.json and special_tokens_map.json.
void WriteHfDirectory(const std::filesystem::path& out, const LlamaConfig& config,
                      const TensorMap& weights, const std::string& tokenizer_model,
                      const HfExportOptions& options);

// `weft export hf RUN_DIR OUT_DIR`: the run's checkpoint (a run directory or
// its checkpoint/) and tokenizer written by WriteHfDirectory. Checks `out`
// before reading anything large.
void ExportRunToHf(const std::filesystem::path& run_dir, const std::filesystem::path& out,
                   const HfExportOptions& options);

}  // namespace weft
