#include "weft/train/planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <unordered_map>

#include "weft/base/algorithm.h"
#include "weft/base/error.h"
#include "weft/sharding/hlo_sharding.h"
#include "weft/train/program.h"

namespace weft {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The sharding of leaf `leaf` of a value (tuple shardings by element).
const HloSharding* LeafSharding(const HloInstruction& instr, int64_t leaf) {
  if (!instr.has_sharding()) return nullptr;
  const HloSharding& s = *instr.sharding();
  if (!s.IsTuple()) return &s;
  if (leaf < 0 || leaf >= static_cast<int64_t>(s.tuple_elements().size())) return nullptr;
  return &s.tuple_elements()[leaf];
}

// Mesh axes along which devices hold different tiles of `s`.
std::vector<std::string> SplitAxes(const HloSharding& s, const MeshConfig& mesh) {
  std::vector<std::string> axes;
  if (!s.IsTiled()) return axes;
  // The device one step along axis a from the mesh's origin (a hybrid
  // mesh's device order is not row-major).
  const Mesh devices = mesh.ToMesh();
  std::vector<int64_t> index(mesh.axis_names.size(), 0);
  const std::vector<int64_t> origin = s.TileIndexForDevice(devices.device(index));
  for (size_t a = 0; a < mesh.axis_names.size(); ++a) {
    if (mesh.axis_sizes[a] < 2) continue;
    index[a] = 1;
    if (s.TileIndexForDevice(devices.device(index)) != origin) axes.push_back(mesh.axis_names[a]);
    index[a] = 0;
  }
  return axes;
}

// The leaf of a global instruction's value that a local buffer is this
// device's tile of (its padded tile shape equals the local shape), or -1:
// the partitioner may give a new instruction an old name.
int64_t MatchingLeaf(const HloInstruction& global, const Shape& local) {
  const std::vector<Shape> leaves = global.shape().Leaves();
  for (size_t i = 0; i < leaves.size(); ++i) {
    const Shape& g = leaves[i];
    if (g.rank() != local.rank() || g.element_type() != local.element_type()) continue;
    const HloSharding* s = LeafSharding(global, static_cast<int64_t>(i));
    const std::vector<int64_t> tile = s != nullptr && !s->IsTuple()
                                          ? s->TileShape(g.dimensions())
                                          : std::vector<int64_t>(g.dimensions());
    if (tile == local.dimensions()) return static_cast<int64_t>(i);
  }
  return -1;
}

int64_t MajorAxisSize(const MeshConfig& mesh) {
  return mesh.axis_sizes.empty() ? 1 : mesh.axis_sizes[0];
}

}  // namespace

double ModelFlopsPerStep(const LlamaConfig& m, int64_t batch, int64_t seq) {
  const double dim = static_cast<double>(m.dim), hd = static_cast<double>(m.head_dim());
  const double q_dim = static_cast<double>(m.n_heads) * hd;
  const double kv_dim = static_cast<double>(m.n_kv_heads > 0 ? m.n_kv_heads : m.n_heads) * hd;
  const double per_layer =
      dim * q_dim + 2 * dim * kv_dim + q_dim * dim + 3 * dim * static_cast<double>(m.ffn_dim);
  const double matmul_params =
      static_cast<double>(m.n_layers) * per_layer + dim * static_cast<double>(m.vocab_size);
  const double b = static_cast<double>(batch), s = static_cast<double>(seq);
  const double tokens = b * s;
  const double pairs = s * (s + 1) / 2;
  const double attention_forward =
      static_cast<double>(m.n_layers) * 2 * b * static_cast<double>(m.n_heads) * pairs * 2 * hd;
  return 6 * matmul_params * tokens + 3 * attention_forward;
}

