// `kvzip serve`: the OpenAI-compatible server over a folder of compressed caches (serve/).
// SIGTERM and SIGINT drain it: no new requests, in-flight answers finish within --grace seconds,
// compress jobs stop at their next progress report. A job still running past the grace (scoring
// or writing) is ended the way any kvzip command ends on SIGTERM: the default handler removes its
// temporary file (common/atomic_file.h) and the process exits 143, so no partial file remains.
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <thread>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "common/error.h"
#include "compress/learned_scorer.h"
#include "kernels/matmul.h"
#include "serve/server.h"

namespace kvzip::cli {
namespace {

struct ServeOpts {
  std::string caches, model, host = "127.0.0.1", api_key_file, device = "cpu";
  std::string scorer;  // --scorer: the learned scorer of compress jobs' method kvzap
  int port = 8080;
  uint32_t parallel = 8, threads = 0, queue = 64, max_tokens = 4096, step_tokens = 0,
           max_compose = 16, compose_threads = 0;
  std::string library_model = "@library";  // serve::ServerOptions's
  uint32_t library_top_k = 4;
  std::optional<double> blend;  // unset: loader::default_blend of the model
  std::string blend_rule = loader::blend_rule_name(loader::ComposeOptions{}.rule);
  uint64_t max_loaded_bytes = uint64_t(4) << 30;
  uint64_t max_upload_bytes = uint64_t(1) << 30;
  int64_t max_client_connections = -1;  // -1: half the HTTP worker threads
  double grace = 10.0, head_timeout = 10.0;
  bool quiet = false, no_key_tiles = false;
};

std::atomic<int> g_signal{0};
struct sigaction g_old_term, g_old_int;

extern "C" void on_stop_signal(int sig) { g_signal.store(sig); }

std::string read_api_key(const std::string& path) {
  std::string key = read_text(path, "API key file");
  while (!key.empty() && (key.back() == '\n' || key.back() == '\r' || key.back() == ' '))
    key.pop_back();
  if (key.size() < 8)
    throw Error(Errc::invalid_argument,
                "--api-key-file " + path + ": the key is shorter than 8 characters");
  if (key.find_first_of(" \t\r\n") != std::string::npos)
    throw Error(Errc::invalid_argument,
                "--api-key-file " + path + ": the key must be one line without spaces");
  return key;
}

// Each waiting connection is a descriptor; the soft limit (often 1024) is raised to the hard one
// so that slow clients run into the server's own bounds (HttpLimits::max_pending) first.
void raise_open_files() {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &r);
  }
}

void run_serve(const ServeOpts& o) {
  if (kernels::parse_device(o.device.c_str()) != kernels::Device::Cpu)
    throw Error(Errc::unsupported,
                "serve: --device " + o.device +
                    " is not available yet: the batching engine's shared-base "
                    "attention (two KV segments) runs on the CPU only; use --device cpu");
  if (o.port < 0 || o.port > 65535)
    throw Error(Errc::invalid_argument,
                "serve: --port " + std::to_string(o.port) + " is outside 0..65535");
  if (o.max_tokens == 0) throw Error(Errc::invalid_argument, "serve: --max-tokens must be >= 1");
  if (!(o.head_timeout > 0 && o.head_timeout <= 3600))
    throw Error(Errc::invalid_argument, "serve: --head-timeout must be in (0, 3600] seconds");
  if (!(o.grace >= 0 && o.grace <= 3600))
    throw Error(Errc::invalid_argument, "serve: --grace must be in [0, 3600] seconds");
  serve::ServerOptions so;
  so.caches_dir = o.caches;
  so.host = o.host;
  so.port = o.port;
  so.engine.threads = o.threads;
  so.engine.compose_threads = o.compose_threads;
  so.engine.parallel = o.parallel;
  so.engine.max_queue = o.queue;
  // Default: every step on the matmul's 8-bit path (serve/engine.h), with room past --parallel.
  so.engine.step_tokens =
      o.step_tokens ? o.step_tokens : std::max(kernels::kMatmulInt8MaxT, o.parallel + 16);
  so.max_loaded_bytes = o.max_loaded_bytes;
  so.key_tiles = !o.no_key_tiles;
  so.max_compose = o.max_compose;
  so.compose_blend = o.blend;
  so.compose_rule = loader::parse_blend_rule(o.blend_rule);
  so.library_model = o.library_model;
  so.library_top_k = o.library_top_k;
  so.chat.max_tokens_cap = o.max_tokens;
  so.chat.default_max_tokens = std::min<uint32_t>(256, o.max_tokens);
  so.http_threads = std::max<uint32_t>(64, 2 * (o.parallel + o.queue));
  so.listen_backlog = static_cast<int>(std::max<uint32_t>(128, 2 * (o.parallel + o.queue)));
  so.max_upload_bytes = o.max_upload_bytes;
  if (o.max_client_connections < -1 || o.max_client_connections > 1000000)
    throw Error(Errc::invalid_argument, "serve: --max-client-connections must be in [0, 1000000]");
  // One address never takes more than half the workers by default, so others still get served.
  const uint32_t per_client = o.max_client_connections < 0
                                  ? so.http_threads / 2
                                  : static_cast<uint32_t>(o.max_client_connections);
  so.http.max_client_requests = per_client;
  so.http.max_pending_per_client = per_client ? std::min<uint32_t>(32, per_client) : 0;
  so.http.head_timeout = std::chrono::milliseconds(static_cast<int64_t>(o.head_timeout * 1000));
  raise_open_files();
  so.compress_threads = o.threads;
  if (!o.api_key_file.empty()) so.api_key = read_api_key(o.api_key_file);
  if (!o.scorer.empty()) so.scorer = compress::load_learned_scorer(o.scorer);
  auto model = load_model(o.model, o.threads, /*long_running=*/true);
  serve::Server server(*model, so);
  const int port = server.bind();
  // Our handlers replace the CLI's temp-file cleanup ones for the server's lifetime; they are
  // kept to end the process the usual way if a job outlives the grace.
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, &g_old_term);
  sigaction(SIGINT, &sa, &g_old_int);
  std::fprintf(stderr, "kvzip serve: listening on http://%s:%d (caches in %s, model %s)%s\n",
               o.host.c_str(), port, o.caches.c_str(), model->path().c_str(),
               so.api_key.empty() ? "" : ", API key required");
  std::thread listener([&] { server.listen(); });
  while (g_signal.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const int sig = g_signal.load();
  std::fprintf(stderr, "kvzip serve: %s received, draining (grace %.1f s)\n",
               sig == SIGTERM ? "SIGTERM" : "SIGINT", o.grace);
  const bool jobs_done =
      server.stop(std::chrono::milliseconds(static_cast<int64_t>(o.grace * 1000)));
  listener.join();
  if (!jobs_done) {
    std::fprintf(stderr, "kvzip serve: a compress job is still running; ending it\n");
    sigaction(SIGTERM, &g_old_term, nullptr);
    sigaction(SIGINT, &g_old_int, nullptr);
    std::raise(sig);  // the cleanup handler removes the job's temporary file, then the process ends
  }
  std::fprintf(stderr, "kvzip serve: stopped\n");
}

}  // namespace

