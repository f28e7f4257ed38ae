// The engine thread: admit, build one step (decode rows first, then prefill pieces, oldest
// first), run it, sample, hand tokens out, retire finished requests; and the composing thread,
// which builds composed requests' caches beside it (see engine.h).
#include "serve/engine.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <thread>

#include "cache/branch_cache.h"
#include "common/error.h"

namespace kvzip::serve {

using Clock = std::chrono::steady_clock;

namespace {
double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}
}  // namespace

const char* finish_name(Finish f) {
  switch (f) {
    case Finish::Stop: return "stop";
    case Finish::Length: return "length";
    case Finish::Cancelled: return "cancelled";
    case Finish::Error: return "error";
  }
  return "error";
}

class Request {
 public:
  RequestSpec spec;
  RequestCallbacks cb;
  std::atomic<bool> cancelled{false};
  // Engine thread only:
  std::unique_ptr<model::AttentionCache> cache;  // a BranchCache, or a ComposedCache
  bool composing = false;  // handed to the composing thread, its result not taken yet
  std::optional<model::Sampler> sampler;
  size_t prefilled = 0;       // prompt tokens in the cache
  int32_t next = -1;          // the token to feed at the next step (after the prompt)
  std::vector<float> logits;  // (V)
  bool done = false;
  RequestResult result;
  Clock::time_point submitted, admitted, first_token;
  bool got_first = false;
};

// A composition built by the composing thread, for the engine thread to take.
struct Engine::Composed {
  std::shared_ptr<Request> request;
  std::unique_ptr<model::ComposedCache> cache;  // null: error (or the request was cancelled)
  std::string error;
  Errc code = Errc::internal;
};

Engine::Engine(const model::Model& model, const EngineOptions& options)
    : model_(model), opt_(options), forward_(model.weights(), [&] {
        if (options.parallel == 0 || options.step_tokens <= options.parallel)
          throw Error(Errc::invalid_argument,
                      "engine: parallel must be >= 1 and step_tokens > parallel (got parallel " +
                          std::to_string(options.parallel) + ", step_tokens " +
                          std::to_string(options.step_tokens) + ")");
        model::ForwardOptions fo;
        fo.threads = options.threads;
        fo.chunk = options.step_tokens;
        fo.matmul = options.matmul;
        return fo;
      }()) {
  composer_ = std::thread([this] { compose_loop(); });
  thread_ = std::thread([this] { run(); });
}

Engine::~Engine() { shutdown(std::chrono::milliseconds(0)); }

void Engine::compose_loop() {
  // The steps come first: on cores the steps already fill, a composition takes the cycles they
  // leave instead of preempting a step's threads (a step waits for its slowest thread). Linux
  // nice values are per thread and the forward pass's pool threads, made below, inherit it.
  const auto tid = static_cast<id_t>(::syscall(SYS_gettid));
  errno = 0;
  const int nice_now = ::getpriority(PRIO_PROCESS, tid);
  if (errno == 0) ::setpriority(PRIO_PROCESS, tid, std::min(19, nice_now + 10));  // best effort
  std::unique_ptr<model::Forward> forward;  // made on first use: a server may never compose
  while (true) {
    std::shared_ptr<Request> r;
    {
      std::unique_lock<std::mutex> lock(mu_);
      compose_cv_.wait(lock, [&] { return compose_stop_ || !to_compose_.empty(); });
      if (compose_stop_) return;  // the engine thread has ended every request
      r = std::move(to_compose_.front());
      to_compose_.pop_front();
    }
    Composed c;
    c.request = r;
    if (!r->cancelled) {
      try {
        if (opt_.before_compose) opt_.before_compose();
        if (!forward) {
          model::ForwardOptions fo;
          const uint32_t all =
              opt_.threads ? opt_.threads : std::max(1u, std::thread::hardware_concurrency());
          fo.threads = opt_.compose_threads ? opt_.compose_threads : std::max(1u, all / 2);
          fo.chunk = opt_.step_tokens;
          fo.matmul = opt_.matmul;
          forward = std::make_unique<model::Forward>(model_.weights(), fo);
        }
        std::vector<const format::CacheHeader*> headers{&r->spec.cache->header};
        std::vector<const model::KvBase*> bases{&r->spec.cache->cache};
        for (const auto& m : r->spec.more)
          headers.push_back(&m->header), bases.push_back(&m->cache);
        c.cache = loader::compose(*forward, model_.tokenizer(), headers, bases, r->spec.compose);
      } catch (const Error& e) {
        c.error = e.what();
        c.code = e.code();
      } catch (const std::exception& e) {
        c.error = e.what();
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      composed_.push_back(std::move(c));
    }
    cv_.notify_one();
  }
}

std::shared_ptr<Request> Engine::submit(RequestSpec spec, RequestCallbacks callbacks) {
  const ModelConfig& cfg = model_.config();
  if (!spec.cache) throw Error(Errc::invalid_argument, "request: no cache");
  if (spec.prompt.empty())
    throw Error(Errc::invalid_argument, "request: the question has no tokens");
  if (spec.max_tokens == 0) throw Error(Errc::invalid_argument, "request: max_tokens must be >= 1");
  uint64_t length = spec.cache->cache.base_length();
  if (!spec.more.empty()) {
    std::vector<const format::CacheHeader*> headers{&spec.cache->header};
    std::vector<std::string> names{spec.cache->id};
    for (const auto& m : spec.more) {
      if (!m) throw Error(Errc::invalid_argument, "request: no cache");
      headers.push_back(&m->header);
      names.push_back(m->id);
    }
    loader::check_composable(headers, names, false);
    length = loader::plan_composition(headers, model_.tokenizer(), spec.compose).length;
  }
  const uint64_t need = length + spec.prompt.size() + 1;
  if (cfg.max_context && need > cfg.max_context)
    throw Error(Errc::invalid_argument,
                "the cache's " + std::to_string(length) + " positions, the question's " +
                    std::to_string(spec.prompt.size()) +
                    " tokens and one answer token exceed the model's context of " +
                    std::to_string(cfg.max_context));
  for (int32_t t : spec.prompt)
    if (t < 0 || uint32_t(t) >= cfg.vocab_size)
      throw Error(Errc::invalid_argument,
                  "request: token id " + std::to_string(t) + " outside the vocabulary");
  auto r = std::make_shared<Request>();
  r->sampler.emplace(spec.sampling);  // Errc::invalid_argument for bad top_p / temperature
  r->spec = std::move(spec);
  r->cb = std::move(callbacks);
  r->submitted = Clock::now();
  r->result.prompt_tokens = static_cast<uint32_t>(r->spec.prompt.size());
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Room is every slot plus the queue: a request admitted at the next step boundary only waits
    // for it, so a burst of parallel + max_queue requests is taken whole.
    if (stopping_ || queue_.size() + active_.size() >= size_t(opt_.parallel) + opt_.max_queue)
      return nullptr;
    queue_.push_back(r);
  }
  cv_.notify_one();
  return r;
}

