// Internal: the state of one PropagateShardings run, shared by
// sharding_propagation.cc (driver, while/call agreement, options),
// infer_sharding.cc (forward/backward inference per op) and shard_groups.cc.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "weft/spmd/op_sharding_rule.h"
#include "weft/spmd/sharding_propagation.h"

namespace weft::spmd {

struct ShardGroupInfo {
  int64_t id = 0;
  bool shard_as = true;
  std::vector<HloInstruction*> members;  // program order
};

struct DecisionSource {
  DecisionKind kind;
  const HloInstruction* source = nullptr;
  std::string_view rule;
};

// Operand `k` of `user`, `instr`, and the sharding `user` has or proposes:
// what backward inference reads of one use.
struct UserEdge {
  const HloInstruction& instr;
  const HloInstruction& user;
  const HloSharding& user_sharding;
  int64_t k;
};

class Propagator {
 public:
  Propagator(HloModule& module, const PropagationOptions& options, PropagationResult* result);
  void Run();

  // --- Run's steps (sharding_propagation.cc) ---
  // The output / parameter flags: checked against the entry, summarized.
  void ReadOptions(const HloComputation& entry);
  // Every instruction indexed, callees first, each computation in post order.
  void IndexInstructions();
  // Sharding custom calls: unspecified dims; an unsharded operand takes the
  // annotation as a starting point (not fixed: propagation may improve it).
  void ApplyShardingCustomCalls();
  // While / call / conditional: related instructions start with one sharding.
  void AgreeCalledComputations();
  // What the user fixed; keeps the root's and parameters' shardings.
  void MarkProvided(HloComputation& entry);
  // Per-sweep "nothing new to learn" flags, per instruction.
  struct Sweep {
    std::vector<char> done_group, done_fwd, done_bwd;
  };
  // After `hlo` changed: its neighbours (users of `for_users`) look again.
  void ClearCache(Sweep& sweep, HloInstruction* hlo, HloInstruction* for_users);
  // While / call agreement after `instr` changed.
  void Agree(Sweep& sweep, HloInstruction* instr);
  // What one sweep does at each instruction of a computation, in post order
  // or (`reverse`) its reverse: `before` first, whatever the flags; then, for
  // instructions it `applies` to (all when empty) and not `done`: a provided
  // one's unspecified dims refined (levels above 0), any other inferred;
  // what changes is agreed across calls and its neighbours look again.
  struct SweepStep {
    std::vector<char> Sweep::*done = nullptr;
    bool reverse = false;
    std::function<void(HloInstruction*)> before = {};
    std::function<bool(const HloInstruction*)> applies = {};
    std::function<bool(HloInstruction*)> refine_unspecified = {};
    std::function<bool(HloInstruction*)> infer = {};
  };
  // Returns whether anything changed.
  bool SweepOnce(Sweep& sweep, const std::vector<HloInstruction*>& order, int level,
                 const SweepStep& step);
  // The three sweeps over a computation: shard groups, forward, backward.
  bool SweepShardGroups(Sweep& sweep, const std::vector<HloInstruction*>& order, int level);
  bool SweepForward(Sweep& sweep, const std::vector<HloInstruction*>& order, int level);
  bool SweepBackward(Sweep& sweep, const std::vector<HloInstruction*>& order, int level);
  // Sweeps every computation until nothing changes at `level`.
  void RunToFixPoint(int level);
  // Outputs and parameters the options do not let propagation decide.
  void ApplyOutputAndParameterOptions(HloComputation& entry);

