#include "weft/base/thread_pool.h"

#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "weft/base/cpu.h"
#include "weft/base/env.h"

namespace weft {

namespace {
thread_local bool t_inside_pool = false;
}

struct ThreadPool::State {
  std::mutex submit;  // held by the one caller whose job is running
  std::mutex mu;
  std::condition_variable wake;
  std::condition_variable done;
  std::vector<std::thread> workers;
  // The current job.
  const std::function<void(int64_t, int)>* fn = nullptr;
  int64_t num_tasks = 0;
  std::atomic<int64_t> next{0};
  uint64_t generation = 0;
  int active = 0;  // workers still inside the current job
  bool stop = false;
  std::exception_ptr error;
  std::mutex error_mu;
};

namespace {

void RunTasks(ThreadPool::State* s, int thread) {
  for (;;) {
    int64_t task = s->next.fetch_add(1, std::memory_order_relaxed);
    if (task >= s->num_tasks) return;
    try {
      (*s->fn)(task, thread);
    } catch (...) {
      std::lock_guard<std::mutex> lock(s->error_mu);
      if (!s->error) s->error = std::current_exception();
      s->next.store(s->num_tasks, std::memory_order_relaxed);  // stop handing out work
    }
  }
}

}  // namespace

ThreadPool& ThreadPool::Global() {
  static ThreadPool pool(static_cast<int>(
      GetEnvInt("WEFT_NUM_THREADS", GetCpuInfo().logical_cores, 1, 1024)));
  return pool;
}

ThreadPool::ThreadPool(int num_threads) : num_threads_(num_threads < 1 ? 1 : num_threads) {
  state_ = new State();
  for (int t = 1; t < num_threads_; ++t) {
    state_->workers.emplace_back([this, t] {
      t_inside_pool = true;
      uint64_t seen = 0;
      for (;;) {
        {
          std::unique_lock<std::mutex> lock(state_->mu);
          state_->wake.wait(lock, [&] { return state_->stop || state_->generation != seen; });
          if (state_->stop) return;
          seen = state_->generation;
        }
        RunTasks(state_, t);
        std::lock_guard<std::mutex> lock(state_->mu);
        if (--state_->active == 0) state_->done.notify_all();
      }
    });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stop = true;
  }
  state_->wake.notify_all();
  for (auto& w : state_->workers) w.join();
  delete state_;
}

void ThreadPool::ParallelFor(int64_t num_tasks,
                             const std::function<void(int64_t task, int thread)>& fn) {
  if (num_tasks <= 0) return;
  std::unique_lock<std::mutex> submit(state_->submit, std::defer_lock);
  if (num_threads_ == 1 || num_tasks == 1 || t_inside_pool || !submit.try_lock()) {
    for (int64_t t = 0; t < num_tasks; ++t) fn(t, 0);
    return;
  }
  // This caller owns the pool until the job ends; it runs as thread 0.
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->fn = &fn;
    state_->num_tasks = num_tasks;
    state_->next.store(0);
    state_->error = nullptr;
    state_->active = num_threads_ - 1;
    ++state_->generation;
  }
  state_->wake.notify_all();
  t_inside_pool = true;
  RunTasks(state_, 0);
  t_inside_pool = false;
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(state_->mu);
    state_->done.wait(lock, [&] { return state_->active == 0; });
    state_->fn = nullptr;
    error = state_->error;
    state_->error = nullptr;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace weft
