// The evaluation end to end on a tiny random-weight model: draft-verified greedy answers equal
// plain generate() whatever the draft (right, wrong, short, long, stopping early), and run_eval
// over a two-paragraph SQuAD file reports the full cache as agreeing with itself (100%, KL 0) and
// every method at ratio 1 as equal to it.
#include <catch2/catch.hpp>

#include <unistd.h>
#include <algorithm>
#include <filesystem>
#include <map>

#include "common/error.h"
#include "common/json.h"
#include "eval/answer.h"
#include "eval/eval.h"
#include "eval/metrics.h"
#include "eval/ruler.h"
#include "model/model.h"
#include "tests/support/tiny_model_dir.h"

using namespace kvzip;
using namespace kvzip::eval;
using Catch::Matchers::Contains;

namespace {

struct TinyModelFile : test::TinyModelDir {
  TinyModelFile() : TinyModelDir("eval", 23, /*max_context=*/1024, /*threads=*/1) {}
};

TinyModelFile& tiny() {
  static TinyModelFile f;
  return f;
}

model::ForwardOptions one_thread() {
  model::ForwardOptions o;
  o.threads = 1;
  return o;
}

GreedyAnswer plain(model::Forward& fwd, model::AttentionCache& cache,
                   const std::vector<int32_t>& prompt, const AnswerParams& ap) {
  model::GenerateParams gp;
  gp.max_tokens = ap.max_tokens;
  gp.stop_tokens = ap.stop_tokens;
  const uint32_t len = cache.logical_length();
  model::GenerateResult r = generate(fwd, cache, prompt, gp);
  cache.rollback(len);
  return GreedyAnswer{r.tokens, r.stopped, r.first_logits, 0, 0};
}

// What every draft test starts from: the tiny model, a dense cache holding a short document (as
// a compressed one would), the prompt of `question`, and the plain answer of max_tokens tokens.
struct Primed {
  const model::Model& m = *tiny().model;
  model::Forward fwd{m.weights(), one_thread()};
  model::KvCache cache{m.config()};
  std::vector<int32_t> prompt;
  AnswerParams ap;
  GreedyAnswer base;

  Primed(const std::string& question, uint32_t max_tokens) {
    fwd.prefill(cache, m.chat().encode_document("the cat sat on the mat; the dog ate."),
                model::LogitsMode::None);
    prompt = m.chat().suffix("\n\nQuestion: " + question);
    ap.max_tokens = max_tokens;
    base = plain(fwd, cache, prompt, ap);
  }
};

void check_same(const GreedyAnswer& got, const GreedyAnswer& want) {
  CHECK(got.tokens == want.tokens);
  CHECK(got.stopped == want.stopped);
  CHECK(got.first_logits == want.first_logits);
}

const char* kSquad = R"({"data": [{"title": "Pets", "paragraphs": [
  {"context": "The cat sat on the mat. The cat is black and old.",
   "qas": [{"question": "Where did the cat sit?", "id": "a", "answers": [{"text": "on the mat"}]},
           {"question": "What colour is the cat?", "id": "b", "answers": [{"text": "black"}]},
           {"question": "Who owns the cat?", "id": "c", "answers": [], "is_impossible": true}]},
  {"context": "A dog ate a bone in the garden at noon.",
   "qas": [{"question": "What did the dog eat?", "id": "d", "answers": [{"text": "a bone"}]},
           {"question": "When?", "id": "e", "answers": [{"text": "noon"}, {"text": "at noon"}]}]}]}]})";

// kSquad with one document per paragraph (two documents).
std::vector<Document> pets() {
  SquadOptions so;
  so.unit = DocumentUnit::Paragraph;
  return parse_squad(kSquad, "pets.json", so);
}

const EvalRow& row(const EvalReport& r, const std::string& method, double ratio) {
  for (const EvalRow& x : r.rows)
    if (x.method == method && x.ratio == ratio) return x;
  FAIL("no row " << method << " " << ratio);
  return r.rows.front();
}

}  // namespace

