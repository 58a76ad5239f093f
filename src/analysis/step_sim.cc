#include "weft/analysis/step_sim.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "weft/analysis/collective_plan.h"
#include "weft/analysis/cost_model.h"
#include "weft/analysis/loops.h"
#include "weft/base/algorithm.h"
#include "weft/base/error.h"
#include "weft/compiler/all_to_all_layout.h"
#include "weft/compiler/schedule.h"
#include "weft/hlo/custom_call_targets.h"

namespace weft::analysis {
namespace {

using runtime::CollectiveKind;

// Instructions a chip's compiler turns into views or nothing: a transpose
// the all-to-all before it wrote in its layout is one too.
bool TakesNoTime(const HloInstruction& instr) {
  switch (instr.opcode()) {
    case HloOpcode::kParameter:
    case HloOpcode::kConstant:
    case HloOpcode::kTuple:
    case HloOpcode::kGetTupleElement:
    case HloOpcode::kReshape:
      return true;
    case HloOpcode::kTranspose:
      return compiler::ForwardsAllToAll(instr);
    case HloOpcode::kCustomCall:  // a buffer, not written
      return instr.attrs().custom_call_target == kAllocateBufferTarget;
    default:
      return false;
  }
}

int64_t Bytes(const Shape& s) { return s.ByteSize(); }

bool IsHalfFloat(PrimitiveType type) {
  return type == PrimitiveType::kBF16 || type == PrimitiveType::kF16;
}

// The chip's matrix peak for operands of `type`: bf16's for 16-bit floats.
double MatrixPeak(const Chip& chip, PrimitiveType type) {
  return IsHalfFloat(type) ? chip.peak_flops_bf16 : chip.peak_flops_f32;
}

int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Padded FLOPs of a dot: 2 x batch x M x N x K with M, N, K rounded up to the tile.
double PaddedDotFlops(const HloInstruction& dot, const std::array<int64_t, 3>& tile) {
  const DotDimensionNumbers& dn = dot.attrs().dot;
  const Shape& lhs = dot.operand(0)->shape();
  const Shape& rhs = dot.operand(1)->shape();
  auto product_except = [](const Shape& s, const std::vector<int64_t>& a,
                           const std::vector<int64_t>& b) {
    int64_t n = 1;
    for (int64_t d = 0; d < s.rank(); ++d) {
      if (!Contains(a, d) && !Contains(b, d)) {
        n *= s.dimensions(d);
      }
    }
    return n;
  };
  int64_t batch = 1, k = 1;
  for (int64_t d : dn.lhs_batch_dims) batch *= lhs.dimensions(d);
  for (int64_t d : dn.lhs_contracting_dims) k *= lhs.dimensions(d);
  const int64_t m = product_except(lhs, dn.lhs_batch_dims, dn.lhs_contracting_dims);
  const int64_t n = product_except(rhs, dn.rhs_batch_dims, dn.rhs_contracting_dims);
  return 2.0 * static_cast<double>(batch) * static_cast<double>(RoundUp(m, tile[0])) *
         static_cast<double>(RoundUp(n, tile[1])) * static_cast<double>(RoundUp(k, tile[2]));
}

// Bytes an unfused instruction (or a fused computation's parameter's
// users) moves to and from memory.
int64_t MemoryBytes(const HloInstruction& instr) {
  switch (instr.opcode()) {
    case HloOpcode::kSlice:
    case HloOpcode::kDynamicSlice:
      return 2 * Bytes(instr.shape());
    case HloOpcode::kDynamicUpdateSlice:  // in place: read and write the update
      return 2 * Bytes(instr.operand(1)->shape());
    case HloOpcode::kGather:
      return 2 * Bytes(instr.shape()) + Bytes(instr.operand(1)->shape());
    case HloOpcode::kScatter:
      return 3 * Bytes(instr.operand(2)->shape()) + Bytes(instr.operand(1)->shape());
    default: {
      int64_t n = Bytes(instr.shape());
      for (const HloInstruction* o : instr.operands()) n += Bytes(o->shape());
      return n;
    }
  }
}

// A fusion's bytes: each parameter read whole, unless every use inside
// reads part of it (slices, gathers: those parts), or it is updated in
// place by the root's dynamic-update-slice (then only the update moves).
int64_t FusionBytes(const HloInstruction& fusion) {
  const HloComputation& c = *fusion.fused_computation();
  const HloInstruction* root = c.root_instruction();
  const HloInstruction* in_place = nullptr;
  int64_t n = Bytes(fusion.shape());
  if (root->opcode() == HloOpcode::kDynamicUpdateSlice &&
      root->operand(0)->opcode() == HloOpcode::kParameter) {
    in_place = root->operand(0);
    n = Bytes(root->operand(1)->shape());
  }
  for (const HloInstruction* param : c.parameter_instructions()) {
    if (param == in_place) continue;
    int64_t partial = 0;
    bool whole = param->users().empty();
    for (const HloInstruction* u : param->users()) {
      const HloOpcode op = u->opcode();
      if ((op == HloOpcode::kSlice || op == HloOpcode::kDynamicSlice || op == HloOpcode::kGather) &&
          u->operand(0) == param) {
        partial += Bytes(u->shape());
      } else {
        whole = true;
      }
    }
    n += whole ? Bytes(param->shape()) : partial;
  }
  return n;
}

// MFU's peak (StepTime::peak_flops): the peak of the operand type most
// matrix FLOPs of the program use, each instruction counted once.
double ProgramMatrixPeak(const HloModule& program, const Chip& chip);

const HloInstruction* DotIn(const HloInstruction& instr) {
  if (instr.opcode() == HloOpcode::kDot) return &instr;
  if (instr.opcode() != HloOpcode::kFusion) return nullptr;
  for (const HloInstruction* inner : instr.fused_computation()->instructions()) {
    if (inner->opcode() == HloOpcode::kDot) return inner;
  }
  return nullptr;
}

bool IsAttention(const HloInstruction& instr) {
  return instr.opcode() == HloOpcode::kCustomCall &&
         (instr.attrs().custom_call_target == kFlexAttentionTarget ||
          instr.attrs().custom_call_target == kFlexAttentionBackwardTarget);
}

double ProgramMatrixPeak(const HloModule& program, const Chip& chip) {
  double half = 0, other = 0;
  for (const HloComputation* c : program.computations()) {
    for (const HloInstruction* instr : c->instructions()) {
      const HloInstruction* dot = DotIn(*instr);
      if (dot == nullptr && !IsAttention(*instr) && instr->opcode() != HloOpcode::kConvolution) {
        continue;
      }
      const FlopCount f = InstructionFlops(dot ? *dot : *instr);
      const double flops = f.dot + f.attention_forward + f.attention_backward;
      const PrimitiveType t = (dot ? dot : instr)->operand(0)->shape().element_type();
      (IsHalfFloat(t) ? half : other) += flops;
    }
  }
  return half > other ? chip.peak_flops_bf16 : chip.peak_flops_f32;
}

// The slice's torus: near-square (2D) or near-cubic (3D) factors of its chips.
std::vector<int64_t> TorusDims(int64_t chips, int rank) {
  std::vector<int64_t> dims;
  int64_t rest = chips;
  for (int left = rank; left > 1; --left) {
    const double target = std::pow(static_cast<double>(rest), 1.0 / left);
    int64_t best = 1;
    for (int64_t a = 1; a <= rest; ++a) {
      if (rest % a == 0 && static_cast<double>(a) <= target + 1e-9) best = a;
    }
    dims.push_back(best);
    rest /= best;
  }
  dims.push_back(rest);
  return dims;
}

double IciBandwidth(const Chip& chip, const std::vector<int64_t>& group, int64_t per_slice) {
  if (chip.ici_topology == Chip::Topology::kSwitch || chip.ici_links <= 0) {
    return chip.ici_bytes_per_s;
  }
  const int rank = chip.ici_topology == Chip::Topology::kTorus3d ? 3 : 2;
  const std::vector<int64_t> dims = TorusDims(per_slice, rank);
  auto coords = [&](int64_t device) {
    std::vector<int64_t> c(dims.size());
    int64_t local = device % per_slice;
    for (size_t i = dims.size(); i-- > 0;) {
      c[i] = local % dims[i];
      local /= dims[i];
    }
    return c;
  };
  const std::vector<int64_t> first = coords(group[0]);
  std::vector<bool> spans(dims.size(), false);
  for (int64_t d : group) {
    const std::vector<int64_t> c = coords(d);
    for (size_t i = 0; i < dims.size(); ++i) spans[i] = spans[i] || c[i] != first[i];
  }
  int64_t axes = 0;
  for (bool s : spans) axes += s ? 1 : 0;
  const double per_link = chip.ici_bytes_per_s / static_cast<double>(chip.ici_links);
  return per_link *
         static_cast<double>(std::min<int64_t>(chip.ici_links, 2 * std::max<int64_t>(axes, 1)));
}

InstructionCost CollectiveCost(const HloModule& program, const HloInstruction& instr,
                               const Chip& chip, const SimOptions& o) {
  CollectivePlanOptions co;
  co.num_devices = o.num_devices;
  co.slices = o.slices;
  const DeviceCollective c = CollectiveOnDevice(program, instr, o.device, co);
  InstructionCost cost;
  cost.bound = "link";
  const int64_t g = static_cast<int64_t>(c.group.size());
  cost.stream = c.crosses_slices ? Stream::kDcn : Stream::kIci;
  if (g <= 1 || c.bytes_sent == 0) {
    cost.bound = "none";
    return cost;
  }
  int64_t steps = g - 1;
  if (c.kind == CollectiveKind::kAllReduce) steps = 2 * (g - 1);
  if (c.kind == CollectiveKind::kCollectivePermute) steps = 1;
  const double latency = c.crosses_slices ? chip.dcn_latency_s : chip.ici_latency_s;
  const double bandwidth = c.crosses_slices ? chip.dcn_bytes_per_s
                                            : IciBandwidth(chip, c.group, o.num_devices / o.slices);
  cost.seconds =
      static_cast<double>(steps) * latency + static_cast<double>(c.bytes_sent) / bandwidth;
  return cost;
}

}  // namespace

std::string_view StreamName(Stream stream) {
  switch (stream) {
    case Stream::kCompute:
      return "compute";
    case Stream::kIci:
      return "ici";
    case Stream::kDcn:
      return "dcn";
  }
  return "?";
}

InstructionCost CostOfInstruction(const HloModule& program, const HloInstruction& instr,
                                  const Chip& chip, const SimOptions& o) {
  InstructionCost cost;
  const HloOpcode op = instr.opcode();
  if (TakesNoTime(instr)) {
    cost.bound = "none";
    return cost;
  }
  if (IsCollective(op)) return CollectiveCost(program, instr, chip, o);
  const int64_t bytes = op == HloOpcode::kFusion ? FusionBytes(instr) : MemoryBytes(instr);
  const bool cached = chip.cache_bytes > 0 && static_cast<double>(bytes) <= chip.cache_bytes;
  const double memory_s =
      static_cast<double>(bytes) / (cached ? chip.cache_bytes_per_s : chip.hbm_bytes_per_s);
  double matrix_s = 0;
  if (const HloInstruction* dot = DotIn(instr)) {
    const double peak = MatrixPeak(chip, dot->operand(0)->shape().element_type());
    matrix_s = PaddedDotFlops(*dot, chip.matrix_tile) / (peak * chip.matrix_efficiency);
    cost.matrix = true;
  } else if (IsAttention(instr) || op == HloOpcode::kConvolution) {
    // A convolution at its counted FLOPs (no tile padding modelled).
    const FlopCount f = InstructionFlops(instr);
    const double peak = MatrixPeak(chip, instr.operand(0)->shape().element_type());
    matrix_s =
        (f.dot + f.attention_forward + f.attention_backward) / (peak * chip.matrix_efficiency);
    cost.matrix = true;
  }
  const double vector_s =
      chip.vector_flops > 0 ? InstructionFlops(instr).other / chip.vector_flops : 0;
  cost.seconds = std::max({matrix_s, memory_s, vector_s});
  cost.bound = cost.seconds == matrix_s && matrix_s > 0          ? "matrix"
               : cost.seconds == vector_s && vector_s > memory_s ? "vector"
                                                                 : "memory";
  return cost;
}

namespace {

const HloInstruction* ThroughViews(const HloInstruction* i) {
  while (i->opcode() == HloOpcode::kReshape) i = i->operand(0);
  return i;
}

// Whether `i` is (a view of) element k of a loop body's state.
bool IsStateElement(const HloInstruction* i, int64_t k) {
  i = ThroughViews(i);
  return i->opcode() == HloOpcode::kGetTupleElement && i->tuple_index() == k &&
         i->operand(0)->opcode() == HloOpcode::kParameter;
}

// The program unrolled into runs of instructions with their dependencies.
struct Node {
  int32_t site = -1;  // index into Expander::sites; -1: a marker (no time)
  Stream stream = Stream::kCompute;
  bool ahead = false;  // a trip's work that runs ahead of it: first when ready
  int32_t issue = 0;   // a collective's place in its stream's order
  double seconds = 0;
  std::vector<int32_t> deps;
};

struct Site {
  const HloInstruction* instr = nullptr;
  InstructionCost cost;
  int64_t runs = 0;
};

using Leaves = std::vector<int32_t>;  // the node producing each leaf; -1: ready at the start

class Expander {
 public:
  Expander(const HloModule& program, const Chip& chip, const SimOptions& options)
      : program_(program), chip_(chip), options_(options) {}

