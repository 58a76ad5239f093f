#include "weft/models/llama.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <nlohmann/json.hpp>
#include <random>

#include "weft/autodiff/stop_gradient.h"
#include "weft/base/algorithm.h"
#include "weft/base/error.h"
#include "weft/hlo/builder.h"
#include "weft/models/name_pattern.h"
#include "weft/models/scan.h"
#include "weft/sharding/mesh.h"

namespace weft {

std::vector<int64_t> LlamaForward::WeightParameters() const {
  std::vector<int64_t> out;
  for (const LlamaWeight& w : weights) out.push_back(w.parameter_number);
  return out;
}

namespace {

// The stacked layer weights, in parameter (and scan xs) order.
constexpr std::array<std::string_view, 9> kLayerWeights = {
    "attention_norm", "attention.wq",    "attention.wk",    "attention.wv",   "attention.wo",
    "ffn_norm",       "feed_forward.w1", "feed_forward.w2", "feed_forward.w3"};

}  // namespace

std::string ShardingRuleName(std::string_view weight_name) {
  if (weight_name.rfind("layers.", 0) == 0) {
    return "layers.0." + std::string(weight_name.substr(7));
  }
  return std::string(weight_name);
}

std::vector<LlamaWeight> LlamaWeights(const LlamaConfig& c) {
  const int64_t kv_heads = c.n_kv_heads > 0 ? c.n_kv_heads : c.n_heads;
  const int64_t hd = c.head_dim();
  const int64_t D = c.dim, L = c.n_layers, V = c.vocab_size, F = c.ffn_dim;
  // kLayerWeights order.
  const std::array<std::vector<int64_t>, kLayerWeights.size()> layer_dims = {{
      {L, D},
      {L, D, c.n_heads * hd},
      {L, D, kv_heads * hd},
      {L, D, kv_heads * hd},
      {L, c.n_heads * hd, D},
      {L, D},
      {L, D, F},
      {L, F, D},
      {L, D, F},
  }};
  constexpr double kStddev = 0.02;
  const double residual_stddev = kStddev / std::sqrt(2.0 * static_cast<double>(L));
  std::vector<LlamaWeight> weights;
  auto add = [&](std::string name, std::vector<int64_t> dims, double stddev) {
    const int64_t n = LlamaForward::kNumDataInputs + static_cast<int64_t>(weights.size());
    weights.push_back({std::move(name), Shape(PrimitiveType::kF32, std::move(dims)), n, stddev});
  };
  add("tok_embeddings", {V, D}, kStddev);
  for (size_t i = 0; i < kLayerWeights.size(); ++i) {
    const std::string_view w = kLayerWeights[i];
    const double stddev = w.ends_with("norm")                             ? 0.0
                          : w == "attention.wo" || w == "feed_forward.w2" ? residual_stddev
                                                                          : kStddev;
    add("layers." + std::string(w), layer_dims[i], stddev);
  }
  add("norm", {D}, 0.0);
  if (!c.tie_embeddings) add("output", {D, V}, kStddev);
  return weights;
}

std::vector<float> InitLlamaWeight(const LlamaWeight& weight, uint64_t seed) {
  const auto n = static_cast<size_t>(weight.shape.ElementsCount());
  if (weight.init_stddev == 0.0) return std::vector<float>(n, 1.0f);
  const int64_t index = weight.parameter_number - LlamaForward::kNumDataInputs;
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
                    static_cast<uint32_t>(index), 0x696e6974u};
  std::mt19937_64 rng(seq);
  std::normal_distribution<double> normal(0.0, weight.init_stddev);
  std::vector<float> values(n);
  for (float& v : values) v = static_cast<float>(normal(rng));
  return values;
}

std::vector<std::string> LlamaRuleNames() {
  std::vector<std::string> names = {"tok_embeddings"};
  for (std::string_view w : kLayerWeights) names.push_back("layers.0." + std::string(w));
  names.push_back("norm");
  names.push_back("output");
  return names;
}

