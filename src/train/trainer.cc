#include "weft/train/trainer.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "trainer_setup.h"
#include "weft/base/atomic_file.h"
#include "weft/base/cpu.h"
#include "weft/base/error.h"
#include "weft/kernels/simd.h"
#include "weft/runtime/comm_threads.h"
#include "weft/runtime/executor.h"
#include "weft/runtime/topology.h"
#include "weft/train/checkpoint.h"
#include "weft/train/dataset.h"
#include "weft/train/eval.h"
#include "weft/train/hf_checkpoint.h"
#include "weft/train/optimizer.h"
#include "weft/train/program.h"
#include "weft/train/run_dir.h"
#include "weft/train/svg_plot.h"

namespace weft {
namespace {

using runtime::Communicator;
using Tensor = runtime::HostTensor;

using Clock = std::chrono::steady_clock;
using train::CheckFitsInMemory;
using train::ModelExtras;
using train::Prepare;
using train::Run;
using train::SetUpUpdates;
using train::TokenizerChecksum;
using train::TrainExtras;

std::span<std::byte> Bytes(const Tensor& t) {
  return {static_cast<std::byte*>(t.mutable_raw_data()), static_cast<size_t>(t.byte_size())};
}

void PrepareOutDir(const Run& run, int64_t start_step) {
  std::filesystem::create_directories(run.out);
  WriteFileAtomically(run.out / "tokenizer.model", run.dataset->tokenizer.serialized_model());
  // Keep the metrics of the steps the checkpoint covers; drop later ones (a
  // killed run's steps that the resumed run will redo).
  const std::filesystem::path metrics = run.out / "metrics.jsonl";
  std::string kept;
  if (start_step > 0) {
    for (const RunMetricsLine& m : ReadRunMetrics(metrics)) {
      if (m.step <= start_step) kept += m.text + "\n";
    }
  }
  WriteFileAtomically(metrics, kept);
}

std::string FormatDuration(double seconds) {
  const int64_t s = static_cast<int64_t>(std::max(0.0, seconds) + 0.5);
  return s >= 3600 ? fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
                   : fmt::format("{}:{:02}", s / 60, s % 60);
}

// Device 0's reporting: progress bar, metrics file, log lines.
class Reporter {
 public:
  Reporter(const Run& run, int64_t start_step, int64_t end_step)
      : run_(run),
        start_(start_step),
        end_(end_step),
        log_(run.options.log ? *run.options.log : std::cout),
        bar_(run.options.progress && isatty(STDERR_FILENO)),
        metrics_(run.out / "metrics.jsonl", std::ios::app) {
    WEFT_CHECK(metrics_.good(), "cannot append to {}", (run.out / "metrics.jsonl").string());
    t0_ = Clock::now();
  }

  void Step(const StepMetrics& m) {
    nlohmann::json j = {{"step", m.step},           {"loss", m.loss},
                        {"grad_norm", m.grad_norm}, {"lr", m.lr},
                        {"tokens", m.tokens},       {"tokens_per_s", m.tokens_per_second},
                        {"step_s", m.step_seconds}, {"skipped", m.skipped}};
    if (m.validation_loss) {
      j["val_loss"] = *m.validation_loss;
      validation_ = fmt::format("  val loss {:.4f}", *m.validation_loss);
    }
    metrics_ << j.dump() << "\n";
    metrics_.flush();
    const double elapsed = std::chrono::duration<double>(Clock::now() - t0_).count();
    const int64_t done = m.step - start_;
    const double eta = done > 0 ? elapsed / done * (end_ - m.step) : 0;
    tokens_ += m.tokens;
    const double tps = elapsed > 0 ? tokens_ / elapsed : 0;
    if (m.skipped) {
      log_ << fmt::format("step {}: {}; update skipped\n", m.step,
                          std::isfinite(m.grad_norm)
                              ? "the update would make a parameter or an Adam moment non-finite"
                              : "non-finite gradient norm");
    }
    if (bar_) {
      const int width = 24;
      const int filled =
          static_cast<int>(width * (m.step - start_) / std::max<int64_t>(1, end_ - start_));
      std::cerr << fmt::format("\r[{}{}] step {}/{}  loss {:.4f}{}  {:.0f} tok/s  ETA {}   ",
                               std::string(filled, '#'), std::string(width - filled, '.'), m.step,
                               end_, m.loss, validation_, tps, FormatDuration(eta))
                << std::flush;
      if (m.step == end_) std::cerr << "\n";
    } else {
      const int64_t every = std::max<int64_t>(1, (end_ - start_) / 20);
      if (m.step == start_ + 1 || m.step % every == 0 || m.step == end_ || m.validation_loss) {
        log_ << fmt::format(
            "step {:>5}/{}  loss {:.4f}{}  grad norm {:.3f}  lr {:.2e}  {:.0f} tok/s  "
            "ETA {}\n",
            m.step, end_, m.loss,
            m.validation_loss ? fmt::format("  val loss {:.4f}", *m.validation_loss) : "",
            m.grad_norm, m.lr, tps, FormatDuration(eta));
        log_.flush();
      }
    }
  }

