// The backward of a scan (autodiff/scan_config.h): a while loop running the
// steps in reverse. Each backward step needs the forward step's values: with
// Remat::kNone the forward loop stacks the non-trivial ones (residuals)
// and the backward slices them; with kFull it stacks only the step's carry
// (and the values GradOptions::remat.save names: selective remat) and the
// backward recomputes the rest of the step from it. Trivial values (constants,
// broadcasts, reshapes, slices of the stacked inputs...) are always
// recomputed. The per-step input cotangents are written into [L, ...]
// accumulators with dynamic-update-slice; with GradOptions::shard_as these
// and the carry cotangents join shard_as groups with their forward
// counterparts.
#include <fmt/format.h>

#include <map>

#include "scan_plan.h"
#include "weft/base/algorithm.h"
#include "weft/base/error.h"

namespace weft::autodiff {

void JoinShardGroup(HloInstruction* instr, int64_t id) {
  if (id < 0 || (instr->has_sharding() && instr->sharding()->shard_group())) return;
  const HloSharding base = instr->has_sharding() ? *instr->sharding() : HloSharding::Unknown();
  instr->set_sharding(base.WithShardGroup(ShardGroup::As(id)));
}

namespace {

bool Cheap(const HloInstruction& x) {
  switch (x.opcode()) {
    case HloOpcode::kConstant:
    case HloOpcode::kIota:
    case HloOpcode::kBroadcast:
    case HloOpcode::kReshape:
    case HloOpcode::kTranspose:
    case HloOpcode::kConvert:
    case HloOpcode::kSlice:
    case HloOpcode::kDynamicSlice:
    case HloOpcode::kCompare:
    case HloOpcode::kCopy:
      return true;
    default:
      return false;
  }
}

Shape Stacked(int64_t length, const Shape& step) {
  std::vector<int64_t> dims = {length};
  dims.insert(dims.end(), step.dimensions().begin(), step.dimensions().end());
  return step.WithDimensions(dims);
}

std::vector<int64_t> WithLeadingOne(const Shape& s) {
  std::vector<int64_t> dims = {1};
  dims.insert(dims.end(), s.dimensions().begin(), s.dimensions().end());
  return dims;
}

// Start indices (i, 0, ..., 0) for a [L, ...] array of `rank`.
std::vector<HloInstruction*> StepIndices(HloComputationBuilder& b, HloInstruction* i,
                                         int64_t rank) {
  std::vector<HloInstruction*> idx = {i};
  HloInstruction* zero = b.ConstantScalar(i->shape().element_type(), 0);
  for (int64_t d = 1; d < rank; ++d) idx.push_back(zero);
  return idx;
}

HloInstruction* StepOf(HloComputationBuilder& b, HloInstruction* stacked, HloInstruction* i,
                       const Shape& step) {
  HloInstruction* s =
      b.DynamicSlice(stacked, StepIndices(b, i, stacked->shape().rank()), WithLeadingOne(step));
  return b.Reshape(s, step.dimensions());
}

HloInstruction* WriteStep(HloComputationBuilder& b, HloInstruction* stacked, HloInstruction* i,
                          HloInstruction* value) {
  HloInstruction* v = b.Reshape(value, WithLeadingOne(value->shape()));
  return b.DynamicUpdateSlice(stacked, v, StepIndices(b, i, stacked->shape().rank()));
}

// A residual: an array value of the forward body, or element `index` of a
// tuple-valued one (index -1 for arrays).
using ResidualKey = std::pair<const HloInstruction*, int64_t>;

// What the planner reads off the forward body.
struct BodyInfo {
  const HloComputation* body = nullptr;
  std::map<int64_t, const HloInstruction*> param_gte;  // state index -> gte
  std::vector<const HloInstruction*> xs_step;          // per xs: the step value (or null)
  std::vector<const HloInstruction*> ys_update;        // per ys: the DUS update (or null)
};

BodyInfo ReadBody(const HloInstruction& w, const ScanConfig& config) {
  BodyInfo info;
  info.body = w.while_body();
  const HloInstruction* param = info.body->parameter_instruction(0);
  for (const HloInstruction* i : info.body->instructions()) {
    WEFT_CHECK(i->opcode() != HloOpcode::kWhile,
               "autodiff: scan {} contains another loop ({}); nested scans are not supported",
               w.Describe(), i->Describe());
    if (i->opcode() == HloOpcode::kGetTupleElement && i->operand(0) == param) {
      WEFT_CHECK(!info.param_gte.count(i->tuple_index()),
                 "autodiff: scan body of {} reads state element {} twice; build it with Scan",
                 w.Describe(), i->tuple_index());
      info.param_gte[i->tuple_index()] = i;
    }
  }
  for (int64_t j = 0; j < config.num_xs; ++j) {
    const HloInstruction* step = nullptr;
    if (auto it = info.param_gte.find(config.xs_index(j)); it != info.param_gte.end()) {
      for (const HloInstruction* ds : it->second->users()) {
        if (ds->opcode() != HloOpcode::kDynamicSlice) continue;
        for (const HloInstruction* r : ds->users()) {
          if (r->opcode() == HloOpcode::kReshape) step = r;
        }
      }
    }
    info.xs_step.push_back(step);
  }
  const HloInstruction* root = info.body->root_instruction();
  WEFT_CHECK(root->opcode() == HloOpcode::kTuple,
             "autodiff: scan body of {} must end in a tuple; build it with Scan", w.Describe());
  for (int64_t j = 0; j < config.num_ys; ++j) {
    const HloInstruction* dus = root->operand(config.ys_index(j));
    info.ys_update.push_back(dus->opcode() == HloOpcode::kDynamicUpdateSlice ? dus->operand(1)
                                                                             : nullptr);
  }
  return info;
}

// Builds the backward body. In the dry run (residuals == nullptr on input of
// `known`), residual reads are placeholders and the keys are collected.
class BackwardBodyBuilder {
 public:
  BackwardBodyBuilder(ModuleEmitter& emitter, const HloInstruction& w, const BodyInfo& info,
                      ScanPlan& plan, bool dry, std::vector<ResidualKey>& residuals)
      : emitter_(emitter),
        w_(w),
        info_(info),
        plan_(plan),
        c_(plan.config),
        dry_(dry),
        residuals_(residuals),
        b_(fmt::format("{}.backward", info.body->name())) {}