  std::vector<Node> nodes;
  std::vector<Site> sites;

  void ExpandEntry() {
    const HloComputation& entry = *program_.entry_computation();
    std::vector<Leaves> params;
    for (const HloInstruction* p : entry.parameter_instructions()) {
      params.emplace_back(p->shape().Leaves().size(), -1);
    }
    Context top;
    Expand(entry, params, top);
  }

 private:
  struct Context {
    int32_t compute_barrier = -1;                  // compute nodes wait for it
    int32_t collective_barrier = -1;               // collectives wait for it
    std::vector<int32_t>* trip_compute = nullptr;  // this trip's compute nodes the next waits for
    const std::unordered_set<const HloInstruction*>* deferrable = nullptr;
    const std::unordered_set<const HloInstruction*>* prefetchable = nullptr;
  };

  const std::vector<HloInstruction*>& ScheduleOf(const HloComputation& c) {
    auto it = schedules_.find(&c);
    if (it == schedules_.end()) it = schedules_.emplace(&c, compiler::ScheduleComputation(c)).first;
    return it->second;
  }

  int32_t SiteOf(const HloInstruction& instr) {
    auto it = site_index_.find(&instr);
    if (it != site_index_.end()) return it->second;
    Site s;
    s.instr = &instr;
    s.cost = CostOfInstruction(program_, instr, chip_, options_);
    sites.push_back(std::move(s));
    const int32_t id = static_cast<int32_t>(sites.size() - 1);
    site_index_.emplace(&instr, id);
    return id;
  }

