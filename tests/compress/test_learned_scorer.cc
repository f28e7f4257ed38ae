// The learned scorer (compress/learned_scorer.h, format/scorer_file.h): the ridge solve against a
// plain double-precision normal-equations reference (Gaussian elimination written here); the
// KVzip target of a calibration window equal to the log of the kvzip scorer's own scores; a
// trained file equal to the reference fit of the same windows' features; the kvzap scorer's
// predictions equal to a hand-written dot product over the prefill's traced hidden states, bit
// for bit after a save and reload; the file refused on another model; corrupted and truncated
// files refused with their codes.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include "common/error.h"
#include "compress/learned_scorer.h"
#include "compress/pipeline.h"
#include "format/detail/codec.h"
#include "model/prefill.h"
#include "tests/compress/support.h"
#include "tests/format/fixtures.h"
#include "tests/support/random_weights.h"

using namespace kvzip;

namespace {

// Solves (X1ᵀX1 + alpha·I′) w = X1ᵀy for each output, X1 = [X, 1], I′ without the intercept:
// the normal equations formed one product at a time and solved by Gaussian elimination with
// partial pivoting, all in double. Returns (outputs, dim + 1).
std::vector<double> reference_ridge(const std::vector<float>& x, const std::vector<float>& y,
                                    size_t n, size_t dim, size_t outputs, double alpha) {
  const size_t d1 = dim + 1;
  auto feat = [&](size_t i, size_t e) { return e == dim ? 1.0 : double(x[i * dim + e]); };
  std::vector<double> out(outputs * d1);
  for (size_t o = 0; o < outputs; ++o) {
    std::vector<double> a(d1 * (d1 + 1), 0.0);  // augmented rows
    for (size_t r = 0; r < d1; ++r) {
      for (size_t c = 0; c < d1; ++c) {
        double s = 0;
        for (size_t i = 0; i < n; ++i) s += feat(i, r) * feat(i, c);
        a[r * (d1 + 1) + c] = s + (r == c && r < dim ? alpha : 0.0);
      }
      double s = 0;
      for (size_t i = 0; i < n; ++i) s += feat(i, r) * double(y[i * outputs + o]);
      a[r * (d1 + 1) + d1] = s;
    }
    for (size_t c = 0; c < d1; ++c) {
      size_t p = c;
      for (size_t r = c + 1; r < d1; ++r)
        if (std::fabs(a[r * (d1 + 1) + c]) > std::fabs(a[p * (d1 + 1) + c])) p = r;
      for (size_t k = 0; k <= d1; ++k) std::swap(a[c * (d1 + 1) + k], a[p * (d1 + 1) + k]);
      for (size_t r = 0; r < d1; ++r) {
        if (r == c) continue;
        const double f = a[r * (d1 + 1) + c] / a[c * (d1 + 1) + c];
        for (size_t k = c; k <= d1; ++k) a[r * (d1 + 1) + k] -= f * a[c * (d1 + 1) + k];
      }
    }
    for (size_t r = 0; r < d1; ++r) out[o * d1 + r] = a[r * (d1 + 1) + d1] / a[r * (d1 + 1) + r];
  }
  return out;
}

double max_rel(const std::vector<double>& got, const std::vector<double>& want) {
  double scale = 0, err = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, std::fabs(want[i]));
    err = std::max(err, std::fabs(got[i] - want[i]));
  }
  return err / scale;
}

struct Tiny {
  ModelConfig cfg = test::tiny_qwen2_config();
  model::Weights w = test::random_weights(cfg, 301);
  std::vector<int32_t> prefix = test::random_tokens(5, cfg.vocab_size, 302);
  std::vector<std::vector<int32_t>> texts = {test::random_tokens(150, cfg.vocab_size, 303),
                                             test::random_tokens(110, cfg.vocab_size, 304)};
  compress::TrainOptions options() const {
    compress::TrainOptions o;
    o.window = 40;
    o.heldout_every = 3;
    o.scorer = test::tiny_kvzip_options();
    return o;
  }
};