 private:
  const Run& run_;
  int64_t start_, end_;
  std::ostream& log_;
  bool bar_;
  std::ofstream metrics_;
  Clock::time_point t0_;
  double tokens_ = 0;
  std::string validation_;  // the bar's "  val loss x" since the last validation step
};

// All devices' sum of `local` (added in device order, the same bits everywhere).
double SumOverDevices(double local, Communicator& comm) {
  int64_t bits = 0;
  std::memcpy(&bits, &local, sizeof(bits));
  const std::vector<int64_t> all = comm.AllGather(std::vector<int64_t>{bits});
  double total = 0;
  for (int64_t b : all) {
    double v = 0;
    std::memcpy(&v, &b, sizeof(v));
    total += v;
  }
  return total;
}

// Adds the seconds from its construction to its destruction to *into, but
// for the time the device's thread ran other devices meanwhile (in-process
// devices sharing a thread, while this one waited in a collective): that
// goes to *others.
struct ElapsedSeconds {
  double* into;
  double* others;
  const Communicator& comm;
  Clock::time_point start = Clock::now();
  double others_before = comm.stats().seconds_others_ran;
  ~ElapsedSeconds() {
    const double ran = comm.stats().seconds_others_ran - others_before;
    *into += std::chrono::duration<double>(Clock::now() - start).count() - ran;
    *others += ran;
  }
};

// A step's program runs as one: `run`'s times, counts and bytes added to
// `step`'s, peaks the larger.
void AddRunStats(const runtime::ExecutorStats& run, runtime::ExecutorStats& step) {
  step.peak_bytes = std::max(step.peak_bytes, run.peak_bytes);
  step.arena_bytes = std::max(step.arena_bytes, run.arena_bytes);
  step.unplanned_bytes = std::max(step.unplanned_bytes, run.unplanned_bytes);
  step.misplaced_results += run.misplaced_results;
  step.instructions += run.instructions;
  step.seconds += run.seconds;
  step.allocations += run.allocations;
  step.allocated_bytes += run.allocated_bytes;
  for (size_t c = 0; c < run.class_seconds.size(); ++c) {
    step.class_seconds[c] += run.class_seconds[c];
    step.class_instructions[c] += run.class_instructions[c];
  }
  for (const auto& [instruction, seconds] : run.instruction_seconds) {
    step.instruction_seconds[instruction] += seconds;
  }
  for (size_t k = 0; k < run.collectives.calls.size(); ++k) {
    step.collectives.calls[k] += run.collectives.calls[k];
    step.collectives.bytes_sent[k] += run.collectives.bytes_sent[k];
  }
  step.collectives.seconds_others_ran += run.collectives.seconds_others_ran;
}

// One device's part of the run.
class DeviceTrainer {
 public:
  DeviceTrainer(const Run& run, Communicator& comm)
      : run_(run),
        comm_(comm),
        device_(comm.device_id()),
        accum_steps_(run.config.train.grad_accum_steps),
        exec_(*run.program.compiled.program, run.exec) {
    const auto& c = run.program.compiled;
    const auto& weights = run.program.forward.weights;
    for (size_t k = 0; k < weights.size(); ++k) {
      const size_t leaf = StepProgram::kNumDataInputs + k;
      const HloSharding& s = c.input_shardings[leaf];
      const Shape& local = c.local_input_shapes[leaf];
      const TensorBox box = ShardBox(s, weights[k].shape.dimensions(), device_);
      if (run.resume) {
        params_.emplace_back(local);
        ReadTensorBox(*run.resume, CheckpointPart::kModel, weights[k].name, box,
                      Bytes(params_.back()), local.dimensions());
      } else {
        // --init-from's weights were checked against the model when read;
        // each device updates a copy of its own.
        const Tensor global = run.init ? AsF32Tensor(run.init->weights.at(weights[k].name)).Clone()
                                       : Tensor::FromVector<float>(
                                             PrimitiveType::kF32, weights[k].shape.dimensions(),
                                             InitLlamaWeight(weights[k], run.config.train.seed));
        params_.push_back(runtime::ShardTensor(global, s, device_, local));
      }
      // The micro-batches' weighted gradient sum (gradients leave the step
      // sharded like their weights): allocated once, reused every step.
      if (accum_steps_ > 1) accum_.emplace_back(local);
      for (std::vector<Tensor>* moments : {&m_, &v_}) {
        moments->emplace_back(local);
        if (!run.resume) continue;
        ReadTensorBox(*run.resume, CheckpointPart::kOptimizer,
                      weights[k].name + (moments == &m_ ? ".m" : ".v"), box, Bytes(moments->back()),
                      local.dimensions());
      }
      // Counted in the norm, and saved, by the lowest device holding this tile.
      const bool owner = OwnsTile(s, weights[k].shape.dimensions(), device_);
      owner_.push_back(owner);
    }
  }