TEST_CASE("draft-verified answers equal plain greedy decoding whatever the drafts", "[eval]") {
  Primed t("what sat?", 10);
  model::Forward& fwd = t.fwd;
  model::KvCache& cache = t.cache;
  const std::vector<int32_t>& prompt = t.prompt;
  const AnswerParams& ap = t.ap;
  const GreedyAnswer& base = t.base;
  REQUIRE(base.tokens.size() == 10);
  // A stop set that ends the answer early (at the first token from the 4th on that did not occur
  // before), so the stopped paths are exercised.
  size_t cut = 3;
  while (cut < base.tokens.size() && std::find(base.tokens.begin(), base.tokens.begin() + cut,
                                               base.tokens[cut]) != base.tokens.begin() + cut)
    ++cut;
  REQUIRE(cut < base.tokens.size());
  AnswerParams stop_ap = ap;
  stop_ap.stop_tokens = {base.tokens[cut]};

  for (const AnswerParams& p : {ap, stop_ap}) {
    const GreedyAnswer want = plain(fwd, cache, prompt, p);
    const std::vector<int32_t>& w = want.tokens;
    std::vector<int32_t> longer = base.tokens;
    longer.insert(longer.end(), {12, 13, 14});
    const std::vector<std::vector<int32_t>> drafts = {
        w,                              // the answer itself
        {w.begin(), w.begin() + 3},     // a prefix
        {},                             // nothing
        {w[0], w[1], 7, 8, 9, 10, 11},  // right start, then wrong
        {5, 6, 7},                      // wrong from the first token
        longer,                         // longer (than the stopped answer)
    };
    for (size_t d = 0; d < drafts.size(); ++d) {
      INFO("draft " << d << ", stop set " << p.stop_tokens.size());
      DraftPool pool;
      pool.add(drafts[d]);
      const uint32_t len = cache.logical_length();
      check_same(answer_greedy(fwd, cache, prompt, p, &pool), want);
      CHECK(cache.logical_length() == len);  // back to the state before the call
    }
    // Several drafts: the newest one leaves the answer at its 3rd token, an older one takes over.
    DraftPool pool;
    pool.add(w);
    pool.add({w[0], w[1], w[2] == 7 ? 8 : 7, 9, 9, 9});
    const GreedyAnswer got = answer_greedy(fwd, cache, prompt, p, &pool);
    check_same(got, want);
    // With only 3 tokens (stopped) the older draft has nothing left to verify: one decode instead.
    CHECK(got.draft_passes == (w.size() > 3 ? 2u : 1u));
    CHECK(got.decode_steps == (w.size() > 3 ? 0u : 1u));
  }
  // Without drafts it is generate() itself.
  check_same(answer_greedy(fwd, cache, prompt, ap, nullptr), base);
  // A correct draft replaces the nine one-token passes: a batch of 8, then one decode for the
  // last token (a batch of one would cost more than the decode).
  DraftPool right;
  right.add(base.tokens);
  const GreedyAnswer verified = answer_greedy(fwd, cache, prompt, ap, &right);
  CHECK(verified.draft_passes == 1);
  CHECK(verified.decode_steps == 1);
}

TEST_CASE("the draft pool tries the newest matching draft and stores each answer once", "[eval]") {
  DraftPool pool;
  pool.add({1, 2, 3});
  pool.add({1, 2, 4, 5});
  pool.add({1, 2, 3});
  CHECK(pool.size() == 2);
  const std::vector<int32_t> p12 = {1, 2}, p123 = {1, 2, 3}, p9 = {9};
  REQUIRE(pool.find(p12, 1));
  CHECK(*pool.find(p12, 1) == std::vector<int32_t>{1, 2, 4, 5});
  CHECK(*pool.find(p12, 2) == std::vector<int32_t>{1, 2, 4, 5});
  CHECK(pool.find(p12, 3) == nullptr);
  CHECK(pool.find(p123, 1) == nullptr);  // {1,2,3} has nothing after the prefix
  CHECK(*pool.find(p123, 0) == std::vector<int32_t>{1, 2, 3});
  CHECK(pool.find(p9, 0) == nullptr);
}

TEST_CASE("draft verification respects a one-token answer limit", "[eval]") {
  Primed t("who?", 1);
  AnswerParams longer = t.ap;
  longer.max_tokens = 6;
  DraftPool pool;
  pool.add(plain(t.fwd, t.cache, t.prompt, longer).tokens);
  check_same(answer_greedy(t.fwd, t.cache, t.prompt, t.ap, &pool), t.base);
}

