// RULER task generation (eval/ruler.h) on a fixed seed with a word counter standing in for the
// tokenizer: every task's question and answer prefix are RULER's template wording, its document
// starts with the template's instruction and holds the needles / chains / words its outputs name,
// the sample fits its length, and the same (seed, task, length, index) gives the same sample. The
// scorer: RULER's string_match_all / string_match_part (100 for the gold answers, 0 for empty).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "common/error.h"
#include "eval/ruler.h"
#include "tests/support/source_path.h"

using namespace kvzip;
using namespace kvzip::eval;

namespace {

size_t words(std::string_view s) {
  size_t n = 0;
  bool in = false;
  for (char c : s) {
    const bool sp = c == ' ' || c == '\n' || c == '\t';
    if (!sp && !in) ++n;
    in = !sp;
  }
  return n;
}

RulerSample gen(const char* task, uint32_t length = 600, uint32_t index = 0,
                const RulerGenOptions& o = {}) {
  return make_ruler_sample(task, length, index, o, words);
}

}  // namespace

namespace {

struct Golden {
  const char* task;
  const char* head;  // the document's first line(s): the template's instruction
  const char* question;
  const char* prefix;
  std::vector<std::string> outputs;
};

const char* kOne =
    "A special magic number is hidden within the following text. Make sure to memorize it. I will "
    "quiz you about the number afterwards.\n";
const char* kOneUuid =
    "A special magic uuid is hidden within the following text. Make sure to memorize it. I will "
    "quiz you about the uuid afterwards.\n";
const char* kMany =
    "Some special magic numbers are hidden within the following text. Make sure to memorize it. I "
    "will quiz you about the numbers afterwards.\n";

// Seed 42, sample 0, 1200 "tokens" (words), the built-in noise haystack.
const std::vector<Golden>& goldens() {
  static const std::vector<Golden> g = {
      {"niah_single_1",
       kOne,
       "\nWhat is the special magic number for fancy-forest mentioned in the provided text?",
       " The special magic number for fancy-forest mentioned in the provided text is",
       {"9104045"}},
      {"niah_single_2",
       kOne,
       "\nWhat is the special magic number for early-parrot mentioned in the provided text?",
       " The special magic number for early-parrot mentioned in the provided text is",
       {"9098604"}},
      {"niah_single_3",
       kOneUuid,
       "\nWhat is the special magic uuid for pale-eagle mentioned in the provided text?",
       " The special magic uuid for pale-eagle mentioned in the provided text is",
       {"4f5ebdb4-8bb8-4d0f-9903-5872046ec914"}},
      {"niah_multikey_1",
       kOne,
       "\nWhat is the special magic number for tame-clock mentioned in the provided text?",
       " The special magic number for tame-clock mentioned in the provided text is",
       {"7582644"}},
      {"niah_multikey_2",
       kOne,
       "\nWhat is the special magic number for rough-cloud mentioned in the provided text?",
       " The special magic number for rough-cloud mentioned in the provided text is",
       {"1389071"}},
      {"niah_multikey_3",
       kOneUuid,
       "\nWhat is the special magic uuid for 1c4c33a9-4305-44c8-b193-5c24f4c7eb85 mentioned in the "
       "provided text?",
       " The special magic uuid for 1c4c33a9-4305-44c8-b193-5c24f4c7eb85 mentioned in the provided "
       "text is",
       {"c6567fe6-bdf3-4786-b23d-62b1bf2864fd"}},
      {"niah_multivalue",
       kMany,
       "\nWhat are all the special magic numbers for solid-mirror mentioned in the provided text?",
       " The special magic numbers for solid-mirror mentioned in the provided text are",
       {"4730408", "4604417", "6334880", "2736410"}},
      {"niah_multiquery",
       kMany,
       "\nWhat are all the special magic numbers for sour-mirror, humble-valley, fancy-valley, and "
       "flat-bicycle "
       "mentioned in the provided text?",
       " The special magic numbers for sour-mirror, humble-valley, fancy-valley, and flat-bicycle "
       "mentioned in the "
       "provided text are",
       {"7327448", "4564468", "9827513", "8798322"}},
      {"vt",
       "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n",
       "\nQuestion: Find all variables that are assigned the value 93785 in the text above.",
       " Answer: According to the chain(s) of variable assignment in the text above, 5 variables "
       "are assigned the "
       "value 93785, they are: ",
       {"QDJYG", "NMFEZ", "YVKEA", "FMGLX", "HVKKW"}},
      {"cwe",
       "Below is a numbered list of words. In these words, some appear more often than others. "
       "Memorize "
       "the ones that appear most often.\n",
       "\nQuestion: What are the 10 most common words in the above list?",
       " Answer: The top 10 words that appear most often in the list are:",
       {"tonil", "lilin", "gazel", "vader", "puvet", "zuson", "tafur", "vupol", "padur", "dibat"}},
      {"fwe",
       "Read the following coded text and track the frequency of each coded word. Find the three "
       "most "
       "frequently appeared coded words. ",
       "\nQuestion: Do not provide any explanation. Please ignore the dots '....'. What are the "
       "three most "
       "frequently appeared words in the above coded text?",
       " Answer: According to the coded text above, the three most frequently appeared words are:",
       {"jbqoqn", "nqfuia", "llpycu"}},
  };
  return g;
}

size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

// The key(s) a NIAH question asks about: between "for " and " mentioned".
std::vector<std::string> asked_keys(const std::string& q) {
  std::string k = q.substr(q.find(" for ") + 5);
  k = k.substr(0, k.find(" mentioned"));
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t end = k.find(", ", start);
    std::string item = k.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (item.rfind("and ", 0) == 0) item = item.substr(4);
    out.push_back(item);
    if (end == std::string::npos) break;
    start = end + 2;
  }
  return out;
}

}  // namespace