  // Trains steps [start, end); device 0 reports.
  void Loop(int64_t start, int64_t end, BatchIterator& it, Reporter* reporter,
            std::vector<StepMetrics>* metrics) {
    for (int64_t step = start; step < end; ++step) {
      const auto t0 = Clock::now();
      StepMetrics m = Step(step, it.Next());
      const double step_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      if (ValidationDue(step + 1)) m.validation_loss = Validate();
      if (reporter) {
        StepMetrics mm = m;
        mm.step_seconds = step_seconds;  // the validation's time not counted
        mm.tokens_per_second = mm.step_seconds > 0 ? mm.tokens / mm.step_seconds : 0;
        reporter->Step(mm);
        metrics->push_back(mm);
        peak_bytes_ = std::max(peak_bytes_, step_stats().peak_bytes);
        collective_bytes_ = step_stats().collective_bytes();
        if (run_.options.on_step) run_.options.on_step(mm);
      }
      const int64_t every = run_.config.train.checkpoint_every;
      if ((every > 0 && (step + 1) % every == 0) || step + 1 == end) {
        SaveCheckpointCollective(step + 1, it.position());
      }
    }
  }

 private:
  // After step `done` (1-based): every validation_every steps and the
  // schedule's last, so a resumed run validates where an uninterrupted one does.
  bool ValidationDue(int64_t done) const {
    if (run_.validation_windows.empty()) return false;
    const int64_t every = run_.config.train.validation_every;
    return done == run_.config.train.steps || (every > 0 && done % every == 0);
  }

  // The mean cross-entropy per predicted token over the held-out windows:
  // the step program's loss (a mean over its batch's predicted tokens)
  // weighted by each batch's predicted tokens, in double, in window order;
  // its gradients are not used and nothing is updated. The same on every
  // device.
  double Validate() {
    const auto& windows = run_.validation_windows;
    const int64_t B = run_.program.batch_size, S = run_.program.seq_len;
    double nll = 0;
    int64_t tokens = 0;
    for (size_t first = 0; first < windows.size(); first += static_cast<size_t>(B)) {
      int64_t predicted = 0;
      const Batch batch = EvalBatch(windows, first, B, S, &predicted);
      const std::vector<Tensor> out = RunProgram(DataTensors(batch), 0, B);
      nll += out[0].GetDouble(0) * static_cast<double>(predicted);
      tokens += predicted;
    }
    return nll / static_cast<double>(tokens);
  }