void CheckShardingRules(const RunConfig& run) {
  const std::vector<std::string> names = LlamaRuleNames();
  // The rule each name gets (first match wins).
  std::vector<const ShardingRule*> owner;
  for (const std::string& name : names) owner.push_back(run.RuleFor(name));
  // How a name is best written in a rule: any layer number for layer weights.
  auto as_pattern = [](const std::string& name) {
    return name.rfind("layers.0.", 0) == 0 ? "layers.*." + name.substr(9) : name;
  };
  std::string listing;
  for (const std::string& name : names) {
    listing += (listing.empty() ? "" : ", ") + as_pattern(name);
  }
  for (const ShardingRule& rule : run.sharding) {
    std::vector<std::string> matched;
    bool owns_one = false;
    for (size_t i = 0; i < names.size(); ++i) {
      if (!MatchesNamePattern(rule.pattern, names[i])) continue;
      matched.push_back(names[i]);
      owns_one = owns_one || owner[i] == &rule;
    }
    if (matched.empty()) {
      std::vector<std::string> patterns;
      for (const std::string& name : names) patterns.push_back(as_pattern(name));
      // The nearest names only (a typo is usually one or two edits away).
      const size_t within = std::max<size_t>(3, rule.pattern.size() / 3);
      std::vector<std::string> close = ClosestNames(rule.pattern, patterns, within, 3);
      if (!close.empty()) {
        const size_t best = NamePatternDistance(rule.pattern, close[0]);
        std::erase_if(close, [&](const std::string& name) {
          return NamePatternDistance(rule.pattern, name) > best;
        });
      }
      const std::string hint =
          close.empty() ? std::string()
                        : fmt::format("Did you mean \"{}\"? ", fmt::join(close, "\" or \""));
      const bool layer_number = rule.pattern.rfind("layers.", 0) == 0 && rule.pattern.size() > 7 &&
                                std::isdigit(static_cast<unsigned char>(rule.pattern[7])) &&
                                rule.pattern.rfind("layers.0.", 0) != 0;
      Fail(
          "{}: sharding rule \"{}\" in {} matches no weight of the model, so it would be "
          "ignored{}. {}Weights: {}",
          rule.location, rule.pattern, run.source,
          layer_number ? " (the layers are stacked and share one layout: a rule names every "
                         "layer, e.g. \"layers.*.attention.wq\")"
                       : "",
          hint, listing);
    }
    if (!owns_one) {
      std::string taken;
      for (size_t i = 0; i < names.size(); ++i) {
        if (!MatchesNamePattern(rule.pattern, names[i])) continue;
        taken += fmt::format("{}{} by \"{}\" ({})", taken.empty() ? "" : ", ", as_pattern(names[i]),
                             owner[i]->pattern, owner[i]->location);
      }
      Fail(
          "{}: sharding rule \"{}\" in {} is never used: every weight it matches is taken by "
          "an earlier rule (the first matching rule in file order wins): {}. Move it above "
          "those rules, or remove it",
          rule.location, rule.pattern, run.source, taken);
    }
  }
}

namespace {

constexpr PrimitiveType kF32 = PrimitiveType::kF32;
constexpr PrimitiveType kS32 = PrimitiveType::kS32;

// The ops the model is made of, over one builder, under the precision
// policy (llama_config.h Precision): `ct` is the compute type of weights as
// the dots read them and of activations (bf16 or f32); statistics are f32.
class Ops {
 public:
  Ops(HloComputationBuilder& b, HloComputation* add, HloComputation* max, PrimitiveType ct)
      : b_(b), add_(add), max_(max), ct_(ct) {}
  HloComputationBuilder& b() { return b_; }
  PrimitiveType ct() const { return ct_; }