  std::unique_ptr<HloComputation> Build() {
    const Shape& fwd_state = w_.shape();
    std::vector<Shape> state = {fwd_state.tuple_shapes(0)};
    for (int64_t j = 0; j < c_.num_carry; ++j)
      state.push_back(fwd_state.tuple_shapes(c_.carry_index(j)));
    for (int64_t j = 0; j < c_.num_xs; ++j) state.push_back(fwd_state.tuple_shapes(c_.xs_index(j)));
    for (int64_t j = 0; j < c_.num_consts; ++j)
      state.push_back(fwd_state.tuple_shapes(c_.consts_index(j)));
    if (!dry_) {
      for (const Shape& s : plan_.residual_shapes) state.push_back(Stacked(c_.length, s));
    }
    for (int64_t j = 0; j < c_.num_ys; ++j) state.push_back(fwd_state.tuple_shapes(c_.ys_index(j)));
    for (int64_t j : plan_.diff_xs) state.push_back(fwd_state.tuple_shapes(c_.xs_index(j)));
    const int64_t res_count = dry_ ? 0 : plan_.num_residuals();
    auto dys_pos = [&](int64_t j) { return plan_.bwd_res(res_count) + j; };
    auto acc_pos = [&](int64_t a) { return dys_pos(c_.num_ys) + a; };

    state_ = b_.Parameter(0, Shape::Tuple(state), "state");
    std::vector<HloInstruction*> elems;
    for (int64_t k = 0; k < static_cast<int64_t>(state.size()); ++k) {
      elems.push_back(b_.GetTupleElement(state_, k));
    }
    i_ = elems[0];

    ReversePass pass(
        b_, emitter_, [this](const HloInstruction* x) { return Resolve(x); },
        [this](const HloInstruction* x, int64_t k) { return ResolveElement(x, k); },
        [this](const HloInstruction*) -> ScanPlan* {
          Fail("autodiff: nested scans are not supported ({})", w_.Describe());
        });
    std::vector<const HloInstruction*> sources;
    for (int64_t j = 0; j < c_.num_carry; ++j) {
      if (auto it = info_.param_gte.find(c_.carry_index(j)); it != info_.param_gte.end()) {
        sources.push_back(it->second);
      }
    }
    for (int64_t j : plan_.diff_xs) {
      if (info_.xs_step[j]) sources.push_back(info_.xs_step[j]);
    }
    std::vector<std::pair<const HloInstruction*, std::vector<HloInstruction*>>> seeds;
    std::vector<HloInstruction*> root_ct(c_.state_size(), nullptr);
    for (int64_t j = 0; j < c_.num_carry; ++j) root_ct[c_.carry_index(j)] = elems[1 + j];
    seeds.push_back({info_.body->root_instruction(), root_ct});
    for (int64_t j = 0; j < c_.num_ys; ++j) {
      if (!info_.ys_update[j]) continue;
      HloInstruction* dys = elems[dys_pos(j)];
      HloInstruction* s = b_.DynamicSlice(dys, StepIndices(b_, i_, dys->shape().rank()),
                                          info_.ys_update[j]->shape().dimensions());
      seeds.push_back({info_.ys_update[j], {s}});
    }
    pass.Run(*info_.body, sources, seeds);

    std::vector<HloInstruction*> out = {
        b_.Subtract(i_, b_.ConstantScalar(i_->shape().element_type(), 1))};
    for (int64_t j = 0; j < c_.num_carry; ++j) {
      HloInstruction* d = nullptr;
      if (auto it = info_.param_gte.find(c_.carry_index(j)); it != info_.param_gte.end()) {
        d = pass.Cotangent(it->second);
      }
      if (!d) d = pass.Zeros(elems[1 + j]->shape());
      if (!dry_) {
        JoinShardGroup(elems[1 + j], plan_.carry_group[j]);
        JoinShardGroup(d, plan_.carry_group[j]);
      }
      out.push_back(d);
    }
    for (int64_t k = 1 + c_.num_carry; k < dys_pos(c_.num_ys); ++k) out.push_back(elems[k]);
    for (int64_t a = 0; a < static_cast<int64_t>(plan_.diff_xs.size()); ++a) {
      HloInstruction* acc = elems[acc_pos(a)];
      const HloInstruction* step = info_.xs_step[plan_.diff_xs[a]];
      HloInstruction* ct = step ? pass.Cotangent(step) : nullptr;
      HloInstruction* updated = ct ? WriteStep(b_, acc, i_, ct) : acc;
      if (!dry_) {
        JoinShardGroup(acc, plan_.xs_group[a]);
        JoinShardGroup(updated, plan_.xs_group[a]);
      }
      out.push_back(updated);
    }
    std::unique_ptr<HloComputation> built = b_.Build(b_.Tuple(out));
    built->RemoveDeadInstructions();
    return built;
  }

