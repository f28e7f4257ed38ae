// serve/ engine: one model in memory answering many requests by continuous batching. Each step
// is one Forward::step: every active request whose question is in decodes one token, and the
// rest of the step's row budget goes to question prefill pieces (oldest request first), so a
// weight is read once per step for all of them and a long question never stalls the decoders.
// A request answers from a loaded cache (serve/cache_store.h) through its own BranchCache, or from
// several composed ones through its own ComposedCache: the caches' rows are shared read-only, the
// request owns only its question and answer rows (and a composition's separators), which go when
// it ends. One engine thread runs the steps; callbacks run on it and must be quick. Compositions
// (separators, the recompute probe, the recompute: forward passes over whole documents) are built
// by a composing thread with its own forward pass, so the steps of the other requests never wait
// for them (it runs at a lower scheduling priority); a composed request joins the steps when its
// composition is done.
// Requests are admitted in arrival order up to `parallel` at once; the queue behind is bounded
// (a request is refused only when all parallel + max_queue places are taken).
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "kernels/matmul.h"
#include "loader/compose.h"
#include "model/model.h"
#include "model/sampling.h"
#include "serve/cache_store.h"

namespace kvzip::serve {

struct EngineOptions {
  uint32_t threads = 0;     // forward threads, 0 = all cores
  uint32_t parallel = 8;    // requests decoded together at most
  uint32_t max_queue = 64;  // requests waiting for a slot at most
  // Rows of one step (decode rows + prefill pieces), > parallel. The default keeps every step on
  // the matmul's 8-bit path (kMatmulInt8MaxT), where a token's result is the same bits whatever
  // batch it is computed in (kernels/qdot.h: one chain per output, register tiles below 8 rows,
  // the VNNI GEMM from there), so batched answers equal `kvzip query`'s on every CPU; larger steps
  // switch to fp32 slabs where the CPU has no VNNI GEMM, to AMX-BF16 tiles where it has them.
  uint32_t step_tokens = kernels::kMatmulInt8MaxT;
  kernels::MatmulPath matmul = kernels::MatmulPath::Fast;
  // Threads of the composing thread's forward pass; 0: half of `threads` (of the cores when
  // threads is 0), at least 1, so that the steps keep the other half while a composition builds.
  uint32_t compose_threads = 0;
  // Called on the composing thread before each composition (tests hold a composition here).
  std::function<void()> before_compose;
};

enum class Finish : uint8_t {
  Stop = 0,       // a stop token, or on_token asked to stop (a stop string)
  Length = 1,     // max_tokens, or the model's context is full
  Cancelled = 2,  // cancel(), or the shutdown deadline passed
  Error = 3,      // the forward pass or the composition failed (RequestResult::error, ::code)
};
const char* finish_name(Finish f);

struct RequestSpec {
  std::shared_ptr<const LoadedCache> cache;  // the compressed state answered from
  // More caches composed after `cache` into one context (loader/compose.h): the request reads
  // every one of them in place through its own view; composing runs on the composing thread once
  // the request is admitted (separators, and recomputed rows with compose.blend > 0).
  std::vector<std::shared_ptr<const LoadedCache>> more;
  loader::ComposeOptions compose;
  std::vector<int32_t> prompt;  // question tokens (loader::question_tokens)
  model::SamplingParams sampling;
  uint32_t max_tokens = 128;
  std::vector<int32_t> stop_tokens;  // end the answer; never emitted
};

struct RequestResult {
  Finish finish = Finish::Stop;
  std::string error;
  Errc code = Errc::internal;  // Finish::Error: what failed (internal for the engine's own faults)
  uint32_t prompt_tokens = 0;
  uint32_t completion_tokens = 0;
  double queue_ms = 0.0;  // submit to admission
  double ttft_ms = 0.0;   // submit to the first token (the whole time when there is none)
  double total_ms = 0.0;  // submit to the end
};

struct RequestCallbacks {
  // Each answer token as it is chosen; return false to end the answer here (Finish::Stop).
  std::function<bool(int32_t token)> on_token{};
  // Exactly once, when the request ends for any reason.
  std::function<void(const RequestResult&)> on_done{};
};

class Request;  // engine-side state of one request

class Engine {
 public:
  Engine(const model::Model& model, const EngineOptions& options);
  ~Engine();  // shutdown with no grace: in-flight requests end Cancelled
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Checks the request (Errc::invalid_argument: empty prompt, bad sampling parameters, question
  // and the cache past the model's context) and queues it. Returns null when the queue is full or
  // the engine is shutting down (the caller answers "retry later"); on_done is then never called.
  // The queue counts only what waits for a busy slot: parallel + max_queue requests fit.
  std::shared_ptr<Request> submit(RequestSpec spec, RequestCallbacks callbacks);
  // Ends a request early (Finish::Cancelled) at the next step; harmless once it has ended.
  static void cancel(const std::shared_ptr<Request>& request);

  // Stops accepting, lets queued and active requests finish until `grace` has passed, then
  // cancels the rest and joins the engine thread. Idempotent.
  void shutdown(std::chrono::milliseconds grace);

  size_t queued() const;
  size_t active() const;
  uint64_t steps() const { return steps_.load(); }

 private:
  void run();
  void compose_loop();
  bool admit_locked();
  // True when a step has something to do: a request ready to step, a finished composition, or a
  // queued request and a free slot. Holds mu_.
  bool ready_locked() const;
  void take_compositions();
  void step_once();
  // step_once's parts: cancellations and each new request's branch; the rows of one batched
  // step (decode rows, then question pieces as the token budget allows); the tokens it samples.
  struct Step;
  void start_requests(const std::vector<Request*>& work);
  Step plan_step(const std::vector<Request*>& work) const;
  void take_tokens(const Step& step);
  void finish(Request& r, Finish f, std::string error = {}, Errc code = Errc::internal);

  const model::Model& model_;
  EngineOptions opt_;
  model::Forward forward_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Request>> queue_;
  std::vector<std::shared_ptr<Request>> active_;  // engine thread; sizes read under mu_
  bool stopping_ = false;
  std::chrono::steady_clock::time_point deadline_;
  std::atomic<uint64_t> steps_{0};
  // The composing thread: requests waiting for their composition, and finished ones (the
  // composition or the error) for the engine thread to take. Under mu_.
  struct Composed;
  std::deque<std::shared_ptr<Request>> to_compose_;
  std::vector<Composed> composed_;
  size_t composing_ = 0;  // active requests whose composition the engine has not taken yet
  bool compose_stop_ = false;
  std::condition_variable compose_cv_;
  std::thread composer_;
  std::thread thread_;
};

}  // namespace kvzip::serve
