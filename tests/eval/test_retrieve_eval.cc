// The retrieval evaluation (eval/retrieve_eval.h) on a tiny random-weight model and a constructed
// SQuAD file whose questions name words of one paragraph each, one of them another paragraph's:
// recall@K counts that miss, the oracle never misses, the joint prefill agrees with itself; full
// caches composed with every token recomputed answer as the joint prefill does, separately
// compressed ones without recompute do not quite; options are refused before any work; the
// temporary library folder is gone afterwards.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "common/error.h"
#include "eval/retrieve_eval.h"
#include "eval/squad.h"
#include "tests/support/real_model.h"
#include "tests/support/source_path.h"
#include "tests/support/thrown.h"
#include "tests/support/tiny_model_dir.h"

using namespace kvzip;
using namespace kvzip::eval;

namespace {

struct TinyRetrieveModel : test::TinyModelDir {
  TinyRetrieveModel() : TinyModelDir("retrieve_eval", 29, /*max_context=*/1024, /*threads=*/1) {}
};

const model::Model& tiny() {
  static TinyRetrieveModel f;
  return *f.model;
}

// Question "c" sits in the second paragraph but only the first holds its words.
const char* kSquad = R"({"data": [{"title": "T", "paragraphs": [
  {"context": "The lighthouse keeper counted seven ships at dawn.",
   "qas": [{"question": "What did the lighthouse keeper count?", "id": "a",
            "answers": [{"text": "seven ships"}]}]},
  {"context": "Mira planted apple trees beside the river.",
   "qas": [{"question": "What did Mira plant?", "id": "b", "answers": [{"text": "apple trees"}]},
           {"question": "Who counted ships at dawn?", "id": "c", "answers": [{"text": "keeper"}]}]},
  {"context": "The orchard pears were sour every autumn.",
   "qas": [{"question": "Which pears were sour?", "id": "d", "answers": [{"text": "orchard"}]}]}
]}]})";

std::vector<Document> paragraphs() {
  SquadOptions so;
  so.unit = DocumentUnit::Paragraph;
  return parse_squad(kSquad, "test", so);
}

RetrieveEvalOptions base_options() {
  RetrieveEvalOptions o;
  o.max_answer_tokens = 4;
  o.threads = 1;
  o.matmul = kernels::MatmulPath::Exact;
  return o;
}

const RetrieveEvalRow& row(const RetrieveEvalReport& r, const std::string& setting, double blend) {
  for (const RetrieveEvalRow& x : r.rows)
    if (x.setting == setting && (setting == "joint" || x.blend == blend)) return x;
  FAIL("no row " << setting << " " << blend);
  return r.rows[0];
}

size_t leftover_folders() {
  size_t n = 0;
  std::string mine = "kvzip-retrieve-";
  mine.append(std::to_string(::getpid())).append("-");
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::temp_directory_path()))
    n += e.path().filename().string().rfind(mine, 0) == 0;
  return n;
}

}  // namespace

TEST_CASE("retrieve eval: recall@1 counts the question its words mislead; the oracle never misses",
          "[eval]") {
  const std::vector<Document> docs = paragraphs();
  REQUIRE(docs.size() == 3);
  RetrieveEvalOptions o = base_options();
  o.k = 1;
  o.blends = {0.0};
  const RetrieveEvalReport r = run_retrieve_eval(tiny(), docs, o);
  CHECK(r.questions == 4);
  CHECK(r.documents == 3);
  REQUIRE(r.rows.size() == 3);
  CHECK(row(r, "retrieved", 0.0).recall == Approx(75.0));
  CHECK(row(r, "joint", 0.0).recall == Approx(75.0));
  CHECK(row(r, "oracle", 0.0).recall == 100.0);
  const RetrieveEvalRow& joint = row(r, "joint", 0.0);
  CHECK(joint.agreement == 100.0);
  CHECK(joint.kl == 0.0);
  CHECK(joint.prefill_ms > 0.0);
  CHECK(joint.search_ms == 0.0);
  // One cache retrieved is answered from its rows: no composition, no recompute.
  const RetrieveEvalRow& one = row(r, "retrieved", 0.0);
  CHECK(one.search_ms > 0.0);
  CHECK(one.recompute_ms == 0.0);
  CHECK(one.prefill_ms == 0.0);
  CHECK(one.ttft_ms == Approx(one.search_ms + one.compose_ms + one.answer_ms));
  CHECK(leftover_folders() == 0);
}

