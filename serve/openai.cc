// OpenAI request parsing and answer text handling (see openai.h).
#include "serve/openai.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "common/json.h"

namespace kvzip::serve {

using nlohmann::json;

ApiError::ApiError(int s, std::string t, std::string c, const std::string& message, std::string p,
                   int retry)
    : std::runtime_error(message),
      status(s),
      type(std::move(t)),
      code(std::move(c)),
      param(std::move(p)),
      retry_after_s(retry) {}

json error_body(const ApiError& e) {
  json err = {{"message", e.what()}, {"type", e.type}};
  err["param"] = e.param.empty() ? json(nullptr) : json(e.param);
  err["code"] = e.code.empty() ? json(nullptr) : json(e.code);
  return json{{"error", err}};
}

namespace {

ApiError bad(const std::string& param, const std::string& message) {
  return ApiError(400, "invalid_request_error", "invalid_value", message, param);
}

const char* type_name(const json& v) { return v.type_name(); }

// The text of a message's content: a string, or an array of {"type": "text", "text": ...} parts.
std::string content_text(const json& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (content.is_null()) return {};
  if (!content.is_array())
    throw bad(where,
              where + " must be a string or an array of text parts, not " + type_name(content));
  std::string out;
  for (const json& part : content) {
    if (!part.is_object() || !part.contains("type") || part["type"] != "text" ||
        !part.contains("text") || !part["text"].is_string())
      throw bad(where,
                where + ": only {\"type\": \"text\", \"text\": \"...\"} parts are supported");
    out += part["text"].get<std::string>();
  }
  return out;
}

double number(const json& v, const char* name, double lo, double hi, bool lo_open = false) {
  if (!v.is_number()) throw bad(name, std::string(name) + " must be a number, not " + type_name(v));
  const double x = v.get<double>();
  if (!std::isfinite(x) || x > hi || (lo_open ? x <= lo : x < lo))
    throw bad(name, std::string(name) + " must be in " + (lo_open ? "(" : "[") +
                        std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return x;
}

int64_t integer(const json& v, const char* name, int64_t lo, int64_t hi) {
  if (!v.is_number_integer())
    throw bad(name, std::string(name) + " must be an integer, not " + type_name(v));
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX))
    throw bad(name, std::string(name) + " is out of range");
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi)
    throw bad(name, std::string(name) + " must be in [" + std::to_string(lo) + ", " +
                        std::to_string(hi) + "], got " + std::to_string(x));
  return x;
}

}  // namespace

json parse_object(const std::string& body) {
  json j;
  try {
    j = parse_json(body, "the request body");  // strict, nesting-limited (common/json.h)
  } catch (const Error& e) {
    throw ApiError(400, "invalid_request_error", "invalid_json", e.what());
  }
  if (!j.is_object())
    throw ApiError(400, "invalid_request_error", "invalid_json", "the body must be a JSON object");
  return j;
}

