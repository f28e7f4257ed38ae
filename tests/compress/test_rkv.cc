// Offline R-KV (spec/methods.md §4) against a plain reference: the similarity matrix S over the candidate
// keys fully materialised (diagonal zeroed, each row's most recent similar entry zeroed, column
// means, softmax) and the probe importance written out (max logit over the group, softmax over
// the candidates, mean, max-pool); on a tiny random model and, for the redundancy's tiled scan,
// on hundreds of keys with repeats. A hand-built case shows the latest copy of a repeat is spared.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>

#include "common/error.h"
#include "compress/compress.h"
#include "compress/detail/rkv.h"
#include "prefill/prefill.h"
#include "tests/compress/support.h"
#include "tests/support/random_weights.h"

using namespace kvzip;

namespace {

std::vector<double> softmax(std::vector<double> x) {
  const double mx = *std::max_element(x.begin(), x.end());
  double sum = 0;
  for (double& e : x) sum += (e = std::exp(e - mx));
  for (double& e : x) e /= sum;
  return x;
}

// R over keys (n, D), with S materialised.
std::vector<double> reference_redundancy(const float* k, uint32_t n, uint32_t D, double T) {
  std::vector<std::vector<double>> kh(n, std::vector<double>(D));
  for (uint32_t i = 0; i < n; ++i) {
    double ss = 0;
    for (uint32_t d = 0; d < D; ++d) ss += double(k[i * D + d]) * k[i * D + d];
    for (uint32_t d = 0; d < D; ++d) kh[i][d] = k[i * D + d] / std::max(std::sqrt(ss), 1e-12);
  }
  std::vector<std::vector<double>> S(n, std::vector<double>(n, 0.0));
  for (uint32_t i = 0; i < n; ++i)
    for (uint32_t j = 0; j < n; ++j)
      if (i != j)
        for (uint32_t d = 0; d < D; ++d) S[i][j] += kh[i][d] * kh[j][d];
  for (uint32_t i = 0; i < n; ++i)
    for (uint32_t j = n; j-- > 0;)
      if (j != i && S[i][j] > T) {
        S[i][j] = 0;
        break;
      }
  std::vector<double> r(n, 0.0);
  for (uint32_t j = 0; j < n; ++j) {
    for (uint32_t i = 0; i < n; ++i) r[j] += S[i][j];
    r[j] /= n;
  }
  return softmax(r);
}

void check_close(const std::vector<float>& got, const std::vector<double>& want, double rel) {
  REQUIRE(got.size() == want.size());
  double scale = 0;
  for (double x : want) scale = std::max(scale, std::abs(x));
  for (size_t j = 0; j < want.size(); ++j) {
    INFO("entry " << j << ": " << got[j] << " vs " << want[j]);
    CHECK(std::abs(got[j] - want[j]) <= rel * std::abs(want[j]) + 1e-6 * scale);
  }
}

// Weights seed 61, prefix of 5 tokens, prefill chunks of 13 tokens.
struct Run : test::ScoredDocument {
  explicit Run(uint32_t n_c) : ScoredDocument(n_c, 61, 5, 13) {}
};

}  // namespace

TEST_CASE("R-KV scores equal λ·importance − (1−λ)·redundancy computed plainly", "[compress]") {
  Run r(70);
  ScorerOptions so;  // α = 8, λ = 0.1, T = 0.5, kernel 7
  so.rkv_threshold = 0.3f;  // the tiny model's keys: enough pairs above it to matter
  auto scorer = make_scorer("rkv", so);
  const DocumentScores got = r.score(*scorer);
  const uint32_t D = r.cfg.head_dim, G = r.cfg.group(), a = 8, n = 70 - a;
  const uint32_t N = r.n_p + 70;
  bool any_spared = false;  // some row had a similar key zeroed (the test exercises it)
  for (uint32_t l = 0; l < r.cfg.n_layers; ++l)
    for (uint32_t h = 0; h < r.cfg.n_kv_heads; ++h) {
      const float* k = r.cache.view(l, h).k + size_t(r.n_p) * D;  // the candidates
      std::vector<double> mean(n, 0.0);
      for (uint32_t t = 0; t < a; ++t) {
        std::vector<double> z(n, -INFINITY);
        for (uint32_t g = 0; g < G; ++g) {
          const float* q = r.rec.at(l, N - a + t, h * G + g);
          for (uint32_t j = 0; j < n; ++j) {
            double dot = 0;
            for (uint32_t d = 0; d < D; ++d) dot += double(q[d]) * k[j * D + d];
            z[j] = std::max(z[j], dot / std::sqrt(double(D)));
          }
        }
        const std::vector<double> p = softmax(z);
        for (uint32_t j = 0; j < n; ++j) mean[j] += p[j] / a;
      }
      const std::vector<double> R = reference_redundancy(k, n, D, 0.3);
      std::vector<double> unzeroed = reference_redundancy(k, n, D, 2.0);  // nothing above 2
      for (uint32_t j = 0; j < n; ++j) any_spared |= std::abs(R[j] - unzeroed[j]) > 1e-4 * R[j];
      std::vector<float> row(n);
      std::vector<double> want(n);
      for (uint32_t j = 0; j < n; ++j) {
        double imp = 0;
        for (int x = int(j) - 3; x <= int(j) + 3; ++x)
          if (x >= 0 && x < int(n)) imp = std::max(imp, mean[size_t(x)]);
        want[j] = 0.1 * imp - 0.9 * R[j];
        row[j] = got.at(l, h, j);
      }
      INFO("layer " << l << " head " << h);
      check_close(row, want, 1e-4);
      for (uint32_t j = n; j < 70; ++j) CHECK(std::isinf(got.at(l, h, j)));
    }
  CHECK(any_spared);
  CHECK(scorer->name() == "rkv");
  CHECK(scorer->params() == MethodParams{{"window", "8"},
                                         {"lambda", "0.1"},
                                         {"threshold", "0.3"},
                                         {"kernel", "7"},
                                         {"candidates", "document"}});
}

