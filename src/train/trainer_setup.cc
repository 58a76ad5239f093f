// Everything `weft train` does before the devices start (trainer_setup.h).
#include "trainer_setup.h"

#include <fmt/format.h>

#include <iostream>

#include "weft/analysis/memory_plan.h"
#include "weft/base/atomic_file.h"
#include "weft/base/crc32c.h"
#include "weft/base/error.h"
#include "weft/base/memory.h"
#include "weft/runtime/executor.h"
#include "weft/runtime/topology.h"
#include "weft/train/checkpoint.h"
#include "weft/train/dataset.h"
#include "weft/train/eval.h"
#include "weft/train/hf_checkpoint.h"
#include "weft/train/optimizer.h"
#include "weft/train/program.h"
#include "weft/train/run_dir.h"
#include "weft/train/sample.h"

namespace weft::train {
namespace {

// The checkpoint's tensor `name` has the type and shape the model needs.
void CheckCheckpointTensor(const CheckpointIndex& index, CheckpointPart part,
                           const std::string& name, const Shape& shape) {
  const auto& tensors = index.part(part);
  const auto found = tensors.find(name);
  const std::string state = (index.dir / "state.json").string();
  WEFT_CHECK(found != tensors.end(),
             "{} has no {} tensor '{}', which this model needs; resume with the config the "
             "checkpoint was written with",
             state, CheckpointPartName(part), name);
  const TensorSpec& spec = found->second.spec;
  WEFT_CHECK(spec.dtype == PrimitiveType::kF32 && spec.shape == shape.dimensions(),
             "{}: {} tensor '{}' is {} [{}], this model needs F32 {}; resume with the config the "
             "checkpoint was written with",
             state, CheckpointPartName(part), name, SafetensorsDTypeName(spec.dtype),
             fmt::join(spec.shape, ","), shape.ToString());
}

std::filesystem::path ResolveResume(const std::filesystem::path& dir) {
  if (CheckpointExists(dir / "checkpoint")) return dir / "checkpoint";
  return dir;
}

bool SamePath(const std::filesystem::path& a, const std::filesystem::path& b) {
  std::error_code e1, e2;
  return std::filesystem::weakly_canonical(a, e1) == std::filesystem::weakly_canonical(b, e2) &&
         !e1 && !e2;
}

bool HoldsMetrics(const std::filesystem::path& out) {
  std::error_code error;
  const auto size = std::filesystem::file_size(out / "metrics.jsonl", error);
  return !error && size > 0;
}

// What the run continues from: --resume DIR, the checkpoint already in --out
// (as torchtitan and MaxText do), or nothing. Refuses what would overwrite a
// run's work without --overwrite. Reads only; runs under the directory's lock.
std::optional<std::filesystem::path> ChooseResume(const TrainOptions& options,
                                                  const std::filesystem::path& out,
                                                  std::ostream& log, bool speak) {
  const std::filesystem::path own = out / "checkpoint";
  const bool has_own = CheckpointExists(own);
  if (!options.resume.empty()) {
    WEFT_CHECK(!options.overwrite,
               "--resume {} and --overwrite contradict each other: drop --overwrite to continue "
               "that run, or --resume to start over",
               options.resume.string());
    const std::filesystem::path dir = ResolveResume(options.resume);
    WEFT_CHECK(!has_own || SamePath(dir, own),
               "--out {} holds a checkpoint of its own, which training from --resume {} would "
               "replace; give a fresh --out, or resume from {}",
               out.string(), options.resume.string(), out.string());
    return dir;
  }
  if (options.overwrite) {
    if (speak && (has_own || HoldsMetrics(out))) {
      log << fmt::format(
          "--overwrite: starting over in {}; its checkpoint and metrics will be "
          "replaced\n",
          out.string());
    }
    return std::nullopt;
  }
  if (has_own) return own;
  WEFT_CHECK(!HoldsMetrics(out),
             "--out {} holds metrics.jsonl of an earlier run but no checkpoint to continue "
             "from; give --overwrite to start over in place, or another --out",
             out.string());
  return std::nullopt;
}

// Prints the [train] settings a resume changes (allowed, and worth seeing).
void ReportTrainChanges(const Run& run, std::ostream& log) {
  const auto& extra = run.resume->state.extra;
  for (const auto& [key, now] : TrainExtras(run.config.train)) {
    const auto it = extra.find(key);
    if (it != extra.end() && it->second != now) {
      log << fmt::format("resume: {} was {} in {}, is {} now ({})\n", key, it->second,
                         (run.resume_dir / "state.json").string(), now, run.config.source);
    }
  }
}

// The slices the step's collectives may cross (compiled hierarchically):
// the mesh's DCN axes when it has them, else the topology's (MPI ranks: one
// slice per host; WEFT_NUM_SLICES / WEFT_SLICE_SIZE) when it holds the
// mesh's devices numbered slice by slice. The same on every process and
// backend, so threads and MPI run one program.
int64_t StepSlices(const MeshConfig& mesh) {
  if (mesh.is_hybrid()) return mesh.num_slices();
  const runtime::Topology& t = runtime::Topology::Global();
  if (t.num_slices() <= 1 || t.num_devices() != mesh.num_devices()) return 1;
  for (int64_t d = 0; d < t.num_devices(); ++d) {
    if (t.device(d).slice != d / t.devices_per_slice()) return 1;
  }
  return t.num_slices();
}

// The run's precision: --precision, else train.precision, else (resuming)
// the one the checkpoint recorded, else this CPU's fastest; said first.
void ChoosePrecision(Run* run, std::ostream& log, bool speak) {
  std::optional<Precision>& precision = run->config.train.precision;
  std::string why;
  if (run->options.precision) {
    precision = run->options.precision;
    why = "--precision";
  } else if (precision) {
    why = fmt::format("train.precision in {}; --precision {} forces the other", run->config.source,
                      *precision == Precision::kBf16 ? "f32" : "bf16");
  } else if (run->resume) {
    const std::string state = (run->resume_dir / "state.json").string();
    precision = TrainedPrecision(run->resume->state.extra, state);
    why = fmt::format("the run's, as {} records it; --precision {} changes it", state,
                      *precision == Precision::kBf16 ? "f32" : "bf16");
  } else {
    PrecisionChoice fastest = FastestPrecision();
    precision = fastest.precision;
    why = std::move(fastest.why);
  }
  if (speak) log << fmt::format("precision {} ({})\n", PrecisionName(*precision), why);
}

}  // namespace

std::map<std::string, std::string> ModelExtras(const LlamaConfig& m) {
  const auto fields = ModelConfigFields(m);
  return {fields.begin(), fields.end()};
}

std::map<std::string, std::string> TrainExtras(const TrainConfig& t) {
  return {{"train.batch_size", std::to_string(t.batch_size)},
          {"train.grad_accum_steps", std::to_string(t.grad_accum_steps)},
          {"train.precision", t.precision ? std::string(PrecisionName(*t.precision)) : "auto"},
          {"train.lr", fmt::format("{}", t.lr)},
          {"train.min_lr", fmt::format("{}", t.min_lr)},
          {"train.warmup_steps", std::to_string(t.warmup_steps)},
          {"train.weight_decay", fmt::format("{}", t.weight_decay)},
          {"train.grad_clip", fmt::format("{}", t.grad_clip)},
          {"train.seed", std::to_string(t.seed)},
          {"train.checkpoint_every", std::to_string(t.checkpoint_every)},
          {"train.beta1", fmt::format("{}", t.beta1)},
          {"train.beta2", fmt::format("{}", t.beta2)},
          {"train.eps", fmt::format("{}", t.eps)},
          {"train.validation_documents", std::to_string(t.validation_documents)},
          {"train.validation_every", std::to_string(t.validation_every)}};
}

std::string TokenizerChecksum(const Dataset& dataset) {
  return Crc32cText(Crc32c(dataset.tokenizer.serialized_model()));
}

void CheckFitsInMemory(const Run& run, int64_t devices_here) {
  const int64_t machine = PhysicalMemoryBytes();
  if (machine <= 0) return;
  const auto& c = run.program.compiled;
  analysis::MemoryPlanOptions mo;
  mo.num_data_inputs = StepProgram::kNumDataInputs;
  for (const LlamaWeight& w : run.program.forward.weights) mo.weight_names.push_back(w.name);
  mo.weights_resident = true;
  mo.executor_accounting = true;
  mo.timeline_points = 1;
  const analysis::MemoryPlan plan = analysis::PlanMemory(*c.program, mo);
  int64_t weights = 0;
  for (size_t i = StepProgram::kNumDataInputs; i < c.local_input_shapes.size(); ++i) {
    weights += c.local_input_shapes[i].ByteSize();
  }
  const int64_t moments = 2 * weights;
  // Gradient accumulation holds one more gradient, the micro-batches' sum.
  const int64_t accumulated = run.config.train.grad_accum_steps > 1 ? weights : 0;
  const int64_t per_device = plan.peak_bytes + moments + accumulated;
  const int64_t need = per_device * devices_here;
  WEFT_CHECK(need <= machine,
             "{}: training needs about {} of memory ({} device(s) in this process x {}: the step "
             "program's peak {} + Adam moments {}{}), but this machine has {}. Lower "
             "train.batch_size or model.seq_len, raise train.grad_accum_steps (the program runs "
             "batch_size / grad_accum_steps rows at a time), set train.remat = \"full\", use a "
             "smaller model, or spread the devices over MPI ranks on several hosts (--backend "
             "mpi)",
             run.config.source, FormatBytes(need), devices_here, FormatBytes(per_device),
             FormatBytes(plan.peak_bytes), FormatBytes(moments),
             accumulated > 0 ? fmt::format(" + accumulated gradients {}", FormatBytes(accumulated))
                             : std::string(),
             FormatBytes(machine));
}

void SetUpUpdates(Run* run) {
  const RunConfig& c = run->config;
  run->schedule = {.warmup_steps = c.train.warmup_steps,
                   .total_steps = c.train.steps,
                   .peak_lr = c.train.lr,
                   .min_lr = c.train.min_lr};
  run->hyper = {.beta1 = c.train.beta1,
                .beta2 = c.train.beta2,
                .eps = c.train.eps,
                .weight_decay = c.train.weight_decay};
  for (const LlamaWeight& w : run->program.forward.weights) {
    run->decay.push_back(WeightDecayApplies(w.name, c.train.no_weight_decay));
  }
}

std::unique_ptr<Run> Prepare(const RunConfig& config, const TrainOptions& options,
                             int64_t available_devices, std::optional<RunDirLock>* lock,
                             bool in_process) {
  auto run = std::make_unique<Run>();
  run->config = config;
  run->options = options;
  std::ostream& log = options.log ? *options.log : std::cout;
  const bool speak = lock != nullptr;
  if (options.mesh) run->config.mesh = *options.mesh;
  if (options.steps) {
    WEFT_CHECK(*options.steps >= 1,
               "--steps {}: give the run's total number of steps, at least 1 (leave --steps out "
               "to use the config's train.steps)",
               *options.steps);
    run->config.train.steps = *options.steps;
  }
  WEFT_CHECK(!options.stop_after || *options.stop_after >= 1,
             "--stop-after {}: give at least 1 step (leave it out to run to the end)",
             options.stop_after.value_or(0));
  if (options.grad_accum) {
    WEFT_CHECK(*options.grad_accum >= 1,
               "--grad-accum {}: give the number of micro-batches each step's batch is split "
               "into, at least 1 (1: no accumulation; leave --grad-accum out to use the "
               "config's train.grad_accum_steps)",
               *options.grad_accum);
    run->config.train.grad_accum_steps = *options.grad_accum;
  }
  if (options.validation_documents) {
    WEFT_CHECK(*options.validation_documents >= 0,
               "--validation-documents {}: give the number of documents to hold out of training, "
               "0 or more (0: no validation; leave it out to use the config's "
               "train.validation_documents)",
               *options.validation_documents);
    run->config.train.validation_documents = *options.validation_documents;
  }
  if (options.validation_every) {
    WEFT_CHECK(*options.validation_every >= 0,
               "--validation-every {}: give 0 or more steps (0: the validation loss after the "
               "last step only; leave it out to use the config's train.validation_every)",
               *options.validation_every);
    run->config.train.validation_every = *options.validation_every;
  }
  if (!options.data_files.empty()) {
    run->config.data.source = "files";
    run->config.data.files = options.data_files;
  }
  const RunConfig& c = run->config;
  WEFT_CHECK(c.train.steps >= 1, "{}: train.steps must be at least 1", c.source);
  if (!options.init_from.empty()) {  // read and checked before anything is written
    WEFT_CHECK(options.resume.empty(),
               "--init-from {} and --resume {} contradict each other: --init-from starts a new "
               "run from a Hugging Face model's weights, --resume continues a run; give one",
               options.init_from.string(), options.resume.string());
    run->init = LoadHf(options.init_from);
    CheckModelMatchesHf(c.model, c.source, run->init->config,
                        (options.init_from / "config.json").string());
    if (!run->init->tokenizer.empty()) run->init_tokenizer = Tokenizer::Load(run->init->tokenizer);
  }
  run->out = options.out.empty() ? DefaultOutDir(c) : options.out;
  CheckDirectoryWritable(run->out, "--out");
  if (lock) lock->emplace(run->out);

  if (auto dir = ChooseResume(options, run->out, log, speak)) {
    run->resume_dir = *dir;
    run->resume = OpenCheckpoint(*dir);
    const auto& extra = run->resume->state.extra;
    for (const auto& [key, value] : ModelExtras(c.model)) {
      const auto it = extra.find(key);
      WEFT_CHECK(it != extra.end() && it->second == value,
                 "{}: the checkpoint was written for {} = {}, the config {} says {}; resume with "
                 "the config the checkpoint was written with (or give another --out)",
                 (dir->lexically_normal() / "state.json").string(), key,
                 it == extra.end() ? "(missing)" : it->second, c.source, value);
    }
    // Checkpoints from before validation held nothing out.
    const auto held = extra.find("train.validation_documents");
    const std::string was = held == extra.end() ? "0" : held->second;
    WEFT_CHECK(was == std::to_string(c.train.validation_documents),
               "{}: the run held {} of its documents out of training for validation, the config "
               "{} says train.validation_documents = {}; the documents it trains on would change "
               "under its data position. Resume with train.validation_documents = {} (or give "
               "another --out)",
               (dir->lexically_normal() / "state.json").string(), was, c.source,
               c.train.validation_documents, was);
    if (options.resume.empty()) {  // continuing the run in --out
      run->complete = run->resume->state.step >= c.train.steps;
      if (speak && !run->complete) {
        log << fmt::format(
            "{} holds a checkpoint at step {}: continuing from it to step {} "
            "(--overwrite starts over, --out DIR starts elsewhere){}\n",
            run->out.string(), run->resume->state.step, c.train.steps,
            run->init ? "; --init-from's weights are not used, its tokenizer is" : "");
      }
      if (run->complete) return run;
    } else {
      WEFT_CHECK(run->resume->state.step < c.train.steps,
                 "--resume {}: the checkpoint is at step {}, the run has {} steps; give a larger "
                 "--steps to train further",
                 dir->string(), run->resume->state.step, c.train.steps);
    }
  }

  ChoosePrecision(run.get(), log, speak);
  // The program first: mesh and shape errors come before any data work.
  StepProgramOptions po;
  po.shard_as = options.shard_as;
  po.expected_devices = available_devices;
  po.slices = StepSlices(c.mesh);
  po.grad_accum_steps = c.train.grad_accum_steps;
  run->program = BuildStepProgram(c, po);
  CheckFitsInMemory(*run, in_process ? run->program.num_devices : 1);
  if (run->resume) {
    for (const auto& w : run->program.forward.weights) {
      CheckCheckpointTensor(*run->resume, CheckpointPart::kModel, w.name, w.shape);
      CheckCheckpointTensor(*run->resume, CheckpointPart::kOptimizer, w.name + ".m", w.shape);
      CheckCheckpointTensor(*run->resume, CheckpointPart::kOptimizer, w.name + ".v", w.shape);
    }
  }

  run->dataset.emplace(LoadDataset(c, options.cache_dir, run->init_tokenizer));
  if (run->dataset->validation) {
    run->validation_windows = EvalWindows(*run->dataset->validation, run->program.seq_len);
    if (speak) {
      const int64_t every = c.train.validation_every;
      log << fmt::format(
          "validation: {} documents held out of training ({} windows of up to {} tokens), "
          "their loss after {}\n",
          run->dataset->validation_documents.size(), run->validation_windows.size(),
          run->program.seq_len,
          every > 0 ? fmt::format("every {} steps and the last", every) : "the last step");
    }
  }
  if (run->resume) {
    const auto& extra = run->resume->state.extra;
    const auto crc = extra.find("tokenizer.crc32c");
    const auto vocab = extra.find("tokenizer.vocab_size");
    const std::string now = TokenizerChecksum(*run->dataset);
    WEFT_CHECK(crc == extra.end() || crc->second == now,
               "{}: the checkpoint was trained with another tokenizer (vocabulary of {} pieces, "
               "{}) than this run's data gives ({} pieces, {}); token ids would mean other "
               "words. Resume with the [data] the run was trained on",
               (run->resume_dir / "state.json").string(),
               vocab == extra.end() ? std::string("?") : vocab->second, crc->second,
               run->dataset->tokenizer.vocab_size(), now);
    if (speak) ReportTrainChanges(*run, log);
  }
  SetUpUpdates(run.get());
  return run;
}

}  // namespace weft::train