TEST_CASE("ruler: every synthetic task's sample is RULER's template on a fixed seed", "[eval]") {
  for (const Golden& g : goldens()) {
    INFO(g.task);
    const RulerTask& task = ruler_task(g.task);
    const RulerSample s = gen(g.task, 1200);
    CHECK(s.task == g.task);
    CHECK(s.question == g.question);
    CHECK(s.answer_prefix == g.prefix);
    CHECK(s.outputs == g.outputs);
    CHECK(s.document.rfind(g.head, 0) == 0);
    // Fits: the document, the question twice (both settings), the prefix and the answer budget.
    const size_t used = words(s.document) + 2 * words(s.question) + words(s.answer_prefix) +
                        task.tokens_to_generate;
    CHECK(used <= 1200);
    CHECK(used > 1000);  // and the haystack fills it
    const std::string name = g.task;
    if (name.rfind("niah", 0) == 0) {
      const std::vector<std::string> keys = asked_keys(s.question);
      const std::string v =
          name == "niah_single_3" || name == "niah_multikey_3" ? "uuids" : "numbers";
      for (size_t i = 0; i < s.outputs.size(); ++i) {
        const std::string& key = keys[name == "niah_multiquery" ? i : 0];
        CHECK(occurrences(s.document, "One of the special magic " + v + " for " + key +
                                          " is: " + s.outputs[i] + ".") == 1);
      }
      if (name == "niah_single_1")
        CHECK(occurrences(s.document, "The grass is green. The sky is blue.") > 10);
      if (name == "niah_multikey_2")
        CHECK(occurrences(s.document, "One of the special magic numbers for ") > 50);
      if (name == "niah_multikey_1")
        CHECK(occurrences(s.document, "One of the special magic numbers for ") == 4);
    } else if (name == "vt") {
      CHECK(occurrences(s.document, "VAR " + s.outputs[0] + " = 93785\n") == 1);
      for (size_t i = 1; i < s.outputs.size(); ++i)
        CHECK(occurrences(s.document, "VAR " + s.outputs[i] + " = VAR " + s.outputs[i - 1] +
                                          " \n") == 1);  // RULER keeps the space
      // The one-shot example comes first, answered.
      CHECK(s.document.find("Memorize and track") == 0);
      CHECK(occurrences(s.document, "Memorize and track the chain(s)") == 2);
      CHECK(occurrences(s.document, "5 variables are assigned the value") == 1);
    } else if (name == "cwe") {
      // Below 4096 tokens: the common words 6 times each in the list, the others once (after
      // the one-shot example).
      const std::string list = s.document.substr(s.document.rfind("Below is a numbered list"));
      for (const std::string& w : s.outputs)
        CHECK(occurrences(list, ". " + w + " ") + occurrences(list, ". " + w + "\n") >= 5);
      CHECK(occurrences(list, ". ") > 300);
    } else if (name == "fwe") {
      std::map<std::string, size_t> freq;
      std::string w;
      for (char c : s.document.substr(std::string(g.head).size()) + " ") {
        if (c == ' ') {
          if (!w.empty()) ++freq[w];
          w.clear();
        } else {
          w += c;
        }
      }
      std::vector<std::pair<size_t, std::string>> by;
      for (auto& [word, n] : freq)
        if (word != "...") by.push_back({n, word});
      std::sort(by.rbegin(), by.rend());
      REQUIRE(by.size() > 3);
      CHECK(by[0].second == s.outputs[0]);
      CHECK(by[1].second == s.outputs[1]);
      CHECK(by[2].second == s.outputs[2]);
      CHECK(freq["..."] > by[0].first);  // the most frequent word is the "..." noise
    }
  }
}

