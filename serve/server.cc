// Server: httplib setup, authentication, access log, error mapping, and every route but chat
// completions (server_chat.cc). See server.h.
#include "serve/server.h"

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <optional>
#include <vector>

#include "common/atomic_file.h"
#include "common/error.h"
#include "compress/learned_scorer.h"
#include "compress/scorer.h"
#include "format/scorer_file.h"
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
  if (!e)
    return ApiError(500, "server_error", "internal", std::string("internal error: ") + ex.what());
  switch (e->code()) {
    case Errc::invalid_argument:
      return ApiError(400, "invalid_request_error", "invalid_value", e->what());
    case Errc::not_found: return ApiError(404, "not_found_error", "model_not_found", e->what());
    case Errc::model_mismatch:
      return ApiError(400, "invalid_request_error", "model_mismatch", e->what());
    case Errc::out_of_memory: return ApiError(503, "server_error", "overloaded", e->what(), {}, 2);
    case Errc::truncated:
    case Errc::bad_magic:
    case Errc::version_unsupported:
    case Errc::corrupt:
    case Errc::checksum_mismatch:  // the file is bad, not the server
      return ApiError(422, "invalid_request_error", errc_name(e->code()),
                      std::string("cache file: ") + e->what());
    case Errc::unsupported: return ApiError(400, "invalid_request_error", "unsupported", e->what());
    default: return ApiError(500, "server_error", errc_name(e->code()), e->what());
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
              {"model",
               {{"arch", h.model.arch},
                {"name", h.model.name},
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
  json j{{"id", s.id},          {"object", "cache.job"},  {"cache", s.cache},
         {"status", s.status},  {"progress", s.progress}, {"created", s.created_unix},
         {"seconds", s.seconds}};
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

// The options, refused before any thread starts when the scorer file is for another model.
static ServerOptions checked(const model::Model& m, ServerOptions o) {
  if (o.scorer) format::check_scorer_model(*o.scorer.file, m.config(), m.fingerprint());
  return o;
}

Server::Impl::Impl(const model::Model& m, ServerOptions o)
    : model(m),
      opt(std::move(o)),
      store(m, opt.caches_dir, opt.max_loaded_bytes, opt.key_tiles),
      engine(m, opt.engine),
      jobs(m, store, opt.max_jobs),
      http(
          [&] {
            HttpLimits l = opt.http;
            l.workers = opt.http_threads;
            l.backlog = opt.listen_backlog;
            return l;
          }(),
          [this](const std::string& method, const std::string& path) {
            return body_limit(method, path);
          }) {
  if (opt.library_model.empty() || CacheStore::valid_id(opt.library_model))
    throw Error(Errc::invalid_argument,
                "the library model's name \"" + opt.library_model +
                    "\" could name a cache; use a name with a character outside A-Z a-z 0-9 . _ -");
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

uint64_t Server::Impl::body_limit(const std::string& method, const std::string& path) const {
  std::string p = path;
  if (p.rfind("/c/", 0) == 0) {  // the pinned form: the limit of the route after the prefix
    const size_t slash = p.find('/', 3);
    p = slash == std::string::npos ? "" : p.substr(slash);
  }
  // A body sent to a path no route of its method has is a 404, as it would be without the body.
  if (method == "PUT")
    return p.rfind("/v1/caches/", 0) == 0 && p.size() > 11 && p.find('/', 11) == std::string::npos
               ? opt.max_upload_bytes
               : HttpServer::kNoRoute;
  if (method == "POST")
    return p == "/v1/caches"             ? opt.max_document_bytes + 4096
           : p == "/v1/chat/completions" ? opt.max_json_bytes
                                         : HttpServer::kNoRoute;
  if (method == "PATCH") return HttpServer::kNoRoute;
  return 0;
}

void Server::Impl::routes() {
  http_handlers();
  on(Method::Post, "/v1/chat/completions",
     [this](const httplib::Request& req, httplib::Response& res, const Scope& scope) {
       chat_completions(req, res, scope);
     });
  library_routes();
  cache_routes();
  on(Method::Post, "/v1/caches",
     [this](const httplib::Request& req, httplib::Response& res, const Scope& scope) {
       post_cache(req, res, scope);
     });
  status_routes();
}

// Authentication, the error and exception handlers, and the access log, for every route.
void Server::Impl::http_handlers() {
  auto authorized = [this](const httplib::Request& req) {
    if (opt.api_key.empty() || req.path == "/health") return true;
    // The header as received, NUL bytes and all (get_header_value stops at the first NUL).
    const auto it = req.headers.find("Authorization");
    if (it == req.headers.end()) return false;
    const std::string& auth = it->second;
    const std::string prefix = "Bearer ";
    return auth.size() > prefix.size() && auth.compare(0, prefix.size(), prefix) == 0 &&
           same_secret(auth.substr(prefix.size()), opt.api_key);
  };
  const ApiError unauthorized(401, "authentication_error", "invalid_api_key",
                              "missing or wrong API key: send Authorization: Bearer <key>");
  http.set_pre_routing_handler(
      [authorized, unauthorized](const httplib::Request& req, httplib::Response& res) {
        if (authorized(req)) return httplib::Server::HandlerResponse::Unhandled;
        send_error(res, unauthorized);
        return httplib::Server::HandlerResponse::Handled;
      });
  // `Expect: 100-continue` from a client without the key gets its 401 instead of the go-ahead.
  http.set_expect_100_continue_handler(
      [authorized, unauthorized](const httplib::Request& req, httplib::Response& res) {
        if (authorized(req)) return 100;
        send_error(res, unauthorized);
        return 401;
      });
  http.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (HttpServer::body_over_limit()) {  // the library read a chunked body up to the limit
      res.status = 413;
      res.body.clear();
    }
    if (!res.body.empty()) return;
    const int s = res.status;
    const std::string what = s == 404   ? "no such route"
                             : s == 413 ? "the body is too large"
                             : s == 405 ? "method not allowed"
                                        : "request failed";
    send_error(res, ApiError(s, s >= 500 ? "server_error" : "invalid_request_error",
                             s == 413 ? "body_too_large" : "", what));
  });
  http.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          send_error(res, api_error_of(e));
        } catch (...) {
          send_error(res, ApiError(500, "server_error", "internal", "internal error"));
        }
      });
  auto log = [this](const std::string& remote, const std::string& method, const std::string& path,
                    int status, double ms) {
    metrics.request(route_of(path), status);
    if (!opt.access_log) return;
    json line{{"ts", static_cast<int64_t>(std::time(nullptr))},
              {"remote", remote},
              {"method", method},
              {"path", path},
              {"status", status},
              {"ms", std::round(ms * 10) / 10}};
    std::lock_guard<std::mutex> lock(log_mu);
    std::cerr << line.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
  };
  http.set_access_logger([log](const httplib::Request& req, const httplib::Response& res) {
    // A request the library could not parse has no path: the target as sent is logged instead.
    const std::string path =
        req.path.empty() ? HttpServer::request_target().substr(0, 256) : req.path;
    log(req.remote_addr, req.method, path, res.status,
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                  HttpServer::request_started())
            .count());
  });
  http.on_refusal([log](const Refusal& r) {
    log(r.remote, r.method, r.target.substr(0, r.target.find('?')).substr(0, 256), r.status, r.ms);
  });
}

