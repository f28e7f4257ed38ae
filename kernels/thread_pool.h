// ThreadPool: a small persistent pool for the CPU kernels (no OpenMP). run(n, fn) calls fn(i) for
// every task i in [0, n) across the pool's threads and the calling thread, and returns when all
// have finished; tasks are handed out dynamically, so uneven tasks balance. The first exception a
// task throws is rethrown in the caller. A run() issued from inside a task runs serially on that
// thread (no nested parallelism). One run() at a time per pool: callers must not share a pool
// across threads concurrently. Waiting: a decode step is a few hundred short runs back to back, so
// workers between runs, and the caller for the workers' check-out, first spin for a bounded time
// (kSpin) on an atomic, and only then sleep on a condition variable: waking a sleeping thread costs
// tens of microseconds on a VM, per run. The spin is bounded, so an idle pool sleeps, and it only
// happens when the pool has no more threads than the CPUs the process may use (oversubscribed, a
// spinning thread would hold a CPU the working one needs).
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace kvzip::kernels {

class ThreadPool {
 public:
  // threads: total threads working on a run() including the caller; 0 means one per hardware
  // thread. threads == 1 starts no worker and runs everything inline.
  explicit ThreadPool(uint32_t threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  uint32_t size() const { return static_cast<uint32_t>(workers_.size()) + 1; }

  // Calls fn(i) for i in [0, n_tasks).
  template <class Fn>
  void run(size_t n_tasks, Fn&& fn) {
    using F = std::remove_reference_t<Fn>;
    run_erased(
        n_tasks, [](void* ctx, size_t i) { (*static_cast<F*>(ctx))(i); },
        const_cast<void*>(static_cast<const void*>(&fn)));
  }

  // Splits [0, n) into at most size()*4 contiguous ranges of at least `grain` items and calls
  // fn(begin, end) for each.
  template <class Fn>
  void parallel_for(size_t n, size_t grain, Fn&& fn) {
    if (n == 0) return;
    size_t parts = static_cast<size_t>(size()) * 4;
    size_t step = (n + parts - 1) / parts;
    if (step < grain) step = grain;
    size_t n_tasks = (n + step - 1) / step;
    run(n_tasks, [&](size_t t) {
      size_t b = t * step, e = b + step < n ? b + step : n;
      fn(b, e);
    });
  }

 private:
  using Call = void (*)(void*, size_t);
  void run_erased(size_t n_tasks, Call call, void* ctx);
  void worker_loop();
  void work_on_current_job();

  // Spins (for at most kSpin, when spin_) until pred() holds; false if it still does not.
  template <class Pred>
  bool spin_until(Pred pred) const;

  std::vector<std::thread> workers_;
  bool spin_ = false;  // the pool fits the CPUs this process may run on
  std::mutex mu_;
  std::condition_variable wake_;  // workers wait here for a new generation
  std::condition_variable done_;  // the caller waits here for every worker to check out
  // Written under mu_ (the condition variables' predicates), read without it by spinning threads.
  std::atomic<uint64_t> generation_{0};   // bumped per run()
  std::atomic<uint32_t> checked_out_{0};  // workers finished with the current generation
  std::atomic<bool> stop_{false};
  // The current job: read by workers only between wake and check-out.
  Call call_ = nullptr;
  void* ctx_ = nullptr;
  size_t n_tasks_ = 0;
  std::atomic<size_t> next_{0};
  std::exception_ptr error_;  // first exception thrown by a task; guarded by mu_
};

// Runs fn(i) for i in [0, n) on `pool`, or serially when pool is null.
template <class Fn>
void run_tasks(ThreadPool* pool, size_t n, Fn&& fn) {
  if (pool && n > 1) {
    pool->run(n, fn);
  } else {
    for (size_t i = 0; i < n; ++i) fn(i);
  }
}

}  // namespace kvzip::kernels