namespace {

// The flags first: a value the user gave is used, never replaced by a default.
void CheckPlanFlags(const RunConfig& config, const PlanOptions& options) {
  if (options.batch_size) {
    WEFT_CHECK(*options.batch_size >= 1,
               "--batch {}: the global batch size must be a positive integer (omit --batch to "
               "use train.batch_size = {} from {})",
               *options.batch_size, config.train.batch_size, config.source);
  }
  if (options.seq_len) {
    WEFT_CHECK(*options.seq_len >= 1 && *options.seq_len <= std::numeric_limits<int32_t>::max(),
               "--seq {}: the sequence length must be an integer in [1, {}] (omit --seq to use "
               "model.seq_len = {} from {})",
               *options.seq_len, std::numeric_limits<int32_t>::max(), config.model.seq_len,
               config.source);
  }
  if (options.grad_accum) {
    WEFT_CHECK(*options.grad_accum >= 1,
               "--grad-accum {}: the number of micro-batches per step must be at least 1 (omit "
               "--grad-accum to use train.grad_accum_steps = {} from {})",
               *options.grad_accum, config.train.grad_accum_steps, config.source);
  }
  if (options.slices) {
    WEFT_CHECK(*options.slices >= 1,
               "--slices {}: the number of slices must be a positive integer (1: one slice, no "
               "DCN; omit --slices to derive it from the mesh and the chip)",
               *options.slices);
  }
}

// plan.slices: given, or derived (and then said how, in any error), with a
// warning when a slice is larger than the chip's largest.
void PlanSlices(const RunConfig& config, const PlanOptions& options, StepPlan& plan) {
  const int64_t n = plan.num_devices;
  const std::string mesh_from = options.mesh ? "--mesh" : "the [mesh] of " + config.source;
  int64_t slices = 1;
  std::string slices_from;
  if (config.mesh.is_hybrid()) {
    // The mesh says which axes span slices (--dcn or [dcn]).
    slices = config.mesh.num_slices();
    const std::string dcn_from = options.mesh && options.mesh->is_hybrid()
                                     ? std::string("--dcn")
                                     : "the [dcn] of " + config.source;
    WEFT_CHECK(!options.slices || *options.slices == slices,
               "--slices {} disagrees with {}, whose mesh {} spans {} slices; drop --slices (the "
               "mesh's DCN axes say how many slices there are)",
               options.slices.value_or(0), dcn_from, MeshText(config.mesh), slices);
    slices_from = fmt::format("{} slices ({})", slices, dcn_from);
  } else if (options.slices) {
    slices = *options.slices;
    slices_from = fmt::format("--slices {}", slices);
  } else if (!config.mesh.axis_names.empty() && config.mesh.axis_names[0] == "dcn") {
    slices = MajorAxisSize(config.mesh);
    slices_from = fmt::format(
        "{} slices (no --slices given: the size of the major axis 'dcn' of {})", slices, mesh_from);
  } else if (n > plan.chip.max_slice_chips && n % plan.chip.max_slice_chips == 0) {
    slices = n / plan.chip.max_slice_chips;
    slices_from = fmt::format(
        "{} slices (no --slices given: the {} devices of {} over the largest {} slice of {} "
        "chips)",
        slices, n, mesh_from, plan.chip.name, plan.chip.max_slice_chips);
  }
  WEFT_CHECK(slices <= n, "{}: more slices than the {} devices of {}; give at most --slices {}",
             slices_from, n, mesh_from, n);
  WEFT_CHECK(config.mesh.is_hybrid() || MajorAxisSize(config.mesh) % slices == 0,
             "{}: the mesh's major axis ({} of size {}, from {}) must span the slices, so its size "
             "must be a multiple of {}; put an axis whose size is a multiple of {} first in "
             "--mesh, or give --slices",
             slices_from, config.mesh.axis_names.empty() ? "none" : config.mesh.axis_names[0],
             MajorAxisSize(config.mesh), mesh_from, slices, slices);
  plan.slices = slices;
  if (n / slices > plan.chip.max_slice_chips) {
    plan.warnings.push_back(fmt::format(
        "a slice of {} chips is larger than the largest {} slice ({} chips); give --slices {} "
        "or more so the mesh's major axis spans slices",
        n / slices, plan.chip.name, plan.chip.max_slice_chips,
        (n + plan.chip.max_slice_chips - 1) / plan.chip.max_slice_chips));
  }
}

// The memory plan, and the bytes of weights, gradients and optimizer state.
void PlanStepMemory(const StepProgram& program, const PlanOptions& options, StepPlan& plan) {
  const compiler::CompiledProgram& c = program.compiled;
  const int64_t data = StepProgram::kNumDataInputs;
  analysis::MemoryPlanOptions mo;
  mo.num_data_inputs = data;
  for (const LlamaWeight& w : program.forward.weights) mo.weight_names.push_back(w.name);
  mo.weights_resident = true;
  // On the executor's own machine the plan is the executor's (its buffer
  // assignment); a chip's compiler packs its own buffers: live bytes.
  mo.executor_accounting = options.chip == "local-cpu";
  mo.timeline_points = options.timeline_points;
  plan.memory = analysis::PlanMemory(*c.program, mo);
  int64_t weight_elements = 0;
  for (size_t i = data; i < c.local_input_shapes.size(); ++i) {
    plan.parameter_bytes += c.local_input_shapes[i].ByteSize();
    weight_elements += c.local_input_shapes[i].ElementsCount();
  }
  for (size_t i = 1; i < c.local_output_shapes.size(); ++i) {
    plan.gradient_bytes += c.local_output_shapes[i].ByteSize();
  }
  // AdamW's m and v in f32 beside the f32 weights, whatever the precision
  // policy (the weights are the program's own inputs, counted above).
  plan.optimizer_bytes = weight_elements * 8;
  if (plan.grad_accum > 1) plan.accumulator_bytes = weight_elements * 4;
}

// The global instructions behind the largest buffers live at the peak.
void FindTopBuffers(const StepProgram& program, const MeshConfig& mesh, int64_t top_buffers,
                    StepPlan& plan) {
  std::unordered_map<std::string, const HloInstruction*> global;
  for (const HloComputation* comp : program.step->computations()) {
    for (const HloInstruction* instr : comp->instructions()) global.emplace(instr->name(), instr);
  }
  for (const analysis::LiveBuffer& b : plan.memory.live_at_peak) {
    if (static_cast<int64_t>(plan.top_buffers.size()) >= top_buffers) break;
    PeakBuffer pb;
    pb.buffer = b;
    auto it = global.find(b.instruction);
    if (it != global.end()) {
      const HloInstruction& g = *it->second;
      const int64_t leaf = MatchingLeaf(g, b.shape);
      const HloSharding* s = leaf >= 0 ? LeafSharding(g, leaf) : nullptr;
      if (leaf >= 0) {
        pb.global_known = true;
        pb.global_shape = g.shape().IsTuple() ? g.shape().Leaves()[leaf] : g.shape();
        if (s != nullptr) {
          pb.sharding = s->ToString();
          pb.split_axes = SplitAxes(*s, mesh);
        }
      }
    }
    plan.top_buffers.push_back(std::move(pb));
  }
}

// Stacked [L, ...] buffers that the fsdp axis leaves whole, largest first.
void FindUnsplitStacked(const StepProgram& program, const RunConfig& config, StepPlan& plan) {
  if (!Contains(config.mesh.axis_names, "fsdp")) return;
  plan.stacked_axis = "fsdp";
  for (const HloComputation* comp : program.step->MakeComputationPostOrder()) {
    for (const HloInstruction* instr : comp->MakeInstructionPostOrder()) {
      // Arrays only: a loop state tuple holds the same buffers as its elements.
      if (!instr->shape().IsArray()) continue;
      const std::vector<Shape> leaves = instr->shape().Leaves();
      for (size_t i = 0; i < leaves.size(); ++i) {
        const Shape& s = leaves[i];
        if (s.rank() < 3 || s.dimensions(0) != config.model.n_layers) continue;
        const HloSharding* sh = LeafSharding(*instr, static_cast<int64_t>(i));
        if (sh != nullptr && Contains(SplitAxes(*sh, config.mesh), plan.stacked_axis)) continue;
        UnsplitStackedBuffer u;
        u.instruction = instr->name();
        u.computation = comp->name();
        u.global_shape = s;
        u.sharding = sh ? sh->ToString() : "(none)";
        const std::vector<int64_t> tile =
            sh ? sh->TileShape(s.dimensions()) : std::vector<int64_t>(s.dimensions());
        u.local_bytes = s.WithDimensions(tile).ByteSize();
        plan.unsplit_stacked.push_back(std::move(u));
      }
    }
  }
  std::stable_sort(plan.unsplit_stacked.begin(), plan.unsplit_stacked.end(),
                   [](const UnsplitStackedBuffer& a, const UnsplitStackedBuffer& b) {
                     return a.local_bytes > b.local_bytes;
                   });
}

// Collectives, FLOPs and the simulated step time.
void PlanStepTime(const StepProgram& program, const RunConfig& config, const PlanOptions& options,
                  StepPlan& plan) {
  const HloModule& local = *program.compiled.program;
  const int64_t n = plan.num_devices;
  analysis::CollectivePlanOptions co;
  co.num_devices = n;
  co.slices = plan.slices;
  plan.collectives = analysis::PlanCollectives(local, co);
  plan.flops = analysis::CountFlops(local);  // per micro-step, scaled below
  plan.model_flops =
      ModelFlopsPerStep(config.model, plan.batch_size, plan.seq_len) / static_cast<double>(n);
  // Offloaded buffers are written once in the forward and read once in the backward.
  plan.host_transfer_bytes = 2 * plan.memory.host_peak_bytes;
  analysis::SimOptions so;
  so.num_devices = n;
  so.slices = plan.slices;
  so.device = plan.collectives.busiest_device;
  so.host_bytes = plan.host_transfer_bytes;
  so.model_flops = plan.model_flops / static_cast<double>(plan.grad_accum);
  so.repeats = plan.grad_accum;
  so.timeline_points = options.timeline_points;
  plan.collective_device = so.device;
  plan.time = analysis::SimulateStep(local, plan.chip, so);
  const double runs = static_cast<double>(plan.grad_accum);
  plan.flops.dot *= runs;
  plan.flops.attention_forward *= runs;
  plan.flops.attention_backward *= runs;
  plan.flops.other *= runs;
}

}  // namespace