  // The program's five data inputs for `batch`.
  static std::vector<Tensor> DataTensors(const Batch& batch) {
    const int64_t B = batch.batch_size, S = batch.seq_len;
    return {Tensor::FromVector<int32_t>(PrimitiveType::kS32, {B, S}, batch.tokens),
            Tensor::FromVector<int32_t>(PrimitiveType::kS32, {B, S}, batch.targets),
            Tensor::FromVector<float>(PrimitiveType::kF32, {B, S}, batch.loss_mask),
            Tensor::FromVector<int32_t>(PrimitiveType::kS32, {B, S}, batch.segment_ids),
            Tensor::FromVector<int32_t>(PrimitiveType::kS32, {B, S}, batch.positions)};
  }

  // The program on rows [k * rows, (k + 1) * rows) of the batch's `data`
  // (the whole batch when not accumulating): this device's share of them.
  std::vector<Tensor> RunProgram(const std::vector<Tensor>& data, int64_t k, int64_t rows) {
    const auto& c = run_.program.compiled;
    std::vector<Tensor> inputs;
    for (size_t i = 0; i < data.size(); ++i) {
      const int64_t S = data[i].dimensions()[1];
      const int64_t row_bytes = data[i].byte_size() / data[i].dimensions()[0];
      const Tensor part = accum_steps_ == 1 ? data[i]
                                            : data[i].View(Shape(data[i].element_type(), {rows, S}),
                                                           k * rows * row_bytes);
      inputs.push_back(
          runtime::ShardTensor(part, c.input_shardings[i], device_, c.local_input_shapes[i]));
    }
    for (const Tensor& p : params_) inputs.push_back(p);  // shared: the executor only reads
    return exec_.Run(std::move(inputs), comm_);
  }

  // The step's program runs (gradient accumulation): the batch's loss into
  // m->loss and its gradient into accum_. Micro-batch k's loss and gradient
  // are means over its n_k loss tokens; weighted by n_k / n (n: the batch's
  // loss tokens) they sum to the batch's means, as one run over the whole
  // batch gives them.
  void Accumulate(const Batch& batch, const std::vector<Tensor>& data, StepMetrics* m) {
    const int64_t rows = batch.batch_size / accum_steps_;
    const int64_t per_micro = rows * batch.seq_len;
    std::vector<double> tokens(static_cast<size_t>(accum_steps_), 0.0);
    double total = 0;
    for (int64_t k = 0; k < accum_steps_; ++k) {
      for (int64_t i = k * per_micro; i < (k + 1) * per_micro; ++i) {
        tokens[k] += batch.loss_mask[i];
      }
      total += tokens[k];
    }
    step_stats_ = {};
    m->loss = 0;
    bool written = false;  // accum_ holds this step's sum
    for (int64_t k = 0; k < accum_steps_; ++k) {
      if (tokens[k] == 0) continue;  // no loss token: a zero loss and gradient
      const std::vector<Tensor> out = RunProgram(data, k, rows);
      const ElapsedSeconds adding{&optimizer_seconds_, &optimizer_others_seconds_, comm_};
      AddRunStats(exec_.stats(), step_stats_);
      const double weight = tokens[k] / total;
      m->loss += weight * out[0].GetDouble(0);
      const float w = static_cast<float>(weight);
      for (size_t j = 0; j < accum_.size(); ++j) {
        float* sum = accum_[j].mutable_data<float>();
        const float* g = out[j + 1].data<float>();
        const int64_t n = accum_[j].element_count();
        if (written) {
          for (int64_t i = 0; i < n; ++i) sum[i] += w * g[i];
        } else {
          for (int64_t i = 0; i < n; ++i) sum[i] = w * g[i];
        }
      }
      written = true;
    }
    if (!written) {
      for (Tensor& sum : accum_) {
        std::fill_n(sum.mutable_data<float>(), sum.element_count(), 0.0f);
      }
    }
  }