format::ScorerFile trained(const Tiny& t, model::Forward& fwd) {
  compress::TrainResult r = compress::train_scorer(fwd, t.prefix, t.texts, t.options());
  r.file.model = ModelFingerprint{"qwen2", "tiny", 1, 2};
  r.file.source = "random tokens";
  return r.file;
}

}  // namespace

TEST_CASE("ridge solve equals a plain normal-equations reference", "[compress]") {
  const size_t n = 300, dim = 12, outputs = 3;
  const std::vector<float> x = test::random_vector(n * dim, 11, -2.0f, 2.0f);
  std::vector<float> y = test::random_vector(n * outputs, 12, -0.5f, 0.5f);  // noise
  for (size_t i = 0; i < n; ++i)
    for (size_t o = 0; o < outputs; ++o)
      for (size_t e = 0; e < dim; ++e)
        y[i * outputs + o] += float((o + 1) * 0.3 * (e % 4)) * x[i * dim + e];
  for (double alpha : {0.0, 1.0, 50.0}) {
    compress::RidgeSystem sys(dim, outputs);
    sys.add(x.data(), dim, y.data(), 100);  // in two batches
    sys.add(x.data() + 100 * dim, dim, y.data() + 100 * outputs, n - 100);
    CHECK(sys.rows() == n);
    const std::vector<double> got = sys.solve(alpha);
    const std::vector<double> want = reference_ridge(x, y, n, dim, outputs, alpha);
    INFO("alpha " << alpha);
    CHECK(max_rel(got, want) < 1e-4);
  }
  // The penalty shrinks the coefficients, never the intercept.
  compress::RidgeSystem sys(dim, outputs);
  sys.add(x.data(), dim, y.data(), n);
  const std::vector<double> big = sys.solve(1e9);
  for (size_t e = 0; e < dim; ++e) CHECK(std::fabs(big[e]) < 1e-5);
  double mean = 0;
  for (size_t i = 0; i < n; ++i) mean += y[i * outputs];
  CHECK(big[dim] == Approx(mean / n).margin(1e-4));
  CHECK_THROWS_AS(compress::RidgeSystem(dim, outputs).solve(1.0), Error);  // no rows
}

TEST_CASE("R² and Spearman against hand-computed values", "[compress]") {
  const std::vector<float> t = {1, 2, 3, 4}, p = {1, 2, 3, 5};
  CHECK(compress::r_squared(t, t) == 1.0);
  CHECK(compress::r_squared(t, p) == Approx(1.0 - 1.0 / 5.0));
  CHECK(compress::spearman(t, p) == Approx(1.0));
  const std::vector<float> rev = {9, 3, 2, 1};
  CHECK(compress::spearman(t, rev) == Approx(-1.0));
  const std::vector<float> tie = {1, 1, 2, 3};  // ranks 1.5 1.5 3 4 against 1 2 3 4
  CHECK(compress::spearman(t, tie) == Approx(0.9486832981));
  CHECK(std::isnan(compress::r_squared(std::vector<float>{2, 2}, std::vector<float>{1, 3})));
}

TEST_CASE("calibration windows: consecutive pieces, a short tail joins the last", "[compress]") {
  const std::vector<int32_t> tok(105);
  auto w = compress::calibration_windows(tok, 40);
  REQUIRE(w.size() == 3);
  CHECK(w[2].size() == 25);
  w = compress::calibration_windows(std::span<const int32_t>(tok).first(89), 40);
  REQUIRE(w.size() == 2);  // 9 < 40 / 4: joins the second window
  CHECK(w[1].size() == 49);
  CHECK(w[1].data() == tok.data() + 40);
}