TEST_CASE("R-KV's redundancy spares the latest copy of a repeated key", "[compress]") {
  // k0 = k1 = k2 (one direction), k3 orthogonal. Row 0 and row 1 zero their entry of k2 (the most
  // recent similar key), row 2 zeroes k1's; column sums [2, 1, 0, 0]; r = sums / 4.
  const float k[] = {1, 0, 2, 0, 0.5f, 0, 0, 3};
  float R[4];
  detail::rkv_redundancy(k, 4, 2, 0.5f, R);
  const std::vector<double> want = softmax({0.5, 0.25, 0.0, 0.0});
  for (int j = 0; j < 4; ++j) CHECK(R[j] == Approx(want[j]).epsilon(1e-6));
  CHECK(R[2] < R[1]);
  CHECK(R[1] < R[0]);
  // With nothing above the threshold no entry is zeroed: the three copies are equally redundant.
  detail::rkv_redundancy(k, 4, 2, 1.0f, R);
  CHECK(R[0] == Approx(R[2]).epsilon(1e-6));
  CHECK(R[0] > R[3]);
}

TEST_CASE("R-KV's redundancy scan matches the materialised matrix across its tiles",
          "[compress]") {
  // 700 keys over 100 directions plus noise (many repeats, some far back), and 50 lone random
  // keys (rows with no similar key: the scan reaches the first candidate).
  const uint32_t n = 750, D = 16;
  const std::vector<float> base = test::random_vector(100 * D, 71);
  const std::vector<float> noise = test::random_vector(n * D, 72, -0.3f, 0.3f);
  const std::vector<float> pick = test::random_vector(n, 73, 0.0f, 100.0f);
  const std::vector<float> lone = test::random_vector(50 * D, 74);
  std::vector<float> k(n * D);
  for (uint32_t i = 0; i < n; ++i)
    for (uint32_t d = 0; d < D; ++d)
      k[i * D + d] = i % 15 == 0 ? lone[(i / 15) * D + d]
                                 : base[uint32_t(pick[i]) * D + d] + noise[i * D + d];
  for (float T : {0.5f, 0.9f}) {
    INFO("threshold " << T);
    std::vector<float> R(n);
    detail::rkv_redundancy(k.data(), n, D, T, R.data());
    check_close(R, reference_redundancy(k.data(), n, D, T), 1e-4);
  }
}

TEST_CASE("R-KV keeps a document no longer than its probe whole", "[compress]") {
  Run r(8);
  auto scorer = make_scorer("rkv", ScorerOptions{});
  const DocumentScores s = r.score(*scorer);
  REQUIRE(s.values.size() == size_t(r.cfg.n_layers) * r.cfg.n_kv_heads * 8);
  for (float x : s.values) CHECK(std::isinf(x));
}

TEST_CASE("R-KV refuses bad options and a prefill it did not observe", "[compress]") {
  auto refused = [](const ScorerOptions& o, const char* what) {
    try {
      make_scorer("rkv", o);
    } catch (const Error& e) {
      INFO(e.what());
      CHECK(e.code() == Errc::invalid_argument);
      CHECK(std::string(e.what()).find(what) != std::string::npos);
      return true;
    }
    return false;
  };
  CHECK_FALSE(refused(ScorerOptions{}, ""));
  ScorerOptions so;
  so.rkv_window = 0;
  CHECK(refused(so, "window"));
  for (float x : {-0.1f, 1.5f, std::nanf("")}) {
    so = {};
    so.rkv_lambda = x;
    CHECK(refused(so, "lambda"));
    so = {};
    so.rkv_threshold = x + 1.0f;  // 0.9 is a valid cosine: refused only for 2.5 and NaN
    CHECK(refused(so, "threshold") == !(x + 1.0f <= 1.0f));
  }
  for (uint32_t k : {0u, 6u}) {
    so = {};
    so.rkv_kernel = k;
    CHECK(refused(so, "kernel"));
  }

  Run r(30);
  auto scorer = make_scorer("rkv", ScorerOptions{});
  Forward fwd(r.w, ForwardOptions{1, 16, {}});
  PrefillResult pre = prefill_document(fwd, r.prefix, r.doc);
  CHECK_THROWS_AS(scorer->score(ScoreInput{&fwd, &pre.cache, r.n_p, r.doc}), Error);
}
