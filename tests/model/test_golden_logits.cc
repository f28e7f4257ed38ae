// Logits of the real model (SmolLM2-135M-Instruct Q4_1) against tests/golden/logits_smollm2.bin,
// written by scripts/golden/make_logits_golden.py from an independent float64 numpy forward
// (format: scripts/golden/README.md, KVZLOGIT v1). Bound: max |Δ| / max |ref| <= 1e-3 at every
// stored position on the exact matmul path (fp32 arithmetic), kFastBound on the fast one (8-bit
// activations, kernels/qdot.h), same argmax on both. Prefill and token-by-token decode are each
// checked. [realmodel] cases need $KVZIP_MODEL; the
// parser's rejection of stale or damaged files runs without it.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "model/forward.h"
#include "model/model.h"
#include "tests/support/real_model.h"
#include "tests/support/source_path.h"

using namespace kvzip;

namespace {

constexpr uint32_t kGoldenVersion = 1;
constexpr uint32_t kSmolVocab = 49152;
// The fast path rounds every matmul input to int8 per 32-element block; through 30 layers that
// moves the logits by up to 4.4% of their largest magnitude (measured: 0.0435 prefill and decode,
// argmax unchanged at every golden position). Bound with ~2x headroom.
constexpr double kFastBound = 0.1;
const char* const kRegenerate = "; regenerate it with python3 scripts/golden/make_logits_golden.py";

struct GoldenPosition {
  uint32_t position = 0;
  std::vector<float> logits;  // (V)
};
struct GoldenCase {
  std::vector<int32_t> ids;
  std::vector<GoldenPosition> positions;
};

// Little-endian cursor over the file; every read is bounds-checked.
struct Cursor {
  const std::vector<char>& b;
  size_t o = 0;
  void need(size_t n, const char* what) {
    if (b.size() - o < n)
      throw std::runtime_error("golden logits file truncated at offset " + std::to_string(o) +
                               " reading " + what + kRegenerate);
  }
  uint32_t u32(const char* what) {
    need(4, what);
    uint32_t v;
    std::memcpy(&v, b.data() + o, 4);
    o += 4;
    return v;
  }
  void floats(float* dst, size_t n, const char* what) {
    need(n * 4, what);
    std::memcpy(dst, b.data() + o, n * 4);
    o += n * 4;
  }
};

// Parses a KVZLOGIT v1 file for a model with `vocab` logits per position; throws
// std::runtime_error naming the field and offset on a wrong magic, version, length or position.
std::vector<GoldenCase> parse_golden(const std::vector<char>& bytes, uint32_t vocab) {
  Cursor c{bytes};
  c.need(8, "magic");
  if (std::memcmp(bytes.data(), "KVZLOGIT", 8) != 0)
    throw std::runtime_error(std::string("golden logits file: bad magic, expected KVZLOGIT") +
                             kRegenerate);
  c.o = 8;
  const uint32_t version = c.u32("version");
  if (version != kGoldenVersion)
    throw std::runtime_error("golden logits file has version " + std::to_string(version) +
                             ", this test reads version " + std::to_string(kGoldenVersion) +
                             " (update the reader or" + kRegenerate + ")");
  std::vector<GoldenCase> cases(c.u32("n_cases"));
  for (GoldenCase& gc : cases) {
    const uint32_t n = c.u32("n_tokens");
    c.need(size_t(n) * 4, "ids");
    gc.ids.resize(n);
    std::memcpy(gc.ids.data(), bytes.data() + c.o, size_t(n) * 4);
    c.o += size_t(n) * 4;
    gc.positions.resize(c.u32("n_positions_stored"));
    uint32_t prev = 0;
    for (size_t k = 0; k < gc.positions.size(); ++k) {
      GoldenPosition& p = gc.positions[k];
      p.position = c.u32("position");
      if (p.position >= n || (k > 0 && p.position <= prev))
        throw std::runtime_error("golden logits file: position " + std::to_string(p.position) +
                                 " at offset " + std::to_string(c.o - 4) +
                                 " is not ascending and below n_tokens " + std::to_string(n) +
                                 kRegenerate);
      prev = p.position;
      p.logits.resize(vocab);
      c.floats(p.logits.data(), vocab, "logits");
    }
  }
  if (c.o != bytes.size())
    throw std::runtime_error("golden logits file is " + std::to_string(bytes.size()) +
                             " bytes, but its contents with a vocabulary of " +
                             std::to_string(vocab) + " end at " + std::to_string(c.o) +
                             kRegenerate);
  return cases;
}

std::vector<char> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::vector<char> golden_bytes() {
  return read_file(kvzip::test::source_path("tests/golden/logits_smollm2.bin"));
}

double max_abs(const float* a, size_t n) {
  double m = 0.0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(double(a[i])));
  return m;
}

// max |got - want| / max |want| over one position's logits.
double rel_diff(const float* got, const std::vector<float>& want) {
  double d = 0.0;
  for (size_t i = 0; i < want.size(); ++i) d = std::max(d, std::fabs(double(got[i]) - want[i]));
  return d / max_abs(want.data(), want.size());
}

size_t argmax(const float* a, size_t n) { return size_t(std::max_element(a, a + n) - a); }

