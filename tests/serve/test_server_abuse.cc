// serve/ under hostile clients, on loopback with raw sockets against a served tiny model, each
// case bounded to seconds: bodies refused or cut at the route's limit while read (Content-Length,
// Expect: 100-continue, chunked; malformed framing a 400 at once); slow heads neither hold the
// server nor outlive one head deadline; a non-streaming answer whose client left stops decoding;
// a burst of parallel + queue requests is admitted whole; replaced or deleted caches count until
// their last request ends, and a load that might pass the budget is refused before it reads; a
// second server on a taken port fails; and the smaller cases (NUL in
// the API key, a half-closed client, the pinned path without "model", an invalid id, the access
// log of a request the parser refused).
#include <catch2/catch.hpp>

#include <malloc.h>

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "common/error.h"
#include "loader/loader.h"
#include "serve/cache_store.h"
#include "serve/engine.h"
#include "tests/serve/http_client.h"
#include "tests/serve/support.h"

using namespace kvzip;
using namespace kvzip::test;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

std::string chat_body(const std::string& model, uint32_t max_tokens, bool stream = false) {
  nlohmann::json j{{"messages", {{{"role", "user"}, {"content", "Who counted ships?"}}}},
                   {"max_tokens", max_tokens},
                   {"temperature", 0},
                   {"stream", stream}};
  if (!model.empty()) j["model"] = model;
  return j.dump();
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Sends a chunked body of `total` bytes in 64 KiB chunks until done, refused, or answered; the
// bytes sent before an answer arrived (all of them when none came while sending).
uint64_t send_chunked(int fd, uint64_t total) {
  const std::string piece(65536, 'x');
  char size_line[32];
  std::snprintf(size_line, sizeof size_line, "%zx\r\n", piece.size());
  const std::string chunk = size_line + piece + "\r\n";
  uint64_t sent = 0;
  while (sent < total && send_all(fd, chunk, milliseconds(1000))) {
    sent += piece.size();
    char c;
    if (::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) > 0) return sent;  // answered mid-body
  }
  if (sent >= total) send_all(fd, "0\r\n\r\n", milliseconds(1000));
  return sent;
}

}  // namespace

