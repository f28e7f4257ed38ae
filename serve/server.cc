// Server: httplib setup, authentication, access log, error mapping, and every route but chat
// completions (server_chat.cc). See server.h.
#include "serve/server.h"

#include <sys/socket.h>
#include <netinet/in.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <mutex>
#include <vector>

#include "common/error.h"
#include "compress/scorer.h"
#include "serve/detail/server_impl.h"

namespace kvzip::serve {

using nlohmann::json;
using namespace detail;

namespace detail {

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) {
  if (e.retry_after_s > 0) res.set_header("Retry-After", std::to_string(e.retry_after_s));
  if (e.status == 401) res.set_header("WWW-Authenticate", "Bearer");
  send_json(res, e.status, error_body(e));
}

ApiError api_error_of(const std::exception& ex) {
  const auto* e = dynamic_cast<const Error*>(&ex);
  if (!e) return ApiError(500, "server_error", "internal", std::string("internal error: ") + ex.what());
  switch (e->code()) {
    case Errc::invalid_argument:
      return ApiError(400, "invalid_request_error", "invalid_value", e->what());
    case Errc::not_found:
      return ApiError(404, "not_found_error", "model_not_found", e->what());
    case Errc::model_mismatch:
      return ApiError(400, "invalid_request_error", "model_mismatch", e->what());
    case Errc::out_of_memory:
      return ApiError(503, "server_error", "overloaded", e->what(), {}, 2);
    case Errc::truncated: case Errc::bad_magic: case Errc::version_unsupported:
    case Errc::corrupt: case Errc::checksum_mismatch:
      return ApiError(500, "server_error", errc_name(e->code()), std::string("cache file: ") + e->what());
    case Errc::unsupported:
      return ApiError(400, "invalid_request_error", "unsupported", e->what());
    default:
      return ApiError(500, "server_error", errc_name(e->code()), e->what());
  }
}

}  // namespace detail