// Compares logits(T, V) rows at the case's stored positions; returns the worst relative error.
double check_case(const GoldenCase& gc, const std::vector<float>& logits, size_t V, size_t index) {
  double worst = 0.0;
  for (const GoldenPosition& p : gc.positions) {
    const float* row = logits.data() + size_t(p.position) * V;
    const double rel = rel_diff(row, p.logits);
    INFO("case " << index << " position " << p.position << ": relative error " << rel);
    CHECK(argmax(row, V) == argmax(p.logits.data(), V));
    worst = std::max(worst, rel);
  }
  return worst;
}

}  // namespace

TEST_CASE("the golden logits file parses as KVZLOGIT v1 with SmolLM2's vocabulary", "[model]") {
  const std::vector<char> bytes = golden_bytes();
  std::vector<GoldenCase> cases = parse_golden(bytes, kSmolVocab);
  REQUIRE(cases.size() == 4);
  size_t positions = 0;
  for (const GoldenCase& gc : cases) positions += gc.positions.size();
  CHECK(positions == 9);
  CHECK(cases[0].ids == std::vector<int32_t>{504, 3575, 282, 4649, 314});
  CHECK(max_abs(cases[0].positions[4].logits.data(), kSmolVocab) > 1.0);
}

TEST_CASE("a stale or damaged golden logits file is refused with a message", "[model]") {
  const std::vector<char> good = golden_bytes();
  auto refused = [&](std::vector<char> bytes, uint32_t vocab, const char* needle) {
    try {
      parse_golden(bytes, vocab);
    } catch (const std::runtime_error& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).find(needle) != std::string::npos);
      return true;
    }
    return false;
  };
  std::vector<char> bad = good;
  bad[0] = 'X';
  CHECK(refused(bad, kSmolVocab, "magic"));
  bad = good;
  bad[8] = 2;  // version 2
  CHECK(refused(bad, kSmolVocab, "version 2"));
  // Another model's vocabulary misaligns every later field; where it trips depends on the bytes.
  CHECK(refused(good, kSmolVocab + 1, "regenerate"));
  CHECK(refused(good, kSmolVocab - 1, "regenerate"));
  bad = good;
  bad.resize(good.size() - 1);
  CHECK(refused(bad, kSmolVocab, "truncated"));
  bad = good;
  bad.push_back(0);
  CHECK(refused(bad, kSmolVocab, "bytes"));
}

TEST_CASE("prefill logits match the float64 reference (1e-3 exact, kFastBound fast)",
          "[model][realmodel]") {
  KVZIP_REAL_MODEL_OR_SKIP(model);
  const ModelConfig& cfg = model->config();
  const std::vector<GoldenCase> cases = parse_golden(golden_bytes(), cfg.vocab_size);
  for (kernels::MatmulPath path : {kernels::MatmulPath::Exact, kernels::MatmulPath::Fast}) {
    model::ForwardOptions opt;
    opt.matmul = path;
    model::Forward fwd(model->weights(), opt);
    for (size_t i = 0; i < cases.size(); ++i) {
      const GoldenCase& gc = cases[i];
      model::KvCache cache(cfg, static_cast<uint32_t>(gc.ids.size()));
      std::vector<float> logits = fwd.prefill(cache, gc.ids, model::LogitsMode::All);
      REQUIRE(logits.size() == gc.ids.size() * cfg.vocab_size);
      const double worst = check_case(gc, logits, cfg.vocab_size, i);
      WARN("golden logits, prefill (" << kernels::matmul_path_name(path) << " path): case " << i
                                      << " (" << gc.ids.size() << " tokens) worst relative error "
                                      << worst);
      REQUIRE(worst <= (path == kernels::MatmulPath::Exact ? 1e-3 : kFastBound));
    }
  }
}

// Decode runs the T == 1 products for every projection and the LM head, on both matmul paths: Fast
// (the default; 8-bit activations times this Q4_1/Q8_0 file's blocks) and Exact (the blocks decoded
// in registers, fp32 dot).
TEST_CASE("token-by-token decode logits match the float64 reference (1e-3 exact, kFastBound fast)",
          "[model][realmodel]") {
  KVZIP_REAL_MODEL_OR_SKIP(model);
  const ModelConfig& cfg = model->config();
  const size_t V = cfg.vocab_size;
  const std::vector<GoldenCase> cases = parse_golden(golden_bytes(), cfg.vocab_size);
  for (bool quantized : {true, false}) {
    model::ForwardOptions opt;
    opt.matmul = quantized ? kernels::MatmulPath::Fast : kernels::MatmulPath::Exact;
    model::Forward fwd(model->weights(), opt);
    REQUIRE(fwd.matmul_path() == opt.matmul);
    // france (every position), digits_code; the exact path only on france.
    for (size_t i : {size_t(0), size_t(3)}) {
      if (!quantized && i != 0) continue;
      const GoldenCase& gc = cases[i];
      model::KvCache cache(cfg, static_cast<uint32_t>(gc.ids.size()));
      std::vector<float> logits(gc.ids.size() * V);
      for (size_t t = 0; t < gc.ids.size(); ++t) {
        std::vector<float> row = fwd.decode(cache, gc.ids[t]);
        std::copy(row.begin(), row.end(), logits.begin() + t * V);
      }
      const double worst = check_case(gc, logits, V, i);
      WARN("golden logits, decode (" << (quantized ? "fast" : "exact") << " path): case " << i
                                     << " worst relative error " << worst);
      REQUIRE(worst <= (quantized ? kFastBound : 1e-3));
    }
  }
}