TEST_CASE("the KVzip target of a window is the log of the kvzip scorer's own scores",
          "[compress]") {
  const Tiny t;
  model::Forward fwd(t.w, model::ForwardOptions{2, 16, {}});
  const std::vector<int32_t>& doc = t.texts[0];
  const std::span<const int32_t> window(doc.data(), 40);
  compress::ScorerOptions so = test::tiny_kvzip_options();
  const compress::WindowTargets got = compress::window_targets(fwd, t.prefix, window, so);
  REQUIRE(got.n == 40);

  so.kvzip_chunk = 40;  // one chunk, as the calibration reconstructs a window
  prefill::PrefillOptions po;
  po.attention_bf16 = false;
  prefill::PrefillResult pre = prefill::prefill_document(fwd, t.prefix, window, po);
  const compress::DocumentScores want =
      compress::make_scorer("kvzip", so)->score(compress::ScoreInput{&fwd, &pre.cache, 5, window});
  const uint32_t Hkv = t.cfg.n_kv_heads;
  for (uint32_t l = 0; l < t.cfg.n_layers; ++l)
    for (uint32_t h = 0; h < Hkv; ++h)
      for (uint32_t j = 0; j < 40; ++j) {
        const float y = got.y[(size_t(l) * 40 + j) * 2 * Hkv + h];
        INFO("layer " << l << " head " << h << " row " << j);
        CHECK(y == Approx(std::log(want.at(l, h, j))).margin(2e-5));
        // KVzip+ differs (value norms over hidden-state norms) but is finite.
        CHECK(std::isfinite(got.y[(size_t(l) * 40 + j) * 2 * Hkv + Hkv + h]));
      }
}

TEST_CASE("a trained scorer is the reference ridge fit of its windows' features", "[compress]") {
  const Tiny t;
  model::Forward fwd(t.w, model::ForwardOptions{2, 16, {}});
  compress::TrainOptions o = t.options();
  for (format::ScorerTarget target :
       {format::ScorerTarget::Kvzip, format::ScorerTarget::KvzipPlus}) {
    o.target = target;
    const compress::TrainResult r = compress::train_scorer(fwd, t.prefix, t.texts, o);
    // Windows: text 0 gives 40, 40, 40, 30 (30 >= 40 / 4 stays alone), text 1 40, 40, 30; every
    // third is held out.
    const uint32_t E = t.cfg.d_model, Hkv = t.cfg.n_kv_heads, L = t.cfg.n_layers;
    std::vector<std::span<const int32_t>> train, held;
    size_t k = 0;
    for (const auto& text : t.texts)
      for (auto w : compress::calibration_windows(text, 40))
        (++k % 3 == 0 ? held : train).push_back(w);
    CHECK(r.file.train_windows == train.size());
    CHECK(r.file.heldout_windows == held.size());
    REQUIRE(r.fits.size() == 2);
    std::vector<std::vector<float>> x(L), y(L);
    const uint32_t which = target == format::ScorerTarget::Kvzip ? 0 : 1;
    size_t rows = 0;
    for (auto w : train) {
      const compress::WindowTargets wt = compress::window_targets(fwd, t.prefix, w, o.scorer);
      rows += wt.n;
      for (uint32_t l = 0; l < L; ++l)
        for (uint32_t j = 0; j < wt.n; ++j) {
          const float* xj = wt.x.data() + (size_t(l) * wt.n + j) * E;
          x[l].insert(x[l].end(), xj, xj + E);
          const float* yj = wt.y.data() + (size_t(l) * wt.n + j) * 2 * Hkv + which * Hkv;
          y[l].insert(y[l].end(), yj, yj + Hkv);
        }
    }
    CHECK(r.file.train_tokens == rows);
    for (uint32_t l = 0; l < L; ++l) {
      const std::vector<double> want = reference_ridge(x[l], y[l], rows, E, Hkv, 1.0);
      std::vector<double> got;
      for (uint32_t h = 0; h < Hkv; ++h) {
        const float* c = r.file.coefficients(l, h);
        got.insert(got.end(), c, c + E + 1);
      }
      INFO("target " << int(which) << " layer " << l);
      CHECK(max_rel(got, want) < 1e-4);
      CHECK(std::isfinite(r.file.r2[l]));
      CHECK(r.file.spearman[l] == r.fits[which].spearman[l]);
    }
  }
}

