// JobRunner: one worker thread running compress_to_file per queued job (see jobs.h).
#include "serve/jobs.h"

#include <ctime>

#include "common/error.h"

namespace kvzip::serve {
namespace {

// Thrown from the prefill progress callback to abandon a job (not an Error: nothing is wrong).
struct JobCancelled {};

}  // namespace

JobRunner::JobRunner(const model::Model& model, CacheStore& store, uint32_t max_pending)
    : model_(model), store_(store), max_pending_(max_pending) {
  thread_ = std::thread([this] { run(); });
}

JobRunner::~JobRunner() {
  shutdown(std::chrono::milliseconds(0));
  if (thread_.joinable()) thread_.join();
}

std::optional<std::string> JobRunner::submit(const std::string& cache, std::string text,
                                             compress::CompressFileOptions options) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_ || queue_.size() + running_ >= max_pending_) return std::nullopt;
  const std::string id = "job-" + std::to_string(next_id_++);
  Job job;
  job.status.id = id;
  job.status.cache = cache;
  job.status.status = "queued";
  job.status.created_unix = static_cast<int64_t>(std::time(nullptr));
  job.text = std::move(text);
  job.options = std::move(options);
  jobs_.emplace(id, std::move(job));
  queue_.push_back(id);
  cv_.notify_one();
  return id;
}

std::optional<JobStatus> JobRunner::get(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return std::nullopt;
  return it->second.status;
}

size_t JobRunner::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size() + running_;
}

bool JobRunner::busy(const std::string& cache) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, job] : jobs_)
    if (job.status.cache == cache &&
        (job.status.status == "queued" || job.status.status == "running"))
      return true;
  return false;
}

bool JobRunner::shutdown(std::chrono::milliseconds grace) {
  std::unique_lock<std::mutex> lock(mu_);
  stopping_ = true;
  for (const auto& id : queue_) jobs_[id].status.status = "cancelled";
  queue_.clear();
  cv_.notify_all();
  return cv_.wait_for(lock, grace, [&] { return running_ == 0; });
}

void JobRunner::run() {
  while (true) {
    std::string id;
    std::string text;
    compress::CompressFileOptions options;
    std::string cache;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      id = queue_.front();
      queue_.pop_front();
      Job& job = jobs_[id];
      job.status.status = "running";
      text = std::move(job.text);
      options = job.options;
      cache = job.status.cache;
      ++running_;
    }
    const auto t0 = std::chrono::steady_clock::now();
    auto set = [&](auto&& fn) {
      std::lock_guard<std::mutex> lock(mu_);
      JobStatus& s = jobs_[id].status;
      fn(s);
      s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    options.compress.prefill.progress = [&](const prefill::PrefillProgress& p) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopping_) throw JobCancelled{};
      }
      set([&](JobStatus& s) {
        s.progress = p.total ? 0.8 * double(p.done) / double(p.total) : 0.0;
      });
    };
    try {
      const compress::CompressResult r =
          compress::compress_to_file(model_, text, options, store_.path_of(cache));
      store_.invalidate(cache);
      set([&](JobStatus& s) {
        s.status = "succeeded";
        s.progress = 1.0;
        s.achieved_ratio = r.achieved_ratio;
      });
    } catch (const JobCancelled&) {
      set([](JobStatus& s) { s.status = "cancelled"; });
    } catch (const std::exception& e) {
      set([&](JobStatus& s) {
        s.status = "failed";
        s.error = e.what();
      });
    }
    std::lock_guard<std::mutex> lock(mu_);
    --running_;
    cv_.notify_all();
  }
}

}  // namespace kvzip::serve