TEST_CASE("serve: bodies are refused or cut at the route's limit while read", "[serve][abuse]") {
  serve::ServerOptions so;
  so.max_json_bytes = 64 << 10;
  so.max_upload_bytes = 1 << 20;
  ServedModel s("serve_bodies", so);

  SECTION("a Content-Length past the limit is a 413 before any body byte") {
    const auto t = Clock::now();
    const std::string r =
        http(s.port,
             "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 314572800\r\n\r\n");
    CHECK(status_of(r) == 413);
    CHECK(seconds_since(t) < 2.0);
    CHECK(status_of(http(s.port,
                         "PUT /c/doc/v1/caches/big HTTP/1.1\r\nContent-Length: 2000000\r\n\r\n")) ==
          413);
  }
  SECTION("Expect: 100-continue with a 2 GiB length gets its 413, not 100 Continue") {
    const std::string r = http(s.port,
                               "PUT /v1/caches/x HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                               "Content-Length: 2147483648\r\n\r\n");
    CHECK(r.find("100 Continue") == std::string::npos);
    CHECK(status_of(r) == 413);
  }
  SECTION("a chunked body is cut at the limit, on a JSON route and on an upload") {
    for (const char* head :
         {"POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
          "PUT /v1/caches/big HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"}) {
      const int fd = connect_to(s.port);
      REQUIRE(fd >= 0);
      REQUIRE(send_all(fd, head));
      const uint64_t sent = send_chunked(fd, uint64_t(64) << 20);
      CHECK(sent < (uint64_t(16) << 20));  // answered long before the 64 MiB were sent
      CHECK(status_of(read_response(fd)) == 413);
      ::close(fd);
    }
    for (const auto& e : std::filesystem::directory_iterator(s.caches))  // no temporary left
      CHECK(e.path().filename().string().rfind("big", 0) != 0);
  }
  SECTION("malformed framing is a 400 at once") {
    const auto t = Clock::now();
    for (const char* framing :
         {"Content-Length: -1\r\n", "Content-Length: 18446744073709551617\r\n",
          "Transfer-Encoding: gzip, chunked\r\n", "Content-Length: 5\r\nContent-Length: 6\r\n",
          "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n", ""}) {
      const std::string r =
          http(s.port,
               std::string("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n") + framing + "\r\n");
      CHECK(status_of(r) == 400);
    }
    CHECK(status_of(http(s.port,
                         "POST /v1/chat/completions HTTP/1.1\r\nContent-Encoding: "
                         "gzip\r\nContent-Length: 3\r\n\r\nabc")) == 415);
    CHECK(status_of(http(s.port, "GET /health HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc")) == 400);
    CHECK(status_of(http(s.port, "garbage\r\n\r\n")) == 400);
    CHECK(seconds_since(t) < 3.0);  // none waited for a read timeout
  }
  const std::string h = http(s.port, request("GET", "/health"));
  CHECK(status_of(h) == 200);
}

// Resident memory is a process-wide figure: this case runs in a process of its own (the serve
// CTest entry); the sanitizer run, which runs every unit test in one process, leaves it out
// ([memory]), as earlier tests' threads and ASan's quarantine keep their own memory resident.
TEST_CASE("serve: big bodies to every route leave resident memory where it was",
          "[serve][abuse][memory]") {
  serve::ServerOptions so;
  so.max_json_bytes = 64 << 10;
  so.max_upload_bytes = 1 << 20;
  ServedModel s("serve_bodies_rss", so);
  ::malloc_trim(0);  // freed memory of earlier tests in this process goes back first
  const uint64_t before = resident_bytes();
  for (const char* path :
       {"/v1/chat/completions", "/v1/caches", "/v1/caches/doc3", "/c/doc/v1/chat/completions"}) {
    const int fd = connect_to(s.port);
    REQUIRE(fd >= 0);
    const std::string method = std::string(path) == "/v1/caches/doc3" ? "PUT" : "POST";
    REQUIRE(send_all(fd, method + " " + path + " HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"));
    send_chunked(fd, uint64_t(32) << 20);
    read_response(fd);
    ::close(fd);
  }
  ::malloc_trim(0);
  CHECK(resident_bytes() < before + (uint64_t(24) << 20));
}

TEST_CASE("serve: slow heads neither hold the server nor outlive the head deadline",
          "[serve][abuse]") {
  serve::ServerOptions so;
  so.http.head_timeout = milliseconds(1500);
  so.http.max_pending = 512;
  so.http.max_pending_per_client = 0;  // all 300 from one address, to load the reader
  so.http_threads = 4;
  ServedModel s("serve_slow", so);
  std::vector<int> slow;
  for (int i = 0; i < 300; ++i) {
    const int fd = connect_to(s.port);
    if (fd < 0) break;
    send_all(fd, "GET /health HTTP/1.1\r\nX-Slow: ");  // never finished
    slow.push_back(fd);
  }
  CHECK(slow.size() == 300);
  std::this_thread::sleep_for(milliseconds(100));
  auto t = Clock::now();
  CHECK(status_of(http(s.port, request("GET", "/health"), milliseconds(3000))) == 200);
  CHECK(seconds_since(t) < 1.0);
  t = Clock::now();
  const std::string chat = http(
      s.port, request("POST", "/v1/chat/completions", chat_body("doc", 2)), milliseconds(5000));
  CHECK(status_of(chat) == 200);
  CHECK(seconds_since(t) < 3.0);
  // A client adding a byte every 200 ms is cut at the head deadline, not kept by each byte.
  const int trickle = connect_to(s.port);
  REQUIRE(trickle >= 0);
  t = Clock::now();
  bool cut = false;
  while (seconds_since(t) < 4.0 && !cut) {
    cut = !send_all(trickle, "a", milliseconds(200));
    char c;
    if (::recv(trickle, &c, 1, MSG_DONTWAIT) >= 0) cut = true;  // the 408 or the close
    std::this_thread::sleep_for(milliseconds(200));
  }
  CHECK(cut);
  CHECK(seconds_since(t) < 2.5);
  ::close(trickle);
  for (int fd : slow) ::close(fd);
}

TEST_CASE("serve: one address's waiting connections are bounded, the newest gets in",
          "[serve][abuse]") {
  serve::ServerOptions so;
  so.http.max_pending_per_client = 8;
  ServedModel s("serve_per_client", so);
  std::vector<int> slow;
  for (int i = 0; i < 40; ++i) {
    const int fd = connect_to(s.port, "127.0.0.2");
    REQUIRE(fd >= 0);  // Linux routes all of 127.0.0.0/8 to loopback
    send_all(fd, "GET /health HTTP/1.1\r\n");
    slow.push_back(fd);
  }
  std::this_thread::sleep_for(milliseconds(200));
  int open = 0;
  for (int fd : slow) {
    char c;
    const ssize_t n = ::recv(fd, &c, 1, MSG_DONTWAIT);
    if (n < 0 && errno == EAGAIN) ++open;  // still waiting: not closed by the server
  }
  CHECK(open == 8);
  const auto t = Clock::now();
  CHECK(status_of(http(s.port, request("GET", "/health"))) == 200);
  CHECK(seconds_since(t) < 1.0);
  for (int fd : slow) ::close(fd);
}

TEST_CASE("serve: a non-streaming answer whose client left stops decoding", "[serve][abuse]") {
  serve::ServerOptions so;
  so.engine.parallel = 2;
  so.engine.max_queue = 8;
  ServedModel s("serve_abandoned", so);
  // On this model and seed the answer runs 1274 tokens before a stop token.
  nlohmann::json long_answer{{"model", "doc"},
                             {"messages", {{{"role", "user"}, {"content", "Tell me everything."}}}},
                             {"max_tokens", 3900},
                             {"temperature", 1},
                             {"seed", 1}};
  for (int i = 0; i < 6; ++i) {
    const int fd = connect_to(s.port);
    REQUIRE(fd >= 0);
    send_all(fd, request("POST", "/v1/chat/completions", long_answer.dump()));
    ::close(fd);
  }
  const auto t = Clock::now();
  std::string m;
  while (seconds_since(t) < 30.0) {
    m = http(s.port, request("GET", "/metrics"));
    if (metric(m, "kvzip_active_requests") == 0 && metric(m, "kvzip_queue_depth") == 0) break;
    std::this_thread::sleep_for(milliseconds(20));
  }
  CHECK(metric(m, "kvzip_active_requests") == 0);
  // Decoding them all takes 3 rounds of 1274 steps (3822); cancelled, they stop within tens of
  // milliseconds (a few hundred of this model's sub-millisecond steps, under load).
  CHECK(metric(m, "kvzip_engine_steps_total") < 2000);
  const std::string r = http(s.port, request("POST", "/v1/chat/completions", chat_body("doc", 2)));
  CHECK(status_of(r) == 200);
}

TEST_CASE("serve: a half-closed client still gets its answer", "[serve][abuse]") {
  ServedModel s("serve_halfclose");
  const int fd = connect_to(s.port);
  REQUIRE(fd >= 0);
  REQUIRE(send_all(fd, request("POST", "/v1/chat/completions", chat_body("doc", 4))));
  ::shutdown(fd, SHUT_WR);
  const std::string r = read_response(fd);
  ::close(fd);
  CHECK(status_of(r) == 200);
  CHECK(r.find("chat.completion") != std::string::npos);
}

TEST_CASE("serve: the engine takes a burst of parallel + queue requests whole", "[serve][abuse]") {
  TinyModelDir dir("serve_burst", 21, 1024);
  const std::string caches = dir.path("caches");
  std::filesystem::create_directories(caches);
  compress_document(*dir.model, "Mira planted seven apple trees behind the school.",
                    caches + "/doc.kvz");
  serve::CacheStore store(*dir.model, caches, uint64_t(1) << 30);
  serve::EngineOptions eo = engine_options(1, 4, 64);
  eo.max_queue = 2;
  serve::RequestSpec long_one = request_for(*dir.model, store, "doc", "Who planted trees?", 100000);
  long_one.stop_tokens.clear();  // runs until cancelled: no slot frees during the burst
  for (int round = 0; round < 5; ++round) {
    serve::Engine engine(*dir.model, eo);
    std::vector<std::unique_ptr<Sink>> sinks;
    int accepted = 0;
    for (int i = 0; i < 6; ++i) {
      sinks.push_back(std::make_unique<Sink>());
      if (engine.submit(long_one, sinks.back()->callbacks())) ++accepted;
    }
    CHECK(accepted == 6);
    Sink extra;
    CHECK_FALSE(engine.submit(long_one, extra.callbacks()));  // all slots and the queue taken
    engine.shutdown(milliseconds(0));
  }
}

TEST_CASE("serve: a replaced or deleted cache counts until its last request ends",
          "[serve][abuse]") {
  TinyModelDir dir("serve_held", 21, 1024);
  const std::string caches = dir.path("caches");
  std::filesystem::create_directories(caches);
  compress_document(*dir.model, "Mira planted seven apple trees behind the school.",
                    caches + "/a.kvz");
  std::filesystem::copy_file(caches + "/a.kvz", caches + "/b.kvz");
  uint64_t one = 0;
  {
    serve::CacheStore probe(*dir.model, caches, uint64_t(1) << 30);
    one = probe.acquire("a")->bytes;
  }
  serve::CacheStore store(*dir.model, caches, one + one / 2);  // room for one cache
  auto held = store.acquire("a");
  store.remove("a");
  CHECK(store.loaded_bytes() == one);          // still in memory: still counted
  CHECK_THROWS_AS(store.acquire("b"), Error);  // would pass the budget
  held.reset();
  CHECK(store.loaded_bytes() == 0);
  auto b = store.acquire("b");
  std::ifstream in(caches + "/b.kvz", std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  store.put("b",
            std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()),
            true);
  CHECK(store.loaded_bytes() == one);  // the replaced copy, held by `b`
  b.reset();
  CHECK(store.loaded_bytes() == 0);
}

TEST_CASE("serve: a load that might pass --max-loaded-bytes is refused before it reads",
          "[serve][abuse]") {
  TinyModelDir dir("serve_bound", 22, 1024);
  const std::string caches = dir.path("caches");
  std::filesystem::create_directories(caches);
  const std::string doc =
      "Mira planted seven apple trees behind the school, and Tomas counted twelve ships.";
  compress_document(*dir.model, doc, caches + "/f.kvz");
  compress_document(*dir.model, doc, caches + "/q.kvz", format::DType::Q8);
  for (const std::string id : {"f", "q"}) {
    INFO(id);
    const uint64_t bound =
        loader::base_bytes_bound(format::CacheReader::open(caches + "/" + id + ".kvz"), 1);
    uint64_t one = 0;
    {
      serve::CacheStore probe(*dir.model, caches, uint64_t(1) << 30);
      one = probe.acquire(id)->bytes;
    }
    CHECK(bound >= one);            // a bound, so the budget holds
    CHECK(bound <= one + one / 4);  // and a tight one, so nothing that fits is refused
    serve::CacheStore tight(*dir.model, caches, bound - 1);  // the cache itself would fit
    CHECK_THROWS_WITH(tight.acquire(id), Catch::Contains("needs up to"));
    CHECK(tight.loaded_bytes() == 0);
    serve::CacheStore exact(*dir.model, caches, bound);
    CHECK(exact.acquire(id)->bytes == one);
  }
}

TEST_CASE("serve: a second server on a taken port fails to bind", "[serve][abuse]") {
  TinyModelDir dir("serve_port", 21, 256);
  std::filesystem::create_directories(dir.path("caches"));
  serve::ServerOptions so;
  so.caches_dir = dir.path("caches");
  so.port = 0;
  serve::Server first(*dir.model, so);
  so.port = first.bind();
  serve::Server second(*dir.model, so);
  try {
    second.bind();
    FAIL("the second server bound a port the first listens on");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::io);
    CHECK(std::string(e.what()).find("in use") != std::string::npos);
  }
}