TEST_CASE("eval on a tiny model: the full cache agrees with itself and ratio 1 equals full",
          "[eval]") {
  const model::Model& m = *tiny().model;
  const std::vector<Document> docs = pets();
  REQUIRE(docs.size() == 2);
  EvalOptions o;
  o.methods = {"kvzip", "snapkv", "h2o", "streaming", "random"};
  o.ratios = {1.0, 0.5};
  o.max_answer_tokens = 6;
  o.system = "Be brief.";
  o.threads = 1;
  o.keep_answers = true;
  std::vector<std::string> log;
  o.log = [&](const std::string& line) { log.push_back(line); };
  const EvalReport r = run_eval(m, docs, o);

  CHECK(r.documents == 2);
  CHECK(r.questions == 4);  // the unanswerable question is left out
  REQUIRE(r.rows.size() == 1 + 5 * 2);
  const EvalRow& full = r.rows[0];
  CHECK(full.method == "full");
  CHECK(full.questions == 4);
  CHECK(full.agreement == 100.0);
  CHECK(full.answer_f1 == 100.0);
  CHECK(full.kl == 0.0);
  CHECK(full.achieved_ratio == 1.0);
  for (const std::string& method : o.methods) {
    INFO(method);
    const EvalRow& one = row(r, method, 1.0);
    CHECK(one.agreement == 100.0);
    CHECK(one.answer_f1 == 100.0);
    CHECK(one.kl == 0.0);
    CHECK(one.f1 == full.f1);
    CHECK(one.contains == full.contains);
    const EvalRow& half = row(r, method, 0.5);
    CHECK(half.achieved_ratio == Approx(0.5).margin(0.01));
    CHECK(half.questions == 4);
    CHECK(half.answer_f1 >= half.agreement);  // an identical answer has answer F1 1
  }
  CHECK(r.rows[1].method == "kvzip");
  CHECK(r.rows[1].ratio == 0.5);  // ratios sorted ascending
  CHECK_FALSE(log.empty());
  CHECK_THAT(format_table(r), Contains("full"));
  const std::string csv = format_csv(r);
  CHECK(csv.rfind(
            "method,ratio,achieved_ratio,contains,f1,kl,agreement,answer_f1,questions,compress_s,"
            "answer_s\n",
            0) == 0);
  CHECK(std::count(csv.begin(), csv.end(), '\n') == 1 + 11);

  // Every answer is listed: 4 questions × 11 rows, one JSON object per line.
  REQUIRE(r.answers.size() == 44);
  CHECK(r.answers[0].method == "full");
  CHECK(r.answers[0].agrees);
  CHECK(r.answers[0].document == "Pets #1");
  // Each answer's answer F1 is its token F1 against the full cache's answer to the same question,
  // and a row's answer F1 is their mean.
  std::map<std::string, std::string> reference;
  for (const AnswerRecord& a : r.answers)
    if (a.method == "full") reference[a.document + "/" + a.question_id] = a.answer;
  REQUIRE(reference.size() == 4);
  std::map<std::pair<std::string, double>, double> sums;
  for (const AnswerRecord& a : r.answers) {
    INFO(a.method << " " << a.ratio << " " << a.answer);
    CHECK(a.answer_f1 == answer_f1(a.answer, reference.at(a.document + "/" + a.question_id)));
    sums[{a.method, a.ratio}] += a.answer_f1;
  }
  for (const EvalRow& e : r.rows)
    CHECK(e.answer_f1 == Approx(100.0 * sums.at({e.method, e.ratio}) / 4));
  const std::string jsonl = format_answers_jsonl(r);
  size_t start = 0, lines = 0;
  for (size_t end; (end = jsonl.find('\n', start)) != std::string::npos; start = end + 1, ++lines) {
    const Json v = parse_json(jsonl.substr(start, end - start), "answers");
    const AnswerRecord& a = r.answers[lines];
    REQUIRE(v.contains("answer"));
    CHECK(v["answer"] == a.answer);
    CHECK(v["method"] == a.method);
    CHECK(v["agrees"] == a.agrees);
    CHECK(v["answer_f1"].get<double>() == a.answer_f1);
    CHECK(v["contains"] == a.contains);
    CHECK(v["id"] == a.question_id);
    CHECK(v["ratio"].get<double>() == a.ratio);
  }
  CHECK(lines == 44);

  // Decoding every token one at a time, and answering again from caches that keep every row,
  // gives the same evaluation; ratio 1 then really goes through eviction and answering.
  o.verify_drafts = false;
  o.reuse_identical = false;
  o.keep_answers = false;
  o.log = nullptr;
  const EvalReport exact = run_eval(m, docs, o);
  REQUIRE(exact.rows.size() == r.rows.size());
  for (const std::string& method : o.methods) {
    INFO(method);
    CHECK(row(exact, method, 1.0).agreement == 100.0);
    CHECK(row(exact, method, 1.0).kl == 0.0);
  }
  for (size_t i = 0; i < r.rows.size(); ++i) {
    INFO(r.rows[i].method << " " << r.rows[i].ratio);
    CHECK(exact.rows[i].agreement == r.rows[i].agreement);
    CHECK(exact.rows[i].f1 == r.rows[i].f1);
    CHECK(exact.rows[i].kl == Approx(r.rows[i].kl).margin(1e-12));
  }
}

