// serve/ engine and cache store on a tiny random-weight GGUF model with real .kvz files:
//  - greedy answers equal QuerySession's (`kvzip query`) token for token, one request alone and
//    twelve requests over two caches batched together;
//  - scheduling: decoders keep advancing while another request's long question is prefilled in
//    pieces; every request completes; the queue is bounded; cancel and shutdown end requests;
//  - the LRU stays within its byte budget and never evicts a cache in use; ids cannot leave the
//    folder; uploads are verified in full before they land.
#include <catch2/catch.hpp>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>

#include "common/error.h"
#include "compress/pipeline.h"
#include "loader/loader.h"
#include "serve/cache_store.h"
#include "serve/engine.h"
#include "tests/serve/support.h"
#include "tests/support/tiny_model_dir.h"

using namespace kvzip;
using namespace kvzip::serve;

namespace {

const char* kDocs[] = {
    "The lighthouse keeper counted ships every night. In winter the harbor froze and the keeper "
    "read old letters from his sister, who lived in a city of bridges far to the south.",
    "Mira planted seven apple trees behind the school. The third tree never bloomed, so the "
    "children painted its branches blue every spring and called it the quiet tree.",
    "A short note about bees: they dance to tell each other where flowers are.",
};

struct Fixture : test::TinyModelDir {
  std::string caches;
  Fixture() : TinyModelDir("serve", 21, 1024) {
    caches = path("caches");
    std::filesystem::create_directories(caches);
    for (int i = 0; i < 3; ++i)
      test::compress_document(*model, kDocs[i], caches + "/doc" + std::to_string(i) + ".kvz");
  }

  std::vector<int32_t> want(const std::string& id, const std::string& q, uint32_t n) const {
    return test::query_answer(*model, caches + "/" + id + ".kvz", q, n);
  }

  RequestSpec spec(CacheStore& store, const std::string& id, const std::string& q,
                   uint32_t n) const {
    return test::request_for(*model, store, id, q, n);
  }
};

using test::Sink;

const char* kQuestions[] = {"Who counted ships?",
                            "How many apple trees were planted?",
                            "What color were the branches painted every spring by the children?",
                            "Where did the sister live?",
                            "What do bees do?",
                            "Which tree bloomed?"};

}  // namespace

TEST_CASE("engine answers equal kvzip query's, alone and batched", "[serve]") {
  Fixture f;
  CacheStore store(*f.model, f.caches, uint64_t(1) << 30);
  Engine engine(
      *f.model,
      test::engine_options(2, 4, 48));  // step 48: long questions go in pieces while others decode
  {
    Sink one;
    REQUIRE(engine.submit(f.spec(store, "doc0", kQuestions[0], 12), one.callbacks()));
    const RequestResult r = one.result.get();
    CHECK(one.tokens == f.want("doc0", kQuestions[0], 12));
    CHECK(r.completion_tokens == one.tokens.size());
    CHECK((r.finish == Finish::Length || r.finish == Finish::Stop));
  }
  {  // a question longer than a step: the engine reads it in pieces, QuerySession in 48-token
     // chunks, both on the matmul's 8-bit path, so the answers are the same tokens
    const std::string q =
        "Tell me, in the words the story uses and without adding anything of your own, "
        "what the keeper did every night, what happened to the harbor in winter, and "
        "whose old letters he read while he waited for the ships to come back?";
    const RequestSpec s = f.spec(store, "doc0", q, 12);
    REQUIRE(s.prompt.size() > 48);
    Sink one;
    REQUIRE(engine.submit(s, one.callbacks()));
    CHECK(one.result.get().finish != Finish::Error);
    CHECK(one.tokens == f.want("doc0", q, 12));
  }
  std::vector<std::unique_ptr<Sink>> sinks;
  std::vector<std::pair<std::string, std::string>> asked;
  for (int i = 0; i < 12; ++i) {
    const std::string id = i % 2 ? "doc1" : "doc0";
    const std::string q = kQuestions[i % 6];
    sinks.push_back(std::make_unique<Sink>());
    REQUIRE(engine.submit(f.spec(store, id, q, 10), sinks.back()->callbacks()));
    asked.emplace_back(id, q);
  }
  for (size_t i = 0; i < sinks.size(); ++i) {
    const RequestResult r = sinks[i]->result.get();
    CHECK(r.finish != Finish::Error);
    INFO("request " << i << " on " << asked[i].first << ": " << asked[i].second);
    CHECK(sinks[i]->tokens == f.want(asked[i].first, asked[i].second, 10));
  }
  CHECK(engine.steps() > 0);
  CHECK(store.loaded_count() == 2);
}