// GET /v1/models, GET /v1/caches, GET/DELETE/PUT /v1/caches/{id}.
void Server::Impl::cache_routes() {
  // Under /c/{cache}/ the lists still name every cache of the shared folder: the prefix only
  // routes, and an `openai` client whose base URL carries it lists models as usual.
  on(Method::Get, "/v1/models",
     [this](const httplib::Request&, httplib::Response& res, const Scope&) {
       json data = json::array();
       for (const CacheInfo& ci : store.list())
         data.push_back({{"id", ci.id},
                         {"object", "model"},
                         {"created", ci.header.created_unix},
                         {"owned_by", "kvzip"}});
       send_json(res, 200, {{"object", "list"}, {"data", data}});
     });
  on(Method::Get, "/v1/caches",
     [this](const httplib::Request&, httplib::Response& res, const Scope&) {
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
       library_update(id);
       send_json(res, 200, {{"id", id}, {"object", "cache"}, {"deleted", true}});
     });
  for (const bool prefixed : {false, true})
    http.Put(
        prefixed ? kPinnedPrefix + R"(/v1/caches/([^/]+))" : std::string(R"(/v1/caches/([^/]+))"),
        [this, prefixed](const httplib::Request& req, httplib::Response& res,
                         const httplib::ContentReader& reader) {
          guarded(res, [&] {
            Scope scope;
            if (prefixed) scope.cache = req.matches[1];
            scope.args.push_back(req.matches[prefixed ? 2 : 1]);
            put_cache(req, res, reader, scope);
          });
        });
}