  int32_t AddNode(int32_t site, Stream stream, double seconds, std::vector<int32_t> deps) {
    std::sort(deps.begin(), deps.end());
    deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
    if (!deps.empty() && deps.front() < 0) deps.erase(deps.begin());
    WEFT_INTERNAL_CHECK(nodes.size() < static_cast<size_t>(std::numeric_limits<int32_t>::max()),
                        "the simulated step has more than 2^31 instruction runs");
    const int32_t id = static_cast<int32_t>(nodes.size());
    nodes.push_back(Node{site, stream, false, id, seconds, std::move(deps)});
    return id;
  }

  int32_t Marker(std::vector<int32_t> deps) {
    return AddNode(-1, Stream::kCompute, 0, std::move(deps));
  }

  // Instructions of a loop body that only wait on a collective to update
  // an accumulator of the loop state: state element k is an accumulator
  // when the root's element k is a dynamic-update-slice or an add of the
  // body's own element k (seen through reshapes). Deferrable are the
  // instructions reached from a collective that feed only such elements
  // (and other deferrable instructions).
  const std::unordered_set<const HloInstruction*>& DeferrableIn(const HloComputation& body) {
    auto it = deferrable_.find(&body);
    if (it != deferrable_.end()) return it->second;
    std::unordered_set<const HloInstruction*> set;
    const HloInstruction* root = body.root_instruction();
    std::unordered_set<const HloInstruction*> accumulated;  // root operands updating an accumulator
    if (root->opcode() == HloOpcode::kTuple) {
      for (int64_t k = 0; k < root->operand_count(); ++k) {
        const HloInstruction* out = ThroughViews(root->operand(k));
        const HloOpcode op = out->opcode();
        if ((op == HloOpcode::kDynamicUpdateSlice && IsStateElement(out->operand(0), k)) ||
            (op == HloOpcode::kAdd &&
             (IsStateElement(out->operand(0), k) || IsStateElement(out->operand(1), k)))) {
          accumulated.insert(root->operand(k));
        }
      }
    }
    if (!accumulated.empty()) {
      const std::vector<HloInstruction*> order = body.MakeInstructionPostOrder();
      std::unordered_set<const HloInstruction*> reached;  // from a collective
      for (const HloInstruction* i : order) {
        bool r = IsCollective(i->opcode());
        for (const HloInstruction* o : i->operands()) r = r || reached.count(o) > 0;
        if (r) reached.insert(i);
      }
      for (auto i = order.rbegin(); i != order.rend(); ++i) {
        const HloInstruction* instr = *i;
        if (instr == root || !reached.count(instr) || IsCollective(instr->opcode())) continue;
        bool ok = !instr->users().empty();
        for (const HloInstruction* u : instr->users()) {
          bool feeds_accumulator = u == root && accumulated.count(instr) > 0;
          ok = ok && (feeds_accumulator || set.count(u) > 0);
        }
        if (ok) set.insert(instr);
      }
    }
    return deferrable_.emplace(&body, std::move(set)).first->second;
  }

