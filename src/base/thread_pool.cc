#include "weft/base/thread_pool.h"

// The pool is OpenMP's: ParallelFor runs its tasks in an `omp parallel`
// team of num_threads() threads (or the calling thread's share, the size its
// GEMMs use too). oneDNN (the executor's GEMM) is built on
// the same OpenMP runtime (libgomp), so GEMMs and weft's own kernels share
// one set of worker threads: after a GEMM the team's threads spin briefly
// and pick up the next elementwise loop, instead of a second pool's
// threads waking up to compete with them for the cores (docs/DESIGN.md,
// "Threads").
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>

#include "weft/base/cpu.h"
#include "weft/base/env.h"

namespace weft {

namespace {
thread_local bool t_inside_pool = false;
thread_local int t_share = 0;  // SetThreadsForThisThread's n
}  // namespace

struct ThreadPool::State {
  std::mutex submit;  // held by the one caller whose job is running
  std::mutex error_mu;
};

ThreadPool& ThreadPool::Global() {
  static ThreadPool pool(
      static_cast<int>(GetEnvInt("WEFT_NUM_THREADS", GetCpuInfo().logical_cores, 1, 1024)));
  return pool;
}

void ThreadPool::SetThreadsForThisThread(int n) {
  t_share = n > 0 ? n : 0;
  omp_set_num_threads(n > 0 ? n : Global().num_threads());
}

int ThreadPool::TeamSize() const {
  return t_share > 0 ? std::min(num_threads_, t_share) : num_threads_;
}

void ThreadPool::EndWorkersOfThisThread() {
  // libgomp ends only this thread's pool, and nothing inside a parallel
  // region (it then returns an error, ignored: nothing to end).
  if (!t_inside_pool) omp_pause_resource_all(omp_pause_soft);
}

ThreadPool::ThreadPool(int num_threads) : num_threads_(num_threads < 1 ? 1 : num_threads) {
  state_ = new State();
}

ThreadPool::~ThreadPool() { delete state_; }

void ThreadPool::ParallelFor(int64_t num_tasks, FunctionRef<void(int64_t task, int thread)> fn) {
  if (num_tasks <= 0) return;
  // Always one size on a thread, whatever the number of tasks: teams sized
  // to each job made libgomp end and create threads (stacks, TLS: ~1,250
  // page faults a step of tiny on 16 threads) inside the training loop.
  const int threads = TeamSize();
  std::unique_lock<std::mutex> submit(state_->submit, std::defer_lock);
  if (threads <= 1 || num_tasks == 1 || t_inside_pool || !submit.try_lock()) {
    for (int64_t t = 0; t < num_tasks; ++t) fn(t, 0);
    return;
  }
  // This caller owns the pool until the job ends; it runs as thread 0.
  std::atomic<int64_t> next{0};
  std::exception_ptr error;
#pragma omp parallel num_threads(threads)
  {
    const bool was_inside = t_inside_pool;
    t_inside_pool = true;
    const int thread = omp_get_thread_num();
    for (;;) {
      const int64_t task = next.fetch_add(1, std::memory_order_relaxed);
      if (task >= num_tasks) break;
      try {
        fn(task, thread);
      } catch (...) {
        std::lock_guard<std::mutex> lock(state_->error_mu);
        if (!error) error = std::current_exception();
        next.store(num_tasks, std::memory_order_relaxed);  // stop handing out work
      }
    }
    t_inside_pool = was_inside;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace weft