TEST_CASE("ruler: samples are reproducible and differ by index, length and seed", "[eval]") {
  for (const char* t : {"niah_multikey_2", "vt", "fwe"}) {
    INFO(t);
    const RulerSample a = gen(t, 1500, 3), b = gen(t, 1500, 3);
    CHECK(a.document == b.document);
    CHECK(a.outputs == b.outputs);
    CHECK(gen(t, 1500, 4).outputs != a.outputs);
    CHECK(gen(t, 1600, 3).outputs != a.outputs);
    RulerGenOptions o;
    o.seed = 7;
    CHECK(gen(t, 1500, 3, o).outputs != a.outputs);
  }
}

TEST_CASE("ruler: an essay haystack places needles between its sentences", "[eval]") {
  RulerGenOptions o;
  o.haystack = "Alpha beta gamma. Delta epsilon zeta eta! Theta iota kappa? Lambda mu nu.";
  const RulerSample s = gen("niah_multivalue", 1200, 0, o);
  CHECK(s.document.find("The grass is green") == std::string::npos);
  CHECK(occurrences(s.document, "Alpha beta gamma.") > 20);
  for (const std::string& v : s.outputs) {
    const size_t at = s.document.find(" for solid-mirror is: " + v + ".");
    REQUIRE(at != std::string::npos);
    const size_t start = s.document.rfind("One of", at);
    // After a sentence end (or the instruction's newline), followed by the next sentence or the
    // end.
    const char before = s.document[start - 2];
    CHECK((before == '.' || before == '!' || before == '?' || s.document[start - 1] == '\n'));
  }
  // Without an essay the essay tasks fall back on the noise haystack.
  CHECK(gen("niah_multivalue", 1200).document.find("The grass is green") != std::string::npos);
}

TEST_CASE("ruler: QA samples hold the gold paragraph among distractors", "[eval]") {
  QaSource src;
  for (int i = 0; i < 30; ++i)
    src.paragraphs.push_back("Paragraph " + std::to_string(i) + " talks about topic " +
                             std::to_string(i) + " at some length here.");
  src.paragraphs[17] = "Paris is the capital of France.";
  src.items.push_back({"What is the capital of France?", {"Paris"}, {17}, {3, 4}});
  RulerGenOptions o;
  o.squad = &src;
  const RulerSample s = gen("qa_1", 150, 0, o);
  const std::string instr =
      "Answer the question based on the given documents. Only give me the answer and do not "
      "output any other words.";
  CHECK(s.document.rfind(instr + "\n\nThe following are given documents.\n\nDocument 1:\n", 0) ==
        0);
  CHECK(s.question == "\n\n" + instr + "\n\nQuestion: What is the capital of France?");
  CHECK(s.answer_prefix == " Answer:");
  CHECK(s.outputs == std::vector<std::string>{"Paris"});
  CHECK(occurrences(s.document, "Paris is the capital of France.") == 1);
  CHECK(occurrences(s.document, "Paragraph 3 talks") ==
        1);  // the article's other paragraphs come next
  CHECK(occurrences(s.document, "Document ") >= 3);
  CHECK(words(s.document) + 2 * words(s.question) + words(s.answer_prefix) + 32 <= 150);
  CHECK_THROWS_WITH(gen("qa_2", 150, 0, o), Catch::Matchers::Contains("option hotpotqa"));
  CHECK_THROWS_WITH(gen("niah_single_1", 100),
                    Catch::Matchers::Contains("does not fit 100 tokens"));
  CHECK_THROWS_WITH(gen("fwe", 40), Catch::Matchers::Contains("does not fit 40 tokens"));
}