 private:
  // The forward value of body instruction `x` inside the backward step.
  HloInstruction* Resolve(const HloInstruction* x) {
    if (auto it = memo_.find(x); it != memo_.end()) return it->second;
    HloInstruction* v = nullptr;
    const HloInstruction* param = info_.body->parameter_instruction(0);
    WEFT_INTERNAL_CHECK(x != param, "autodiff: scan body state used whole in {}", w_.Describe());
    if (x->opcode() == HloOpcode::kGetTupleElement && x->operand(0) == param) {
      const int64_t k = x->tuple_index();
      if (k == 0) {
        v = i_;
      } else if (k < c_.xs_index(0)) {
        v = Saved({x, -1});
      } else if (k < c_.ys_index(0)) {
        v = b_.GetTupleElement(state_, k);  // xs and consts sit at the same positions
      } else {
        Fail(
            "autodiff: the scan body of {} reads its stacked output {} for something other "
            "than writing it; not supported",
            w_.Describe(), k);
      }
    } else if (x->opcode() == HloOpcode::kGetTupleElement && !Cheap(*x->operand(0))) {
      v = ResolveElement(x->operand(0), x->tuple_index());
    } else if ((plan_remat_none() || SavedByName(*x)) && !Cheap(*x) && x->shape().IsArray()) {
      v = Saved({x, -1});
    } else {
      std::vector<HloInstruction*> ops;
      for (const HloInstruction* op : x->operands()) ops.push_back(Resolve(op));
      v = CloneInstruction(b_, emitter_, *x, std::move(ops));
      // A recomputed value keeps its constraint but not its group membership
      // (an instruction belongs to one group; the original stays the member).
      if (v->has_sharding()) v->set_sharding(v->sharding()->WithShardGroup(std::nullopt));
    }
    memo_[x] = v;
    return v;
  }