  // --- infer_sharding.cc ---
  bool InferFromOperands(HloInstruction* instr, int level);
  // InferFromOperands' steps: manual regions (nullopt: not one of theirs),
  // ops without spatial partitioning (a replicated operand), then by op.
  std::optional<bool> InferFromManualOperands(HloInstruction* instr, int level);
  bool InferFromReplicatedOperand(HloInstruction* instr, bool may_combine);
  bool InferGetTupleElement(HloInstruction* instr, bool may_combine, bool aggressive);
  bool InferTuple(HloInstruction* instr);
  // while, conditional (from the branches' roots), a called parameter.
  bool InferFromCaller(HloInstruction* instr, bool may_combine);
  bool InferDotFromOperands(HloInstruction* instr, bool may_combine);
  // A convolution read as a dot (ParseConvolutionDims) where it is one, or
  // where neither operand splits a true convolution spatial dim and it has
  // no groups; otherwise from the input alone (XLA's rule): as the input
  // where the kernel is small and the input features are whole, else only
  // the batch.
  bool InferConvolutionFromOperands(HloInstruction* instr, bool may_combine);
  // broadcast, concatenate, reduce, dynamic-slice, dynamic-update-slice.
  bool InferShapeOpFromOperands(HloInstruction* instr, int level, bool may_combine,
                                bool aggressive);
  // topk, reduce-window, select-and-scatter, bitcast-convert, custom calls.
  bool InferFromRuleOperands(HloInstruction* instr, bool may_combine, bool aggressive);
  // sort: every result from the most specific operand (XLA's rule).
  bool InferSortFromOperands(HloInstruction* instr, bool may_combine, bool aggressive);
  // gather: from the indices, then the operand; scatter: result j from
  // operand j, then (when the indices or an update are split) from the
  // indices and update j.
  bool InferGatherScatter(HloInstruction* instr, bool may_combine);
  // Elementwise ops from every operand, others from one representative.
  bool InferFromRepresentativeOperand(HloInstruction* instr, bool may_combine, bool aggressive);
  // Operand k's sharding projected onto result leaf `leaf` (nullopt: none).
  std::optional<HloSharding> FromOperand(const HloInstruction* instr, int64_t k, int64_t leaf = 0);
  DecisionSource ForwardWhy(const HloInstruction* instr, const HloInstruction* source);
  bool InferFromUsers(HloInstruction* instr, int level);
  // The sharding `user` (with `user_sharding`) asks of its operand `instr`.
  std::optional<HloSharding> ShardingFromUser(const HloInstruction& instr,
                                              const HloInstruction& user,
                                              const HloSharding& user_sharding, int level);
  // ShardingFromUser's steps for users with a rule: result leaf `leaf`'s
  // sharding projected onto the operand; then per op, refined by the other
  // operands where they are tied to it.
  std::optional<HloSharding> ProjectFromUser(const UserEdge& edge, int64_t leaf = 0);
  std::optional<HloSharding> DynamicSliceOperandFromUser(const UserEdge& edge);
  std::optional<HloSharding> DotOperandFromUser(const UserEdge& edge, bool may_combine);
  std::optional<HloSharding> ReduceInputFromUser(const UserEdge& edge);
  // A gather's operand: nothing where the result is split only along dims
  // the operand does not share (XLA gives it no candidate then).
  std::optional<HloSharding> GatherOperandFromUser(const UserEdge& edge);
  // A scatter's operand j: result j. Its indices: what the split updates
  // imply, merged. Its update j: what result j implies, refined by the indices.
  std::optional<HloSharding> ScatterOperandFromUser(const UserEdge& edge);
  // sort, topk, reduce-window, select-and-scatter, bitcast-convert, custom calls.
  std::optional<HloSharding> RuleOperandFromUser(const UserEdge& edge, bool may_combine);
  // An annotation's unspecified dims refined from its operand / users. An
  // annotation whose only user is a manual conversion (SPMDFullToShardShape,
  // SPMDShardToFullShape) with the same unspecified dims is refined as a pair
  // with it: the users are the conversion's, and what refines the auto side
  // refines the manual side's non-manual dims too (XLA's
  // RefineManualAutoShardingFromAuto / FromManual).
  bool RefineUnspecifiedFromOperand(HloInstruction* instr);
  bool RefineUnspecifiedFromUsers(HloInstruction* instr, int level);
  // Refines the pair (annotation `instr`, its conversion) with `proposal`,
  // a sharding of the pair's auto side (from_auto) or manual side.
  bool RefinePairAlong(HloInstruction* instr, const HloSharding& proposal, bool from_auto,
                       const HloInstruction* source);
  HloInstruction* ManualConversionOf(const HloInstruction* annotation) const;

  // --- shard_groups.cc ---
  void CollectShardGroups();
  void CheckExplicitGroupConflicts() const;
  bool InferFromShardGroup(HloInstruction* instr, int level);
  bool RefineUnspecifiedFromGroup(HloInstruction* instr);
  void AlignShardAsGroups();