TEST_CASE("retrieve eval: full caches fully recomputed answer as the joint prefill", "[eval]") {
  RetrieveEvalOptions o = base_options();
  o.k = 2;
  o.ratio = 1.0;
  o.blends = {0.0, 1.0};
  o.max_questions = 3;
  const RetrieveEvalReport r = run_retrieve_eval(tiny(), paragraphs(), o);
  CHECK(r.questions == 3);
  CHECK(r.method == "full");
  REQUIRE(r.rows.size() == 5);
  const RetrieveEvalRow& whole = row(r, "retrieved", 1.0);
  CHECK(whole.agreement == 100.0);
  CHECK(whole.kl < 1e-3);
  CHECK(whole.recompute_ms > 0.0);
  CHECK(row(r, "retrieved", 0.0).kl > whole.kl);
  CHECK(row(r, "retrieved", 0.0).recompute_ms == 0.0);
  const std::string csv = format_retrieve_csv(r);
  CHECK(csv.rfind("setting,method,ratio,k,blend,recall,", 0) == 0);
  CHECK(std::count(csv.begin(), csv.end(), '\n') == 6);
  CHECK(format_retrieve_table(r).find("recall@2") != std::string::npos);
}

TEST_CASE("retrieve eval options are refused before any work", "[eval]") {
  const std::vector<Document> docs = paragraphs();
  RetrieveEvalOptions o = base_options();
  o.k = 0;
  Error e = test::error_from([&] { run_retrieve_eval(tiny(), docs, o); });
  CHECK(e.code() == Errc::invalid_argument);
  CHECK_THAT(e.what(), Catch::Matchers::Contains("at least 1"));
  o.k = 4;
  e = test::error_from([&] { run_retrieve_eval(tiny(), docs, o); });
  CHECK_THAT(e.what(),
             Catch::Matchers::Contains("has 3 paragraphs with questions; option retrieve 4"));
  o.k = 2;
  o.ratio = 0.0;
  CHECK_THROWS_AS(check_retrieve_options(o), Error);
  o.ratio = 0.5;
  o.blends = {1.5};
  CHECK_THROWS_AS(check_retrieve_options(o), Error);
  o.blends = {};
  o.method = "nope";
  CHECK_THROWS_AS(check_retrieve_options(o), Error);
  CHECK(leftover_folders() == 0);
}

TEST_CASE("retrieve eval on the Normans paragraphs: most questions find their paragraphs",
          "[eval][realmodel]") {
  KVZIP_REAL_MODEL_OR_SKIP(model);
  SquadOptions so;
  so.unit = DocumentUnit::Paragraph;
  std::vector<Document> docs = read_squad(test::source_path("examples/normans.json"), so);
  REQUIRE(docs.size() >= 4);
  docs.resize(4);  // a small library keeps the test short
  RetrieveEvalOptions o;
  o.k = 2;
  o.max_questions = 3;
  o.max_answer_tokens = 8;
  o.threads = 2;
  const RetrieveEvalReport r = run_retrieve_eval(*model, docs, o);
  CHECK(r.questions == 3);
  REQUIRE(r.rows.size() == 3);
  INFO(format_retrieve_table(r));
  const RetrieveEvalRow& joint = row(r, "joint", 0.0);
  const RetrieveEvalRow& found = row(r, "retrieved", library_default_blend(*model));
  CHECK(found.recall > 60.0);  // BM25 finds two of the three questions' paragraphs among 4
  CHECK(joint.agreement == 100.0);
  CHECK(joint.f1 > 0.0);
  CHECK(found.recompute_ms > 0.0);
  CHECK(found.kl > 0.0);
  CHECK(found.kl < 2.0);
  CHECK(row(r, "oracle", library_default_blend(*model)).recall == 100.0);
}