  StepMetrics Step(int64_t step, const Batch& batch) {
    const int64_t B = batch.batch_size, S = batch.seq_len;
    WEFT_INTERNAL_CHECK(B == run_.program.batch_size * accum_steps_,
                        "a batch of {} rows for a step of {} x {} rows", B, accum_steps_,
                        run_.program.batch_size);
    const std::vector<Tensor> data = DataTensors(batch);
    optimizer_seconds_ = 0;
    optimizer_others_seconds_ = 0;
    StepMetrics m;
    m.step = step + 1;
    m.tokens = B * S;
    std::vector<Tensor> out;  // without accumulation: the loss, then the gradients
    if (accum_steps_ == 1) {
      out = RunProgram(data, 0, B);
      m.loss = out[0].GetDouble(0);
    } else {
      Accumulate(batch, data, &m);
    }
    const std::span<const Tensor> grads = accum_steps_ == 1
                                              ? std::span<const Tensor>(out).subspan(1)
                                              : std::span<const Tensor>(accum_);
    // The rest of the step.
    const ElapsedSeconds updating{&optimizer_seconds_, &optimizer_others_seconds_, comm_};

    double sq = 0;
    for (size_t k = 0; k < params_.size(); ++k) {
      if (owner_[k]) {
        sq +=
            SumOfSquares(std::span<const float>(grads[k].data<float>(), grads[k].element_count()));
      }
    }
    const double total = SumOverDevices(sq, comm_);
    m.grad_norm = std::sqrt(total);
    m.lr = run_.schedule.LearningRate(step);
    if (!std::isfinite(total)) {
      m.skipped = true;
      return m;
    }
    const double scale = ClipScale(total, run_.config.train.grad_clip);
    auto adam_step = [&](size_t k) {
      return AdamWStep{
          .lr = m.lr, .step = step + 1, .grad_scale = scale, .apply_weight_decay = run_.decay[k]};
    };
    // A finite gradient can still overflow an update; every device checks
    // its shards first and all skip the step together if any would.
    double would_overflow = 0;
    for (size_t k = 0; k < params_.size() && would_overflow == 0; ++k) {
      const int64_t n = params_[k].element_count();
      if (!AdamWUpdateStaysFinite(std::span<const float>(params_[k].data<float>(), n),
                                  std::span<const float>(grads[k].data<float>(), n),
                                  std::span<const float>(m_[k].data<float>(), n),
                                  std::span<const float>(v_[k].data<float>(), n), run_.hyper,
                                  adam_step(k))) {
        would_overflow = 1;
      }
    }
    if (SumOverDevices(would_overflow, comm_) > 0) {
      m.skipped = true;
      return m;
    }
    for (size_t k = 0; k < params_.size(); ++k) {
      const int64_t n = params_[k].element_count();
      AdamWUpdate(std::span<float>(params_[k].mutable_data<float>(), n),
                  std::span<const float>(grads[k].data<float>(), n),
                  std::span<float>(m_[k].mutable_data<float>(), n),
                  std::span<float>(v_[k].mutable_data<float>(), n), run_.hyper, adam_step(k));
    }
    return m;
  }