  // Instructions of a loop body that read only loop-invariant state, the
  // trip counter and constants (the counter's increment, the dynamic-slice
  // of the next layer's weights before its all-gather): they can run a trip
  // ahead, as XLA's collective pipeliner moves them with the collective.
  const std::unordered_set<const HloInstruction*>& PrefetchableIn(const HloComputation& body) {
    auto it = prefetchable_.find(&body);
    if (it != prefetchable_.end()) return it->second;
    const HloInstruction* root = body.root_instruction();
    std::unordered_set<int64_t> known;  // state elements known a trip ahead
    if (root->opcode() == HloOpcode::kTuple) {
      for (int64_t k = 0; k < root->operand_count(); ++k) {
        const HloInstruction* out = ThroughViews(root->operand(k));
        const bool counter = out->opcode() == HloOpcode::kAdd &&
                             ((IsStateElement(out->operand(0), k) &&
                               out->operand(1)->opcode() == HloOpcode::kConstant) ||
                              (IsStateElement(out->operand(1), k) &&
                               out->operand(0)->opcode() == HloOpcode::kConstant));
        if (IsStateElement(out, k) || counter) known.insert(k);
      }
    }
    const std::vector<HloInstruction*> order = body.MakeInstructionPostOrder();
    std::unordered_set<const HloInstruction*> ahead;
    for (const HloInstruction* i : order) {
      const HloOpcode op = i->opcode();
      bool a = false;
      if (op == HloOpcode::kConstant) {
        a = true;
      } else if (op == HloOpcode::kGetTupleElement &&
                 i->operand(0)->opcode() == HloOpcode::kParameter) {
        a = known.count(i->tuple_index()) > 0;
      } else if (op != HloOpcode::kParameter && !IsCollective(op) && i != root &&
                 op != HloOpcode::kWhile && i->operand_count() > 0) {
        a = true;
        for (const HloInstruction* o : i->operands()) a = a && ahead.count(o) > 0;
      }
      if (a) ahead.insert(i);
    }
    std::unordered_set<const HloInstruction*> set;
    for (const HloInstruction* instr : ahead) {
      if (!TakesNoTime(*instr)) set.insert(instr);
    }
    // Collectives of such values are issued a trip ahead too.
    for (const HloInstruction* i : order) {
      if (!IsCollective(i->opcode())) continue;
      bool a = true;
      for (const HloInstruction* o : i->operands()) a = a && ahead.count(o) > 0;
      if (a) set.insert(i);
    }
    return prefetchable_.emplace(&body, std::move(set)).first->second;
  }

