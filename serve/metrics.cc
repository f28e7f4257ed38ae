// Metrics: Prometheus text rendering of the counters, gauges and histograms (see metrics.h).
#include "serve/metrics.h"

#include <cstdio>

namespace kvzip::serve {
namespace {

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.9g", v);
  return b;
}

void line(std::string& out, const std::string& name, const std::string& labels, double v) {
  out += name;
  if (!labels.empty()) out.append("{").append(labels).append("}");
  out.append(" ").append(num(v)).append("\n");
}

void head(std::string& out, const char* name, const char* type, const char* help) {
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++n_;
}

void Histogram::render(std::string& out, const std::string& name) const {
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    line(out, name + "_bucket", "le=\"" + num(bounds_[i]) + "\"", double(cum));
  }
  line(out, name + "_bucket", "le=\"+Inf\"", double(n_));
  line(out, name + "_sum", "", sum_);
  line(out, name + "_count", "", double(n_));
}

Metrics::Metrics()
    : ttft_({0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}),
      per_token_({0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2}) {}

void Metrics::request(const std::string& route, int status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++requests_[{route, status}];
}

void Metrics::completion(uint32_t prompt_tokens, uint32_t completion_tokens, double ttft_s,
                         double per_token_s) {
  std::lock_guard<std::mutex> lock(mu_);
  prompt_tokens_ += prompt_tokens;
  completion_tokens_ += completion_tokens;
  ttft_.observe(ttft_s);
  if (completion_tokens > 1) per_token_.observe(per_token_s);
}

void Metrics::cache_error(const std::string& code) {
  std::lock_guard<std::mutex> lock(mu_);
  ++cache_errors_[code];
}

std::string Metrics::render(const Gauges& g) const {
  std::string out;
  std::lock_guard<std::mutex> lock(mu_);
  head(out, "kvzip_http_requests_total", "counter", "HTTP requests by route and status code.");
  for (const auto& [k, n] : requests_)
    line(out, "kvzip_http_requests_total",
         "route=\"" + k.first + "\",code=\"" + std::to_string(k.second) + "\"", double(n));
  head(out, "kvzip_cache_errors_total", "counter",
       "Requests refused because of a cache file (damaged, another model's, larger than the "
       "budget).");
  for (const auto& [code, n] : cache_errors_)
    line(out, "kvzip_cache_errors_total", "code=\"" + code + "\"", double(n));
  // One unlabelled sample each: (name, type, help, value).
  auto scalar = [&out](const char* name, const char* type, const char* help, double v) {
    head(out, name, type, help);
    line(out, name, "", v);
  };
  scalar("kvzip_prompt_tokens_total", "counter", "Question tokens prefilled.",
         double(prompt_tokens_));
  scalar("kvzip_completion_tokens_total", "counter", "Answer tokens generated.",
         double(completion_tokens_));
  head(out, "kvzip_time_to_first_token_seconds", "histogram",
       "Request arrival to first answer token.");
  ttft_.render(out, "kvzip_time_to_first_token_seconds");
  head(out, "kvzip_time_per_output_token_seconds", "histogram",
       "Mean time between answer tokens of a request (requests with 2+ tokens).");
  per_token_.render(out, "kvzip_time_per_output_token_seconds");
  scalar("kvzip_queue_depth", "gauge", "Requests waiting for an engine slot.", double(g.queued));
  scalar("kvzip_active_requests", "gauge", "Requests being prefilled or decoded.",
         double(g.active));
  scalar("kvzip_engine_steps_total", "counter", "Batched forward steps run.", double(g.steps));
  scalar("kvzip_loaded_caches", "gauge", "Compressed caches in memory.", double(g.loaded_caches));
  scalar("kvzip_loaded_cache_bytes", "gauge", "K/V bytes of the caches in memory.",
         double(g.loaded_bytes));
  scalar("kvzip_compress_jobs_running", "gauge", "Compress jobs queued or running.",
         double(g.jobs_running));
  scalar("kvzip_library_caches", "gauge", "Caches in the library index.", double(g.library_caches));
  scalar("kvzip_library_skipped_caches", "gauge",
         "Cache files the last library index refresh skipped as unreadable or corrupt.",
         double(g.library_skipped));
  return out;
}

}  // namespace kvzip::serve
