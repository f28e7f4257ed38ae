// serve/ HTTP server: the OpenAI-compatible API and the cache resources over cpp-httplib.
//   POST /v1/chat/completions  (stream: server-sent events)   GET /v1/models
//   GET /v1/caches, GET|PUT|DELETE /v1/caches/{id}, POST /v1/caches (a compress job),
//   GET /v1/jobs/{id}, GET /health, GET /metrics (Prometheus text)
//   and each /v1 route again as /c/{cache}/v1/..., which pins the cache (for a proxy's consistent
//   hashing across replicas that share the caches folder: docs/scale-out.md)
// Safety: binds 127.0.0.1 unless told otherwise; with an API key every route but /health needs
// `Authorization: Bearer <key>` (compared in constant time); connections, heads and bodies are
// bounded as they are read (serve/http_server.h); questions, max_tokens, the request queue and
// the job queue are capped; a non-streaming answer whose client left is cancelled; cache ids are
// checked (serve/cache_store.h); every bad request gets an OpenAI error object with a 4xx status.
// One JSON access-log line per request goes to stderr. stop() drains: new requests get 503,
// in-flight ones finish within the grace.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "compress/learned_scorer.h"
#include "model/model.h"
#include "serve/engine.h"
#include "serve/http_server.h"
#include "serve/openai.h"

namespace kvzip::serve {

struct ServerOptions {
  std::string caches_dir;
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port (bind() says which)
  EngineOptions engine;
  uint64_t max_loaded_bytes = uint64_t(4) << 30;
  bool key_tiles = true;  // f32 caches also keep their keys transposed (serve::CacheStore)
  std::string api_key;    // empty: no authentication
  ChatLimits chat;
  size_t max_json_bytes = size_t(1) << 20;       // chat and other JSON bodies
  size_t max_document_bytes = size_t(16) << 20;  // POST /v1/caches text
  size_t max_upload_bytes = size_t(1) << 30;  // PUT /v1/caches/{id} (streamed to a temporary file)
  uint32_t http_threads = 64;  // requests with a body served at once (a streaming answer holds one)
  int listen_backlog =
      1024;  // connections waiting to be accepted (the kernel caps it at somaxconn)
  uint32_t max_compose = 16;            // caches one request may compose ("model": "a+b+c")
  std::optional<double> compose_blend;  // composed requests: loader::ComposeOptions::blend
  loader::BlendRule compose_rule = loader::BlendRule::deviation;  // loader::ComposeOptions::rule
  // The "model" that answers from the caches a question needs (library/library.h): never a
  // valid cache id, so it cannot name a cache. library_top_k: caches retrieved at most.
  std::string library_model = "@library";
  uint32_t library_top_k = 4;
  // Head deadline, waiting-connection and per-address bounds (serve/http_server.h); its workers
  // and backlog come from http_threads and listen_backlog.
  HttpLimits http;
  uint32_t max_jobs = 4;  // compress jobs queued or running
  uint32_t compress_threads = 0;
  // The learned scorer compress jobs use for "method": "kvzap" (compress/learned_scorer.h);
  // without one such a job is refused. Checked against the model when the server is made.
  compress::LearnedScorerFile scorer;
  bool access_log = true;
};

class Server {
 public:
  // Errc::model_mismatch when options.scorer was trained on another model.
  Server(const model::Model& model, ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds host:port; returns the port (the chosen one for port 0). Errc::io when it cannot.
  int bind();
  // Serves until stop(); call bind() first.
  void listen();
  // Drains (new requests: 503), lets answers finish within `grace`, cancels what is left,
  // stops compress jobs, closes the listener. Returns false when a compress job is still running
  // (past its prefill) after the grace. Safe from any thread; idempotent.
  bool stop(std::chrono::milliseconds grace);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvzip::serve
