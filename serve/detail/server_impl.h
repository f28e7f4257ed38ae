// The server's state shared by its route files (server.cc: setup, auth, caches, jobs, health,
// metrics; server_chat.cc: chat completions). Internal to serve/.
#pragma once
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "library/library.h"
#include "serve/cache_store.h"
#include "serve/engine.h"
#include "serve/http_server.h"
#include "serve/jobs.h"
#include "serve/metrics.h"
#include "serve/server.h"

namespace kvzip::serve {

// What a route's path says. Every /v1 route is served twice: as itself and as
// /c/{cache}/v1/..., the form a proxy hashes on to send one document's requests to one replica
// (docs/scale-out.md). The prefix pins the cache: a request under it may only name that cache.
struct Scope {
  std::optional<std::string> cache;  // set for the /c/{cache}/ form
  std::vector<std::string> args;     // the route's own captures, e.g. {id} of /v1/caches/{id}
  // The cache a request names (`given`, from its path or body; empty: not named), checked against
  // the pinned one: under /c/{cache}/ an empty name means that cache and another name is a 400.
  std::string pinned(const std::string& given, const char* param) const;
};

struct Server::Impl {
  const model::Model& model;
  ServerOptions opt;
  CacheStore store;
  Engine engine;
  JobRunner jobs;
  Metrics metrics;
  HttpServer http;
  std::atomic<bool> draining{false};
  std::atomic<uint64_t> next_completion{1};
  // The folder's library index (server_library.cc), opened on first use. One SQLite connection
  // runs one transaction at a time: every use holds library_mu.
  std::mutex library_mu;
  std::unique_ptr<library::Index> library;
  std::chrono::steady_clock::time_point library_refreshed{};
  std::atomic<uint64_t> library_skipped{0}, library_caches{0};

  Impl(const model::Model& m, ServerOptions o);
  using Route = std::function<void(const httplib::Request&, httplib::Response&, const Scope&)>;
  enum class Method { Get, Post, Put, Delete };
  void routes();
  void http_handlers();  // authentication, error and exception handlers, access log
  void cache_routes();   // /v1/models, /v1/caches and /v1/caches/{id}
  void status_routes();  // /v1/jobs/{id}, /health, /metrics
  void post_cache(const httplib::Request& req, httplib::Response& res, const Scope& scope);
  static nlohmann::json json_body(const httplib::Request& req, size_t cap);
  // Registers `route` for `pattern` (starting with /v1/) and for /c/{cache}`pattern`.
  void on(Method method, const std::string& pattern, Route route);
  // The largest body `method` `path` takes (0: none): HttpServer refuses larger ones unread.
  uint64_t body_limit(const std::string& method, const std::string& path) const;
  void put_cache(const httplib::Request& req, httplib::Response& res,
                 const httplib::ContentReader& reader, const Scope& scope);
  void chat_completions(const httplib::Request& req, httplib::Response& res, const Scope& scope);
  std::vector<std::shared_ptr<const LoadedCache>> chat_caches(const ChatRequest& cr,
                                                              nlohmann::json& sources);
  // GET /v1/search (server_library.cc).
  void library_routes();
  // The index, opened if need be and refreshed when the last refresh is over a second old (files
  // another replica or a compress job wrote). Holds library_mu.
  library::Index& library_locked();
  // The caches to compose for a question of the library model (ApiError 404 when none fits).
  library::Selection library_retrieve(const std::string& question, uint32_t answer_tokens);
  // An upload, replacement or deletion of `id` reflected in the index at once (if it is open).
  void library_update(const std::string& id);
  // The client's error for cache `id` that could not be acquired (unknown, damaged, another
  // model's, larger than the budget); file problems are counted in /metrics.
  ApiError cache_refusal(const std::string& id, const Error& e);
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
