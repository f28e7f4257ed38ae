// Test support for the serve/ HTTP tests: a `kvzip serve` Server on a tiny model, listening on a
// free loopback port in a thread, and a raw-socket client that sends exactly the bytes a test
// gives (hostile framing included) and reads what comes back within a deadline.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "serve/server.h"
#include "tests/support/tiny_model_dir.h"

namespace kvzip::test {

// A connected TCP socket to 127.0.0.1:port (from `source`, another loopback address, when given);
// -1 when it cannot connect.
int connect_to(int port, const char* source = nullptr);
// Sends all of `bytes` (false when the connection refused them within `wait`).
bool send_all(int fd, const std::string& bytes,
              std::chrono::milliseconds wait = std::chrono::seconds(5));
// Reads until the peer closes, a whole response has arrived (by its Content-Length or a chunked
// body's end), or `wait` passes; returns what arrived.
std::string read_response(int fd, std::chrono::milliseconds wait = std::chrono::seconds(5));
// The status of the last (non-100) response in `text`, 0 when there is none.
int status_of(const std::string& text);
// One request on a fresh connection: its response text.
std::string http(int port, const std::string& request,
                 std::chrono::milliseconds wait = std::chrono::seconds(5));
// A well-formed request with a Content-Length body.
std::string request(const std::string& method, const std::string& path,
                    const std::string& body = {}, const std::string& extra_headers = {});
// The value of the Prometheus sample `name` in a /metrics response, -1 when absent.
double metric(const std::string& metrics_text, const std::string& name);
// Resident memory of this process in bytes (VmRSS).
uint64_t resident_bytes();

// A served tiny model with one cache "doc" (and its copy "doc2"), listening on `port`.
struct ServedModel : TinyModelDir {
  std::string caches;
  std::unique_ptr<serve::Server> server;
  std::thread listener;
  int port = 0;
  // Without `access_log` the server's stderr log is off (quiet tests).
  explicit ServedModel(const std::string& tag, serve::ServerOptions so = {},
                       bool access_log = false);
  ~ServedModel();
};

}  // namespace kvzip::test