void add_serve_commands(CLI::App& app) {
  auto o = std::make_shared<ServeOpts>();
  auto* c =
      app.add_subcommand("serve", "OpenAI-compatible server answering from compressed caches");
  c->add_option("--caches", o->caches,
                "Folder of .kvz caches; a request's \"model\" names DIR/<id>.kvz")
      ->required();
  c->add_option("-m,--model", o->model, "GGUF model file or HF folder (default: $KVZIP_MODEL)");
  c->add_option("--host", o->host, "Address to listen on")->capture_default_str();
  c->add_option("--port", o->port, "Port (0: any free port)")->capture_default_str();
  c->add_option("--parallel", o->parallel, "Requests decoded together at most")
      ->capture_default_str();
  c->add_option("--queue", o->queue, "Requests waiting for a slot at most (then 429)")
      ->capture_default_str();
  c->add_option(
      "--step-tokens", o->step_tokens,
      "Rows per batched step (decode rows + question pieces); default max(48, parallel + 16), "
      "which keeps every step on the 8-bit matmul path");
  c->add_option("--max-tokens", o->max_tokens, "Largest max_tokens a request may ask")
      ->capture_default_str();
  c->add_option("--max-compose", o->max_compose,
                "Caches one request may compose (\"model\": \"a+b+c\"); more: 400")
      ->check(CLI::Range(1u, 64u))
      ->capture_default_str();
  c->add_option(
       "--library-model", o->library_model,
       "The \"model\" name that answers from the caches a question needs (retrieved from the "
       "folder's index and composed); must not be a valid cache id")
      ->capture_default_str();
  c->add_option("--library-top-k", o->library_top_k, "Caches the library model composes at most")
      ->check(CLI::Range(1u, 16u))
      ->capture_default_str();
  c->add_option(
       "--compose-threads", o->compose_threads,
       "Threads that build compositions beside the engine's steps (0: half of -t, at least 1)")
      ->capture_default_str();
  c->add_option("--blend", o->blend,
                "Composed requests: fraction of each later document's tokens recomputed with the "
                "documents before it in view (default: the model's, docs/composing.md)")
      ->check(CLI::Range(0.0, 1.0));
  c->add_option("--blend-rule", o->blend_rule,
                std::string("Composed requests: which tokens --blend recomputes (")
                    .append(loader::kBlendRuleNames)
                    .append(")"))
      ->capture_default_str();
  c->add_option("--max-loaded-bytes", o->max_loaded_bytes,
                "Bytes of caches kept loaded (LRU): K/V, and an f32 cache's transposed keys")
      ->capture_default_str();
  c->add_flag("--no-key-tiles", o->no_key_tiles,
              "Keep an f32 cache's keys once in memory (by default they are also kept transposed, "
              "for faster decoding at about the K bytes again)");
  c->add_option(
       "--max-upload-bytes", o->max_upload_bytes,
       "Largest .kvz a PUT /v1/caches/{id} takes (streamed to a temporary file, then verified)")
      ->capture_default_str();
  c->add_option(
      "--max-client-connections", o->max_client_connections,
      "Requests one client address may have in service at once (then 429; default: half the "
      "HTTP worker threads, max(64, 2 x (parallel + queue))), and at most 32 of its connections "
      "wait for their request head; 0: no limit (behind a proxy all clients share its address: "
      "docs/serve-production.md)");
  c->add_option("--head-timeout", o->head_timeout,
                "Seconds a connection gets to send a whole request head (then 408)")
      ->capture_default_str();
  c->add_option("--api-key-file", o->api_key_file,
                "File holding the API key clients must send as a Bearer token");
  c->add_option("--scorer", o->scorer,
                "Learned scorer file (.kvp) of `kvzip calibrate --scorer` for this model: compress "
                "jobs (POST /v1/caches) may then ask \"method\": \"kvzap\"");
  c->add_option("--device", o->device, "cpu (cuda is not available for serve yet)")
      ->capture_default_str();
  c->add_option("--grace", o->grace, "Seconds in-flight answers get to finish on SIGTERM")
      ->capture_default_str();
  add_threads_option(c, o->threads);
  c->callback([o] { run_serve(*o); });
}

}  // namespace kvzip::cli
