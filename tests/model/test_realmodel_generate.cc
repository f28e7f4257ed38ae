// End-to-end greedy generation on the real model (SmolLM2-135M-Instruct Q4_1, $KVZIP_MODEL):
// "The capital of France is" continues with " Paris", and its first 8 greedy tokens equal the
// float64 reference's (line france.greedy8 of tests/golden/logits_smollm2.txt, written by
// scripts/golden/make_logits_golden.py). The quantized decode GEMV and the fp32 one pick the same
// greedy tokens on several prompts, with logits equal up to fp32 rounding. Skipped with a warning
// when the model is absent.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "model/forward.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "tests/support/skip.h"

using namespace kvzip;

namespace {

// The ids on the line starting with `key` in the golden companion file; fails if it is missing.
std::vector<int32_t> golden_ids(const std::string& key) {
  std::ifstream in(std::string(KVZIP_SOURCE_DIR) + "/tests/golden/logits_smollm2.txt");
  REQUIRE(in.good());
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string first;
    words >> first;
    if (first != key) continue;
    std::vector<int32_t> ids;
    for (int32_t id; words >> id;) ids.push_back(id);
    return ids;
  }
  FAIL("tests/golden/logits_smollm2.txt has no line '" << key << "'");
  return {};
}

// Loaded once for every test case of this file.
const Model* real_model() {
  static std::unique_ptr<Model> model;
  const std::string path = test::real_model_path();
  if (path.empty()) return nullptr;
  if (!model) model = Model::load(path);
  return model.get();
}

std::vector<int32_t> greedy(const Model& model, const ForwardOptions& opt,
                            const std::vector<int32_t>& prompt, uint32_t n) {
  Forward fwd(model.weights(), opt);
  KvCache cache(model.config(), static_cast<uint32_t>(prompt.size()) + n);
  GenerateParams gp;
  gp.max_tokens = n;
  gp.stop_tokens = model.chat().stop_tokens();
  return generate(fwd, cache, prompt, gp).tokens;
}

}  // namespace

TEST_CASE("greedy 'The capital of France is' continues with Paris, as the reference does",
          "[model][realmodel]") {
  const Model* model = real_model();
  if (!model) {
    test::skip_no_model();
    return;
  }
  const Tokenizer& tok = model->tokenizer();
  REQUIRE_FALSE(tok.add_bos());  // the golden prompt has no BOS
  const std::vector<int32_t> prompt = tok.encode("The capital of France is", false);
  CHECK(prompt == std::vector<int32_t>{504, 3575, 282, 4649, 314});

  const std::vector<int32_t> want = golden_ids("france.greedy8");
  REQUIRE(want.size() == 8);
  const std::vector<int32_t> got = greedy(*model, ForwardOptions{}, prompt, 8);
  const std::string text = tok.decode(got);
  INFO("generated \"" << text << "\"");
  CHECK(text.find(" Paris") != std::string::npos);
  CHECK(got == want);
}

// The quantized GEMV reads the very values the fp32 copy holds, so only the summation order
// differs: logits agree to ~1e-6 relative (bound 1e-4, far below any argmax margin seen).
TEST_CASE("the fast and the exact decode paths generate the same greedy text", "[model][realmodel]") {
  const Model* model = real_model();
  if (!model) {
    test::skip_no_model();
    return;
  }
  ForwardOptions q_opt, f_opt;
  f_opt.matmul = MatmulPath::Exact;
  const char* prompts[] = {"The capital of France is", "def fibonacci(n):",
                           "Once upon a time, in a small village,"};
  for (const char* text : prompts) {
    const std::vector<int32_t> prompt = model->tokenizer().encode(text, false);
    INFO("prompt \"" << text << "\"");
    CHECK(greedy(*model, q_opt, prompt, 10) == greedy(*model, f_opt, prompt, 10));
  }

  Forward fq(model->weights(), q_opt), ff(model->weights(), f_opt);
  REQUIRE(fq.matmul_path() == MatmulPath::Fast);
  const std::vector<int32_t> ids = model->tokenizer().encode("Water boils at 100 degrees", false);
  KvCache cq(model->config(), 64), cf(model->config(), 64);
  double worst = 0.0;
  for (int32_t id : ids) {
    const std::vector<float> lq = fq.decode(cq, id), lf = ff.decode(cf, id);
    double diff = 0.0, scale = 0.0;
    for (size_t v = 0; v < lf.size(); ++v) {
      diff = std::max(diff, double(std::fabs(lq[v] - lf[v])));
      scale = std::max(scale, double(std::fabs(lf[v])));
    }
    worst = std::max(worst, diff / scale);
  }
  WARN("quantized vs fp32 decode GEMV: worst relative logit difference " << worst);
  CHECK(worst < 1e-4);
}