TEST_CASE("kvzap predicts from the prefill's input-normed hidden states, the same after a reload",
          "[compress]") {
  const Tiny t;
  model::Forward fwd(t.w, model::ForwardOptions{2, 16, {}});
  format::ScorerFile file = trained(t, fwd);
  format::testing::TempDir dir;
  const std::string path = dir.path("tiny.kvp");
  format::write_scorer_file(file, path, false);
  const auto loaded = std::make_shared<const format::ScorerFile>(format::read_scorer_file(path));
  CHECK(loaded->checksum == file.checksum);
  CHECK(loaded->weights == file.weights);

  // The hidden states the forward feeds its q/k/v projections, by position, from its trace.
  std::vector<std::vector<float>> xn(t.cfg.n_layers);
  model::ForwardOptions traced{2, 16, {}};
  traced.trace = [&](const model::TraceTensor& tt) {
    if (std::strcmp(tt.name, "attn_norm") == 0)
      xn[tt.layer].insert(xn[tt.layer].end(), tt.data, tt.data + size_t(tt.rows) * tt.cols);
  };
  model::Forward fwd_traced(t.w, traced);
  const std::vector<int32_t> doc = test::random_tokens(37, t.cfg.vocab_size, 310);
  compress::CompressOptions co;
  co.method = compress::kLearnedMethod;
  co.ratio = 0.5;
  co.prefill.answer_room = 16;
  co.scorer.learned = loaded;
  co.scorer.learned_source = compress::learned_scorer_source(*loaded, path);
  co.scorer.kvzap_window = 8;  // the document's last 8 rows always kept
  std::unique_ptr<compress::Scorer> s = compress::make_method_scorer(co);
  co.prefill.observer = s->prefill_observer(fwd_traced, 5, 37);
  prefill::PrefillResult pre = prefill::prefill_document(fwd_traced, t.prefix, doc, co.prefill);
  const compress::DocumentScores got =
      s->score(compress::ScoreInput{&fwd_traced, &pre.cache, 5, doc});
  const uint32_t E = t.cfg.d_model;
  for (uint32_t l = 0; l < t.cfg.n_layers; ++l)
    for (uint32_t h = 0; h < t.cfg.n_kv_heads; ++h) {
      const float* w = file.coefficients(l, h);
      for (uint32_t j = 0; j < 37; ++j) {
        const float* x = xn[l].data() + size_t(5 + j) * E;
        float acc = 0.0f;
        for (uint32_t e = 0; e < E; ++e) acc += w[e] * x[e];
        if (j < 37 - 8) CHECK(got.at(l, h, j) == acc + w[E]);
        else CHECK(got.at(l, h, j) == std::numeric_limits<float>::infinity());
      }
    }

  // The whole pipeline with the file as written and as reloaded: the same scores, bit for bit.
  co.prefill.observer = nullptr;
  const compress::CompressResult a = compress::compress(fwd, t.prefix, doc, co);
  co.scorer.learned = std::make_shared<const format::ScorerFile>(file);
  const compress::CompressResult b = compress::compress(fwd, t.prefix, doc, co);
  CHECK(a.method == "kvzap");
  CHECK(a.kept_scores == b.kept_scores);
  CHECK(a.achieved_ratio == Approx(0.5).margin(0.02));
  bool named = false;
  for (const auto& [k, v] : a.params)
    named |= k == "scorer_xxh64" && v == format::scorer_checksum_text(file);
  CHECK(named);
}