namespace {

// Equal strings in time that depends only on the expected key's length.
bool same_secret(const std::string& given, const std::string& key) {
  volatile unsigned char diff = given.size() != key.size();
  for (size_t i = 0; i < key.size(); ++i)
    diff = diff | (static_cast<unsigned char>(i < given.size() ? given[i] : 0) ^
                   static_cast<unsigned char>(key[i]));
  return diff == 0;
}

std::string hex64(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

json cache_json(const CacheInfo& ci) {
  const format::CacheHeader& h = ci.header;
  return json{{"id", ci.id},
              {"object", "cache"},
              {"created", h.created_unix},
              {"model", {{"arch", h.model.arch}, {"name", h.model.name},
                         {"tokenizer_hash", hex64(h.model.tokenizer_hash)},
                         {"weights_hash", hex64(h.model.weights_hash)}}},
              {"method", h.method},
              {"requested_ratio", h.requested_ratio},
              {"achieved_ratio", h.achieved_ratio},
              {"document_tokens", h.document_tokens.size()},
              {"prefix_tokens", h.prefix_tokens.size()},
              {"bytes", ci.file_bytes},
              {"loaded", ci.loaded}};
}

json job_json(const JobStatus& s) {
  json j{{"id", s.id}, {"object", "cache.job"}, {"cache", s.cache}, {"status", s.status},
         {"progress", s.progress}, {"created", s.created_unix}, {"seconds", s.seconds}};
  if (!s.error.empty()) j["error"] = s.error;
  if (s.status == "succeeded") j["achieved_ratio"] = s.achieved_ratio;
  return j;
}

// The path form of a pinned cache: /c/{cache}/v1/...
const std::string kPinnedPrefix = R"(/c/([^/]+))";

// Route label for metrics: the pattern, never the raw path (ids would explode the label set).
std::string route_of(const std::string& path) {
  if (path.rfind("/c/", 0) == 0) {
    const size_t slash = path.find('/', 3);
    return slash == std::string::npos ? "other" : "/c/{cache}" + route_of(path.substr(slash));
  }
  for (const char* p : {"/v1/chat/completions", "/v1/models", "/v1/caches", "/health", "/metrics"})
    if (path == p) return p;
  if (path.rfind("/v1/caches/", 0) == 0) return "/v1/caches/{id}";
  if (path.rfind("/v1/jobs/", 0) == 0) return "/v1/jobs/{id}";
  return "other";
}

thread_local std::chrono::steady_clock::time_point t_request_start;
std::mutex log_mu;

}  // namespace

std::string Scope::pinned(const std::string& given, const char* param) const {
  if (!cache) return given;
  if (given.empty() || given == *cache) return *cache;
  throw ApiError(400, "invalid_request_error", "cache_mismatch",
                 "the path /c/" + cache->substr(0, 64) + "/ pins cache \"" + cache->substr(0, 64) +
                     "\" but the request names \"" + given.substr(0, 64) + "\"",
                 param);
}

Server::Impl::Impl(const model::Model& m, ServerOptions o)
    : model(m), opt(std::move(o)), store(m, opt.caches_dir, opt.max_loaded_bytes, opt.key_tiles),
      engine(m, opt.engine), jobs(m, store, opt.max_jobs) {
  routes();
}

void Server::Impl::on(Method method, const std::string& pattern, Route route) {
  for (const bool prefixed : {false, true}) {
    auto handler = [route, prefixed](const httplib::Request& req, httplib::Response& res) {
      guarded(res, [&] {
        Scope scope;
        size_t first = 1;
        if (prefixed) {
          scope.cache = req.matches[1];
          first = 2;
        }
        for (size_t i = first; i < req.matches.size(); ++i) scope.args.push_back(req.matches[i]);
        route(req, res, scope);
      });
    };
    const std::string path = prefixed ? kPinnedPrefix + pattern : pattern;
    switch (method) {
      case Method::Get: http.Get(path, handler); break;
      case Method::Post: http.Post(path, handler); break;
      case Method::Put: http.Put(path, handler); break;
      case Method::Delete: http.Delete(path, handler); break;
    }
  }
}

void Server::Impl::routes() {
  const uint32_t n_threads = opt.http_threads;
  http.new_task_queue = [n_threads] { return new httplib::ThreadPool(n_threads); };
  http.set_payload_max_length(opt.max_upload_bytes);
  http.set_keep_alive_timeout(2);
  http.set_read_timeout(30);
  http.set_write_timeout(30);

  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    t_request_start = std::chrono::steady_clock::now();
    if (opt.api_key.empty() || req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
    const std::string auth = req.get_header_value("Authorization");
    const std::string prefix = "Bearer ";
    const bool ok = auth.size() > prefix.size() && auth.compare(0, prefix.size(), prefix) == 0 &&
                    same_secret(auth.substr(prefix.size()), opt.api_key);
    if (ok) return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, ApiError(401, "authentication_error", "invalid_api_key",
                             "missing or wrong API key: send Authorization: Bearer <key>"));
    return httplib::Server::HandlerResponse::Handled;
  });
  http.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (!res.body.empty()) return;
    const int s = res.status;
    const std::string what = s == 404 ? "no such route" : s == 413 ? "the body is too large"
                             : s == 405 ? "method not allowed" : "request failed";
    send_error(res, ApiError(s, s >= 500 ? "server_error" : "invalid_request_error", "", what));
  });
  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      send_error(res, api_error_of(e));
    } catch (...) {
      send_error(res, ApiError(500, "server_error", "internal", "internal error"));
    }
  });
  http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    metrics.request(route_of(req.path), res.status);
    if (!opt.access_log) return;
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                                t_request_start).count();
    json line{{"ts", static_cast<int64_t>(std::time(nullptr))}, {"remote", req.remote_addr},
              {"method", req.method}, {"path", req.path}, {"status", res.status},
              {"ms", std::round(ms * 10) / 10}};
    std::lock_guard<std::mutex> lock(log_mu);
    std::cerr << line.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
  });

  auto json_body = [this](const httplib::Request& req, size_t cap) {
    if (req.body.size() > cap)
      throw ApiError(413, "invalid_request_error", "body_too_large",
                     "the body is " + std::to_string(req.body.size()) + " bytes; at most " +
                         std::to_string(cap));
    return parse_object(req.body);
  };

  on(Method::Post, "/v1/chat/completions",
     [this](const httplib::Request& req, httplib::Response& res, const Scope& scope) {
       chat_completions(req, res, scope);
     });
  // Under /c/{cache}/ the lists still name every cache of the shared folder: the prefix only
  // routes, and an `openai` client whose base URL carries it lists models as usual.
  on(Method::Get, "/v1/models", [this](const httplib::Request&, httplib::Response& res, const Scope&) {
    json data = json::array();
    for (const CacheInfo& ci : store.list())
      data.push_back({{"id", ci.id}, {"object", "model"}, {"created", ci.header.created_unix},
                      {"owned_by", "kvzip"}});
    send_json(res, 200, {{"object", "list"}, {"data", data}});
  });
  on(Method::Get, "/v1/caches", [this](const httplib::Request&, httplib::Response& res, const Scope&) {
    json data = json::array();
    for (const CacheInfo& ci : store.list()) data.push_back(cache_json(ci));
    send_json(res, 200, {{"object", "list"}, {"data", data}});
  });
  on(Method::Get, R"(/v1/caches/([^/]+))",
     [this](const httplib::Request&, httplib::Response& res, const Scope& scope) {
       send_json(res, 200, cache_json(store.info(scope.pinned(scope.args[0], "id"))));
     });
  on(Method::Delete, R"(/v1/caches/([^/]+))",
     [this](const httplib::Request&, httplib::Response& res, const Scope& scope) {
       const std::string id = scope.pinned(scope.args[0], "id");
       store.remove(id);
       send_json(res, 200, {{"id", id}, {"object", "cache"}, {"deleted", true}});
     });
  on(Method::Put, R"(/v1/caches/([^/]+))",
     [this](const httplib::Request& req, httplib::Response& res, const Scope& scope) {
       const std::string id = scope.pinned(scope.args[0], "id");
       store.path_of(id);  // the id check first
       if (jobs.busy(id))
         throw ApiError(409, "invalid_request_error", "conflict", "a compress job is writing cache " + id);
       const bool replace = req.get_param_value("replace") == "true";
       try {
         store.put(id, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(req.body.data()),
                                               req.body.size()), replace);
       } catch (const Error& e) {
         if (e.code() == Errc::invalid_argument && !replace)
           throw ApiError(409, "invalid_request_error", "conflict",
                          "cache " + id + " exists; PUT with ?replace=true to replace it");
         if (e.code() == Errc::model_mismatch || e.code() == Errc::io) throw;
         throw ApiError(400, "invalid_request_error", errc_name(e.code()),
                        std::string("the uploaded .kvz is not valid: ") + e.what());
       }
       send_json(res, 201, cache_json(store.info(id)));
     });
  on(Method::Post, "/v1/caches",
     [this, json_body](const httplib::Request& req, httplib::Response& res, const Scope& scope) {
       if (draining) throw ApiError(503, "server_error", "shutting_down", "the server is shutting down", {}, 5);
       const json j = json_body(req, opt.max_document_bytes + 4096);
       auto str = [&](const char* k, const std::string& def) {
         if (!j.contains(k) || j[k].is_null()) return def;
         if (!j[k].is_string()) throw ApiError(400, "invalid_request_error", "invalid_value",
                                               std::string(k) + " must be a string", k);
         return j[k].get<std::string>();
       };
       const std::string id = scope.pinned(str("id", ""), "id");
       const std::string text = str("text", str("document", ""));
       if (id.empty()) throw ApiError(400, "invalid_request_error", "invalid_value", "id is required", "id");
       store.path_of(id);
       if (text.find_first_not_of(" \t\r\n") == std::string::npos)
         throw ApiError(400, "invalid_request_error", "invalid_value", "text (the document) is required", "text");
       if (text.size() > opt.max_document_bytes)
         throw ApiError(413, "invalid_request_error", "body_too_large", "the document is too large", "text");
       bool replace = false;
       if (j.contains("replace")) {
         if (!j["replace"].is_boolean())
           throw ApiError(400, "invalid_request_error", "invalid_value", "replace must be a boolean", "replace");
         replace = j["replace"].get<bool>();
       }
       compress::CompressFileOptions fo;
       fo.compress.method = str("method", "kvzip");
       if (fo.compress.method == "kvzip-head")
         throw ApiError(400, "invalid_request_error", "unsupported",
                        "kvzip-head needs a head-scores file: compress with the CLI and PUT the .kvz", "method");
       if (j.contains("ratio")) {
         if (!j["ratio"].is_number())
           throw ApiError(400, "invalid_request_error", "invalid_value", "ratio must be a number", "ratio");
         fo.compress.ratio = j["ratio"].get<double>();
       }
       uint32_t chunk = 2048;
       if (j.contains("chunk")) {
         if (!j["chunk"].is_number_integer() || j["chunk"].get<int64_t>() < 1 || j["chunk"].get<int64_t>() > 65536)
           throw ApiError(400, "invalid_request_error", "invalid_value", "chunk must be an integer in [1, 65536]", "chunk");
         chunk = static_cast<uint32_t>(j["chunk"].get<int64_t>());
       }
       fo.compress.scorer = compress::make_scorer_options(model.chat(), chunk, 0);
       fo.system = str("system", "");
       fo.query_template = str("query_template", fo.query_template);
       fo.write.force = replace;
       fo.threads = opt.compress_threads;
       compress::make_method_scorer(fo.compress);  // a bad method or ratio fails now, not in the job
       if (fo.query_template.find("{question}") == std::string::npos)
         throw ApiError(400, "invalid_request_error", "invalid_value", "query_template must contain {question}", "query_template");
       if (!replace && std::filesystem::exists(store.path_of(id)))
         throw ApiError(409, "invalid_request_error", "conflict", "cache " + id + " exists; send \"replace\": true", "id");
       if (jobs.busy(id))
         throw ApiError(409, "invalid_request_error", "conflict", "a compress job is already writing cache " + id, "id");
       const auto job = jobs.submit(id, text, fo);
       if (!job)
         throw ApiError(429, "rate_limit_error", "too_many_jobs", "too many compress jobs; retry later", {}, 10);
       // Under /c/{cache}/ the job's URL keeps the prefix, so the proxy asks the replica running it.
       res.set_header("Location", (scope.cache ? "/c/" + *scope.cache : std::string()) + "/v1/jobs/" + *job);
       send_json(res, 202, job_json(*jobs.get(*job)));
     });
  // Jobs live in the memory of the replica that runs them (their output is an atomic file in
  // the shared folder, so a job lost with its replica is simply submitted again).
  on(Method::Get, R"(/v1/jobs/([^/]+))",
     [this](const httplib::Request&, httplib::Response& res, const Scope& scope) {
       const auto s = jobs.get(scope.args[0]);
       if (!s) throw ApiError(404, "not_found_error", "job_not_found", "no such job");
       send_json(res, 200, job_json(*s));
     });
  http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    send_json(res, draining ? 503 : 200, {{"status", draining ? "draining" : "ok"}});
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    Gauges g;
    g.queued = engine.queued();
    g.active = engine.active();
    g.steps = engine.steps();
    g.loaded_caches = store.loaded_count();
    g.loaded_bytes = store.loaded_bytes();
    g.jobs_running = jobs.pending();
    res.set_content(metrics.render(g), "text/plain; version=0.0.4");
  });
}

