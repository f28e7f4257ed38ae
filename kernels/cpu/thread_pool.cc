// ThreadPool implementation: one generation counter under a mutex wakes the workers; tasks are
// claimed from an atomic counter; every worker checks out of every generation before run()
// returns, so no worker can touch a finished job's function or context.
#include "kernels/thread_pool.h"

#include <algorithm>

namespace kvzip::kernels {
namespace {
thread_local bool tl_in_task = false;  // true while this thread executes a pool task
}  // namespace

ThreadPool::ThreadPool(uint32_t threads) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  workers_.reserve(threads - 1);
  for (uint32_t i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
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
    {
      std::unique_lock<std::mutex> lk(mu_);
      wake_.wait(lk, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    work_on_current_job();
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (++checked_out_ == workers_.size()) done_.notify_one();
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
    checked_out_ = 0;
    ++generation_;
  }
  wake_.notify_all();
  work_on_current_job();
  std::exception_ptr err;
  {
    std::unique_lock<std::mutex> lk(mu_);
    done_.wait(lk, [&] { return checked_out_ == workers_.size(); });
    err = error_;
    error_ = nullptr;
  }
  if (err) std::rethrow_exception(err);
}

}  // namespace kvzip::kernels