  // --- helpers (sharding_propagation.cc) ---
  int32_t Index(const HloInstruction* instr) const { return index_.at(instr); }
  const OpShardingRule* Rule(const HloInstruction* instr);
  // Moves `sharding` of tensor `from` of `instr` to tensor `to` through its rule.
  std::optional<HloSharding> Project(const HloInstruction* instr, TensorRef from,
                                     const HloSharding& sharding, TensorRef to);
  std::span<const int64_t> Dims(const HloInstruction* instr, TensorRef ref) const;
  // XLA's MaybeImproveInstructionSharding, recording the decision.
  bool Improve(HloInstruction* instr, HloSharding proposed, bool may_combine, bool aggressive,
               const DecisionSource& why);
  // Same for one leaf of a tuple-shaped instruction.
  bool ImproveLeaf(HloInstruction* instr, int64_t leaf, HloSharding proposed, bool may_combine,
                   bool aggressive, const DecisionSource& why);
  void SetSharding(HloInstruction* instr, std::optional<HloSharding> sharding,
                   const DecisionSource& why);
  bool IsProvided(const HloInstruction* instr) const { return provided_[Index(instr)]; }
  bool SupportsSpatialPartitioning(const HloInstruction* instr, bool allow_output,
                                   bool allow_params) const;
  int64_t NonRootUsers(const HloInstruction* instr) const;
  bool InComputationMap(const HloComputation* c) const { return computation_map_.count(c) > 0; }
  const std::vector<int64_t>* UnspecifiedDims(const HloInstruction* instr) const;
  std::optional<HloSharding> LookaheadUserSharding(HloInstruction* instr);

  HloModule& module_;
  const PropagationOptions& options_;
  PropagationResult* result_;
  int64_t round_ = 0;
  int level_ = 0;
  bool allow_output_any_ = false, allow_params_any_ = false;
  // The entry's root and parameter shardings as given (MarkProvided).
  std::optional<HloSharding> saved_root_;
  std::vector<std::optional<HloSharding>> saved_params_;

  std::vector<HloComputation*> computations_;
  std::vector<std::vector<HloInstruction*>> post_orders_;
  std::unordered_map<const HloInstruction*, int32_t> index_;
  std::vector<HloInstruction*> instrs_;
  std::vector<char> provided_;
  std::vector<char> rule_built_;
  std::vector<std::unique_ptr<OpShardingRule>> rules_;
  // Last projections per instruction: the same sharding is proposed through
  // the same op in every sweep, so remember input -> output.
  struct CachedProjection {
    TensorRef from, to;
    HloSharding input;
    std::optional<HloSharding> output;
  };
  std::vector<std::vector<CachedProjection>> projection_cache_;
  std::unordered_map<const HloInstruction*, std::vector<int64_t>> unspecified_dims_;
  // Operands whose sharding only a Sharding annotation gave (not fixed).
  std::unordered_set<const HloInstruction*> seeded_;
  // Annotation -> the manual conversion refined with it (see RefinePairAlong).
  std::unordered_map<const HloInstruction*, HloInstruction*> manual_conversion_;
  // Computation -> the while / call that runs it.
  std::unordered_map<const HloComputation*, HloInstruction*> computation_map_;

  std::vector<ShardGroupInfo> groups_;
  std::vector<int32_t> group_of_;  // per instruction: index into groups_, or -1
};

// "unspecified_dims=[0,2]" in a custom call's backend_config or frontend
// attributes; nullopt if absent. Throws weft::Error if malformed.
std::optional<std::vector<int64_t>> ParseUnspecifiedDims(const HloInstruction& instr);

bool IsCustomCall(const HloInstruction& instr, std::string_view target);
// The operand of `conditional` that `branch`'s parameter receives: 1 + the
// first branch index that runs `branch`.
int64_t BranchArgumentIndex(const HloInstruction& conditional, const HloComputation& branch);
// Leaves of tuple element `index` start at this leaf.
int64_t LeafOffset(const Shape& tuple, int64_t index);
// Leaf `leaf` of `sharding` on `shape` (a non-tuple sharding applies to all).
HloSharding LeafSharding(const HloSharding& sharding, int64_t leaf);
// A tuple sharding with `leaf` replaced.
HloSharding WithLeaf(const std::optional<HloSharding>& sharding, const Shape& shape, int64_t leaf,
                     const HloSharding& value);

}  // namespace weft::spmd
