// ThreadPool implementation: one generation counter, bumped under a mutex, wakes the workers
// (spinning ones see it change; sleeping ones are notified); tasks are claimed from an atomic
// counter; every worker checks out of every generation before run() returns, so no worker can
// touch a finished job's function or context. The job's fields are written before the generation
// is bumped (release) and read after a worker sees it (acquire).
#include "kernels/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace kvzip::kernels {
namespace {
thread_local bool tl_in_task = false;  // true while this thread executes a pool task

// How long a waiting thread spins before it sleeps: longer than the gaps between the runs of a
// decode step (norms, RoPE, the caller's own bookkeeping: microseconds), short enough that an
// idle pool costs nothing measurable.
constexpr std::chrono::microseconds kSpin{500};

// The CPUs this process may run on (its affinity mask; the hardware's count where unknown).
uint32_t usable_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return uint32_t(std::max(1, CPU_COUNT(&set)));
  return std::max(1u, std::thread::hardware_concurrency());
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}
}  // namespace

template <class Pred>
bool ThreadPool::spin_until(Pred pred) const {
  if (!spin_) return pred();
  const auto t0 = std::chrono::steady_clock::now();
  for (uint32_t i = 1;; ++i) {
    if (pred()) return true;
    cpu_relax();
    if ((i & 255) == 0) {
      if (std::chrono::steady_clock::now() - t0 > kSpin) return pred();
      // Every few microseconds, let another runnable thread have this CPU (other processes on a
      // busy machine, e.g. tests run in parallel): a spinning thread must not starve the one it
      // waits for.
      sched_yield();
    }
  }
}

ThreadPool::ThreadPool(uint32_t threads) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  spin_ = threads <= usable_cpus();
  workers_.reserve(threads - 1);
  for (uint32_t i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_.store(true);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::work_on_current_job() {
  bool was_in_task = tl_in_task;
  tl_in_task = true;
  for (;;) {
    size_t i = next_.fetch_add(1, std::memory_order_relaxed);
    if (i >= n_tasks_) break;
    try {
      call_(ctx_, i);
    } catch (...) {
      std::lock_guard<std::mutex> lk(mu_);
      if (!error_) error_ = std::current_exception();
      next_.store(n_tasks_, std::memory_order_relaxed);  // stop handing out tasks
    }
  }
  tl_in_task = was_in_task;
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    const auto woken = [&] {
      return stop_.load(std::memory_order_acquire) ||
             generation_.load(std::memory_order_acquire) != seen;
    };
    if (!spin_until(woken)) {
      std::unique_lock<std::mutex> lk(mu_);
      wake_.wait(lk, woken);
    }
    if (stop_.load(std::memory_order_acquire)) return;
    seen = generation_.load(std::memory_order_acquire);
    work_on_current_job();
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (checked_out_.fetch_add(1) + 1 == workers_.size()) done_.notify_one();
    }
  }
}

void ThreadPool::run_erased(size_t n_tasks, Call call, void* ctx) {
  if (n_tasks == 0) return;
  if (workers_.empty() || tl_in_task || n_tasks == 1) {
    for (size_t i = 0; i < n_tasks; ++i) call(ctx, i);
    return;
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    call_ = call;
    ctx_ = ctx;
    n_tasks_ = n_tasks;
    next_.store(0, std::memory_order_relaxed);
    error_ = nullptr;
    checked_out_.store(0);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  work_on_current_job();
  const auto all_out = [&] {
    return checked_out_.load(std::memory_order_acquire) == workers_.size();
  };
  if (!spin_until(all_out)) {
    std::unique_lock<std::mutex> lk(mu_);
    done_.wait(lk, all_out);
  }
  std::exception_ptr err;
  {
    std::lock_guard<std::mutex> lk(mu_);
    err = error_;
    error_ = nullptr;
  }
  if (err) std::rethrow_exception(err);
}

}  // namespace kvzip::kernels
