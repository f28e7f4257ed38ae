// The server's state shared by its route files (server.cc: setup, auth, caches, jobs, health,
// metrics; server_chat.cc: chat completions). Internal to serve/.
#pragma once
#include <httplib.h>

#include <atomic>
#include <nlohmann/json.hpp>
#include <string>

#include "serve/cache_store.h"
#include "serve/engine.h"
#include "serve/jobs.h"
#include "serve/metrics.h"
#include "serve/server.h"

namespace kvzip::serve {

struct Server::Impl {
  const Model& model;
  ServerOptions opt;
  CacheStore store;
  Engine engine;
  JobRunner jobs;
  Metrics metrics;
  httplib::Server http;
  std::atomic<bool> draining{false};
  std::atomic<uint64_t> next_completion{1};

  Impl(const Model& m, ServerOptions o);
  void routes();
  void chat_completions(const httplib::Request& req, httplib::Response& res);
};

namespace detail {
// Writes `e` as an OpenAI error object (and Retry-After when it says so).
void send_error(httplib::Response& res, const ApiError& e);
// The ApiError of a kvzip::Error (status by code) or any other exception (500).
ApiError api_error_of(const std::exception& e);
// Runs `fn`, turning whatever it throws into an error response.
template <class Fn>
void guarded(httplib::Response& res, Fn&& fn) {
  try {
    fn();
  } catch (const ApiError& e) {
    send_error(res, e);
  } catch (const std::exception& e) {
    send_error(res, api_error_of(e));
  }
}
void send_json(httplib::Response& res, int status, const nlohmann::json& body);
}  // namespace detail

}  // namespace kvzip::serve