namespace {

// The conversation of "messages": user and assistant messages alternate, from a user message to
// the last one, the question. System messages are skipped (the cache was compressed with its
// system prompt).
void parse_messages(const json& j, const ChatLimits& limits, ChatRequest& r) {
  if (!j.contains("messages") || !j["messages"].is_array() || j["messages"].empty())
    throw bad("messages", "messages must be a non-empty array");
  const json& msgs = j["messages"];
  if (msgs.size() > 256) throw bad("messages", "at most 256 messages");
  std::vector<std::string> turns;
  size_t conversation_bytes = 0;
  for (size_t i = 0; i < msgs.size(); ++i) {
    const std::string where = "messages[" + std::to_string(i) + "]";
    const json& m = msgs[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      throw bad(where, where + " must be an object with a string \"role\"");
    const std::string role = m["role"].get<std::string>();
    if (role != "system" && role != "developer" && role != "user" && role != "assistant")
      throw bad(where + ".role", where + ".role \"" + role.substr(0, 32) + "\" is not supported");
    const std::string text =
        content_text(m.contains("content") ? m["content"] : json(), where + ".content");
    if (i + 1 == msgs.size() && role != "user")
      throw bad(where, "the last message must be the user's question (role \"user\")");
    if (role == "system" || role == "developer") continue;
    if ((role == "user") != (turns.size() % 2 == 0))
      throw bad(where + ".role",
                where + " is a " + role + " message where a" +
                    (role == "user" ? "n assistant" : " user") +
                    " message belongs: user and assistant messages must alternate, "
                    "starting with a user message");
    conversation_bytes += text.size();
    turns.push_back(text);
  }
  r.question = turns.back();
  for (size_t i = 0; i + 1 < turns.size(); i += 2) r.history.emplace_back(turns[i], turns[i + 1]);
  if (r.question.find_first_not_of(" \t\r\n") == std::string::npos)
    throw bad("messages", "the question (the last user message) is empty");
  if (conversation_bytes > limits.max_question_bytes)
    throw ApiError(413, "invalid_request_error", "question_too_long",
                   "the conversation's messages are " + std::to_string(conversation_bytes) +
                       " bytes; at most " + std::to_string(limits.max_question_bytes),
                   "messages");
}

// "stop": a string or an array of up to 4 strings, each of 1-256 bytes.
std::vector<std::string> parse_stop(const json& s) {
  std::vector<std::string> stop;
  if (s.is_string()) {
    stop.push_back(s.get<std::string>());
  } else if (s.is_array() && s.size() <= 4) {
    for (const json& x : s) {
      if (!x.is_string()) throw bad("stop", "stop must be a string or an array of up to 4 strings");
      stop.push_back(x.get<std::string>());
    }
  } else {
    throw bad("stop", "stop must be a string or an array of up to 4 strings");
  }
  for (const auto& x : stop)
    if (x.empty() || x.size() > 256) throw bad("stop", "each stop string must have 1-256 bytes");
  return stop;
}

// Sampling, stop strings and streaming; the OpenAI fields kvzip does not support are refused.
void parse_generation(const json& j, const ChatLimits& limits, ChatRequest& r) {
  auto has = [&](const char* k) { return j.contains(k) && !j[k].is_null(); };
  r.max_tokens = limits.default_max_tokens;
  for (const char* k : {"max_tokens", "max_completion_tokens"})
    if (has(k)) r.max_tokens = static_cast<uint32_t>(integer(j[k], k, 1, limits.max_tokens_cap));
  if (has("temperature"))
    r.temperature = static_cast<float>(number(j["temperature"], "temperature", 0, 2));
  if (has("top_p"))
    r.top_p = static_cast<float>(number(j["top_p"], "top_p", 0, 1, /*lo_open=*/true));
  if (has("top_k")) r.top_k = static_cast<uint32_t>(integer(j["top_k"], "top_k", 0, 1 << 20));
  if (has("seed")) {
    r.seed = static_cast<uint64_t>(integer(j["seed"], "seed", INT64_MIN, INT64_MAX));
    r.seeded = true;
  }
  if (has("stop")) r.stop = parse_stop(j["stop"]);
  if (has("stream")) {
    if (!j["stream"].is_boolean()) throw bad("stream", "stream must be a boolean");
    r.stream = j["stream"].get<bool>();
  }
  if (has("stream_options")) {
    const json& so = j["stream_options"];
    if (!so.is_object()) throw bad("stream_options", "stream_options must be an object");
    if (so.contains("include_usage")) {
      if (!so["include_usage"].is_boolean())
        throw bad("stream_options.include_usage", "include_usage must be a boolean");
      r.include_usage = so["include_usage"].get<bool>();
    }
  }
  if (has("n") && integer(j["n"], "n", 1, 1) != 1) throw bad("n", "n must be 1");
  for (const char* k : {"presence_penalty", "frequency_penalty"})
    if (has(k) && number(j[k], k, -2, 2) != 0.0)
      throw bad(k, std::string(k) + " is not supported (only 0)");
  if (has("logprobs") && (!j["logprobs"].is_boolean() || j["logprobs"].get<bool>()))
    throw bad("logprobs", "logprobs are not supported");
  if (has("tools") || has("functions")) throw bad("tools", "tools and functions are not supported");
}

}  // namespace

ChatRequest parse_chat_request(const std::string& body, const ChatLimits& limits,
                               const std::string& pinned) {
  const json j = parse_object(body);
  ChatRequest r;
  auto has = [&](const char* k) { return j.contains(k) && !j[k].is_null(); };
  for (const char* k : {"model", "cache"})
    if (has(k) && !j[k].is_string())
      throw bad(k, std::string(k) + " must be a string, not " + type_name(j[k]));
  if (has("cache")) r.cache = j["cache"].get<std::string>();
  else if (has("model")) r.cache = j["model"].get<std::string>();
  else if (!pinned.empty()) r.cache = pinned;
  else throw bad("model", "model is required: the id of a cache (GET /v1/models lists them)");
  parse_messages(j, limits, r);
  parse_generation(j, limits, r);
  return r;
}

StopText::StopText(std::vector<std::string> stops) : stops_(std::move(stops)) {}

bool StopText::add(const std::string& piece) {
  if (stopped_) return true;
  const size_t from = text_.size();
  text_ += piece;
  size_t cut = std::string::npos;
  for (const auto& s : stops_) {
    // A stop string completed by this piece starts at most s.size() - 1 bytes before it.
    const size_t start = from >= s.size() ? from - s.size() + 1 : 0;
    const size_t at = text_.find(s, start);
    if (at != std::string::npos) cut = std::min(cut, at);
  }
  if (cut == std::string::npos) return false;
  text_.resize(cut);
  stopped_ = true;
  return true;
}

size_t StopText::safe_length(bool finished) const {
  if (finished || stopped_) return text_.size();
  size_t hold = 0;
  for (const auto& s : stops_) {
    for (size_t k = std::min(s.size() - 1, text_.size()); k > hold; --k)
      if (text_.compare(text_.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
  }
  return text_.size() - hold;
}

}  // namespace kvzip::serve