  // Every device writes the tiles it owns (collective).
  void SaveCheckpointCollective(int64_t steps_done, int64_t data_position) {
    const auto& c = run_.program.compiled;
    const auto& weights = run_.program.forward.weights;
    std::vector<SavePiece> pieces;
    for (size_t k = 0; k < weights.size(); ++k) {
      if (!owner_[k]) continue;
      const HloSharding& s = c.input_shardings[StepProgram::kNumDataInputs + k];
      const TensorBox box = ShardBox(s, weights[k].shape.dimensions(), device_);
      const TensorSpec global{PrimitiveType::kF32, weights[k].shape.dimensions()};
      for (const auto& [part, suffix, tensors] :
           {std::tuple{CheckpointPart::kModel, "", &params_},
            std::tuple{CheckpointPart::kOptimizer, ".m", &m_},
            std::tuple{CheckpointPart::kOptimizer, ".v", &v_}}) {
        const Tensor& t = (*tensors)[k];
        pieces.push_back({part, weights[k].name + suffix, global, box,
                          static_cast<const std::byte*>(t.raw_data()), t.dimensions()});
      }
    }
    TrainState state;
    if (device_ == 0) {
      state.step = steps_done;
      state.data_position = data_position;
      state.config_hash = run_.config.Hash();
      state.extra = ModelExtras(run_.config.model);
      state.extra.merge(TrainExtras(run_.config.train));
      state.extra["total_steps"] = std::to_string(run_.schedule.total_steps);
      state.extra["tokenizer.crc32c"] = TokenizerChecksum(*run_.dataset);
      state.extra["tokenizer.vocab_size"] = std::to_string(run_.dataset->tokenizer.vocab_size());
    }
    SaveShardedCheckpoint(run_.out / "checkpoint", pieces, state, comm_);
  }

 public:
  int64_t peak_bytes() const { return peak_bytes_; }
  int64_t collective_bytes() const { return collective_bytes_; }

  // One step for TrainStepsInMemory: no report, no checkpoint.
  void StepInMemory(int64_t step, BatchIterator& it, const TrainStepsOptions& options) {
    const auto t0 = Clock::now();
    StepMetrics m = Step(step, it.Next());
    m.step_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    m.tokens_per_second = m.step_seconds > 0 ? m.tokens / m.step_seconds : 0;
    if (device_ == 0 && options.on_step) {
      StepProfile profile{step_stats(), optimizer_seconds_};
      profile.executor.collectives.seconds_others_ran += optimizer_others_seconds_;
      options.on_step(m, profile);
    }
  }

 private:
  // The last step's program runs.
  const runtime::ExecutorStats& step_stats() const {
    return accum_steps_ == 1 ? exec_.stats() : step_stats_;
  }

