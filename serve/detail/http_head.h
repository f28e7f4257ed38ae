// The checks serve/http_server.cc makes on a complete request head before any body byte is read:
// the request line, and the framing headers a body depends on. Internal to serve/.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kvzip::serve::detail {

struct Head {
  std::string method, target;
  std::optional<uint64_t> length;  // Content-Length
  bool chunked = false;            // Transfer-Encoding: chunked
  bool body_method = false;        // POST, PUT, PATCH: a body is expected (and framed)
  uint64_t cap = 0;                // the route's body limit (set by the caller)
  int status = 0;                  // 0: acceptable; else the answer (400, 415, 417, 501)
  std::string code, why;           // the error object's code and message
};

// `head`: the request line and headers up to and including the blank line. Refuses: a NUL byte
// anywhere, a malformed request line, a Content-Length that is not one decimal number below 2^63
// (or several that differ), a transfer coding other than exactly `chunked`, both framings at
// once, a body method with neither, a Content-Encoding (bodies are taken as sent), an Expect
// other than 100-continue.
Head parse_head(std::string_view head);

// The reason phrase of an HTTP status.
const char* reason(int status);
// An OpenAI error object for a request refused before routing.
std::string error_json(int status, const std::string& code, const std::string& message);

}  // namespace kvzip::serve::detail