StepPlan PlanTrainingStep(const RunConfig& input_config, const PlanOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  RunConfig config = input_config;
  if (options.mesh) config.mesh = *options.mesh;
  CheckPlanFlags(config, options);
  const int64_t accum = options.grad_accum.value_or(config.train.grad_accum_steps);

  StepPlan plan;
  plan.config_source = config.source;
  plan.model = config.model;
  plan.mesh = config.mesh;
  plan.shard_as = options.shard_as;

  // The chip, before any compute: a typo should not wait for a compile.
  const std::filesystem::path chips_file =
      options.chips_file.empty() ? analysis::FindChipTable(config.source) : options.chips_file;
  const analysis::ChipTable chips = analysis::LoadChipTable(chips_file);
  plan.chip = chips.Find(options.chip);
  if (options.matrix_efficiency) {
    WEFT_CHECK(*options.matrix_efficiency > 0 && *options.matrix_efficiency <= 1,
               "matrix_efficiency must be in (0, 1], got {}", *options.matrix_efficiency);
    plan.chip.matrix_efficiency = *options.matrix_efficiency;
  }
  plan.chips_file = chips_file.string();
  // A config that does not say: bf16, which every chip in the table has
  // units for (the trainer's choice by the CPU is no guide to the target's).
  plan.precision = options.precision.value_or(config.train.precision.value_or(Precision::kBf16));

  RematPolicy remat = config.train.remat;
  if (!options.remat.empty()) remat = ParseRematPolicy(options.remat, "--remat");
  plan.remat = RematText(remat);
  plan.remat_policy = remat;

  // The program's own checks that need no compute (model, mesh size, batch
  // against the batch axes), before slices are derived from the mesh.
  StepProgramOptions po;
  po.batch_size = options.batch_size;
  po.grad_accum_steps = accum;
  po.seq_len = options.seq_len;
  po.remat = remat;
  po.shard_as = options.shard_as;
  po.precision = plan.precision;
  CheckStepProgram(config, po);
  plan.num_devices = config.mesh.num_devices();
  plan.num_parameters = config.model.NumParameters();
  PlanSlices(config, options, plan);

  // The program `weft train` would run: fused, as a chip's compiler fuses
  // and as weft's executor runs it (StepProgramOptions::fuse).
  po.slices = plan.slices;
  const StepProgram program = BuildStepProgram(config, po);
  plan.grad_accum = accum;
  plan.micro_batch_size = program.batch_size;
  plan.batch_size = program.batch_size * accum;
  plan.seq_len = program.seq_len;
  plan.compile_seconds = SecondsSince(start);

  const auto analysis_start = std::chrono::steady_clock::now();
  PlanStepMemory(program, options, plan);
  FindTopBuffers(program, config.mesh, options.top_buffers, plan);
  FindUnsplitStacked(program, config, plan);
  PlanStepTime(program, config, options, plan);
  if (options.keep_program) plan.program_text = program.compiled.program->ToString();
  plan.analysis_seconds = SecondsSince(analysis_start);
  return plan;
}

}  // namespace weft