TEST_CASE("ruler: HotpotQA files are read as RULER reads them", "[eval]") {
  const auto path = std::filesystem::temp_directory_path() / "kvzip_test_hotpot.json";
  {
    std::ofstream f(path);
    f << R"([{"question":"Q1?","answer":"A1","context":[["T1",["S1. ","S2."]],["T2",["S3."]]]},
             {"question":"Q2?","answer":"A2","context":[["T2",["S3."]]]}])";
  }
  const QaSource src = read_hotpotqa(path.string());
  CHECK(src.paragraphs == std::vector<std::string>{"T1\nS1. S2.", "T2\nS3."});
  REQUIRE(src.items.size() == 2);
  CHECK(src.items[0].gold == std::vector<uint32_t>{0, 1});
  CHECK(src.items[1].gold == std::vector<uint32_t>{1});
  CHECK(src.items[1].answers == std::vector<std::string>{"A2"});
  {
    std::ofstream f(path);
    f << R"([{"question":"Q1?","answer":"A1","context":[["T1","not a list"]]}])";
  }
  CHECK_THROWS_WITH(read_hotpotqa(path.string()), Catch::Matchers::Contains("[0].context[0]"));
  std::filesystem::remove(path);
}

TEST_CASE("ruler: the scorer gives 100 to the gold answers and 0 to empty ones", "[eval]") {
  for (const Golden& g : goldens()) {
    const RulerTask& t = ruler_task(g.task);
    std::string all;
    for (const std::string& o : g.outputs) all += " " + o + ",";
    CHECK(ruler_score(t, all, g.outputs) == 1.0);
    CHECK(ruler_score(t, "", g.outputs) == 0.0);
  }
  const RulerTask& all = ruler_task("niah_multivalue");
  CHECK(ruler_score(all, "1234567 and 7654321", {"1234567", "7654321", "1111111", "2222222"}) ==
        0.5);
  CHECK(ruler_score(ruler_task("vt"), "qdjyg NMFEZ", {"QDJYG", "NMFEZ"}) ==
        1.0);  // case-insensitive
  const RulerTask& part = ruler_task("qa_1");
  CHECK(ruler_score(part, "It is Paris.", {"Paris", "the city of Paris"}) == 1.0);
  CHECK(ruler_score(part, "London", {"Paris", "the city of Paris"}) == 0.0);
  CHECK(ruler_score(part, "", {"Paris"}) == 0.0);
}

TEST_CASE("ruler: task lists", "[eval]") {
  CHECK(parse_ruler_tasks("all").size() == 13);
  CHECK(parse_ruler_tasks("niah").size() == 8);
  CHECK(parse_ruler_tasks("synthetic").size() == 11);
  CHECK(parse_ruler_tasks("vt,niah_single_1,vt") ==
        std::vector<std::string>{"niah_single_1", "vt"});
  CHECK_THROWS_WITH(parse_ruler_tasks("niah_single_9"),
                    Catch::Matchers::Contains("unknown task 'niah_single_9'"));
  CHECK_THROWS_AS(parse_ruler_tasks(","), Error);
}

