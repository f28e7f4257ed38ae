// serve/ compress jobs: POST /v1/caches runs compress_to_file (compress/pipeline.h) in the
// background, one job at a time in arrival order, and clients poll the job. The file appears
// atomically when the job succeeds and never otherwise (compress_to_file writes through
// AtomicFile). shutdown() cancels queued jobs and stops a running one at its next prefill
// progress report; a job past its prefill (scoring, writing) is waited for.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "compress/pipeline.h"
#include "serve/cache_store.h"

namespace kvzip::serve {

struct JobStatus {
  std::string id;         // "job-<n>"
  std::string cache;      // the cache id it writes
  std::string status;     // queued, running, succeeded, failed, cancelled
  double progress = 0.0;  // 0..1 (the prefill is the first 80%)
  std::string error;      // failed: why
  int64_t created_unix = 0;
  double seconds = 0.0;  // running time so far / in all
  double achieved_ratio = 0.0;
};

class JobRunner {
 public:
  JobRunner(const model::Model& model, CacheStore& store, uint32_t max_pending);
  ~JobRunner();

  // Queues a compress of `text` into cache `cache`; returns the job id, or nullopt when
  // max_pending jobs are already queued or running, or shutdown began.
  std::optional<std::string> submit(const std::string& cache, std::string text,
                                    compress::CompressFileOptions options);
  std::optional<JobStatus> get(const std::string& id) const;
  size_t pending() const;  // queued or running
  // True while a job for `cache` is queued or running (a second one would race it).
  bool busy(const std::string& cache) const;

  // Cancels queued jobs, asks the running one to stop, waits up to `grace` for it. Returns false
  // when a job is still running after that (the caller must not leave a temporary behind).
  bool shutdown(std::chrono::milliseconds grace);

 private:
  struct Job {
    JobStatus status;
    std::string text;
    compress::CompressFileOptions options;
  };
  void run();

  const model::Model& model_;
  CacheStore& store_;
  uint32_t max_pending_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Job> jobs_;
  std::deque<std::string> queue_;
  uint64_t next_id_ = 1;
  size_t running_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace kvzip::serve
