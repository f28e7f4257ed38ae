// POST /v1/chat/completions: the question goes through the cache's query template
// (loader::question_tokens) into the engine; answer text is decoded as tokens arrive, stop
// strings are cut, and the result is sent as one chat.completion or as server-sent events of
// chat.completion.chunk objects ending in `data: [DONE]`.
#include <condition_variable>
#include <ctime>
#include <mutex>
#include <random>

#include "common/error.h"
#include "loader/loader.h"
#include "serve/detail/server_impl.h"

namespace kvzip::serve {

using nlohmann::json;
using namespace detail;

namespace {

// What the engine thread hands to the HTTP thread of one request.
struct Channel {
  std::mutex mu;
  std::condition_variable cv;
  model::StreamDecoder decoder;
  StopText text;
  bool done = false;
  RequestResult result;
  Channel(const model::Tokenizer& t, std::vector<std::string> stops)
      : decoder(t), text(std::move(stops)) {}
};

const char* finish_reason(Finish f) { return f == Finish::Length ? "length" : "stop"; }

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// One answer on its way: the channel the engine writes, the engine's handle, and what every
// response object of the answer repeats.
struct Reply {
  std::shared_ptr<Channel> ch;
  std::shared_ptr<Request> handle;
  std::string id;
  int64_t created;
  std::string model_name;
  json sources;  // null, or the library model's sources
};

// The whole answer as one chat.completion, once the engine is done.
void send_whole(const Reply& reply, httplib::Response& res) {
  const auto& [ch, handle, id, created, model_name, sources] = reply;
  // The client is looked at every 20 ms (a decode step or two of a real model): one that left
  // is not answered, its slot goes to the next request.
  std::unique_lock<std::mutex> lock(ch->mu);
  bool gone = false;
  while (!ch->cv.wait_for(lock, std::chrono::milliseconds(20), [&] { return ch->done; })) {
    if (gone) continue;
    lock.unlock();
    gone = HttpServer::client_gone();
    if (gone) Engine::cancel(handle);
    lock.lock();
  }
  const RequestResult r = ch->result;
  if (gone && r.finish == Finish::Cancelled)  // nobody to answer; logged as nginx does
    throw ApiError(499, "invalid_request_error", "client_closed",
                   "the client closed the connection");
  if (r.finish == Finish::Cancelled)
    throw ApiError(503, "server_error", "shutting_down",
                   "the answer was cancelled (server shutting down)", {}, 5);
  if (r.finish == Finish::Error) {
    if (r.code == Errc::internal) throw ApiError(500, "server_error", "internal", r.error);
    throw api_error_of(Error(r.code, r.error));  // e.g. a composition past the model's context
  }
  json body{
      {"id", id},
      {"object", "chat.completion"},
      {"created", created},
      {"model", model_name},
      {"choices", json::array({{{"index", 0},
                                {"message", {{"role", "assistant"}, {"content", ch->text.text()}}},
                                {"logprobs", nullptr},
                                {"finish_reason", finish_reason(r.finish)}}})},
      {"usage",
       {{"prompt_tokens", r.prompt_tokens},
        {"completion_tokens", r.completion_tokens},
        {"total_tokens", r.prompt_tokens + r.completion_tokens}}}};
  if (!sources.is_null()) body["sources"] = sources;
  send_json(res, 200, body);
}

// The event that ends a stream whose answer failed or was cancelled.
std::string error_event(const RequestResult& r) {
  const std::string message =
      r.finish == Finish::Error ? r.error : "the answer was cancelled (server shutting down)";
  return "data: " +
         dump(json{{"error",
                    {{"message", message},
                     {"type", "server_error"},
                     {"param", nullptr},
                     {"code", finish_name(r.finish)}}}}) +
         "\n\n";
}

// The usage chunk (stream_options.include_usage): no choices, the token counts.
std::string usage_event(const RequestResult& r, const std::string& id, int64_t created,
                        const std::string& model_name) {
  return "data: " +
         dump(json{{"id", id},
                   {"object", "chat.completion.chunk"},
                   {"created", created},
                   {"model", model_name},
                   {"choices", json::array()},
                   {"usage",
                    {{"prompt_tokens", r.prompt_tokens},
                     {"completion_tokens", r.completion_tokens},
                     {"total_tokens", r.prompt_tokens + r.completion_tokens}}}}) +
         "\n\n";
}

// The answer as server-sent events of chat.completion.chunk objects, ending in `data: [DONE]`.
void send_stream(const Reply& reply, bool include_usage, httplib::Response& res) {
  const auto& [ch, handle, id, created, model_name, sources] = reply;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  // The library model's sources go in every chunk (a client may read any one of them).
  auto chunk = [id, created, model_name, sources](const json& delta, const json& finish) {
    json c{{"id", id},
           {"object", "chat.completion.chunk"},
           {"created", created},
           {"model", model_name},
           {"choices", json::array({{{"index", 0},
                                     {"delta", delta},
                                     {"logprobs", nullptr},
                                     {"finish_reason", finish}}})}};
    if (!sources.is_null()) c["sources"] = sources;
    return "data: " + dump(c) + "\n\n";
  };
  auto sent = std::make_shared<size_t>(0);
  auto started = std::make_shared<bool>(false);
  const bool usage = include_usage;
  res.set_chunked_content_provider(
      "text/event-stream",
      [ch, handle, chunk, sent, started, usage, id, created, model_name](size_t,
                                                                         httplib::DataSink& sink) {
        auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
        if (!*started) {
          *started = true;
          if (!write(chunk({{"role", "assistant"}, {"content", ""}}, nullptr))) {
            Engine::cancel(handle);
            return false;
          }
        }
        std::string piece;
        bool done;
        RequestResult r;
        {
          std::unique_lock<std::mutex> lock(ch->mu);
          ch->cv.wait_for(lock, std::chrono::seconds(5),
                          [&] { return ch->done || ch->text.safe_length(false) > *sent; });
          done = ch->done;
          const size_t n = ch->text.safe_length(done);
          piece = ch->text.text().substr(*sent, n - *sent);
          *sent = n;
          r = ch->result;
        }
        if (!piece.empty() && !write(chunk({{"content", piece}}, nullptr))) {
          Engine::cancel(handle);
          return false;
        }
        if (!done) return true;  // called again for more
        std::string tail = r.finish == Finish::Cancelled || r.finish == Finish::Error
                               ? error_event(r)
                               : chunk(json::object(), finish_reason(r.finish));
        if (usage) tail += usage_event(r, id, created, model_name);
        tail += "data: [DONE]\n\n";
        write(tail);
        sink.done();
        return true;
      },
      [handle](bool success) {
        if (!success) Engine::cancel(handle);  // the client went away
      });
}

}  // namespace

ApiError Server::Impl::cache_refusal(const std::string& id, const Error& e) {
  const std::string name = "cache \"" + id + "\"";
  switch (e.code()) {
    case Errc::not_found:
      return ApiError(404, "not_found_error", "model_not_found",
                      "no cache \"" + id + "\"; GET /v1/models lists them", "model");
    case Errc::out_of_memory:  // every loaded cache busy: retrying helps
      return api_error_of(e);
    case Errc::invalid_argument:  // larger than the whole budget (CacheStore::acquire)
      metrics.cache_error("cache_too_large");
      return ApiError(422, "invalid_request_error", "cache_too_large", e.what(), "model");
    case Errc::model_mismatch:
      metrics.cache_error("model_mismatch");
      return ApiError(400, "invalid_request_error", "model_mismatch", name + ": " + e.what(),
                      "model");
    case Errc::truncated:
    case Errc::bad_magic:
    case Errc::version_unsupported:
    case Errc::corrupt:
    case Errc::checksum_mismatch:
      metrics.cache_error(errc_name(e.code()));
      return ApiError(422, "invalid_request_error", errc_name(e.code()),
                      name +
                          " cannot be read (the file is damaged; replace it with PUT /v1/caches/" +
                          id + "): " + e.what(),
                      "model");
    default: return api_error_of(e);
  }
}

// The caches a chat request names ("a+b+c" composes a, b and c in that order; ids never hold
// '+'), or those the library model retrieves for its question (their ranking in `sources`).
std::vector<std::shared_ptr<const LoadedCache>> Server::Impl::chat_caches(const ChatRequest& cr,
                                                                          json& sources) {
  // The library model composes the caches its retrieval picks; "a+b+c" composes the caches a, b
  // and c (ids never contain '+'), in that order.
  std::vector<std::string> ids;
  if (cr.cache == opt.library_model) {
    const library::Selection sel = library_retrieve(cr.question, cr.max_tokens);
    sources = json::array();
    for (const auto& h : sel.sources) {
      ids.push_back(h.id);
      sources.push_back({{"id", h.id}, {"score", h.score}, {"tokens", h.tokens}});
    }
  }
  for (size_t at = 0; sources.is_null();) {
    const size_t plus = cr.cache.find('+', at);
    ids.push_back(cr.cache.substr(at, plus == std::string::npos ? std::string::npos : plus - at));
    if (plus == std::string::npos) break;
    at = plus + 1;
  }
  if (ids.size() > opt.max_compose)
    throw ApiError(400, "invalid_request_error", "too_many_caches",
                   std::to_string(ids.size()) + " caches composed; at most " +
                       std::to_string(opt.max_compose) + " (the server's composition limit)",
                   "model");
  std::vector<std::shared_ptr<const LoadedCache>> caches;
  for (const std::string& cid : ids) {
    // A malformed id is a bad value (400), as on /v1/caches/{id}; a well-formed unknown one is 404.
    if (!CacheStore::valid_id(cid))
      throw ApiError(400, "invalid_request_error", "invalid_value",
                     "\"" + cid.substr(0, 64) +
                         "\" is not a cache id (1-128 characters of A-Z a-z 0-9 . _ -, "
                         "not starting with '.'; several joined by + compose)",
                     "model");
    try {
      caches.push_back(store.acquire(cid));
    } catch (const Error& e) {
      throw cache_refusal(cid, e);
    }
  }
  return caches;
}

void Server::Impl::chat_completions(const httplib::Request& req, httplib::Response& res,
                                    const Scope& scope) {
  if (req.body.size() > opt.max_json_bytes)  // HttpServer refuses it unread; kept for other callers
    throw ApiError(413, "invalid_request_error", "body_too_large",
                   "the body is " + std::to_string(req.body.size()) + " bytes; at most " +
                       std::to_string(opt.max_json_bytes));
  ChatRequest cr = parse_chat_request(req.body, opt.chat, scope.cache.value_or(""));
  cr.cache = scope.pinned(cr.cache, "model");
  if (draining)
    throw ApiError(503, "server_error", "shutting_down", "the server is shutting down", {}, 5);
  json sources = nullptr;  // the library model's sources
  const std::vector<std::shared_ptr<const LoadedCache>> caches = chat_caches(cr, sources);
  const std::shared_ptr<const LoadedCache> cache = caches[0];
  RequestSpec spec;
  spec.cache = cache;
  spec.more.assign(caches.begin() + 1, caches.end());
  spec.compose.blend = opt.compose_blend;
  spec.compose.rule = opt.compose_rule;
  spec.compose.max_docs = opt.max_compose;
  spec.prompt = loader::conversation_tokens(model, cache->header, cr.history, cr.question);
  spec.max_tokens = cr.max_tokens;
  spec.stop_tokens = model.chat().stop_tokens();
  spec.sampling.temperature = cr.temperature;
  spec.sampling.top_p = cr.top_p;
  spec.sampling.top_k = cr.top_k;
  spec.sampling.seed = cr.seeded ? cr.seed : std::random_device{}() * 0x9e3779b97f4a7c15ull;

  auto ch = std::make_shared<Channel>(model.tokenizer(), cr.stop);
  RequestCallbacks cb;
  cb.on_token = [ch](int32_t tok) {
    std::lock_guard<std::mutex> lock(ch->mu);
    const bool stopped = ch->text.add(ch->decoder.push(tok));
    ch->cv.notify_all();
    return !stopped;
  };
  cb.on_done = [ch, this](const RequestResult& r) {
    {
      std::lock_guard<std::mutex> lock(ch->mu);
      ch->text.add(ch->decoder.finish());
      ch->result = r;
      ch->done = true;
    }
    ch->cv.notify_all();
    if (r.finish == Finish::Stop || r.finish == Finish::Length) {
      const double per_token = r.completion_tokens > 1
                                   ? (r.total_ms - r.ttft_ms) / 1000.0 / (r.completion_tokens - 1)
                                   : 0.0;
      metrics.completion(r.prompt_tokens, r.completion_tokens, r.ttft_ms / 1000.0, per_token);
    }
  };
  std::shared_ptr<Request> handle = engine.submit(std::move(spec), std::move(cb));
  if (!handle) {
    if (draining)
      throw ApiError(503, "server_error", "shutting_down", "the server is shutting down", {}, 5);
    throw ApiError(429, "rate_limit_error", "queue_full",
                   "too many requests are waiting; retry shortly", {}, 1);
  }
  const Reply reply{ch,
                    handle,
                    "chatcmpl-" + std::to_string(next_completion++),
                    static_cast<int64_t>(std::time(nullptr)),
                    cr.cache,
                    sources};
  if (cr.stream) send_stream(reply, cr.include_usage, res);
  else send_whole(reply, res);
}

}  // namespace kvzip::serve
