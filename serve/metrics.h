// serve/ metrics: counters and latency histograms of the server, rendered as Prometheus text
// exposition (format 0.0.4). Thread-safe; recording is a short critical section.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace kvzip::serve {

// Cumulative histogram with fixed upper bounds (seconds), as Prometheus expects.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);
  // `name`_bucket{le=...}, `name`_sum, `name`_count lines.
  void render(std::string& out, const std::string& name) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // (bounds + 1): the last is +Inf
  double sum_ = 0.0;
  uint64_t n_ = 0;
};

// Values read at render time (gauges owned by other parts of the server).
struct Gauges {
  uint64_t queued = 0, active = 0, loaded_caches = 0, loaded_bytes = 0, steps = 0, jobs_running = 0;
  // The library index (library/library.h): caches in it, and files its last refresh skipped as
  // unreadable or corrupt.
  uint64_t library_caches = 0, library_skipped = 0;
};

class Metrics {
 public:
  Metrics();
  // One HTTP request: route pattern (e.g. "/v1/chat/completions") and status code.
  void request(const std::string& route, int status);
  // One answered chat completion.
  void completion(uint32_t prompt_tokens, uint32_t completion_tokens, double ttft_s,
                  double per_token_s);
  // One request refused because of a cache file (its error code: truncated, checksum_mismatch,
  // cache_too_large, ...).
  void cache_error(const std::string& code);
  std::string render(const Gauges& g) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  std::map<std::string, uint64_t> cache_errors_;
  uint64_t prompt_tokens_ = 0, completion_tokens_ = 0;
  Histogram ttft_, per_token_;
};

}  // namespace kvzip::serve