TEST_CASE("eval options are checked before any model work", "[eval]") {
  EvalOptions o;
  o.methods = {"kvzip", "full", "kvzip", "h2o"};
  o.ratios = {0.5, 0.1, 0.5};
  const EvalOptions c = checked(o);
  CHECK(c.methods == std::vector<std::string>{"kvzip", "h2o"});
  CHECK(c.ratios == std::vector<double>{0.1, 0.5});
  o.methods = {"kvzip", "pyramid"};
  CHECK_THROWS_WITH(checked(o), Contains("known methods"));
  o.methods = {"kvzip"};
  o.ratios = {0.0};
  CHECK_THROWS_AS(checked(o), Error);
  o.ratios = {1.5};
  CHECK_THROWS_AS(checked(o), Error);
  o.ratios = {0.5};
  o.query_template = "no placeholder";
  CHECK_THROWS_WITH(checked(o), Contains("{question}"));
}

TEST_CASE("a document longer than the model's context is refused with both numbers", "[eval]") {
  const model::Model& m = *tiny().model;
  std::string text(3000, 'x');
  text.append(" end");
  Document d{"long", text, {{"q", "what?", {"x"}, false, ""}}};
  EvalOptions o;
  o.methods = {"streaming"};
  o.ratios = {0.5};
  o.threads = 1;
  CHECK_THROWS_WITH(run_eval(m, {d}, o), Contains("1024"));
}

TEST_CASE("eval runs head-level KVzip from given head scores and refuses it without them",
          "[eval]") {
  EvalOptions bad;
  bad.methods = {"kvzip-head"};
  CHECK_THROWS_MATCHES(checked(bad), Error, Catch::Predicate<Error>([](const Error& e) {
                         return e.code() == Errc::invalid_argument &&
                                std::string(e.what()).find("option head_scores") !=
                                    std::string::npos;
                       }));
  const model::Model& m = *tiny().model;
  const std::vector<Document> docs = pets();
  EvalOptions o;
  o.methods = {"kvzip-head"};
  o.ratios = {0.5, 1.0};
  o.head_scores = {0.9f, 0.1f, 0.2f, 0.8f};  // L = 2, Hkv = 2: ratio 0.5 keeps heads 0 and 3
  o.max_answer_tokens = 4;
  o.threads = 1;
  const EvalReport r = run_eval(m, docs, o);
  REQUIRE(r.rows.size() == 3);
  const EvalRow& one = row(r, "kvzip-head", 1.0);
  CHECK(one.agreement == 100.0);
  CHECK(one.kl == 0.0);
  CHECK(row(r, "kvzip-head", 0.5).achieved_ratio == 0.5);  // window 0: the head fraction
  o.head_window = 1000;  // longer than every document: every head keeps every row
  CHECK(row(run_eval(m, docs, o), "kvzip-head", 0.5).achieved_ratio == 1.0);
  o.head_scores = {0.9f, 0.1f};
  CHECK_THROWS_AS(run_eval(m, docs, o), Error);
}

