// serve/ connection handling over cpp-httplib (Debian's 0.11, a compiled library): how the
// server survives hostile clients. The library's own loop gives each connection a pool thread
// from accept on, restarts its read timeout on every byte, reads bodies before a route can refuse
// them, and sets SO_REUSEPORT. HttpServer keeps the library's request parser and routing
// (process_request) but owns everything around it, through the two hooks the library offers
// (the virtual process_and_close_socket and the protected process_request):
//  - a new connection costs a file descriptor and a small buffer, not a thread: one reader thread
//    (epoll) collects request heads, each with one deadline for the whole head (not per byte);
//    past max_pending (or max_pending_per_client from one address) the oldest unfinished head is
//    closed, so a fresh request always gets in, however many slow clients there are;
//  - a complete head is checked before any body byte is read: malformed framing (a negative or
//    overflowing Content-Length, a transfer coding other than chunked, a body route without a
//    length, a compressed body) is a 400/415 at once, a Content-Length past the route's limit
//    (body_limit) a 413, also under `Expect: 100-continue`; chunked bodies are cut at the limit
//    while they are read;
//  - requests without a body (health, metrics, lists) run on their own small pool, so streams and
//    uploads filling the main pool never starve /health; one address holds at most
//    max_client_requests requests in service (then 429);
//  - the listening socket gets SO_REUSEADDR (not SO_REUSEPORT: a second server on a taken port
//    fails to bind instead of silently sharing it) and the backlog asked for.
// Routes see the connection they serve through client_gone() (a client that closed while its
// answer is computed) and the access log through request_started() / request_target().
#pragma once
#include <httplib.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace kvzip::serve {

struct HttpLimits {
  std::chrono::milliseconds head_timeout{10000};  // the whole head, from accept or the last answer
  std::chrono::milliseconds body_timeout{30000};  // the whole body, plus its bytes at body_min_rate
  uint64_t body_min_rate = uint64_t(1) << 20;     // bytes per second a large upload must keep up
  std::chrono::milliseconds io_timeout{30000};    // one write (a client not reading its answer)
  size_t max_head_bytes = 16384;                  // request line and headers (then 431)
  uint32_t max_pending = 1024;  // connections waiting for their head (then the oldest is closed)
  uint32_t max_pending_per_client = 32;  // the same from one address
  uint32_t max_client_requests = 64;     // requests of one address in service at once (0: no limit)
  uint32_t workers = 64;          // threads serving requests with a body (and streamed answers)
  uint32_t light_workers = 4;     // threads serving requests without a body
  uint32_t keep_alive_max = 100;  // requests on one connection
  int backlog = 1024;
};

// What happened to a request refused before it reached the routes (access log, metrics).
struct Refusal {
  std::string remote, method, target;
  int status = 0;
  double ms = 0.0;
};

class HttpServer : public httplib::Server {
 public:
  // body_limit(method, path): the largest body the route takes (0: none; kNoRoute: no route of
  // that method has the path, a 404 before any body byte is read).
  static constexpr uint64_t kNoRoute = ~uint64_t(0);
  using BodyLimit = std::function<uint64_t(const std::string& method, const std::string& path)>;
  HttpServer(HttpLimits limits, BodyLimit body_limit);
  ~HttpServer() override;

  // Binds (SO_REUSEADDR) and sets the backlog; returns the port, -1 when the address is taken or
  // not this machine's (errno says which).
  int bind(const std::string& host, int port);
  // Closes waiting connections, lets requests in service finish, joins the threads. Call after
  // httplib::Server::stop(). Idempotent.
  void shutdown();
  // Called for each request refused before routing (framing, limits, head deadline).
  void on_refusal(std::function<void(const Refusal&)> fn) { on_refusal_ = std::move(fn); }
  // The access logger: called with every answered request (as httplib's set_logger).
  void set_access_logger(httplib::Logger fn);

  // For route handlers, about the request the calling thread serves:
  // true once its client has closed the connection (a half-closed client that still reads its
  // answer is told apart by an interim `100 Continue`, which a gone client answers with a reset).
  static bool client_gone();
  // When its first byte arrived (for the access log's duration).
  static std::chrono::steady_clock::time_point request_started();
  // Its request target as sent (for the access log when the library could not parse it).
  static std::string request_target();
  // Marks the connection to be closed after this answer (a body left unread).
  static void close_after();
  // True when the body was cut at the route's limit while read (the answer is then a 413).
  static bool body_over_limit();

  struct Impl;

 private:
  bool process_and_close_socket(socket_t sock) override;
  friend struct Impl;
  std::unique_ptr<Impl> impl_;
  std::function<void(const Refusal&)> on_refusal_;
};

}  // namespace kvzip::serve