TEST_CASE("serve: key with a NUL, pinned path without model, invalid id", "[serve][abuse]") {
  serve::ServerOptions so;
  so.api_key = "secret-key-1";
  ServedModel s("serve_small", so);
  const std::string auth = "Authorization: Bearer secret-key-1\r\n";
  const char nul_key[] = "Authorization: Bearer secret-key-1\0zz\r\n";  // the key, a NUL, more
  const int nul = status_of(
      http(s.port, request("GET", "/v1/models", {}, std::string(nul_key, sizeof nul_key - 1))));
  CHECK((nul == 400 || nul == 401));
  CHECK(status_of(http(s.port, request("GET", "/v1/models", {}, auth))) == 200);
  CHECK(status_of(http(
            s.port, request("POST", "/c/doc/v1/chat/completions", chat_body("", 2), auth))) == 200);
  CHECK(status_of(http(
            s.port, request("POST", "/v1/chat/completions", chat_body("../doc", 2), auth))) == 400);
  CHECK(status_of(http(
            s.port, request("POST", "/v1/chat/completions", chat_body("nope", 2), auth))) == 404);
  // Expect: 100-continue without the key: 401 before the body.
  const std::string r = http(
      s.port, "PUT /v1/caches/x HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 10\r\n\r\n");
  CHECK(status_of(r) == 401);
  CHECK(r.find("100 Continue") == std::string::npos);
}

TEST_CASE("serve: the access log names unparsable requests and times them", "[serve][abuse]") {
  // The log goes to stderr: this test sends it to a file for a moment.
  const std::string log_path =
      (std::filesystem::temp_directory_path() / "kvzip_abuse_access.log").string();
  std::fflush(stderr);
  const int saved = ::dup(2);
  const int fd = ::open(log_path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
  REQUIRE(fd >= 0);
  ::dup2(fd, 2);
  {
    ServedModel s("serve_log", {}, /*access_log=*/true);
    http(s.port, "garbage line\r\n\r\n");
    http(s.port, "FETCH /v1/odd HTTP/1.1\r\n\r\n");  // a method the parser does not know
    std::this_thread::sleep_for(milliseconds(200));
  }
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  ::close(fd);
  std::ifstream in(log_path);
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] == '{') lines.push_back(nlohmann::json::parse(line));
  std::filesystem::remove(log_path);
  REQUIRE(lines.size() >= 2);
  CHECK(lines[0]["path"] == "garbage line");
  CHECK(lines[1]["path"] == "/v1/odd");
  for (const auto& l : lines) {
    CHECK(l["status"] == 400);
    CHECK(l["ms"].get<double>() < 1000.0);
  }
}