TEST_CASE("ruler: the kvpress CSV lists compression as the fraction removed", "[eval]") {
  RulerReport r;
  r.model_name = "m";
  r.rows.push_back({"agnostic", "vt", "full", 4096, 1.0, 1.0, 100.0, 2});
  r.rows.push_back({"aware", "vt", "kvzip", 4096, 0.3, 0.3, 50.0, 2, 35.36});
  r.rows.push_back({"agnostic", "vt", "snapkv", 4096, 0.125, 0.125, 20.0, 5, 8.94});
  CHECK(format_kvpress_csv(r) ==
        "model,method,compression_ratio,task,score,setting,context_length,score_se,samples\n"
        "m,no_press,0.000,vt,100.00,agnostic,4096,0.00,2\n"
        "m,kvzip,0.700,vt,50.00,aware,4096,35.36,2\n"
        "m,snapkv,0.875,vt,20.00,agnostic,4096,8.94,5\n");
  CHECK(format_ruler_csv(r) ==
        "setting,length,task,method,ratio,achieved_ratio,score,samples,score_se\n"
        "agnostic,4096,vt,full,1.0000,1.0000,100.00,2,0.00\n"
        "aware,4096,vt,kvzip,0.3000,0.3000,50.00,2,35.36\n"
        "agnostic,4096,vt,snapkv,0.1250,0.1250,20.00,5,8.94\n");
  const std::string table = format_ruler_table(r);
  CHECK_THAT(table, Catch::Matchers::Contains(
                        "aware      4096  kvzip       0.30  0.300            50.0    50.0"));
  CHECK_THAT(table, Catch::Matchers::EndsWith("string-match recall (0-100) per task\n"));
}

TEST_CASE("ruler: a cell's mean and its standard error over the samples", "[eval]") {
  const auto near = [](double v) { return Catch::Detail::Approx(v); };
  // Recall per sample, 0-100: two of five samples right.
  const std::vector<double> two_of_five = {100, 0, 100, 0, 0};
  const MeanError m = mean_standard_error(two_of_five);
  CHECK(m.mean == near(40.0));
  // Sample variance (n - 1): (2 * 60^2 + 3 * 40^2) / 4 = 3000; se = sqrt(3000 / 5) = 24.49.
  CHECK(m.se == near(std::sqrt(600.0)));
  const std::vector<double> same = {50, 50, 50};
  CHECK(mean_standard_error(same).mean == near(50.0));
  CHECK(mean_standard_error(same).se == 0.0);
  const std::vector<double> pair = {0, 100};
  CHECK(mean_standard_error(pair).se == near(50.0));  // sd 70.71 over sqrt(2)
  const std::vector<double> one = {75};
  CHECK(mean_standard_error(one).mean == near(75.0));
  CHECK(mean_standard_error(one).se == 0.0);
  CHECK(mean_standard_error({}).mean == 0.0);
  CHECK(mean_standard_error({}).se == 0.0);
}

TEST_CASE(
    "ruler: the bundled HotpotQA-layout example gives qa_2 samples with both bridge paragraphs",
    "[eval]") {
  const QaSource src = read_hotpotqa(kvzip::test::source_path("examples/bridges.json"));
  REQUIRE(src.items.size() == 10);
  CHECK(src.paragraphs.size() == 30);
  for (const QaSource::Item& it : src.items) {
    CHECK(it.gold.size() == 3);
    REQUIRE(it.answers.size() == 1);
    // The answer is written in the question's second (bridge) paragraph, not in the first.
    CHECK(src.paragraphs[it.gold[1]].find(it.answers[0]) != std::string::npos);
    CHECK(src.paragraphs[it.gold[0]].find(it.answers[0]) == std::string::npos);
  }
  RulerGenOptions o;
  o.hotpotqa = &src;
  const RulerSample s = gen("qa_2", 600, 4, o);
  CHECK(s.question.find("Question: " + src.items[4].question) != std::string::npos);
  CHECK(occurrences(s.document, src.paragraphs[src.items[4].gold[0]]) >= 1);
  CHECK(occurrences(s.document, src.paragraphs[src.items[4].gold[1]]) >= 1);
}
