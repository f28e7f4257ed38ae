// RULER task generation (eval/ruler.h) on a fixed seed with a word counter standing in for the
// tokenizer: every task's question and answer prefix are RULER's template wording, its document
// starts with the template's instruction and holds the needles / chains / words its outputs name,
// the sample fits its length, and the same (seed, task, length, index) gives the same sample. The
// scorer: RULER's string_match_all / string_match_part (100 for the gold answers, 0 for empty).
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "common/error.h"
#include "eval/ruler.h"

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

RulerSample gen(const char* task, uint32_t length = 600, uint32_t index = 0, const RulerGenOptions& o = {}) {
  return make_ruler_sample(task, length, index, o, words);
}

}  // namespace

TEST_CASE("ruler dump", "[.dump]") {
  RulerGenOptions o;
  o.haystack = "Alpha beta gamma. Delta epsilon zeta eta! Theta iota kappa? Lambda mu nu xi omicron pi.";
  for (const RulerTask& t : ruler_tasks()) {
    if (t.name.rfind("qa_", 0) == 0) continue;
    const RulerSample s = gen(t.name.c_str(), 1200, 0, o);
    std::string path = "/tmp/ruler/dump/" + t.name + ".txt";
    FILE* f = std::fopen(path.c_str(), "w");
    std::fprintf(f, "%s\n=====Q\n%s\n=====P\n%s\n=====O\n", s.document.c_str(), s.question.c_str(), s.answer_prefix.c_str());
    for (auto& x : s.outputs) std::fprintf(f, "%s\n", x.c_str());
    std::fclose(f);
  }
}