TEST_CASE("decoders advance while a long question is prefilled in pieces", "[serve]") {
  Fixture f;
  CacheStore store(*f.model, f.caches, uint64_t(1) << 30);
  Engine engine(*f.model, test::engine_options(1, 2, 6));
  std::mutex mu;
  std::vector<char> order;  // 'a' for each token of A, 'b' for B's
  std::promise<void> a_started;
  bool a_signalled = false;
  std::promise<RequestResult> a_done, b_done;
  RequestSpec a = f.spec(store, "doc0", "Hi?", 400);
  a.stop_tokens.clear();  // A decodes all 400 tokens, well past B's whole answer
  REQUIRE(engine.submit(a, {[&](int32_t) {
                              std::lock_guard<std::mutex> lock(mu);
                              order.push_back('a');
                              if (!a_signalled) a_signalled = true, a_started.set_value();
                              return true;
                            },
                            [&](const RequestResult& r) { a_done.set_value(r); }}));
  a_started.get_future().wait();
  RequestSpec b = f.spec(store, "doc1", kQuestions[2], 3);  // ~20+ tokens: several pieces of 5
  const size_t b_prompt = b.prompt.size();
  REQUIRE(b_prompt > 10);
  REQUIRE(engine.submit(b, {[&](int32_t) {
                              std::lock_guard<std::mutex> lock(mu);
                              order.push_back('b');
                              return true;
                            },
                            [&](const RequestResult& r) { b_done.set_value(r); }}));
  const RequestResult rb = b_done.get_future().get();
  const RequestResult ra = a_done.get_future().get();
  CHECK(ra.finish == Finish::Length);
  CHECK(ra.completion_tokens == 400);
  CHECK(rb.finish != Finish::Error);
  // From B's admission to its first token B's question took >= ceil(len / 5) steps, in each of
  // which A decoded one token: A's tokens interleave before B's first.
  std::lock_guard<std::mutex> lock(mu);
  const auto first_b = std::find(order.begin(), order.end(), 'b');
  REQUIRE(first_b != order.end());
  CHECK(std::count(order.begin(), first_b, 'a') >= long((b_prompt + 4) / 5));
  CHECK(std::count(first_b, order.end(), 'a') > 0);  // and A keeps going after
}

TEST_CASE("the queue is bounded; cancel and shutdown end requests", "[serve]") {
  Fixture f;
  CacheStore store(*f.model, f.caches, uint64_t(1) << 30);
  EngineOptions eo = test::engine_options(1, 1, 64);
  eo.max_queue = 1;
  auto engine = std::make_unique<Engine>(*f.model, eo);
  Sink s1, s2, s3;
  RequestSpec long_one = f.spec(store, "doc0", "Hi?", 100000);
  long_one.stop_tokens.clear();
  auto r1 = engine->submit(long_one, s1.callbacks());
  REQUIRE(r1);
  while (engine->active() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto r2 = engine->submit(long_one, s2.callbacks());
  REQUIRE(r2);
  CHECK_FALSE(engine->submit(long_one, s3.callbacks()));  // one active, one queued: full
  Engine::cancel(r1);
  CHECK(s1.result.get().finish == Finish::Cancelled);
  // r2 is admitted and runs (the model's context ends it, else shutdown's deadline).
  engine->shutdown(std::chrono::milliseconds(50));
  const RequestResult r = s2.result.get();
  CHECK((r.finish == Finish::Cancelled || r.finish == Finish::Length));
  CHECK_FALSE(engine->submit(long_one, s3.callbacks()));
  RequestSpec empty = long_one;
  empty.prompt.clear();
  Engine e2(*f.model, eo);
  CHECK_THROWS_AS(e2.submit(empty, s3.callbacks()), Error);
  RequestSpec hot = long_one;
  hot.sampling.top_p = 0.0f;
  CHECK_THROWS_AS(e2.submit(hot, s3.callbacks()), Error);
}

TEST_CASE("the cache LRU stays within its bytes and never evicts a cache in use", "[serve]") {
  Fixture f;
  uint64_t bytes[3];
  {
    CacheStore all(*f.model, f.caches, uint64_t(1) << 30);
    for (int i = 0; i < 3; ++i) bytes[i] = all.acquire("doc" + std::to_string(i))->bytes;
    CHECK(all.loaded_bytes() == bytes[0] + bytes[1] + bytes[2]);
  }
  // Loads reserve their bound (loader::base_bytes_bound) before they read: room for two bounds.
  uint64_t bound[3];
  for (int i = 0; i < 3; ++i) {
    bound[i] = loader::base_bytes_bound(
        format::CacheReader::open(f.caches + "/doc" + std::to_string(i) + ".kvz"), 1);
    CHECK(bound[i] >= bytes[i]);
  }
  const uint64_t budget = std::max({bound[0] + bound[1], bound[1] + bound[2], bound[0] + bound[2]});
  CacheStore store(*f.model, f.caches, budget);
  {
    auto a = store.acquire("doc0");
    auto b = store.acquire("doc1");
  }
  store.acquire("doc0");  // doc0 is now the most recent: doc1 goes for doc2
  auto c = store.acquire("doc2");
  CHECK(store.loaded_count() == 2);
  CHECK(store.loaded_bytes() <= budget);
  for (const CacheInfo& ci : store.list()) CHECK(ci.loaded == (ci.id != "doc1"));
  auto a = store.acquire("doc0");
  // Both loaded caches are held: loading doc1 cannot evict either.
  CHECK_THROWS_MATCHES(store.acquire("doc1"), Error,
                       Catch::Matchers::Predicate<Error>(
                           [](const Error& e) { return e.code() == Errc::out_of_memory; }));
  a.reset();
  CHECK(store.acquire("doc1")->id == "doc1");  // doc0 was free again
  CHECK(store.loaded_bytes() <= budget);
}

TEST_CASE("cache ids cannot leave the folder; uploads are verified before they land", "[serve]") {
  Fixture f;
  CacheStore store(*f.model, f.caches, uint64_t(1) << 30);
  for (const char* bad : {"", "../doc0", "a/b", ".hidden", "x y", "doc0\n", "caf\xc3\xa9"}) {
    INFO(bad);
    CHECK_FALSE(CacheStore::valid_id(bad));
    CHECK_THROWS_AS(store.acquire(bad), Error);
  }
  CHECK(CacheStore::valid_id("A-z_0.9"));
  CHECK_THROWS_MATCHES(store.acquire("nope"), Error,
                       Catch::Matchers::Predicate<Error>(
                           [](const Error& e) { return e.code() == Errc::not_found; }));
  std::ifstream in(f.caches + "/doc2.kvz", std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), {});
  // A flipped byte deep in the K/V sections: the full verification catches it, nothing lands.
  std::vector<uint8_t> bad = bytes;
  bad[bad.size() - 40] ^= 0x5a;
  CHECK_THROWS_AS(store.put("copy", bad, false), Error);
  std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + bytes.size() / 2);
  CHECK_THROWS_AS(store.put("copy", cut, false), Error);
  CHECK_FALSE(std::filesystem::exists(f.caches + "/copy.kvz"));
  store.put("copy", bytes, false);
  CHECK(store.acquire("copy")->header.document_tokens.size() > 0);
  CHECK_THROWS_AS(store.put("copy", bytes, false), Error);  // exists, no replace
  store.put("copy", bytes, true);
  // Another model's cache is refused with both fingerprints.
  test::TinyModelDir other("serve-other", 99, 1024);
  CacheStore foreign(*other.model, f.caches, uint64_t(1) << 30);
  try {
    foreign.put("alien", bytes, false);
    FAIL("expected model_mismatch");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::model_mismatch);
  }
  store.remove("copy");
  CHECK_FALSE(std::filesystem::exists(f.caches + "/copy.kvz"));
  CHECK_THROWS_AS(store.remove("copy"), Error);
  for (const auto& de : std::filesystem::directory_iterator(f.caches))
    CHECK(de.path().filename().string().find(".tmp.") == std::string::npos);
}