  Leaves Expand(const HloComputation& c, const std::vector<Leaves>& params, const Context& ctx) {
    std::unordered_map<const HloInstruction*, Leaves> leaves;
    auto operand_deps = [&](const HloInstruction& instr) {
      std::vector<int32_t> deps;
      for (const HloInstruction* o : instr.operands()) {
        const Leaves& l = leaves.at(o);
        deps.insert(deps.end(), l.begin(), l.end());
      }
      return deps;
    };
    for (const HloInstruction* instr : ScheduleOf(c)) {
      const HloOpcode op = instr->opcode();
      const size_t n_leaves = instr->shape().Leaves().size();
      switch (op) {
        case HloOpcode::kParameter:
          leaves[instr] = params.at(instr->parameter_number());
          continue;
        case HloOpcode::kConstant:
          leaves[instr] = Leaves(n_leaves, -1);
          continue;
        case HloOpcode::kTuple: {
          Leaves l;
          for (const HloInstruction* o : instr->operands()) {
            const Leaves& ol = leaves.at(o);
            l.insert(l.end(), ol.begin(), ol.end());
          }
          leaves[instr] = std::move(l);
          continue;
        }
        case HloOpcode::kGetTupleElement: {
          const HloInstruction* t = instr->operand(0);
          size_t offset = 0;
          for (int64_t i = 0; i < instr->tuple_index(); ++i) {
            offset += t->shape().tuple_shapes()[i].Leaves().size();
          }
          const Leaves& tl = leaves.at(t);
          leaves[instr] = Leaves(tl.begin() + offset, tl.begin() + offset + n_leaves);
          continue;
        }
        case HloOpcode::kReshape:
          leaves[instr] = leaves.at(instr->operand(0));
          continue;
        case HloOpcode::kWhile:
          leaves[instr] = ExpandWhile(*instr, leaves.at(instr->operand(0)), ctx);
          continue;
        case HloOpcode::kCall: {
          std::vector<Leaves> args;
          for (const HloInstruction* o : instr->operands()) args.push_back(leaves.at(o));
          leaves[instr] = Expand(*instr->to_apply(), args, ctx);
          continue;
        }
        default:
          break;
      }
      const int32_t site = SiteOf(*instr);
      const InstructionCost& cost = sites[site].cost;
      sites[site].runs += 1;
      std::vector<int32_t> deps = operand_deps(*instr);
      const bool collective = cost.stream != Stream::kCompute;
      const bool ahead = ctx.prefetchable != nullptr && ctx.prefetchable->count(instr) > 0;
      const int32_t barrier = collective || ahead ? ctx.collective_barrier : ctx.compute_barrier;
      if (barrier >= 0) deps.push_back(barrier);
      const int32_t node = AddNode(site, cost.stream, cost.seconds, std::move(deps));
      nodes[node].ahead = ahead;
      // Issued with the previous trip's first collectives.
      if (ahead && collective && ctx.collective_barrier >= 0)
        nodes[node].issue = ctx.collective_barrier;
      if (!collective && !ahead && ctx.trip_compute != nullptr &&
          (ctx.deferrable == nullptr || !ctx.deferrable->count(instr))) {
        ctx.trip_compute->push_back(node);
      }
      leaves[instr] = Leaves(n_leaves, node);
    }
    return leaves.at(c.root_instruction());
  }