  // x as type t (x itself when it is t already).
  HloInstruction* Cast(HloInstruction* x, PrimitiveType t) {
    return x->shape().element_type() == t ? x : b_.Convert(x, t);
  }
  HloInstruction* Sum(HloInstruction* x, std::vector<int64_t> dims) {
    return b_.Reduce(x, b_.ConstantScalar(kF32, 0), std::move(dims), add_);
  }
  HloInstruction* Max(HloInstruction* x, std::vector<int64_t> dims) {
    return b_.Reduce(x, b_.ConstantScalar(kF32, -INFINITY), std::move(dims), max_);
  }
  HloInstruction* Splat(double v, const std::vector<int64_t>& dims) {
    return b_.Broadcast(b_.ConstantScalar(kF32, v), dims, {});
  }
  // x [..., K] . w [K, N] -> [..., N] in the compute type (the f32 weight
  // cast where it is read; dots accumulate in f32 whatever they return).
  HloInstruction* Linear(HloInstruction* x, HloInstruction* w) {
    DotDimensionNumbers d;
    d.lhs_contracting_dims = {x->shape().rank() - 1};
    d.rhs_contracting_dims = {0};
    return b_.Dot(x, Cast(w, ct_), d);
  }
  // x [B,S,D] * rsqrt(mean(x^2) + eps) * w [D]: the statistics and the
  // normalization in f32, the scale by w in the compute type (MaxText's
  // RMSNorm), so the backward saves a compute-type value.
  HloInstruction* RmsNorm(HloInstruction* x, HloInstruction* w, double eps) {
    HloInstruction* xf = Cast(x, kF32);
    const std::vector<int64_t>& dims = x->shape().dimensions();
    const int64_t d = dims.back();
    HloInstruction* ms = b_.Divide(Sum(b_.Multiply(xf, xf), {2}), Splat(d, {dims[0], dims[1]}));
    HloInstruction* r = b_.Unary(HloOpcode::kRsqrt, b_.Add(ms, Splat(eps, {dims[0], dims[1]})));
    HloInstruction* y = Cast(b_.Multiply(xf, b_.Broadcast(r, dims, {0, 1})), ct_);
    return b_.Multiply(y, b_.Broadcast(Cast(w, ct_), dims, {2}));
  }
  // [B,S,H*Dh] -> [B,H,S,Dh]
  HloInstruction* SplitHeads(HloInstruction* x, int64_t heads) {
    const auto& d = x->shape().dimensions();
    HloInstruction* r = b_.Reshape(x, {d[0], d[1], heads, d[2] / heads});
    return b_.Transpose(r, {0, 2, 1, 3});
  }
  // [B,H,S,Dh] -> [B,S,H*Dh]
  HloInstruction* MergeHeads(HloInstruction* x) {
    const auto& d = x->shape().dimensions();
    HloInstruction* t = b_.Transpose(x, {0, 2, 1, 3});
    return b_.Reshape(t, {d[0], d[2], d[1] * d[3]});
  }
  // Meta's RoPE on x [B,S,H*Dh], before the heads are split: pairs
  // (x[2j], x[2j+1]) of each head rotate by angle pos * theta^(-2j/Dh), as
  // x * cos + swap(x) * signed_sin, where swap reverses each pair and the
  // tables [B,S,Dh/2,2] hold (cos, cos) and (-sin, sin) per pair
  // (RopeTables). Only index maps and elementwise ops on the projection's
  // own layout, so the compiler runs the rotation as one loop over it.
  HloInstruction* Rope(HloInstruction* x, int64_t heads, HloInstruction* cos,
                       HloInstruction* signed_sin) {
    const std::vector<int64_t> d = x->shape().dimensions();  // B,S,H*Dh
    const std::vector<int64_t> pd = {d[0], d[1], heads, d[2] / heads / 2, 2};
    HloInstruction* pairs = b_.Reshape(x, pd);
    HloInstruction* swapped = b_.Reverse(pairs, {4});
    HloInstruction* c = b_.Broadcast(cos, pd, {0, 1, 3, 4});
    HloInstruction* s = b_.Broadcast(signed_sin, pd, {0, 1, 3, 4});
    return b_.Reshape(b_.Add(b_.Multiply(pairs, c), b_.Multiply(swapped, s)), d);
  }