void Engine::cancel(const std::shared_ptr<Request>& request) {
  if (request) request->cancelled = true;
}

void Engine::shutdown(std::chrono::milliseconds grace) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_) {
      stopping_ = true;
      deadline_ = Clock::now() + grace;
    } else {
      deadline_ = std::min(deadline_, Clock::now() + grace);
    }
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    compose_stop_ = true;
  }
  compose_cv_.notify_one();
  if (composer_.joinable()) composer_.join();
}

size_t Engine::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

size_t Engine::active() const {
  std::lock_guard<std::mutex> lock(mu_);
  return active_.size();
}

void Engine::finish(Request& r, Finish f, std::string error, Errc code) {
  if (r.done) return;
  r.done = true;
  const auto now = Clock::now();
  r.result.finish = f;
  r.result.error = std::move(error);
  r.result.code = code;
  r.result.total_ms = ms_between(r.submitted, now);
  r.result.ttft_ms = r.got_first ? ms_between(r.submitted, r.first_token) : r.result.total_ms;
  r.cache.reset();  // the request's rows go now, not when the last handle does
  if (r.cb.on_done) r.cb.on_done(r.result);
}

// Moves queued requests into free slots; true when there is work.
bool Engine::admit_locked() {
  while (active_.size() < opt_.parallel && !queue_.empty()) {
    std::shared_ptr<Request> r = std::move(queue_.front());
    queue_.pop_front();
    r->admitted = Clock::now();
    r->result.queue_ms = ms_between(r->submitted, r->admitted);
    if (!r->spec.more.empty()) {  // composed beside the steps; joins them when done
      r->composing = true;
      ++composing_;
      to_compose_.push_back(r);
      compose_cv_.notify_one();
    }
    active_.push_back(std::move(r));
  }
  return !active_.empty();
}

bool Engine::ready_locked() const {
  return !composed_.empty() || active_.size() > composing_ ||
         (!queue_.empty() && active_.size() < opt_.parallel);
}

// Installs the compositions the composing thread finished (or ends their requests).
void Engine::take_compositions() {
  std::vector<Composed> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    done.swap(composed_);
    composing_ -= done.size();
  }
  for (Composed& c : done) {
    Request& r = *c.request;
    r.composing = false;
    if (r.done) continue;
    if (r.cancelled) {
      finish(r, Finish::Cancelled);
    } else if (!c.cache) {
      finish(r, Finish::Error, c.error, c.code);
    } else {
      r.cache = std::move(c.cache);
      r.logits.resize(model_.config().vocab_size);
    }
  }
}