TEST_CASE("a scorer file for another model is refused", "[compress]") {
  const Tiny t;
  model::Forward fwd(t.w, model::ForwardOptions{2, 16, {}});
  const format::ScorerFile file = trained(t, fwd);
  ModelConfig cfg = t.cfg;
  CHECK_NOTHROW(format::check_scorer_model(file, cfg, file.model));
  ModelFingerprint other = file.model;
  other.weights_hash ^= 1;
  try {
    format::check_scorer_model(file, cfg, other);
    FAIL("accepted another model's weights");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::model_mismatch);
    CHECK_THAT(e.what(), Catch::Matchers::Contains("trained on another model"));
  }
  cfg.d_model *= 2;
  CHECK_THROWS_AS(format::check_scorer_model(file, cfg, file.model), Error);
  // The scorer itself refuses a forward of another shape before the prefill.
  format::ScorerFile narrow = file;
  narrow.d_model = t.cfg.d_model / 2;
  compress::ScorerOptions so;
  so.learned = std::make_shared<const format::ScorerFile>(narrow);
  std::unique_ptr<compress::Scorer> s = compress::make_scorer("kvzap", so);
  try {
    s->prefill_observer(fwd, 2, 10);
    FAIL("accepted a model of another shape");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::model_mismatch);
  }
  CHECK_THROWS_AS(compress::make_scorer("kvzap", compress::ScorerOptions{}), Error);
}

TEST_CASE("corrupted and truncated scorer files are refused with their codes",
          "[compress][format]") {
  format::ScorerFile f;
  f.model = ModelFingerprint{"llama", "tiny", 7, 8};
  f.n_layers = 2;
  f.n_kv_heads = 3;
  f.d_model = 4;
  f.window = 1000;
  f.source = "licence.txt";
  f.r2 = {0.5f, std::nanf("")};
  f.spearman = {0.7f, 0.6f};
  f.weights = test::random_vector(2 * 3 * 5, 9);
  const std::vector<uint8_t> good = format::encode_scorer_file(f);
  const format::ScorerFile back = format::decode_scorer_file(good, "x.kvp");
  CHECK(back.weights == f.weights);
  CHECK(back.model.same_model(f.model));
  CHECK(back.source == f.source);
  CHECK(std::isnan(back.r2[1]));
  CHECK(back.r2[0] == 0.5f);
  CHECK(back.checksum == f.checksum);

  auto code_of = [](const std::vector<uint8_t>& b) {
    try {
      (void)format::decode_scorer_file(b, "bad.kvp");
    } catch (const Error& e) {
      CHECK_THAT(e.what(), Catch::Matchers::StartsWith("bad.kvp: "));
      return e.code();
    }
    return Errc::internal;  // accepted
  };
  auto reseal = [](std::vector<uint8_t> b) {
    const uint64_t h = format::detail::xxh64(b.data(), b.size() - 8);
    std::memcpy(b.data() + b.size() - 8, &h, 8);
    return b;
  };
  for (size_t n : {size_t(0), size_t(5), size_t(15), size_t(60), good.size() - 9, good.size() - 1})
    CHECK(code_of(std::vector<uint8_t>(good.begin(), good.begin() + n)) == Errc::truncated);
  std::vector<uint8_t> b = good;
  b[0] = 'X';
  CHECK(code_of(b) == Errc::bad_magic);
  b = good;
  b[8] = 2;  // major 2
  CHECK(code_of(b) == Errc::version_unsupported);
  b = good;
  b[b.size() - 20] ^= 0x40;  // a coefficient
  CHECK(code_of(b) == Errc::checksum_mismatch);
  b = good;
  b.push_back(0);
  CHECK(code_of(b) == Errc::corrupt);
  b = good;
  b[28] = 7;  // unknown target
  CHECK(code_of(reseal(b)) == Errc::corrupt);
  b = good;
  std::memset(b.data() + 16, 0, 4);  // L = 0
  CHECK(code_of(b) == Errc::corrupt);
  b = good;
  const float inf = std::numeric_limits<float>::infinity();
  std::memcpy(b.data() + b.size() - 12, &inf, 4);  // the last coefficient
  CHECK(code_of(reseal(b)) == Errc::corrupt);
  b = good;
  b[12] = 8;  // Header_Size 8
  CHECK(code_of(b) == Errc::corrupt);
  // The writer refuses what the file cannot hold.
  format::ScorerFile bad = f;
  bad.weights[3] = std::nanf("");
  CHECK_THROWS_AS(format::encode_scorer_file(bad), Error);
}
