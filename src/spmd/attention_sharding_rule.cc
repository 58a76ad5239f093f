#include "weft/spmd/attention_sharding_rule.h"

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "weft/base/error.h"

namespace weft {
namespace {

using TensorFactors = OpShardingRule::TensorFactors;

struct AttentionFactors {
  int64_t b, hkv, group, sq, skv, d, dv;
  // q-side heads: [hkv] or [hkv, group].
  std::vector<int64_t> QHeads() const {
    return group < 0 ? std::vector<int64_t>{hkv} : std::vector<int64_t>{hkv, group};
  }
};

std::vector<std::string> TensorNames(const HloInstruction& instr) {
  const std::string& config = instr.attrs().backend_config;
  if (config.empty()) return {};
  nlohmann::json j = nlohmann::json::parse(config, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return {};
  for (const char* key : {"tensors", "tensor_names"}) {
    if (j.contains(key) && j[key].is_array()) {
      std::vector<std::string> names;
      for (const auto& n : j[key]) names.push_back(n.is_string() ? n.get<std::string>() : "");
      return names;
    }
  }
  return {};
}

// Factors of q, k, v (checked to be rank 4 with matching B, heads, D).
std::optional<AttentionFactors> MakeFactors(OpShardingRule& rule, const HloInstruction& instr) {
  if (instr.operand_count() < 3) return std::nullopt;
  const Shape& q = instr.operand(0)->shape();
  const Shape& k = instr.operand(1)->shape();
  const Shape& v = instr.operand(2)->shape();
  if (q.rank() != 4 || k.rank() != 4 || v.rank() != 4) return std::nullopt;
  const int64_t hq = q.dimensions(1), hkv = k.dimensions(1);
  if (hkv == 0 || hq % hkv != 0) return std::nullopt;
  AttentionFactors f;
  f.b = rule.AddFactor(q.dimensions(0));
  f.hkv = rule.AddFactor(hkv);
  f.group = hq == hkv ? -1 : rule.AddFactor(hq / hkv);
  f.sq = rule.AddFactor(q.dimensions(2));
  f.skv = rule.AddFactor(k.dimensions(2));
  f.d = rule.AddFactor(q.dimensions(3), FactorKind::kNeedReplication);
  f.dv = rule.AddFactor(v.dimensions(3), FactorKind::kNeedReplication);
  return f;
}

TensorFactors Q(const AttentionFactors& f) { return {{f.b}, f.QHeads(), {f.sq}, {f.d}}; }
TensorFactors K(const AttentionFactors& f) { return {{f.b}, {f.hkv}, {f.skv}, {f.d}}; }
TensorFactors V(const AttentionFactors& f) { return {{f.b}, {f.hkv}, {f.skv}, {f.dv}}; }
TensorFactors Out(const AttentionFactors& f) { return {{f.b}, f.QHeads(), {f.sq}, {f.dv}}; }
TensorFactors Lse(const AttentionFactors& f) { return {{f.b}, f.QHeads(), {f.sq}}; }

// The named tensors from operand `first` on.
void AddNamedTensors(OpShardingRule& rule, const HloInstruction& instr, int64_t first,
                     const AttentionFactors& f) {
  const std::vector<std::string> names = TensorNames(instr);
  const int64_t sq = instr.operand(0)->shape().dimensions(2);
  const int64_t skv = instr.operand(1)->shape().dimensions(2);
  bool seen_q = false;
  for (int64_t i = first; i < instr.operand_count(); ++i) {
    const Shape& s = instr.operand(i)->shape();
    const size_t n = static_cast<size_t>(i - first);
    const std::string name = n < names.size() ? names[n] : "";
    TensorFactors t;
    if (s.rank() == 2) {
      bool is_q;
      if (name.rfind("q_", 0) == 0) {
        is_q = true;
      } else if (name.rfind("kv_", 0) == 0) {
        is_q = false;
      } else {
        is_q = !seen_q && s.dimensions(1) == sq;
      }
      seen_q |= is_q;
      const int64_t len = is_q ? sq : skv;
      if (s.dimensions(1) == len) t = {{f.b}, {is_q ? f.sq : f.skv}};
    } else if (s.rank() == 4 && s.dimensions(2) == sq && s.dimensions(3) == skv) {
      const int64_t heads = instr.operand(0)->shape().dimensions(1);
      t = {{f.b}, s.dimensions(1) == heads ? f.QHeads() : std::vector<int64_t>{}, {f.sq}, {f.skv}};
      if (t[1].empty()) t[1] = {rule.AddFactor(s.dimensions(1))};  // broadcast heads
    }
    if (t.empty()) {
      for (int64_t d : s.dimensions()) t.push_back({rule.AddFactor(d)});  // not tied
    }
    rule.operands.push_back(std::move(t));
  }
}

}  // namespace

std::optional<OpShardingRule> FlexAttentionRule(const HloInstruction& instr) {
  OpShardingRule rule;
  rule.name = kFlexAttentionTarget;
  auto f = MakeFactors(rule, instr);
  if (!f) return std::nullopt;
  rule.operands = {Q(*f), K(*f), V(*f)};
  AddNamedTensors(rule, instr, 3, *f);
  rule.results = {Out(*f)};
  if (instr.shape().IsTuple() && instr.shape().tuple_shapes().size() >= 2) {
    rule.results.push_back(Lse(*f));
  }
  return rule;
}

std::optional<OpShardingRule> FlexAttentionBackwardRule(const HloInstruction& instr) {
  OpShardingRule rule;
  rule.name = kFlexAttentionBackwardTarget;
  auto f = MakeFactors(rule, instr);
  if (!f || instr.operand_count() < 6) return std::nullopt;
  rule.operands = {Q(*f), K(*f), V(*f), Out(*f), Lse(*f), Out(*f)};
  // dlse is present when the operand after dout has lse's shape and is not
  // one of the named tensors.
  const int64_t named = static_cast<int64_t>(TensorNames(instr).size());
  int64_t first = 6;
  if (instr.operand_count() > 6 &&
      (named > 0 ? instr.operand_count() - named == 7
                 : instr.operand(6)->shape() == instr.operand(4)->shape())) {
    rule.operands.push_back(Lse(*f));
    first = 7;
  }
  AddNamedTensors(rule, instr, first, *f);
  rule.results = {Q(*f), K(*f), V(*f)};
  return rule;
}

void RegisterAttentionShardingRules() {
  RegisterCustomCallRule(kFlexAttentionTarget, FlexAttentionRule);
  RegisterCustomCallRule(kFlexAttentionBackwardTarget, FlexAttentionBackwardRule);
}

}  // namespace weft