namespace {

// Debian's cpp-httplib is a compiled library whose listening socket has a backlog of 5
// (CPPHTTPLIB_LISTEN_BACKLOG, fixed when the library was built). A burst of clients arriving
// while the accept thread waits for a CPU then overflows the queue and some get a connection
// reset (measured: 27 of 64 simultaneous requests under CPU load). listen() on a socket that
// already listens only changes its backlog, so the socket is found (this process, listening,
// bound to `port`) and given a queue as long as the requests the server takes (ServerOptions::listen_backlog).
void widen_backlog(int port, int backlog) {
  std::vector<int> fds;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    const std::string name = e.path().filename().string();
    if (!name.empty() && name.find_first_not_of("0123456789") == std::string::npos) fds.push_back(std::stoi(name));
  }
  for (int fd : fds) {
    int listening = 0;
    socklen_t len = sizeof listening;
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) continue;
    sockaddr_storage addr{};
    socklen_t alen = sizeof addr;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &alen) != 0) continue;
    int p = -1;
    if (addr.ss_family == AF_INET) p = ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
    if (addr.ss_family == AF_INET6) p = ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
    if (p == port) ::listen(fd, backlog);
  }
}

}  // namespace

Server::Server(const model::Model& model, ServerOptions options)
    : impl_(std::make_unique<Impl>(model, std::move(options))) {}

Server::~Server() { stop(std::chrono::milliseconds(0)); }

int Server::bind() {
  Impl& s = *impl_;
  const int port = s.opt.port == 0 ? s.http.bind_to_any_port(s.opt.host)
                                   : (s.http.bind_to_port(s.opt.host, s.opt.port) ? s.opt.port : -1);
  if (port <= 0)
    throw Error(Errc::io, "cannot listen on " + s.opt.host + ":" + std::to_string(s.opt.port) +
                              " (in use, or not an address of this machine)");
  widen_backlog(port, s.opt.listen_backlog);
  return port;
}

void Server::listen() { impl_->http.listen_after_bind(); }

bool Server::stop(std::chrono::milliseconds grace) {
  Impl& s = *impl_;
  s.draining = true;
  s.engine.shutdown(grace);
  const bool jobs_done = s.jobs.shutdown(grace);
  s.http.stop();
  return jobs_done;
}

}  // namespace kvzip::serve
