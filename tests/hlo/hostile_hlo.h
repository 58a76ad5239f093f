// HLO text a hostile user could write, shared by the tests of every command
// that reads HLO (tests/hlo, tests/spmd, tests/runtime): computations that
// call themselves, and long chains of nested calls. Header-only.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <vector>

#include "weft/hlo/module.h"

namespace weft::hostile_hlo {

// A module whose computation calls itself, one way per case; `cycle` is the
// call chain the error must name ("f -> g -> f").
struct RecursiveModule {
  const char* name;
  const char* text;
  const char* cycle;
};

inline const std::vector<RecursiveModule>& RecursiveModules() {
  static const std::vector<RecursiveModule> modules = {
      {"DirectCall", R"(HloModule direct
f {
  x = f32[4] parameter(0)
  ROOT c = f32[4] call(x), to_apply=f
}
ENTRY e {
  p = f32[4] parameter(0), sharding={replicated}
  ROOT r = f32[4] call(p), to_apply=f, sharding={replicated}
}
)",
       "f -> f"},
      {"MutualCalls", R"(HloModule mutual
g {
  y = f32[4] parameter(0)
  ROOT d = f32[4] call(y), to_apply=f
}
f {
  x = f32[4] parameter(0)
  ROOT c = f32[4] call(x), to_apply=g
}
ENTRY e {
  p = f32[4] parameter(0), sharding={replicated}
  ROOT r = f32[4] call(p), to_apply=f, sharding={replicated}
}
)",
       "g -> f -> g"},
      {"WhileBody", R"(HloModule while_body
cond {
  s = f32[4] parameter(0)
  ROOT t = pred[] constant(false)
}
body {
  s = f32[4] parameter(0)
  ROOT w = f32[4] while(s), condition=cond, body=body
}
ENTRY e {
  p = f32[4] parameter(0), sharding={replicated}
  ROOT w = f32[4] while(p), condition=cond, body=body, sharding={replicated}
}
)",
       "body -> body"},
      {"WhileCondition", R"(HloModule while_condition
body {
  s = f32[4] parameter(0)
  ROOT n = f32[4] negate(s)
}
cond {
  s = f32[4] parameter(0)
  w = f32[4] while(s), condition=cond, body=body
  ROOT t = pred[] constant(false)
}
ENTRY e {
  p = f32[4] parameter(0), sharding={replicated}
  ROOT w = f32[4] while(p), condition=cond, body=body, sharding={replicated}
}
)",
       "cond -> cond"},
      {"ReduceToApply", R"(HloModule reduce_to_apply
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] reduce(a, b), dimensions={}, to_apply=add
}
ENTRY e {
  p = f32[4] parameter(0), sharding={replicated}
  z = f32[] constant(0), sharding={replicated}
  ROOT s = f32[] reduce(p, z), dimensions={0}, to_apply=add, sharding={replicated}
}
)",
       "add -> add"},
  };
  return modules;
}

enum class ChainKind { kCall, kWhile };

// The over-deep chain each command's test must refuse by name: of calls,
// 10,000 deep (such a chain overflowed the stacks of `weft partition` and
// `weft run`); of whiles, one more than the limit. Both are refused by the
// same walk (CheckCallGraph) before anything recurses, and a module 10,000
// computations deep takes about 10 s to parse in the sanitizer build.
inline int64_t OverDeepChain(ChainKind kind) {
  return kind == ChainKind::kCall ? 10000 : kMaxCallDepth + 1;
}

// A module whose entry reaches `depth` nested calls: e -> f{depth-1} -> ...
// -> f0, each a call (kCall) or a while running its body f{k} once (kWhile;
// every while also calls `cond`).
// Values are f32[4], replicated, so every command accepts the module when
// the depth is allowed.
inline std::string CallChainModule(int64_t depth, ChainKind kind) {
  std::string text = fmt::format("HloModule chain_{}\n\n", depth);
  if (kind == ChainKind::kCall) {
    text += "f0 {\n  x = f32[4] parameter(0)\n  ROOT y = f32[4] negate(x)\n}\n\n";
    for (int64_t i = 1; i < depth; ++i) {
      text += fmt::format(
          "f{} {{\n  x = f32[4] parameter(0)\n  ROOT y = f32[4] call(x), to_apply=f{}\n}}\n\n", i,
          i - 1);
    }
    text += fmt::format(
        "ENTRY e {{\n  p = f32[4] parameter(0), sharding={{replicated}}\n"
        "  ROOT r = f32[4] call(p), to_apply=f{}, sharding={{replicated}}\n}}\n",
        depth - 1);
    return text;
  }
  // A loop whose body runs once: state (i, x), condition i < 1.
  const std::string state = "(s32[], f32[4])";
  text += fmt::format(
      "cond {{\n  s = {0} parameter(0)\n  i = s32[] get-tuple-element(s), index=0\n"
      "  one = s32[] constant(1)\n  ROOT lt = pred[] compare(i, one), direction=LT\n}}\n\n",
      state);
  auto body = [&](int64_t k, const std::string& inner) {
    return fmt::format(
        "f{1} {{\n  s = {0} parameter(0)\n  i = s32[] get-tuple-element(s), index=0\n"
        "  x = f32[4] get-tuple-element(s), index=1\n  one = s32[] constant(1)\n"
        "  j = s32[] add(i, one)\n{2}  ROOT t = {0} tuple(j, y)\n}}\n\n",
        state, k, inner);
  };
  auto loop = [&](int64_t callee, const std::string& x) {
    return fmt::format(
        "  zero = s32[] constant(0)\n  init = {0} tuple(zero, {2})\n"
        "  w = {0} while(init), condition=cond, body=f{1}\n"
        "  y = f32[4] get-tuple-element(w), index=1\n",
        state, callee, x);
  };
  text += body(0, "  y = f32[4] negate(x)\n");
  for (int64_t k = 1; k < depth; ++k) text += body(k, loop(k - 1, "x"));
  text += fmt::format("ENTRY e {{\n  p = f32[4] parameter(0)\n{}  ROOT r = f32[4] copy(y)\n}}\n",
                      loop(depth - 1, "p"));
  return text;
}

}  // namespace weft::hostile_hlo