 private:
  HloComputationBuilder& b_;
  HloComputation* add_;
  HloComputation* max_;
  PrimitiveType ct_;
};

struct Shardings {
  std::optional<Mesh> mesh;
  const RunConfig* run = nullptr;
  std::vector<std::string> batch_axes;

  // The weight's sharding from the rule of its per-layer name (see llama.h).
  std::optional<HloSharding> ForWeight(const std::string& name, const Shape& shape) const {
    if (!run) return std::nullopt;
    const bool stacked = name.rfind("layers.", 0) == 0;
    const ShardingRule* rule = run->RuleFor(ShardingRuleName(name));
    if (!rule) return std::nullopt;
    std::vector<AxisSpec> dims;
    if (stacked) dims.push_back(AxisSpec());
    dims.insert(dims.end(), rule->spec.dims().begin(), rule->spec.dims().end());
    try {
      return ToHloSharding(*mesh, PartitionSpec(dims), shape.rank());
    } catch (const Error& e) {
      Fail("{}: sharding rule \"{}\" = {} does not fit weight {} {}: {}", rule->location,
           rule->pattern, rule->spec.ToString(), name, shape.ToString(), e.what());
    }
  }
  // The residual stream [B, S, D] (RunConfig::activations "residual"):
  // as configured, else batch over the batch axes (when they divide it) and
  // seq over "tensor" (sequence parallelism, when the mesh has that axis).
  std::optional<HloSharding> Residual(const Shape& shape) const {
    if (!mesh) return std::nullopt;
    if (const ShardingRule* rule = run->ActivationRule("residual")) {
      try {
        return ToHloSharding(*mesh, rule->spec, shape.rank());
      } catch (const Error& e) {
        Fail("{}: activation sharding \"residual\" = {} does not fit the residual stream {}: {}",
             rule->location, rule->spec.ToString(), shape.ToString(), e.what());
      }
    }
    if (!HasTensorAxis()) return BatchSplit(shape);
    return ToHloSharding(*mesh, PartitionSpec({BatchAxes(shape), std::string(kTensorAxis)}),
                         shape.rank());
  }
  // A column-parallel projection's output [B, S, F] (q, k, v, the MLP's
  // gate and up): F split over "tensor", as Megatron splits the heads and
  // the MLP's hidden units; nullopt (left to propagation) without that axis.
  std::optional<HloSharding> TensorColumns(const Shape& shape) const {
    if (!HasTensorAxis()) return std::nullopt;
    return ToHloSharding(*mesh,
                         PartitionSpec({BatchAxes(shape), AxisSpec(), std::string(kTensorAxis)}),
                         shape.rank());
  }
  bool HasTensorAxis() const {
    if (!mesh) return false;
    const std::string tensor(kTensorAxis);
    return Contains(mesh->axis_names(), tensor) && mesh->axis_size(tensor) > 1;
  }
  // Dim 0's entry: the batch axes where they split it (BatchSplit), else none.
  AxisSpec BatchAxes(const Shape& shape) const {
    return BatchSplit(shape) ? AxisSpec(batch_axes) : AxisSpec();
  }
  // Split on dim 0 over the batch axes (when they divide it).
  std::optional<HloSharding> BatchSplit(const Shape& shape) const {
    if (!mesh || batch_axes.empty()) return std::nullopt;
    int64_t n = 1;
    for (const std::string& a : batch_axes) n *= mesh->axis_size(a);
    if (n == 1 || shape.dimensions(0) % n != 0) return std::nullopt;
    return ToHloSharding(*mesh, PartitionSpec({AxisSpec(batch_axes)}), shape.rank());
  }
};

// One decoder layer, the scan's body (see llama.h): RMSNorm, q/k/v
// projections, RoPE, flex attention, the output projection and the residual;
// RMSNorm, the SwiGLU MLP and the residual.
struct LlamaLayer {
  const Shardings& sh;
  HloComputation* add;
  HloComputation* max;
  PrimitiveType ct;  // the compute type
  int64_t batch, seq, heads, kv_heads, head_dim;
  double eps;
  std::string attention_config;