// A JSON object body of at most `cap` bytes (413 above it, 400 when it is not an object).
json Server::Impl::json_body(const httplib::Request& req, size_t cap) {
  if (req.body.size() > cap)
    throw ApiError(413, "invalid_request_error", "body_too_large",
                   "the body is " + std::to_string(req.body.size()) + " bytes; at most " +
                       std::to_string(cap));
  return parse_object(req.body);
}

// POST /v1/caches: a document to compress, as a job; 202 with the job's URL.
void Server::Impl::post_cache(const httplib::Request& req, httplib::Response& res,
                              const Scope& scope) {
  if (draining)
    throw ApiError(503, "server_error", "shutting_down", "the server is shutting down", {}, 5);
  const json j = json_body(req, opt.max_document_bytes + 4096);
  auto str = [&](const char* k, const std::string& def) {
    if (!j.contains(k) || j[k].is_null()) return def;
    if (!j[k].is_string())
      throw ApiError(400, "invalid_request_error", "invalid_value",
                     std::string(k) + " must be a string", k);
    return j[k].get<std::string>();
  };
  const std::string id = scope.pinned(str("id", ""), "id");
  const std::string text = str("text", str("document", ""));
  if (id.empty())
    throw ApiError(400, "invalid_request_error", "invalid_value", "id is required", "id");
  store.path_of(id);
  if (text.find_first_not_of(" \t\r\n") == std::string::npos)
    throw ApiError(400, "invalid_request_error", "invalid_value", "text (the document) is required",
                   "text");
  if (text.size() > opt.max_document_bytes)
    throw ApiError(413, "invalid_request_error", "body_too_large", "the document is too large",
                   "text");
  bool replace = false;
  if (j.contains("replace")) {
    if (!j["replace"].is_boolean())
      throw ApiError(400, "invalid_request_error", "invalid_value", "replace must be a boolean",
                     "replace");
    replace = j["replace"].get<bool>();
  }
  compress::CompressFileOptions fo;
  fo.compress.method = str("method", "kvzip");
  if (fo.compress.method == compress::kLearnedMethod && !opt.scorer)
    throw ApiError(
        400, "invalid_request_error", "no_scorer",
        "this server has no scorer file for method kvzap: start it with --scorer FILE.kvp "
        "(made by `kvzip calibrate --scorer`), or compress with the CLI and PUT the .kvz",
        "method");
  if (fo.compress.method == "kvzip-head")
    throw ApiError(400, "invalid_request_error", "unsupported",
                   "kvzip-head needs a head-scores file: compress with the CLI and PUT the .kvz",
                   "method");
  if (j.contains("ratio")) {
    if (!j["ratio"].is_number())
      throw ApiError(400, "invalid_request_error", "invalid_value", "ratio must be a number",
                     "ratio");
    fo.compress.ratio = j["ratio"].get<double>();
  }
  uint32_t chunk = 2048;
  if (j.contains("chunk")) {
    if (!j["chunk"].is_number_integer() || j["chunk"].get<int64_t>() < 1 ||
        j["chunk"].get<int64_t>() > 65536)
      throw ApiError(400, "invalid_request_error", "invalid_value",
                     "chunk must be an integer in [1, 65536]", "chunk");
    chunk = static_cast<uint32_t>(j["chunk"].get<int64_t>());
  }
  fo.compress.scorer = compress::make_scorer_options(model.chat(), chunk, 0);
  if (fo.compress.method == compress::kLearnedMethod)
    compress::use_learned_scorer(fo.compress.scorer, opt.scorer, model);
  fo.system = str("system", "");
  fo.query_template = str("query_template", fo.query_template);
  fo.write.force = replace;
  fo.threads = opt.compress_threads;
  compress::check_file_options(fo);  // a bad method, ratio or template fails now, not in the job
  if (!replace && std::filesystem::exists(store.path_of(id)))
    throw ApiError(409, "invalid_request_error", "conflict",
                   "cache " + id + " exists; send \"replace\": true", "id");
  if (jobs.busy(id))
    throw ApiError(409, "invalid_request_error", "conflict",
                   "a compress job is already writing cache " + id, "id");
  const auto job = jobs.submit(id, text, fo);
  if (!job)
    throw ApiError(429, "rate_limit_error", "too_many_jobs", "too many compress jobs; retry later",
                   {}, 10);
  // Under /c/{cache}/ the job's URL keeps the prefix, so the proxy asks the replica running it.
  res.set_header("Location",
                 (scope.cache ? "/c/" + *scope.cache : std::string()) + "/v1/jobs/" + *job);
  send_json(res, 202, job_json(*jobs.get(*job)));
}

