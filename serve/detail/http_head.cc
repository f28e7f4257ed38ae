// parse_head: the framing checks on a request head (see http_head.h).
#include "serve/detail/http_head.h"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

#include "serve/openai.h"

namespace kvzip::serve::detail {

namespace {

std::string lower_trim(std::string_view v) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t' || v.back() == '\r'))
    v.remove_suffix(1);
  std::string s(v);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

Head fail(Head h, int status, const char* code, std::string why) {
  h.status = status;
  h.code = code;
  h.why = std::move(why);
  return h;
}

}  // namespace

Head parse_head(std::string_view head) {
  Head h;
  while (head.substr(0, 2) == "\r\n") head.remove_prefix(2);  // empty lines before a request
  const size_t eol = head.find("\r\n");
  const std::string_view line = head.substr(0, eol);
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp1 != std::string_view::npos) h.method = std::string(line.substr(0, sp1));
  if (sp2 != std::string_view::npos) h.target = std::string(line.substr(sp1 + 1, sp2 - sp1 - 1));
  else if (sp1 != std::string_view::npos) h.target = std::string(line.substr(sp1 + 1));
  if (h.target.size() > 2048) h.target.resize(2048);
  if (head.find('\0') != std::string_view::npos)
    return fail(h, 400, "invalid_request", "the request head contains a NUL byte");
  if (sp1 == 0 || sp2 == std::string_view::npos || line.substr(sp2 + 1).rfind("HTTP/1.", 0) != 0) {
    h.target = std::string(line.substr(0, 256));  // the access log shows what was sent
    return fail(h, 400, "invalid_request", "malformed request line");
  }
  h.body_method = h.method == "POST" || h.method == "PUT" || h.method == "PATCH";
  std::string te;
  bool has_te = false;
  size_t pos = eol + 2;
  while (pos < head.size()) {
    const size_t e = head.find("\r\n", pos);
    if (e == std::string_view::npos || e == pos) break;
    const std::string_view field = head.substr(pos, e - pos);
    pos = e + 2;
    const size_t colon = field.find(':');
    if (colon == std::string_view::npos || colon == 0)
      return fail(h, 400, "invalid_request", "malformed header line");
    const std::string name = lower_trim(field.substr(0, colon));
    const std::string_view raw = field.substr(colon + 1);
    if (name == "content-length") {
      const std::string v = lower_trim(raw);
      if (v.empty() || v.size() > 18 || v.find_first_not_of("0123456789") != std::string::npos)
        return fail(h, 400, "invalid_content_length",
                    "Content-Length must be a decimal number of bytes below 10^18, not \"" +
                        v.substr(0, 32) + "\"");
      const uint64_t n = std::stoull(v);
      if (h.length && *h.length != n)
        return fail(h, 400, "invalid_content_length", "two different Content-Length values");
      h.length = n;
    } else if (name == "transfer-encoding") {
      te += (te.empty() ? "" : ",") + lower_trim(raw);
      has_te = true;
    } else if (name == "content-encoding") {
      const std::string v = lower_trim(raw);
      if (v != "identity")
        return fail(h, 415, "unsupported_encoding",
                    "Content-Encoding \"" + v.substr(0, 32) +
                        "\" is not accepted: send the body uncompressed");
    } else if (name == "expect") {
      if (lower_trim(raw) != "100-continue")
        return fail(h, 417, "expectation_failed", "only Expect: 100-continue is understood");
    }
  }
  if (has_te) {
    if (te != "chunked")
      return fail(h, 400, "unsupported_transfer_encoding",
                  "Transfer-Encoding \"" + te.substr(0, 64) + "\" is not accepted: only chunked");
    if (h.length)
      return fail(h, 400, "invalid_framing", "both Content-Length and Transfer-Encoding");
    h.chunked = true;
  }
  if (h.body_method && !h.length && !h.chunked)
    return fail(h, 400, "length_required", h.method + " needs a Content-Length or a chunked body");
  return h;
}

const char* reason(int status) {
  switch (status) {
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 415: return "Unsupported Media Type";
    case 417: return "Expectation Failed";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
    default: return "Error";
  }
}

std::string error_json(int status, const std::string& code, const std::string& message) {
  const char* type = status == 429   ? "rate_limit_error"
                     : status >= 500 ? "server_error"
                                     : "invalid_request_error";
  return error_body(ApiError(status, type, code, message))
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace kvzip::serve::detail