  ScanStepResult operator()(HloComputationBuilder& lb, const ScanStep& step) const {
    Ops o(lb, add, max, ct);
    HloInstruction* x = step.carry[0];
    x->set_name("layer_input");  // the saved layer input, by name (remat offload)
    const auto& w = step.xs;     // attention_norm wq wk wv wo ffn_norm w1 w2 w3
    HloInstruction* cos = step.consts[0];
    HloInstruction* sin = step.consts[1];
    HloInstruction* seg = step.consts[2];
    HloInstruction* h = o.RmsNorm(x, w[0], eps);
    // The layer's named activations (kLayerActivations), which a selective
    // remat policy saves by name (GradOptions::remat.save).
    const auto named = [](HloInstruction* y, std::string_view name) {
      y->set_name(std::string(name));
      return y;
    };
    // Column-parallel projections: the sequence gathered, heads split.
    const auto columns = [&](HloInstruction* y, std::string_view name) {
      y->set_sharding(sh.TensorColumns(y->shape()));
      return named(y, name);
    };
    HloInstruction* q =
        o.SplitHeads(o.Rope(columns(o.Linear(h, w[1]), "q_proj"), heads, cos, sin), heads);
    HloInstruction* k =
        o.SplitHeads(o.Rope(columns(o.Linear(h, w[2]), "k_proj"), kv_heads, cos, sin), kv_heads);
    HloInstruction* v = o.SplitHeads(columns(o.Linear(h, w[3]), "v_proj"), kv_heads);
    const Shape attn_shape =
        Shape::Tuple({Shape(ct, {batch, heads, seq, head_dim}), Shape(kF32, {batch, heads, seq})});
    HloInstruction* attn =
        named(lb.CustomCall({q, k, v, seg}, attn_shape, "weft.flex_attention", attention_config),
              "attention");
    HloInstruction* a =
        named(o.Linear(o.MergeHeads(lb.GetTupleElement(attn, 0)), w[4]), "out_proj");
    HloInstruction* x1 = lb.Add(x, a);
    x1->set_sharding(sh.Residual(x1->shape()));
    HloInstruction* h2 = o.RmsNorm(x1, w[5], eps);
    HloInstruction* gate = columns(o.Linear(h2, w[6]), "mlp_gate");
    HloInstruction* up = columns(o.Linear(h2, w[8]), "mlp_up");
    HloInstruction* silu = lb.Multiply(gate, lb.Unary(HloOpcode::kLogistic, gate));
    HloInstruction* x2 = lb.Add(x1, named(o.Linear(lb.Multiply(silu, up), w[7]), "mlp_down"));
    x2->set_sharding(sh.Residual(x2->shape()));
    return ScanStepResult{{x2}, {}};
  }
};

// RoPE's tables [B, S, Dh/2, 2] at each token's position within its
// document: (cos, cos) and (-sin, sin) for each pair (Ops::Rope), computed in
// f32 and cast to the compute type once (as Hugging Face's Llama does).
std::pair<HloInstruction*, HloInstruction*> RopeTables(Ops& ops, HloInstruction* positions,
                                                       const LlamaConfig& c, int64_t B, int64_t S) {
  HloComputationBuilder& b = ops.b();
  const int64_t hd = c.head_dim();
  std::vector<double> inv_freq(hd / 2);
  for (int64_t j = 0; j < hd / 2; ++j) {
    inv_freq[j] = std::pow(c.rope_theta, -2.0 * static_cast<double>(j) / static_cast<double>(hd));
  }
  HloInstruction* freq = b.Constant(Literal(Shape(kF32, {hd / 2}), inv_freq));
  HloInstruction* angles =
      b.Multiply(b.Broadcast(b.Convert(positions, kF32), {B, S, hd / 2}, {0, 1}),
                 b.Broadcast(freq, {B, S, hd / 2}, {2}));
  const std::vector<int64_t> pairs = {B, S, hd / 2, 2};
  HloInstruction* cos = b.Broadcast(b.Unary(HloOpcode::kCosine, angles), pairs, {0, 1, 2});
  HloInstruction* sign = b.Constant(Literal(Shape(kF32, {2}), std::vector<double>{-1.0, 1.0}));
  HloInstruction* sin = b.Multiply(b.Broadcast(b.Unary(HloOpcode::kSine, angles), pairs, {0, 1, 2}),
                                   b.Broadcast(sign, pairs, {3}));
  return {ops.Cast(cos, ops.ct()), ops.Cast(sin, ops.ct())};
}

// The mean cross-entropy of f32 `logits` [B, S, V] over the tokens whose
// loss_mask is set: the builder's last instruction, the entry's root.
// logsumexp shifts by the row max, whose gradient cancels (d lse / d max =
// 1 - sum softmax = 0): stopped, as jax.nn.logsumexp does, so the backward
// neither computes nor holds the max's [B, S, V] mask.
void MeanCrossEntropy(Ops& ops, HloInstruction* logits, HloInstruction* targets,
                      HloInstruction* loss_mask) {
  HloComputationBuilder& b = ops.b();
  const std::vector<int64_t> bsv = logits->shape().dimensions();
  HloInstruction* row_max = StopGradient(ops.Max(logits, {2}));
  HloInstruction* shifted = b.Subtract(logits, b.Broadcast(row_max, bsv, {0, 1}));
  HloInstruction* lse =
      b.Add(b.Unary(HloOpcode::kLog, ops.Sum(b.Unary(HloOpcode::kExp, shifted), {2})), row_max);
  HloInstruction* is_target = b.Compare(
      b.Iota(Shape(kS32, bsv), 2), b.Broadcast(targets, bsv, {0, 1}), ComparisonDirection::kEq);
  HloInstruction* target_logit = ops.Sum(b.Select(is_target, logits, ops.Splat(0, bsv)), {2});
  HloInstruction* nll = b.Multiply(b.Subtract(lse, target_logit), loss_mask);
  HloInstruction* count = b.Maximum(ops.Sum(loss_mask, {0, 1}), b.ConstantScalar(kF32, 1));
  b.Divide(ops.Sum(nll, {0, 1}), count);
}

}  // namespace