void Engine::run() {
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      // Requests whose composition is being built have nothing to step: no spinning on them.
      cv_.wait(lock, [&] { return stopping_ || ready_locked(); });
      if (stopping_ && !ready_locked() && !active_.empty())  // only compositions in flight
        cv_.wait_until(lock, deadline_, [&] { return ready_locked(); });
      if (stopping_ && Clock::now() >= deadline_) {  // grace is over: cancel everything left
        for (auto& r : queue_) active_.push_back(std::move(r));
        queue_.clear();
        std::vector<std::shared_ptr<Request>> left;
        left.swap(active_);
        lock.unlock();
        for (auto& r : left) finish(*r, Finish::Cancelled);
        return;
      }
      if (!admit_locked()) {
        if (stopping_) return;
        continue;
      }
    }
    step_once();
    std::lock_guard<std::mutex> lock(mu_);
    active_.erase(
        std::remove_if(active_.begin(), active_.end(), [](const auto& r) { return r->done; }),
        active_.end());
  }
}

struct Engine::Step {
  std::vector<model::StepItem> items;
  std::vector<Request*> owners;
  std::vector<uint32_t> pieces;  // prompt tokens each item carries (0: a decode row)
};

void Engine::start_requests(const std::vector<Request*>& work) {
  for (Request* r : work) {
    if (r->composing || r->done) continue;  // a composing request ends when its result comes
    if (r->cancelled) {
      finish(*r, Finish::Cancelled);
      continue;
    }
    if (!r->cache) {
      try {
        const uint32_t room = static_cast<uint32_t>(r->spec.prompt.size()) +
                              std::min<uint32_t>(r->spec.max_tokens, 128) + 1;
        r->cache = std::make_unique<model::BranchCache>(r->spec.cache->cache, room);
        r->logits.resize(model_.config().vocab_size);
      } catch (const Error& e) {
        finish(*r, Finish::Error, e.what(), e.code());
      }
    }
  }
}

Engine::Step Engine::plan_step(const std::vector<Request*>& work) const {
  Step s;
  uint32_t budget = opt_.step_tokens;
  for (Request* r : work) {  // decode rows first: every answering request advances each step
    if (r->done || !r->cache || r->prefilled < r->spec.prompt.size()) continue;
    s.items.push_back(
        model::StepItem{r->cache.get(), std::span<const int32_t>(&r->next, 1), r->logits.data()});
    s.owners.push_back(r);
    s.pieces.push_back(0);
    --budget;
  }
  for (Request* r : work) {  // then question pieces, oldest first, as the budget allows
    if (r->done || !r->cache || r->prefilled >= r->spec.prompt.size() || budget == 0) continue;
    const size_t left = r->spec.prompt.size() - r->prefilled;
    // A question that fits the smallest budget a step can leave (step_tokens - parallel) is read
    // in one piece, as `kvzip query` reads it, so its attention sums in the same order and greedy
    // answers match; it waits for a step with room. Longer ones are split as the budget allows.
    const size_t whole = opt_.step_tokens - opt_.parallel;
    if (left > budget && left <= whole) continue;
    const uint32_t n = static_cast<uint32_t>(std::min<size_t>(left, budget));
    const bool last = n == left;
    s.items.push_back(model::StepItem{
        r->cache.get(), std::span<const int32_t>(r->spec.prompt).subspan(r->prefilled, n),
        last ? r->logits.data() : nullptr});
    s.owners.push_back(r);
    s.pieces.push_back(n);
    budget -= n;
  }
  return s;
}

void Engine::take_tokens(const Step& s) {
  const ModelConfig& cfg = model_.config();
  for (size_t i = 0; i < s.items.size(); ++i) {
    Request& r = *s.owners[i];
    r.prefilled += s.pieces[i];
    if (!s.items[i].logits) continue;
    const int32_t tok = r.sampler->sample(r.logits);
    const auto& stops = r.spec.stop_tokens;
    if (std::find(stops.begin(), stops.end(), tok) != stops.end()) {
      finish(r, Finish::Stop);
      continue;
    }
    if (!r.got_first) r.got_first = true, r.first_token = Clock::now();
    ++r.result.completion_tokens;
    if (r.cb.on_token && !r.cb.on_token(tok)) {
      finish(r, Finish::Stop);
      continue;
    }
    if (r.result.completion_tokens >= r.spec.max_tokens ||
        (cfg.max_context && uint64_t(r.cache->logical_length()) + 1 > cfg.max_context)) {
      finish(r, Finish::Length);
      continue;
    }
    r.next = tok;
  }
}

void Engine::step_once() {
  std::vector<Request*> work;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& r : active_) work.push_back(r.get());
  }
  take_compositions();
  start_requests(work);
  Step s = plan_step(work);
  if (s.items.empty()) return;
  try {
    forward_.step(s.items);
  } catch (const std::exception& e) {  // every cache was rolled back; these requests end
    for (Request* r : s.owners) finish(*r, Finish::Error, e.what());
    return;
  }
  ++steps_;
  take_tokens(s);
}

}  // namespace kvzip::serve
