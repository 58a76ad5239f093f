// `weft bench peak|attention|collectives|propagate|executor|plan|auto|train`.
#include <memory>
#include <string>
#include <vector>

#include "bench.h"
#include "bench_auto.h"
#include "bench_checkpoint.h"
#include "bench_collectives.h"
#include "bench_executor.h"
#include "bench_plan.h"
#include "bench_propagate.h"
#include "bench_train.h"
#include "commands.h"
#include "weft/base/error.h"

namespace weft::cli {

void AddBench(CLI::App& app) {
  auto* bench = app.add_subcommand(
      "bench", "Benchmarks; performance is reported as a ratio to this machine's measured peak");
  bench->require_subcommand(1);

  auto* peak = bench->add_subcommand(
      "peak", "Measure this machine's float32 FMA peak (and the AMX bf16 peak where present)");
  auto peak_json = std::make_shared<bool>(false);
  peak->add_flag("--json", *peak_json, "Print JSON instead of a table");
  peak->callback([peak_json] { SetAction([peak_json] { return bench::RunPeak(*peak_json); }); });

  auto* attn = bench->add_subcommand(
      "attention",
      "Flex attention forward and backward: time, GFLOP/s over unmasked pairs (4*B*H*pairs*D "
      "forward, 2.5x that backward) and percent of the measured peak");
  auto opt = std::make_shared<bench::AttentionBenchOptions>();
  attn->add_flag("--json", opt->json, "Print JSON instead of a table");
  attn->add_option("--seq", opt->seq_lens, "Sequence lengths")->capture_default_str();
  attn->add_option("--dim", opt->head_dims, "Head dims")->capture_default_str();
  attn->add_option("--mask", opt->masks, "Masks: none, causal, sliding_window, document")
      ->capture_default_str();
  attn->add_option("--heads", opt->heads, "Heads")->capture_default_str();
  attn->add_option("--batch", opt->batch, "Batch")->capture_default_str();
  attn->add_option("--dtype", opt->dtype,
                   "f32 or bf16 (bf16 also times f32 in the same run and reports the speedup)")
      ->capture_default_str();
  auto forward_only = std::make_shared<bool>(false);
  attn->add_flag("--forward-only", *forward_only, "Skip the backward pass");
  auto* coll = bench->add_subcommand(
      "collectives",
      "All-reduce, all-gather, reduce-scatter and all-to-all (into another buffer and in place) "
      "bandwidth over message sizes (nccl-tests algbw/busbw), in-process threads or MPI ranks "
      "(--mpi, under mpirun)");
  struct CollectiveOptions {
    bool json = false, mpi = false;
    int devices = 4;
    int64_t min_bytes = 4 << 10, max_bytes = 64 << 20;
  };
  auto copt = std::make_shared<CollectiveOptions>();
  coll->add_flag("--json", copt->json, "Print JSON instead of a table");
  coll->add_flag("--mpi", copt->mpi, "One device per MPI rank (run under mpirun)");
  coll->add_option("--devices", copt->devices, "In-process devices")->capture_default_str();
  coll->add_option("--min-bytes", copt->min_bytes, "Smallest message")->capture_default_str();
  coll->add_option("--max-bytes", copt->max_bytes, "Largest message")->capture_default_str();
  coll->callback([copt] {
    SetAction([copt] {
      return copt->mpi ? bench::RunCollectivesMpi(copt->json, copt->min_bytes, copt->max_bytes)
                       : bench::RunCollectives(copt->json, copt->devices, copt->min_bytes,
                                               copt->max_bytes);
    });
  });

  auto* prop = bench->add_subcommand(
      "propagate",
      "Sharding propagation of a 126-layer unrolled Llama-style training graph, one thread");
  struct PropagateBenchOptions {
    bool json = false;
    int64_t chain = 0;
    CLI::Option* chain_given = nullptr;
  };
  auto popt = std::make_shared<PropagateBenchOptions>();
  prop->add_flag("--json", popt->json, "Print JSON instead of a table");
  popt->chain_given =
      prop->add_option("--chain", popt->chain,
                       "Time build, propagation, partitioning and destruction of a chain of N "
                       "elementwise ops that all read one sharded parameter, at N/4, N/2 and N "
                       "(microseconds per instruction: equal when the passes are linear)");
  prop->callback([popt] {
    SetAction([popt] {
      return popt->chain_given->count() > 0 ? bench::RunPropagateChainBench(popt->chain, popt->json)
                                            : bench::RunPropagateBench(popt->json);
    });
  });

  auto* exec = bench->add_subcommand(
      "executor",
      "Executor overhead per instruction (a chain of tiny adds), microseconds; with --gemm, "
      "bf16 against f32 dots through the executor, GFLOP/s");
  struct ExecutorBenchOptions {
    bool json = false, gemm = false;
    std::vector<std::string> shapes;
    int reps = 5;
    std::string hlo;
    int top = 20;
  };
  auto eopt = std::make_shared<ExecutorBenchOptions>();
  exec->add_flag("--json", eopt->json, "Print JSON instead of a table");
  exec->add_flag("--gemm", eopt->gemm,
                 "Time dots [M,K] x [K,N] in f32, in bf16 (oneDNN's bf16 matmul where it has "
                 "one) and in bf16 forced onto the widening path, in the same run");
  exec->add_option("--gemm-shape", eopt->shapes,
                   "Dot shapes MxKxN for --gemm (default 4096x512x1536 4096x1536x512)");
  exec->add_option("--reps", eopt->reps, "Timed runs per dot for --gemm (the median is reported)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  exec->add_option("--hlo", eopt->hlo,
                   "Time this HLO module instead, compiled for one device and fused: the median "
                   "of --reps runs on seeded random inputs and its --top instructions")
      ->check(CLI::ExistingFile);
  exec->add_option("--top", eopt->top, "Instructions listed with --hlo")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  exec->callback([eopt] {
    SetAction([eopt] {
      if (!eopt->hlo.empty()) {
        WEFT_CHECK(!eopt->gemm && eopt->shapes.empty(),
                   "--hlo cannot be combined with --gemm or --gemm-shape");
        return bench::RunExecutorModule(eopt->json, eopt->hlo, eopt->reps, eopt->top);
      }
      if (!eopt->gemm) {
        WEFT_CHECK(eopt->shapes.empty(), "--gemm-shape needs --gemm");
        return bench::RunExecutorOverhead(eopt->json);
      }
      std::vector<bench::GemmShape> shapes;
      for (const std::string& s : eopt->shapes) shapes.push_back(bench::ParseGemmShape(s));
      if (shapes.empty()) shapes = bench::DefaultGemmShapes();
      return bench::RunExecutorGemm(eopt->json, shapes, eopt->reps);
    });
  });

  auto* plan = bench->add_subcommand(
      "plan",
      "Planning Llama 3.1 405B's training step on v6e-256 (weft plan), one thread; "
      "target < 3 s");
  auto plan_json = std::make_shared<bool>(false);
  plan->add_flag("--json", *plan_json, "Print JSON instead of a table");
  plan->callback(
      [plan_json] { SetAction([plan_json] { return bench::RunPlanBench(*plan_json); }); });

  // `weft bench auto [CONFIG]`: bench/bench_auto.h.
  auto* automatic = bench->add_subcommand(
      "auto",
      "weft plan --auto for this machine's in-process devices (chip local-cpu), then every "
      "candidate that fits run for a few steps: the chosen candidate's step time over the "
      "fastest measured");
  auto auto_opt = std::make_shared<bench::AutoBenchOptions>();
  automatic->add_option("config", auto_opt->config, "Run config (TOML)")->capture_default_str();
  automatic->add_option("--chips", auto_opt->chips, "In-process devices")->capture_default_str();
  automatic->add_option("--steps", auto_opt->steps, "Timed steps per candidate")
      ->capture_default_str();
  automatic->add_option("--remat", auto_opt->remats,
                        "Remat presets to try (default: those of weft plan --auto)");
  automatic->add_flag("--json", auto_opt->json, "Print JSON instead of a table");
  automatic->callback(
      [auto_opt] { SetAction([auto_opt] { return bench::RunAutoBench(*auto_opt); }); });

  // `weft bench checkpoint [CONFIG]`: bench/bench_checkpoint.h.
  auto* ckpt = bench->add_subcommand(
      "checkpoint",
      "Saving and loading a config's parameters and AdamW moments sharded over in-process "
      "devices, as weft train does: MB/s against this disk's sequential write (and read) "
      "measured in the same run");
  auto ckpt_opt = std::make_shared<bench::CheckpointBenchOptions>();
  ckpt->add_option("config", ckpt_opt->config, "Run config (TOML)")->capture_default_str();
  ckpt->add_option("--mesh", ckpt_opt->mesh, "The saving mesh")->capture_default_str();
  ckpt->add_option("--load-mesh", ckpt_opt->load_mesh,
                   "The mesh of the resharding load (default: fsdp over every device)");
  ckpt->add_option("--dir", ckpt_opt->dir,
                   "Where to write (default: a fresh temporary directory, removed after)");
  ckpt->add_option("--reps", ckpt_opt->reps, "Runs of each; the best counts")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  ckpt->add_flag("--json", ckpt_opt->json, "Print JSON instead of a table");
  ckpt->callback(
      [ckpt_opt] { SetAction([ckpt_opt] { return bench::RunCheckpointBench(*ckpt_opt); }); });

  // `weft bench train CONFIG`: bench/bench_train.h.
  auto* train = bench->add_subcommand(
      "train",
      "Training steps of a config's Llama in this process: tokens/s, model-FLOPs utilization "
      "against the peak of its precision measured in the same run (float32 FMA; bf16: the bf16 "
      "matrix peak), time by class, allocations, page faults and peak bytes per step");
  auto train_opt = std::make_shared<bench::TrainBenchOptions>();
  train->add_option("config", train_opt->config, "Run config (TOML), e.g. configs/small.toml")
      ->required();
  train->add_option("--mesh", train_opt->mesh,
                    "Mesh axes, major to minor, e.g. fsdp=2,tensor=2 (replaces the config's "
                    "[mesh]; fsdp=1,tensor=1 is one device)");
  train->add_option("--precision", train_opt->precision,
                    "bf16 or f32 (replaces the config's train.precision; when it does not say, "
                    "the one this CPU trains fastest, as weft train chooses)");
  train->add_option("--steps", train_opt->steps, "Timed steps")->capture_default_str();
  train->add_option("--warmup", train_opt->warmup, "Untimed steps first (at least 1)")
      ->capture_default_str();
  auto train_no_profile = std::make_shared<bool>(false);
  train->add_flag("--no-profile", *train_no_profile,
                  "Do not time instructions by class (the breakdown is then optimizer and other)");
  auto train_unfused = std::make_shared<bool>(false);
  train->add_flag("--unfused", *train_unfused,
                  "Run the per-device program without fusion (compiler::FuseLoops is on by "
                  "default, as in weft train)");
  train->add_flag("--json", train_opt->json, "Print one JSON object instead of a table");
  train
      ->add_option("--top", train_opt->top,
                   "Also list device 0's N instructions that took the most time per step "
                   "(needs the profile)")
      ->check(CLI::NonNegativeNumber);
  train->callback([train_opt, train_no_profile, train_unfused] {
    train_opt->profile = !*train_no_profile;
    train_opt->fuse_loops = !*train_unfused;
    SetAction([train_opt] { return bench::RunTrainBench(*train_opt); });
  });

  attn->callback([opt, forward_only] {
    opt->backward = !*forward_only;
    SetAction([opt] { return bench::RunAttention(*opt); });
  });
}

}  // namespace weft::cli