  Leaves ExpandWhile(const HloInstruction& loop, const Leaves& init, const Context& outer) {
    const int64_t trips = WhileTripCount(loop);
    const HloComputation& body = *loop.while_body();
    const auto& deferrable = DeferrableIn(body);
    const auto& prefetchable = PrefetchableIn(body);
    std::vector<int32_t> start_deps = init;
    if (outer.compute_barrier >= 0) start_deps.push_back(outer.compute_barrier);
    const int32_t start = Marker(std::move(start_deps));
    int32_t previous_trip_start = start, trip_start = start;
    Leaves carry = init;
    for (int64_t trip = 0; trip < trips; ++trip) {
      std::vector<int32_t> compute;
      Context ctx;
      ctx.compute_barrier = trip_start;
      ctx.collective_barrier = previous_trip_start;
      ctx.trip_compute = &compute;
      ctx.deferrable = &deferrable;
      ctx.prefetchable = &prefetchable;
      carry = Expand(body, {carry}, ctx);
      compute.push_back(trip_start);
      previous_trip_start = trip_start;
      trip_start = Marker(std::move(compute));
      if (outer.trip_compute != nullptr) outer.trip_compute->push_back(trip_start);
    }
    return carry;
  }

  const HloModule& program_;
  const Chip& chip_;
  const SimOptions& options_;
  std::unordered_map<const HloComputation*, std::vector<HloInstruction*>> schedules_;
  std::unordered_map<const HloInstruction*, int32_t> site_index_;
  std::unordered_map<const HloComputation*, std::unordered_set<const HloInstruction*>> deferrable_;
  std::unordered_map<const HloComputation*, std::unordered_set<const HloInstruction*>>
      prefetchable_;
};

void MergeInto(std::vector<Interval>& out, double start, double end) {
  if (end <= start) return;
  out.push_back({start, end});
}

std::vector<Interval> Coalesce(std::vector<Interval> v, double gap) {
  std::sort(v.begin(), v.end(),
            [](const Interval& a, const Interval& b) { return a.start < b.start; });
  std::vector<Interval> out;
  for (const Interval& i : v) {
    if (!out.empty() && i.start <= out.back().end + gap) {
      out.back().end = std::max(out.back().end, i.end);
    } else {
      out.push_back(i);
    }
  }
  return out;
}

// Each node's users, as compressed rows: users[start[i] .. start[i + 1]).
struct UserLists {
  std::vector<int32_t> start, users;
};

UserLists MakeUserLists(const std::vector<Node>& nodes) {
  const size_t n = nodes.size();
  UserLists out;
  out.start.assign(n + 1, 0);
  for (const Node& node : nodes) {
    for (int32_t d : node.deps) ++out.start[d + 1];
  }
  for (size_t i = 0; i < n; ++i) out.start[i + 1] += out.start[i];
  out.users.resize(out.start[n]);
  std::vector<int32_t> fill(out.start.begin(), out.start.end() - 1);
  for (size_t i = 0; i < n; ++i) {
    for (int32_t d : nodes[i].deps) out.users[fill[d]++] = static_cast<int32_t>(i);
  }
  return out;
}

// One run of the expanded schedule as a dataflow over the compute stream and
// the collective streams: when each stream is busy, and how long compute
// waited on each.
struct SimulatedRun {
  double critical = 0;     // when the last node finishes
  double compute_end = 0;  // when the compute stream last finished
  double matrix_s = 0;     // compute seconds in matrix work
  std::array<double, kNumStreams> busy_s{};
  std::array<double, kNumStreams> exposed{};  // compute idle, waiting on each stream
  std::array<std::vector<Interval>, kNumStreams> intervals;
  std::vector<double> seconds_of_site;
};

SimulatedRun Simulate(const Expander& ex) {
  const std::vector<Node>& nodes = ex.nodes;
  const size_t n = nodes.size();
  const UserLists users = MakeUserLists(nodes);
  SimulatedRun run;
  run.seconds_of_site.assign(ex.sites.size(), 0);
  std::vector<int32_t> remaining(n);
  std::vector<int32_t> last_dep(n, -1);
  std::array<std::vector<int32_t>, kNumStreams> queue;
  std::vector<char> ready(n, 0);
  for (size_t i = 0; i < n; ++i) {
    remaining[i] = static_cast<int32_t>(nodes[i].deps.size());
    if (nodes[i].site >= 0 && nodes[i].stream != Stream::kCompute) {
      queue[static_cast<int>(nodes[i].stream)].push_back(static_cast<int32_t>(i));
    }
  }
  for (auto& q : queue) {
    std::stable_sort(q.begin(), q.end(),
                     [&](int32_t a, int32_t b) { return nodes[a].issue < nodes[b].issue; });
  }

  using Event = std::pair<double, int32_t>;  // completion time, node
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events;
  // Ready compute: work running a trip ahead first, then schedule order.
  using Ready = std::pair<bool, int32_t>;  // (not ahead, node)
  std::priority_queue<Ready, std::vector<Ready>, std::greater<>> compute_ready;
  std::array<bool, kNumStreams> busy{};
  std::array<size_t, kNumStreams> next{};
  double now = 0;
  size_t done = 0;
  int32_t last_done = -1;

  // A marker's stream is the stream of what it last waited for.
  std::vector<int8_t> source(n, static_cast<int8_t>(Stream::kCompute));
  auto make_ready = [&](int32_t i) {
    if (nodes[i].site < 0) {
      if (last_dep[i] >= 0) source[i] = source[last_dep[i]];
      events.push({now, i});
    } else if (nodes[i].stream == Stream::kCompute) {
      compute_ready.push({!nodes[i].ahead, i});
    } else {
      ready[i] = 1;
    }
  };
  for (size_t i = 0; i < n; ++i) {
    if (nodes[i].site >= 0) source[i] = static_cast<int8_t>(nodes[i].stream);
    if (remaining[i] == 0) make_ready(static_cast<int32_t>(i));
  }
  auto start = [&](int32_t i) {
    const Node& node = nodes[i];
    const int s = static_cast<int>(node.stream);
    busy[s] = true;
    run.busy_s[s] += node.seconds;
    run.seconds_of_site[node.site] += node.seconds;
    MergeInto(run.intervals[s], now, now + node.seconds);
    events.push({now + node.seconds, i});
  };
  for (;;) {
    if (!busy[0] && !compute_ready.empty()) {
      const int32_t i = compute_ready.top().second;
      compute_ready.pop();
      if (now > run.compute_end && last_dep[i] >= 0)
        run.exposed[source[last_dep[i]]] += now - run.compute_end;
      if (ex.sites[nodes[i].site].cost.matrix) run.matrix_s += nodes[i].seconds;
      start(i);
    }
    for (int s = 1; s < kNumStreams; ++s) {
      if (!busy[s] && next[s] < queue[s].size() && ready[queue[s][next[s]]])
        start(queue[s][next[s]++]);
    }
    if (events.empty()) break;
    now = events.top().first;
    while (!events.empty() && events.top().first == now) {
      const int32_t i = events.top().second;
      events.pop();
      ++done;
      last_done = i;
      if (nodes[i].site >= 0) {
        busy[static_cast<int>(nodes[i].stream)] = false;
        if (nodes[i].stream == Stream::kCompute) run.compute_end = now;
      }
      for (int32_t k = users.start[i]; k < users.start[i + 1]; ++k) {
        const int32_t u = users.users[k];
        last_dep[u] = i;
        if (--remaining[u] == 0) make_ready(u);
      }
    }
  }
  WEFT_INTERNAL_CHECK(done == n, "the step simulation finished {} of {} instruction runs", done, n);

  run.critical = now;
  // Links still busy after the last compute: exposed too.
  if (run.critical > run.compute_end && last_done >= 0)
    run.exposed[source[last_done]] += run.critical - run.compute_end;
  return run;
}

}  // namespace

StepTime SimulateStep(const HloModule& program, const Chip& chip, const SimOptions& options) {
  WEFT_INTERNAL_CHECK(options.num_devices >= 1 && options.slices >= 1 &&
                          options.num_devices % options.slices == 0 && options.device >= 0 &&
                          options.device < options.num_devices,
                      "simulating device {} of {} devices in {} slices", options.device,
                      options.num_devices, options.slices);
  Expander ex(program, chip, options);
  ex.ExpandEntry();
  SimulatedRun run = Simulate(ex);

  StepTime t;
  t.peak_flops = ProgramMatrixPeak(program, chip);
  t.compute_s = run.busy_s[0];
  t.matrix_s = run.matrix_s;
  t.ici_s = run.busy_s[1];
  t.dcn_s = run.busy_s[2];
  const double critical = run.critical;
  const double r = static_cast<double>(std::max<int64_t>(options.repeats, 1));
  t.compute_s *= r;
  t.matrix_s *= r;
  t.ici_s *= r;
  t.dcn_s *= r;
  t.exposed_ici_s = run.exposed[1] * r;
  t.exposed_dcn_s = run.exposed[2] * r;
  const double host_s = static_cast<double>(options.host_bytes) / chip.host_bytes_per_s;
  t.host_s = host_s * r;
  t.exposed_host_s = std::max(0.0, host_s - critical) * r;
  t.step_s = (critical + std::max(0.0, host_s - critical)) * r;
  t.serial_s = t.compute_s + t.ici_s + t.dcn_s + t.host_s;
  if (t.step_s > 0) t.mfu = r * options.model_flops / (t.step_s * t.peak_flops);
  if (t.serial_s > 0) t.mfu_serial = r * options.model_flops / (t.serial_s * t.peak_flops);
  t.simulated_runs = static_cast<int64_t>(ex.nodes.size());

  for (size_t s = 0; s < ex.sites.size(); ++s) {
    const Site& site = ex.sites[s];
    if (run.seconds_of_site[s] <= 0) continue;
    t.top.push_back({site.instr->name(), site.instr->parent()->name(), site.cost.stream,
                     site.cost.bound, site.runs * options.repeats, run.seconds_of_site[s] * r});
  }
  std::stable_sort(
      t.top.begin(), t.top.end(),
      [](const SimInstruction& a, const SimInstruction& b) { return a.seconds > b.seconds; });
  if (static_cast<int64_t>(t.top.size()) > options.top) t.top.resize(options.top);
  const double gap = options.timeline_points > 0 && t.step_s > 0
                         ? t.step_s / static_cast<double>(options.timeline_points)
                         : 0;
  for (int s = 0; s < kNumStreams; ++s) t.busy[s] = Coalesce(std::move(run.intervals[s]), gap);
  return t;
}

}  // namespace weft::analysis
