// HloModule: computations (callees and the entry), plus the SPMD config.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "weft/hlo/computation.h"

namespace weft {

// The most calls (call, while, reduce/scatter/all-reduce to_apply, ...)
// that may nest inside one another. Code that follows calls recursively (the
// executor runs a called computation inside the caller's step, the
// partitioner partitions a while body inside its while) needs stack in
// proportion; this bound keeps every command within the default stack,
// sanitizer builds included. Real programs nest a handful deep.
inline constexpr int64_t kMaxCallDepth = 256;

class HloModule {
 public:
  explicit HloModule(std::string name) : name_(std::move(name)) {}
  HloModule(const HloModule&) = delete;
  HloModule& operator=(const HloModule&) = delete;

  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }

  // Takes ownership. Computation and instruction names are made unique
  // within the module (a clashing name gets a ".N" suffix).
  HloComputation* AddComputation(std::unique_ptr<HloComputation> computation);
  HloComputation* AddEntryComputation(std::unique_ptr<HloComputation> computation);
  HloComputation* entry_computation() const { return entry_; }
  void set_entry_computation(HloComputation* entry);

  // In the order added.
  std::vector<HloComputation*> computations() const;
  // nullptr when absent.
  HloComputation* GetComputation(std::string_view name) const;
  // Callees before callers, otherwise in the order added; the entry last.
  // Walks the call graph iteratively. Throws weft::Error when a computation
  // calls itself (directly, mutually, as a while body or condition, as a
  // to_apply), naming the cycle, or when calls nest deeper than
  // kMaxCallDepth, naming the chain (see CheckCallGraph).
  std::vector<HloComputation*> MakeComputationPostOrder() const;

  // Number of SPMD partitions (devices per replica) and replicas; 1 = unset.
  int64_t num_partitions() const { return num_partitions_; }
  void set_num_partitions(int64_t n) { num_partitions_ = n; }
  int64_t replica_count() const { return replica_count_; }
  void set_replica_count(int64_t n) { replica_count_ = n; }

  // An instruction name not used yet in the module: `prefix`, or `base.N`
  // with the smallest free N (base = prefix without a ".N" suffix).
  // (Computation names are a separate namespace, as in XLA.)
  std::string UniqueName(std::string_view prefix) { return instruction_names_.Unique(prefix); }

  // Canonical HLO text (see printer.h).
  std::string ToString() const;

 private:
  struct NameSpace {
    std::unordered_set<std::string> taken;
    std::unordered_map<std::string, int64_t> next_suffix;  // per base name
    std::string Unique(std::string_view prefix);
  };
  void Uniquify(HloComputation* computation);

  std::string name_;
  std::vector<std::unique_ptr<HloComputation>> computations_;
  HloComputation* entry_ = nullptr;
  int64_t num_partitions_ = 1;
  int64_t replica_count_ = 1;
  NameSpace instruction_names_;
  NameSpace computation_names_;
};

// The one check of the call graph every command relies on: no computation
// calls itself, and no chain of calls is longer than kMaxCallDepth. Throws
// weft::Error naming the cycle or the chain. The verifier runs it (so every
// parsed module is checked), and so do the partitioner, the propagation and
// the executor for modules built in memory.
void CheckCallGraph(const HloModule& module);

}  // namespace weft
