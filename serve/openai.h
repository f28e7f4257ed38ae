// serve/ OpenAI API shapes: the chat-completion request parsed and checked field by field
// (nlohmann/json; every wrong type, range or size is an ApiError with a 4xx status, never a
// crash), OpenAI's error object, and the text side of an answer (stop strings found across
// token boundaries, streamed text held back while it may still become a stop string).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace kvzip::serve {

// An error the client gets as {"error": {"message", "type", "param", "code"}} with `status`.
struct ApiError : std::runtime_error {
  int status;
  std::string type;       // "invalid_request_error", "authentication_error", "not_found_error", ...
  std::string code;       // machine-readable, e.g. "model_not_found"; may be empty
  std::string param;      // the offending field; may be empty
  int retry_after_s = 0;  // > 0: a Retry-After header (429, 503)
  ApiError(int status, std::string type, std::string code, const std::string& message,
           std::string param = {}, int retry_after_s = 0);
};
nlohmann::json error_body(const ApiError& e);

struct ChatLimits {
  uint32_t max_tokens_cap = 4096;         // max_tokens above this: 400
  uint32_t default_max_tokens = 256;      // when the request gives none
  size_t max_question_bytes = 64 * 1024;  // all user and assistant messages together
};

struct ChatRequest {
  std::string cache;     // the cache id: "cache" if given, else "model"
  std::string question;  // the last message's text (a user message)
  // Earlier turns of the conversation, oldest first: (user message, assistant answer) pairs. The
  // cache's document belongs to the first user turn; system messages are not part of a request's
  // prompt (the system prompt was fixed when the cache was compressed) and are skipped.
  std::vector<std::pair<std::string, std::string>> history;
  uint32_t max_tokens = 0;
  float temperature = 1.0f;  // OpenAI's default; 0 = greedy
  float top_p = 1.0f;
  uint32_t top_k = 0;  // extension; 0 = off
  uint64_t seed = 0;
  bool seeded = false;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
};

// Parses a request body. Fields OpenAI defines that kvzip cannot honour (n > 1, penalties other
// than 0, logprobs, tools) are refused rather than ignored; unknown fields are ignored.
// `pinned`: the cache the path already names (/c/{cache}/...); then "model" may be left out.
ChatRequest parse_chat_request(const std::string& body, const ChatLimits& limits,
                               const std::string& pinned = {});

// Parses a JSON object body (400 for anything else).
nlohmann::json parse_object(const std::string& body);

// Text of an answer as tokens arrive: appends each token's text, finds stop strings (the answer
// ends before the first one found) and says how much may be shown so far.
class StopText {
 public:
  explicit StopText(std::vector<std::string> stops);
  // Adds text; returns true when a stop string is now complete (text() ends before it).
  bool add(const std::string& piece);
  const std::string& text() const { return text_; }
  // Bytes of text() that can be shown now: all of it once finished, else all but a tail that is
  // the beginning of some stop string.
  size_t safe_length(bool finished) const;

 private:
  std::vector<std::string> stops_;
  std::string text_;
  bool stopped_ = false;
};

}  // namespace kvzip::serve
