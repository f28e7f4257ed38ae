// run_ruler on a tiny random-weight model: every sample is generated before any length is
// evaluated, so a length a task cannot fit fails before the work of the lengths before it (no
// group is logged as run, no answer is computed).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "common/error.h"
#include "eval/ruler.h"
#include "tests/support/tiny_model_dir.h"

using namespace kvzip;

TEST_CASE("ruler: a length no task fits fails before any length is evaluated", "[eval]") {
  test::TinyModelDir t("ruler_run", 5, 8192, 1);
  eval::RulerOptions ro;
  ro.tasks = {"niah_single_1"};
  ro.lengths = {3000, 10};  // the first fits, the second cannot hold the task's template
  ro.eval.methods = {"streaming"};
  ro.eval.ratios = {0.5};
  ro.eval.threads = 1;
  ro.eval.max_answer_tokens = 1;
  std::vector<std::string> lines;
  ro.log = [&](const std::string& s) { lines.push_back(s); };
  try {
    eval::run_ruler(*t.model, ro);
    FAIL("expected Errc::invalid_argument for length 10");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::invalid_argument);
    CHECK(std::string(e.what()).find("does not fit 10") != std::string::npos);
  }
  CHECK(lines.empty());  // not one group started
  // The first length alone runs: the refusal was the second length's.
  ro.lengths = {3000};
  CHECK(eval::run_ruler(*t.model, ro).rows.size() == 2);  // full + streaming at 0.5
}