  HloInstruction* ResolveElement(const HloInstruction* x, int64_t index) {
    if ((plan_remat_none() || SavedByName(*x)) && !Cheap(*x)) return Saved({x, index});
    return b_.GetTupleElement(Resolve(x), index);
  }

  bool plan_remat_none() const { return emitter_.options().remat.kind == Remat::kNone; }
  // Selective remat: a value named in GradOptions::remat.save or
  // remat.offload is stacked.
  bool SavedByName(const HloInstruction& x) const {
    for (const std::vector<std::string>* names :
         {&emitter_.options().remat.save, &emitter_.options().remat.offload}) {
      if (Contains(*names, x.name())) return true;
    }
    return false;
  }

  HloInstruction* Saved(ResidualKey key) {
    if (auto it = saved_.find(key); it != saved_.end()) return it->second;
    const Shape& shape =
        key.second < 0 ? key.first->shape() : key.first->shape().tuple_shapes(key.second);
    HloInstruction* v = nullptr;
    if (dry_) {
      residuals_.push_back(key);
      v = b_.Parameter(static_cast<int64_t>(residuals_.size()), shape, "residual");
    } else {
      const auto it = std::find(residuals_.begin(), residuals_.end(), key);
      WEFT_INTERNAL_CHECK(it != residuals_.end(), "autodiff: residual {} was not planned",
                          key.first->Describe());
      const int64_t r = it - residuals_.begin();
      v = StepOf(b_, b_.GetTupleElement(state_, plan_.bwd_res(r)), i_, shape);
    }
    saved_[key] = v;
    return v;
  }

