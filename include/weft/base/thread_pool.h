// The process-wide compute thread pool used by the kernels.
//
// ParallelFor hands out task indices dynamically; each task must write only
// its own outputs, so results do not depend on which thread ran what.
// A call made while the pool is already busy (from a worker, or from a second
// caller thread such as another device's executor thread) runs inline on the
// calling thread: never a deadlock, never oversubscription.
#pragma once

#include <cstdint>

#include "weft/base/function_ref.h"

namespace weft {

class ThreadPool {
 public:
  // The shared pool. Its size is WEFT_NUM_THREADS if set, else the number of
  // logical cores.
  static ThreadPool& Global();

  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // The threads the calling thread's jobs use from now on: its device's
  // share of the cores (n > 0; 0: the whole pool). It is also the calling
  // thread's OpenMP team size (omp_set_num_threads), which oneDNN's GEMMs
  // use, so GEMMs and weft's kernels on one thread always run teams of one
  // size: libgomp ends the threads beyond a smaller team and creates them
  // again for the next larger one.
  static void SetThreadsForThisThread(int n);

  // The threads a ParallelFor called from this thread runs on: its share
  // (SetThreadsForThisThread), else the pool.
  int TeamSize() const;

  // Ends the worker threads of the calling thread's teams (OpenMP's pause;
  // its next ParallelFor starts them again). Call it before handing the
  // cores to other threads (LocalCluster's devices): libgomp counts idle
  // workers as threads competing for the cores, and with more of those than
  // cores every team's barriers sleep at once instead of spinning, so every
  // parallel region waits for a futex wake-up (tiny on one device: ~680
  // context switches a step, the second core 20% idle).
  static void EndWorkersOfThisThread();

  // Runs fn(task, thread) for task in [0, num_tasks); thread is in
  // [0, num_threads()) and identifies per-thread scratch. Rethrows the first
  // exception thrown by any task after all running tasks have stopped. The
  // team is the pool, or the calling thread's share where it has one, even
  // for fewer tasks than threads (the others find none).
  void ParallelFor(int64_t num_tasks, FunctionRef<void(int64_t task, int thread)> fn);

  struct State;  // implementation detail (thread_pool.cc)

 private:
  int num_threads_;
  State* state_;
};

}  // namespace weft