// GET /v1/jobs/{id}, GET /health, GET /metrics.
void Server::Impl::status_routes() {
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
    g.library_caches = library_caches;
    g.library_skipped = library_skipped;
    res.set_content(metrics.render(g), "text/plain; version=0.0.4");
  });
}

// PUT /v1/caches/{id}: the body goes to a temporary file beside the target as it arrives (never
// held in memory), is verified there in full, and only then renamed into place.
void Server::Impl::put_cache(const httplib::Request& req, httplib::Response& res,
                             const httplib::ContentReader& reader, const Scope& scope) {
  const std::string id = scope.pinned(scope.args[0], "id");
  const std::string path = store.path_of(id);  // the id check first
  if (jobs.busy(id))
    throw ApiError(409, "invalid_request_error", "conflict",
                   "a compress job is writing cache " + id);
  const bool replace = req.get_param_value("replace") == "true";
  const ApiError exists(409, "invalid_request_error", "conflict",
                        "cache " + id + " exists; PUT with ?replace=true to replace it");
  std::optional<AtomicFile> file;
  try {
    file.emplace(path, replace);
  } catch (const Error& e) {
    if (e.code() == Errc::invalid_argument && !replace) throw exists;
    throw;
  }
  uint64_t got = 0;
  bool over = false;
  const bool whole = reader([&](const char* data, size_t n) {
    got += n;
    if (got > opt.max_upload_bytes) {
      over = true;
      return false;
    }
    file->write(data, n);
    return true;
  });
  if (over || HttpServer::body_over_limit())
    throw ApiError(413, "invalid_request_error", "body_too_large",
                   "the upload is over " + std::to_string(opt.max_upload_bytes) +
                       " bytes (the server's upload limit)");
  if (!whole)
    throw ApiError(400, "invalid_request_error", "incomplete_body",
                   "the body ended early or arrived too slowly");
  try {
    store.put_file(id, *file);
    library_update(id);
  } catch (const Error& e) {
    if (e.code() == Errc::invalid_argument && !replace) throw exists;
    if (e.code() == Errc::model_mismatch || e.code() == Errc::io) throw;
    throw ApiError(400, "invalid_request_error", errc_name(e.code()),
                   std::string("the uploaded .kvz is not valid: ") + e.what());
  }
  send_json(res, 201, cache_json(store.info(id)));
}

Server::Server(const model::Model& model, ServerOptions options)
    : impl_(std::make_unique<Impl>(model, checked(model, std::move(options)))) {}

Server::~Server() { stop(std::chrono::milliseconds(0)); }

int Server::bind() {
  Impl& s = *impl_;
  const int port = s.http.bind(s.opt.host, s.opt.port);
  if (port <= 0) {
    const int err = errno;
    throw Error(
        Errc::io,
        "cannot listen on " + s.opt.host + ":" + std::to_string(s.opt.port) + ": " +
            (err == EADDRINUSE ? std::string("the port is in use (another server listens on it)")
             : err ? std::strerror(err) + std::string(" (not an address of this machine?)")
                   : std::string("not an address of this machine")));
  }
  return port;
}

void Server::listen() { impl_->http.listen_after_bind(); }

bool Server::stop(std::chrono::milliseconds grace) {
  Impl& s = *impl_;
  s.draining = true;
  s.engine.shutdown(grace);
  const bool jobs_done = s.jobs.shutdown(grace);
  s.http.stop();
  s.http.shutdown();
  return jobs_done;
}

}  // namespace kvzip::serve