TEST_CASE("eval --kv-dtypes: every cache again as a .kvz image of each dtype, compared with f32",
          "[eval]") {
  const model::Model& m = *tiny().model;
  const std::vector<Document> docs = pets();
  EvalOptions o;
  o.methods = {"kvzip"};
  o.ratios = {0.5, 1.0};
  o.kv_dtypes = {"q4", "f32", "f16", "q4"};  // f32 goes first, duplicates drop
  o.max_answer_tokens = 6;
  o.threads = 1;
  o.keep_answers = true;
  const EvalOptions c = checked(o);
  CHECK(c.kv_dtypes == std::vector<std::string>{"f32", "q4", "f16"});
  const EvalReport r = run_eval(m, docs, o);
  REQUIRE(r.rows.size() == 1 + 2 * 3);
  CHECK(r.with_kv_dtypes);
  for (double ratio : {0.5, 1.0}) {
    std::vector<const EvalRow*> rows;
    for (const EvalRow& x : r.rows)
      if (x.method == "kvzip" && x.ratio == ratio) rows.push_back(&x);
    REQUIRE(rows.size() == 3);
    CHECK(rows[0]->kv_dtype == "f32");
    CHECK(rows[0]->file_bytes == 0);  // the f32 rows are the in-memory cache, as before
    CHECK(rows[1]->kv_dtype == "q4");
    CHECK(rows[2]->kv_dtype == "f16");
    CHECK(rows[1]->questions == 4);
    CHECK(rows[1]->achieved_ratio == rows[0]->achieved_ratio);
    // Bytes: q4 (4-bit codes + 4 bytes of parameters per 16-value row and block; the prefix
    // rows f16, which in this tiny cache are most rows) not above f16 (sections pad to 4 KiB).
    CHECK(rows[2]->file_bytes > 0);
    CHECK(rows[1]->file_bytes <= rows[2]->file_bytes);
    CHECK(rows[1]->kl >= 0.0);
  }
  CHECK_THAT(format_table(r), Contains("file_bytes"));
  const std::string csv = format_csv(r);
  CHECK(csv.rfind(
            "method,ratio,achieved_ratio,contains,f1,kl,agreement,answer_f1,questions,compress_s,"
            "answer_s,kv_dtype,file_bytes,load_ms\n",
            0) == 0);
  CHECK_THAT(format_answers_jsonl(r), Contains("\"kv_dtype\":\"q4\""));
  o.kv_dtypes = {"q3"};
  CHECK_THROWS_WITH(checked(o), Contains("q3 is not one of"));
}

TEST_CASE("query-aware eval scores kvzip with the questions: other caches, same full cache",
          "[eval]") {
  const model::Model& m = *tiny().model;
  const std::vector<Document> docs = pets();
  EvalOptions o;
  o.methods = {"kvzip", "snapkv"};
  o.ratios = {0.3};
  o.max_answer_tokens = 4;
  o.threads = 1;
  o.keep_answers = true;
  const EvalReport agnostic = run_eval(m, docs, o);
  o.query_aware = true;
  const EvalReport aware = run_eval(m, docs, o);
  REQUIRE(agnostic.answers.size() == aware.answers.size());
  size_t kvzip_changed = 0;
  for (size_t i = 0; i < aware.answers.size(); ++i) {
    const AnswerRecord &a = agnostic.answers[i], &q = aware.answers[i];
    REQUIRE(a.method == q.method);
    if (a.method == "kvzip") {
      kvzip_changed += a.kl != q.kl || a.answer != q.answer ? 1 : 0;
    } else {  // the full cache and snapkv do not read the questions
      CHECK(a.answer == q.answer);
      CHECK(a.kl == q.kl);
    }
  }
  CHECK(kvzip_changed > 0);
}

TEST_CASE("ruler eval: one full cache per sample, methods without a ratio-1 row", "[eval]") {
  const model::Model& m = *tiny().model;
  RulerOptions ro;
  ro.tasks = {"niah_single_1"};
  ro.lengths = {900};
  ro.settings = {RulerSetting::QueryAgnostic, RulerSetting::QueryAware};
  ro.eval.methods = {"kvzip", "streaming"};
  ro.eval.ratios = {0.5, 1.0};
  ro.eval.max_answer_tokens = 3;
  ro.eval.threads = 1;
  ro.model_name = "tiny";
  const RulerReport r = run_ruler(m, ro);
  REQUIRE(r.rows.size() == 2 * 3);  // per setting: full, kvzip 0.5, streaming 0.5
  for (size_t s = 0; s < 2; ++s) {
    CHECK(r.rows[3 * s].method == "full");
    CHECK(r.rows[3 * s].ratio == 1.0);
    CHECK(r.rows[3 * s + 1].ratio == 0.5);
    CHECK(r.rows[3 * s + 2].ratio == 0.5);
  }
  CHECK(r.rows[0].setting == "agnostic");
  CHECK(r.rows[3].setting == "aware");
  const std::string csv = format_kvpress_csv(r);
  CHECK_THAT(csv, Contains("tiny,no_press,0.000,niah_single_1,"));
  CHECK_THAT(csv, Contains("tiny,kvzip,0.500,niah_single_1,"));
  CHECK(std::count(csv.begin(), csv.end(), '\n') == 1 + 6);
}