TEST_CASE("servers sharing one folder see each other's replacements and removals", "[serve]") {
  Fixture f;
  // Two replicas over the same folder (docs/scale-out.md): each keeps its own loaded copies.
  CacheStore a(*f.model, f.caches, uint64_t(1) << 30);
  CacheStore b(*f.model, f.caches, uint64_t(1) << 30);
  const auto old0 = a.acquire("doc0");
  const auto doc1 = a.acquire("doc1");
  CHECK(a.acquire("doc0") == old0);  // unchanged file: the loaded copy is reused
  std::ifstream in(f.caches + "/doc2.kvz", std::ios::binary);
  const std::vector<uint8_t> bytes2((std::istreambuf_iterator<char>(in)), {});
  b.put("doc0", bytes2, /*replace=*/true);  // b replaces doc0 with doc2's content
  const auto new0 = a.acquire("doc0");
  CHECK(new0 != old0);
  CHECK(new0->header.document_tokens == b.acquire("doc2")->header.document_tokens);
  CHECK(new0->header.document_tokens != old0->header.document_tokens);
  CHECK(old0->cache.bytes_kept() > 0);  // a request still holding the old copy keeps it intact
  b.remove("doc1");
  CHECK_THROWS_MATCHES(a.acquire("doc1"), Error,
                       Catch::Matchers::Predicate<Error>(
                           [](const Error& e) { return e.code() == Errc::not_found; }));
  CHECK(a.loaded_count() == 1);  // doc1's stale copy is gone from a's LRU too
  CHECK(doc1->id == "doc1");
}

TEST_CASE("a conversation's later turns follow its first question through the chat template",
          "[serve]") {
  Fixture f;
  CacheStore store(*f.model, f.caches, uint64_t(1) << 30);
  const auto c = store.acquire("doc0");
  const std::vector<std::pair<std::string, std::string>> history{
      {"Who counted ships?", "The keeper."}, {"When?", "Every night."}};
  const std::vector<int32_t> ids =
      loader::conversation_tokens(*f.model, c->header, history, "Why?");
  std::vector<int32_t> want =
      loader::question_tokens(f.model->tokenizer(), c->header, "Who counted ships?");
  for (const auto& t : {f.model->chat().next_turn("The keeper.", "When?"),
                        f.model->chat().next_turn("Every night.", "Why?")})
    want.insert(want.end(), t.begin(), t.end());
  CHECK(ids == want);
  CHECK(loader::conversation_tokens(*f.model, c->header, {}, "Why?") ==
        loader::question_tokens(f.model->tokenizer(), c->header, "Why?"));
}