LlamaForward BuildLlamaForward(const LlamaConfig& c, const LlamaBuildOptions& options) {
  // A config read from TOML was checked key by key; one built in code is
  // checked here, before anything is built.
  ValidateLlamaConfig(c, options.run ? options.run->source : std::string("the model config"));
  const int64_t B = options.batch_size;
  const int64_t S = options.seq_len > 0 ? options.seq_len : c.seq_len;
  WEFT_CHECK(B >= 1 && S >= 1, "Llama: batch_size {} and seq_len {} must be at least 1", B, S);
  const int64_t D = c.dim;

  Shardings sh;
  if (options.run) {
    CheckShardingRules(*options.run);
    sh.run = options.run;
    sh.mesh = options.run->mesh.ToMesh();
    sh.batch_axes = options.run->mesh.batch_axes();
  }

  LlamaForward out;
  out.module = std::make_unique<HloModule>("llama");
  if (sh.mesh) out.module->set_num_partitions(sh.mesh->num_devices());
  HloModule& m = *out.module;
  HloComputation* add = m.AddComputation(MakeScalarReduction("add_f32", HloOpcode::kAdd, kF32));
  HloComputation* max = m.AddComputation(MakeScalarReduction("max_f32", HloOpcode::kMaximum, kF32));
  const bool want_logits = options.output == LlamaOutput::kLogits;
  HloComputationBuilder b(want_logits ? "llama_logits" : "llama_loss");
  const PrimitiveType ct = options.precision == Precision::kBf16 ? PrimitiveType::kBF16 : kF32;
  Ops ops(b, add, max, ct);

  auto data = [&](int64_t n, const char* name, PrimitiveType t) {
    HloInstruction* p = b.Parameter(n, Shape(t, {B, S}), name);
    p->set_sharding(sh.BatchSplit(p->shape()));
    return p;
  };
  HloInstruction* tokens = data(0, "tokens", kS32);
  HloInstruction* targets = data(1, "targets", kS32);
  HloInstruction* loss_mask = data(2, "loss_mask", kF32);
  HloInstruction* segments = data(3, "segment_ids", kS32);
  HloInstruction* positions = data(4, "positions", kS32);

  // The weights in parameter order (LlamaWeights): tok_embeddings, the
  // kLayerWeights stack, norm, output.
  out.weights = LlamaWeights(c);
  std::vector<HloInstruction*> params;
  for (const LlamaWeight& w : out.weights) {
    HloInstruction* p = b.Parameter(w.parameter_number, w.shape, w.name);
    p->set_sharding(sh.ForWeight(w.name, w.shape));
    params.push_back(p);
  }
  WEFT_INTERNAL_CHECK(params.size() == kLayerWeights.size() + 2 + (c.tie_embeddings ? 0 : 1),
                      "Llama: {} weights", params.size());
  HloInstruction* emb = params[0];
  std::vector<HloInstruction*> layer_weights(params.begin() + 1,
                                             params.begin() + 1 + kLayerWeights.size());
  HloInstruction* final_norm = params[1 + kLayerWeights.size()];
  HloInstruction* head = c.tie_embeddings ? nullptr : params.back();

  // Embedding lookup: rows of tok_embeddings.
  GatherDimensionNumbers g;
  g.offset_dims = {2};
  g.collapsed_slice_dims = {0};
  g.start_index_map = {0};
  g.index_vector_dim = 2;
  HloInstruction* x = ops.Cast(b.Gather(emb, tokens, g, {1, D}), ct);
  x->set_sharding(sh.Residual(x->shape()));
  const auto [cos, sin] = RopeTables(ops, positions, c, B, S);

  const int64_t hd = c.head_dim();
  const nlohmann::json attn_config = {
      {"mask", "q_idx >= kv_idx && seg[b, q_idx] == seg[b, kv_idx]"},
      {"mask_tensors", {"seg"}},
      {"scale", 1.0 / std::sqrt(static_cast<double>(hd))}};
  const LlamaLayer layer{sh,
                         add,
                         max,
                         ct,
                         B,
                         S,
                         c.n_heads,
                         c.n_kv_heads > 0 ? c.n_kv_heads : c.n_heads,
                         hd,
                         c.norm_eps,
                         attn_config.dump()};
  ScanOutputs layers = Scan(m, b, "layers", layer, {x}, layer_weights, {cos, sin, segments});

  HloInstruction* h = ops.RmsNorm(layers.carry[0], final_norm, c.norm_eps);
  // The logits are stored in the compute type (a [B, S, V] buffer: the
  // step's largest) and cast to f32 where the loss reads them, so the
  // softmax statistics, log-sum-exp and the loss run in f32 (the casts fuse
  // into their loops).
  DotDimensionNumbers d;
  d.lhs_contracting_dims = {2};
  d.rhs_contracting_dims = {head ? 0 : 1};
  HloInstruction* logits = ops.Cast(b.Dot(h, ops.Cast(head ? head : emb, ct), d), kF32);
  if (want_logits) {
    logits->set_sharding(sh.BatchSplit(logits->shape()));
    m.AddEntryComputation(b.Build(logits));
    return out;
  }
  // Vocabulary-parallel logits (the sequence gathered): the loss's
  // reductions over V sum partial results over the tensor axis.
  if (sh.HasTensorAxis()) logits->set_sharding(sh.TensorColumns(logits->shape()));
  MeanCrossEntropy(ops, logits, targets, loss_mask);
  m.AddEntryComputation(b.Build());
  return out;
}

}  // namespace weft
