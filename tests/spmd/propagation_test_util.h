// Propagation tests' helpers: a text module propagated, its instructions'
// shardings by name, and EXPECT_SHARDING comparing them as shardings.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <string_view>

#include "weft/hlo/parser.h"
#include "weft/spmd/sharding_propagation.h"

namespace weft::testing {

struct Propagated {
  std::unique_ptr<HloModule> module;
  PropagationResult result;
  const HloInstruction* Get(std::string_view name) const {
    for (const HloComputation* c : module->computations()) {
      if (const HloInstruction* i = c->GetInstruction(name)) return i;
    }
    ADD_FAILURE() << "no instruction " << name;
    return nullptr;
  }
  std::string ShardingOf(std::string_view name) const {
    const HloInstruction* i = Get(name);
    return i && i->has_sharding() ? i->sharding()->ToString() : "(none)";
  }
};

inline Propagated Propagate(const std::string& text, PropagationOptions options = {}) {
  Propagated p;
  p.module = ParseHloModule(text);
  p.result = PropagateShardings(*p.module, options);
  return p;
}

}  // namespace weft::testing

// Expects instruction `name` to have sharding `expected` (compared as shardings).
#define EXPECT_SHARDING(p, name, expected)                                     \
  do {                                                                         \
    const HloInstruction* _i = (p).Get(name);                                  \
    ASSERT_NE(_i, nullptr);                                                    \
    ASSERT_TRUE(_i->has_sharding()) << name << " has no sharding";             \
    EXPECT_EQ(*_i->sharding(), HloSharding::Parse(expected))                   \
        << name << ": " << _i->sharding()->ToString() << " vs " << (expected); \
  } while (0)