  ModuleEmitter& emitter_;
  const HloInstruction& w_;
  const BodyInfo& info_;
  ScanPlan& plan_;
  const ScanConfig& c_;
  bool dry_;
  std::vector<ResidualKey>& residuals_;
  HloComputationBuilder b_;
  HloInstruction* state_ = nullptr;
  HloInstruction* i_ = nullptr;
  std::unordered_map<const HloInstruction*, HloInstruction*> memo_;
  std::map<ResidualKey, HloInstruction*> saved_;
};

// The forward condition over the augmented state.
HloComputation* AugmentCondition(ModuleEmitter& emitter, const HloComputation& cond,
                                 const Shape& state) {
  HloComputationBuilder b(cond.name() + ".saving");
  std::unordered_map<const HloInstruction*, HloInstruction*> map;
  for (const HloInstruction* x : cond.instructions()) {
    if (x->opcode() == HloOpcode::kParameter) {
      map[x] = b.Parameter(0, state, x->name());
      continue;
    }
    std::vector<HloInstruction*> ops;
    for (const HloInstruction* op : x->operands()) ops.push_back(map.at(op));
    map[x] = CloneInstruction(b, emitter, *x, std::move(ops));
  }
  return emitter.out().AddComputation(b.Build(map.at(cond.root_instruction())));
}

// The forward body that also stacks the residuals.
HloComputation* AugmentBody(ModuleEmitter& emitter, const BodyInfo& info, const ScanPlan& plan,
                            const std::vector<ResidualKey>& residuals, const Shape& state) {
  const HloComputation& body = *info.body;
  HloComputationBuilder b(body.name() + ".saving");
  std::unordered_map<const HloInstruction*, HloInstruction*> map;
  const HloInstruction* root = body.root_instruction();
  HloInstruction* param = nullptr;
  for (const HloInstruction* x : body.instructions()) {
    if (x == root) continue;
    if (x->opcode() == HloOpcode::kParameter) {
      map[x] = param = b.Parameter(0, state, x->name());
      continue;
    }
    std::vector<HloInstruction*> ops;
    for (const HloInstruction* op : x->operands()) ops.push_back(map.at(op));
    map[x] = CloneInstruction(b, emitter, *x, std::move(ops));
  }
  for (int64_t j = 0; j < plan.config.num_carry; ++j) {
    if (auto it = info.param_gte.find(plan.config.carry_index(j)); it != info.param_gte.end()) {
      JoinShardGroup(map.at(it->second), plan.carry_group[j]);
    }
  }
  HloInstruction* i =
      info.param_gte.count(0) ? map.at(info.param_gte.at(0)) : b.GetTupleElement(param, 0);
  std::vector<HloInstruction*> out;
  for (const HloInstruction* op : root->operands()) out.push_back(map.at(op));
  const int64_t n = plan.config.state_size();
  for (int64_t r = 0; r < static_cast<int64_t>(residuals.size()); ++r) {
    const auto& [x, index] = residuals[r];
    HloInstruction* v = index < 0 ? map.at(x) : b.GetTupleElement(map.at(x), index);
    out.push_back(WriteStep(b, b.GetTupleElement(param, n + r), i, v));
  }
  std::unique_ptr<HloComputation> built = b.Build(b.Tuple(out));
  built->RemoveDeadInstructions();
  return emitter.out().AddComputation(std::move(built));
}

HloComputation* BackwardCondition(ModuleEmitter& emitter, const std::string& name,
                                  const Shape& state) {
  HloComputationBuilder b(name);
  HloInstruction* p = b.Parameter(0, state, "state");
  HloInstruction* i = b.GetTupleElement(p, 0);
  b.Compare(i, b.ConstantScalar(i->shape().element_type(), 0), ComparisonDirection::kGe);
  return emitter.out().AddComputation(b.Build());
}

}  // namespace

std::unique_ptr<ScanPlan> PlanScan(ModuleEmitter& emitter, const HloInstruction& w,
                                   const std::vector<bool>& xs_needs_grad) {
  std::optional<ScanConfig> config = ScanConfigOf(w);
  WEFT_CHECK(config.has_value(),
             "autodiff: {} is a while loop that is not a scan; only loops built by Scan "
             "(models/scan.h, a \"scan\" backend_config) are differentiable",
             w.Describe());
  auto plan = std::make_unique<ScanPlan>();
  plan->config = *config;
  const ScanConfig& c = plan->config;
  for (int64_t j = 0; j < c.num_carry; ++j) {
    const Shape& s = w.shape().tuple_shapes(c.carry_index(j));
    WEFT_CHECK(s.IsArray() && IsFloatingPoint(s.element_type()),
               "autodiff: scan {} carry {} is {}; carries must be floating-point arrays (pass "
               "integer values as consts)",
               w.Describe(), j, s.ToString());
  }
  const bool groups = emitter.options().shard_as;
  const HloInstruction* init = w.operand(0);
  WEFT_CHECK(init->opcode() == HloOpcode::kTuple,
             "autodiff: scan {} must take a tuple instruction as its state", w.Describe());
  for (int64_t j = 0; j < c.num_xs; ++j) {
    if (!xs_needs_grad[j]) continue;
    plan->diff_xs.push_back(j);
    int64_t id = -1;
    if (groups) {
      const HloInstruction* xs = init->operand(c.xs_index(j));
      id = xs->has_sharding() && xs->sharding()->shard_group() ? xs->sharding()->shard_group()->id
                                                               : emitter.NewShardGroupId();
    }
    plan->xs_group.push_back(id);
  }
  for (int64_t j = 0; j < c.num_carry; ++j) {
    plan->carry_group.push_back(groups ? emitter.NewShardGroupId() : -1);
  }

  const BodyInfo info = ReadBody(w, c);
  std::vector<ResidualKey> residuals;
  {
    BackwardBodyBuilder dry(emitter, w, info, *plan, /*dry=*/true, residuals);
    dry.Build();  // discarded: only the residual list is wanted
  }
  const std::vector<std::string>& offload = emitter.options().remat.offload;
  for (const auto& [x, index] : residuals) {
    if (Contains(offload, x->name())) {
      plan->offloaded_state.push_back(c.state_size() + plan->num_residuals());
    }
    plan->residual_shapes.push_back(index < 0 ? x->shape() : x->shape().tuple_shapes(index));
  }
  BackwardBodyBuilder real(emitter, w, info, *plan, /*dry=*/false, residuals);
  std::unique_ptr<HloComputation> bwd_body = real.Build();
  const Shape bwd_state = bwd_body->parameter_instruction(0)->shape();
  plan->backward_condition =
      BackwardCondition(emitter, w.while_condition()->name() + ".backward", bwd_state);
  plan->backward_body = emitter.out().AddComputation(std::move(bwd_body));

  std::vector<Shape> fwd_state = w.shape().tuple_shapes();
  for (const Shape& s : plan->residual_shapes) fwd_state.push_back(Stacked(c.length, s));
  const Shape state = Shape::Tuple(fwd_state);
  plan->forward_condition = AugmentCondition(emitter, *w.while_condition(), state);
  plan->forward_body = AugmentBody(emitter, info, *plan, residuals, state);
  return plan;
}

namespace {

// The while vjp: runs the planned backward loop and hands the carry and
// stacked-input cotangents to the scan's state tuple.
void While(VjpContext& ctx, const HloInstruction& f, std::span<HloInstruction* const> ct) {
  ScanPlan* plan = ctx.PlanFor(&f);
  const ScanConfig& c = plan->config;
  const HloInstruction* init = f.operand(0);
  HloComputationBuilder& b = ctx.b();
  HloInstruction* fwd = ctx.Primal(&f);  // the augmented loop

  std::vector<HloInstruction*> state = {
      b.ConstantScalar(f.shape().tuple_shapes(0).element_type(), c.length - 1)};
  for (int64_t j = 0; j < c.num_carry; ++j) {
    HloInstruction* d = ct[c.carry_index(j)];
    state.push_back(d ? d : ctx.Zeros(f.shape().tuple_shapes(c.carry_index(j))));
  }
  for (int64_t j = 0; j < c.num_xs; ++j) state.push_back(ctx.Primal(init->operand(c.xs_index(j))));
  for (int64_t j = 0; j < c.num_consts; ++j) {
    WEFT_CHECK(!ctx.NeedsGrad(init->operand(c.consts_index(j))),
               "autodiff: scan {} const {} depends on a differentiated parameter; pass it as a "
               "stacked input (xs) or carry to differentiate it",
               f.Describe(), j);
    state.push_back(ctx.Primal(init->operand(c.consts_index(j))));
  }
  for (int64_t r = 0; r < plan->num_residuals(); ++r) {
    state.push_back(b.GetTupleElement(fwd, c.state_size() + r));
  }
  for (int64_t j = 0; j < c.num_ys; ++j) {
    HloInstruction* d = ct[c.ys_index(j)];
    state.push_back(d ? d : ctx.Zeros(f.shape().tuple_shapes(c.ys_index(j))));
  }
  for (size_t a = 0; a < plan->diff_xs.size(); ++a) {
    const int64_t j = plan->diff_xs[a];
    HloInstruction* d = ct[c.xs_index(j)];  // the loop's unchanged xs output, if used
    HloInstruction* acc = d ? d : ctx.Zeros(f.shape().tuple_shapes(c.xs_index(j)));
    JoinShardGroup(acc, plan->xs_group[a]);
    JoinShardGroup(state[1 + c.num_carry + j], plan->xs_group[a]);
    state.push_back(acc);
  }
  HloInstruction* loop = b.While(b.Tuple(state), plan->backward_condition, plan->backward_body);
  for (int64_t j = 0; j < c.num_carry; ++j) {
    ctx.Accumulate(init, b.GetTupleElement(loop, 1 + j), c.carry_index(j));
  }
  for (size_t a = 0; a < plan->diff_xs.size(); ++a) {
    HloInstruction* g = b.GetTupleElement(loop, plan->bwd_acc(static_cast<int64_t>(a)));
    JoinShardGroup(g, plan->xs_group[a]);
    ctx.Accumulate(init, g, c.xs_index(plan->diff_xs[a]));
  }
}

}  // namespace

void RegisterWhileVjps(VjpTable& t) { t.Register(HloOpcode::kWhile, While); }

}  // namespace weft::autodiff