  const Run& run_;
  Communicator& comm_;
  int64_t device_;
  int64_t accum_steps_;  // program runs per step (train.grad_accum_steps)
  int64_t peak_bytes_ = 0, collective_bytes_ = 0;
  runtime::Executor exec_;
  runtime::ExecutorStats step_stats_;  // with accumulation: the step's runs summed
  std::vector<Tensor> params_, m_, v_;
  std::vector<Tensor> accum_;  // with accumulation: per weight, the gradient sum
  std::vector<bool> owner_;
  double optimizer_seconds_ = 0;  // of the last step
  // Of the last step, outside the program: the time this device's thread
  // ran other devices while this one waited (the update's sums over devices).
  double optimizer_others_seconds_ = 0;
};

void ReportComplete(const Run& run) {
  std::ostream& log = run.options.log ? *run.options.log : std::cout;
  log << fmt::format(
      "{} is already trained to step {} of {}: nothing to do (--steps N trains "
      "further, --overwrite starts over, --out DIR starts elsewhere)\n",
      run.out.string(), run.resume->state.step, run.config.train.steps);
}

int64_t StartStep(const Run& run) { return run.resume ? run.resume->state.step : 0; }

int64_t EndStep(const Run& run) {
  const int64_t start = StartStep(run);
  int64_t end = run.config.train.steps;
  if (run.options.stop_after) end = std::min(end, start + *run.options.stop_after);
  return end;
}

// The device body, shared by both backends.
void RunDevice(const Run& run, Communicator& comm, TrainResult* result) {
  const int64_t start = StartStep(run), end = EndStep(run);
  // Every device has read its tiles of the checkpoint (each chunk checked)
  // before anything in the run directory is written.
  DeviceTrainer trainer(run, comm);
  comm.Barrier();
  if (comm.device_id() == 0) PrepareOutDir(run, start);
  BatchIterator it = MakeBatchIterator(*run.dataset, run.config);
  if (run.resume) it.Seek(run.resume->state.data_position);
  std::optional<Reporter> reporter;
  if (comm.device_id() == 0) reporter.emplace(run, start, end);
  trainer.Loop(start, end, it, reporter ? &*reporter : nullptr, &result->steps);
  result->peak_bytes = trainer.peak_bytes();
  result->collective_bytes_per_step = trainer.collective_bytes();
}

void Finish(const Run& run, const TrainResult& result, const std::string& backend) {
  std::ostream& log = run.options.log ? *run.options.log : std::cout;
  // The curve from the whole metrics file (steps before a resume included).
  std::vector<PlotSeries> curves(2);
  PlotSeries &loss = curves[0], &validation = curves[1];
  loss.name = "loss";
  validation.name = "validation loss";
  validation.markers = true;  // a point every validation_every steps
  for (const RunMetricsLine& m : ReadRunMetrics(run.out / "metrics.jsonl")) {
    if (m.validation_loss) {
      validation.x.push_back(static_cast<double>(m.step));
      validation.y.push_back(*m.validation_loss);
    }
    if (!m.loss) continue;  // a non-finite loss has no point on the curve
    loss.x.push_back(static_cast<double>(m.step));
    loss.y.push_back(*m.loss);
  }
  if (validation.x.empty()) curves.pop_back();
  WriteSvgPlot(
      run.out / "loss.svg", curves,
      {.title = fmt::format("{}: {}", run.config.source,
                            curves.size() > 1 ? "training and validation loss" : "training loss"),
       .x_label = "step",
       .y_label = "loss (mean cross-entropy, nats)"});
  if (result.steps.empty()) return;
  double tokens = 0, seconds = 0;
  for (const StepMetrics& m : result.steps) {
    tokens += m.tokens;
    seconds += m.step_seconds;
  }
  const int64_t accum = run.config.train.grad_accum_steps;
  const std::string micro = accum > 1 ? fmt::format(", {} micro-batches of {} rows per step", accum,
                                                    run.program.batch_size)
                                      : std::string();
  log << fmt::format(
      "trained steps {}..{} on {} devices ({}, {}{}): loss {:.4f} -> {:.4f}, {:.0f} tokens/s\n"
      "device 0: step program peak {:.1f} MiB, {:.1f} MiB sent per step\n"
      "wrote {}/checkpoint, metrics.jsonl, loss.svg\n",
      result.steps.front().step, result.steps.back().step, run.program.num_devices, backend,
      MeshText(run.config.mesh), micro, result.steps.front().loss, result.steps.back().loss,
      seconds > 0 ? tokens / seconds : 0, result.peak_bytes / 1048576.0,
      result.collective_bytes_per_step / 1048576.0, run.out.string());
  for (auto m = result.steps.rbegin(); m != result.steps.rend(); ++m) {
    if (!m->validation_loss) continue;
    int64_t predicted = 0;
    for (const auto& w : run.validation_windows) predicted += static_cast<int64_t>(w.size()) - 1;
    log << fmt::format(
        "validation loss {:.4f} at step {} ({} held-out documents, {} predicted tokens; "
        "train.validation_documents)\n",
        *m->validation_loss, m->step, run.dataset->validation_documents.size(), predicted);
    break;
  }
}

}  // namespace

std::filesystem::path DefaultOutDir(const RunConfig& config) {
  std::string stem = std::filesystem::path(config.source).stem().string();
  if (stem.empty()) stem = "run";
  return std::filesystem::path("runs") / stem;
}

PrecisionChoice FastestPrecision() {
  namespace simd = kernels::simd;
  const simd::Primitives& bf16 = simd::GetBf16Primitives();
  if (simd::Bf16InstructionsAllowed() && bf16.bf16_dot_peak_loop != nullptr) {
    return {Precision::kBf16, fmt::format("this CPU has a bf16 unit ({}); --precision f32 forces "
                                          "f32",
                                          bf16.isa)};
  }
  const CpuInfo& cpu = GetCpuInfo();
  std::string reason = "this CPU has no bf16 unit: no avx512_bf16, no AMX";
  if (!simd::Bf16InstructionsAllowed()) {
    reason =
        fmt::format("the forced instruction set {} (WEFT_ISA) has no bf16 instructions", bf16.isa);
  } else if (cpu.amx_bf16) {
    reason = fmt::format("this CPU has no avx512_bf16 and its AMX is not usable: {}",
                         GetAmxStatus().why_not);
  }
  return {Precision::kF32, fmt::format("{}; bf16 would be widened to f32 for every dot and run "
                                       "slower; --precision bf16 forces it",
                                       reason)};
}

TrainResult Train(const RunConfig& config, const TrainOptions& options) {
  const int64_t devices = (options.mesh ? *options.mesh : config.mesh).num_devices();
  std::optional<RunDirLock> lock;
  std::unique_ptr<Run> run = Prepare(config, options, devices, &lock, /*in_process=*/true);
  if (run->complete) {
    ReportComplete(*run);
    TrainResult nothing;
    nothing.out = run->out;
    return nothing;
  }
  lock->Keep();
  TrainResult result;
  result.out = run->out;
  result.num_devices = run->program.num_devices;
  runtime::LocalCluster cluster(run->program.num_devices);
  cluster.Run([&](int64_t device, Communicator& comm) {
    TrainResult scratch;
    RunDevice(*run, comm, device == 0 ? &result : &scratch);
  });
  Finish(*run, result, "threads");
  return result;
}

TrainStepsInfo TrainStepsInMemory(const RunConfig& config, const TrainStepsOptions& options) {
  WEFT_CHECK(options.steps >= 1, "--steps {}: give at least 1 step", options.steps);
  auto run = std::make_unique<Run>();
  run->config = config;
  if (options.mesh) run->config.mesh = *options.mesh;
  run->config.train.steps = std::max(run->config.train.steps, options.steps);
  if (!run->config.train.precision) run->config.train.precision = FastestPrecision().precision;
  run->options.cache_dir = options.cache_dir;
  run->options.progress = false;
  StepProgramOptions po;
  po.expected_devices = run->config.mesh.num_devices();
  po.fuse = options.fuse_loops;
  po.grad_accum_steps = run->config.train.grad_accum_steps;
  run->program = BuildStepProgram(run->config, po);
  CheckFitsInMemory(*run, run->program.num_devices);
  run->dataset.emplace(LoadDataset(run->config, options.cache_dir));
  SetUpUpdates(run.get());
  run->exec.profile = options.profile;
  runtime::LocalCluster cluster(run->program.num_devices);
  cluster.Run([&](int64_t, Communicator& comm) {
    DeviceTrainer trainer(*run, comm);
    BatchIterator it = MakeBatchIterator(*run->dataset, run->config);
    for (int64_t step = 0; step < options.steps; ++step) trainer.StepInMemory(step, it, options);
  });
  return {.num_devices = run->program.num_devices,
          .batch_size = run->config.train.batch_size,
          .seq_len = run->program.seq_len};
}

TrainResult TrainOnMpiRank(const RunConfig& config, const TrainOptions& options,
                           Communicator& comm) {
  // Rank 0 owns the output directory; the others only read the checkpoint.
  std::optional<RunDirLock> lock;
  std::unique_ptr<Run> run =
      Prepare(config, options, comm.num_devices(), comm.device_id() == 0 ? &lock : nullptr,
              /*in_process=*/false);
  if (run->complete) {
    if (comm.device_id() == 0) ReportComplete(*run);
    TrainResult nothing;
    nothing.out = run->out;
    return nothing;
  }
  comm.VerifySameHash(std::hash<std::string>{}(run->program.compiled.program->ToString()),
                      "the training step program (give every rank the same config and flags)");
  if (lock) lock->Keep();
  TrainResult result;
  result.out = run->out;
  result.num_devices = run->program.num_devices;
  RunDevice(*run, comm, &result);
  if (comm.device_id() == 0) Finish(*run, result, "mpi");
  return result;
}

}  // namespace weft
