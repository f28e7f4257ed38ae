// Group-wise q8/q4 K/V (kernels/kv_quant.h) on random inputs with outlier channels, against a plain
// reference written here from the formula (x = c · fma(s, q, m); channel 2i in the low nibble):
// the round-trip error of every value is within its group's bound; scores, weighted sums and the
// whole attention over quantized rows equal dequantize-then-attend (double precision) within a
// float-summation bound; the format's reconstruction gives the same bits as the kernel's; a tiny
// hand-built case pins the byte layout; each query row of a call gets the bits it gets alone.
// Rotated rows (layout.rotated): the reference applies an explicit Walsh–Hadamard matrix product
// to the formula's values. Byte parameters
// (layout.byte_params): the reference decodes them from the spec's formula, written out here.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <vector>

#include "common/hadamard.h"
#include "common/half.h"
#include "format/format.h"
#include "kernels/kv_quant.h"
#include "kernels/quant.h"
#include "tests/support/random_weights.h"

using namespace kvzip;

namespace {

// Rows with a few outlier channels (keys' typical shape): channel j scaled by 1 or 20.
std::vector<float> outlier_rows(size_t rows, uint32_t D, uint64_t seed) {
  std::vector<float> x = test::random_vector(rows * D, seed, -1.0f, 1.0f);
  for (size_t r = 0; r < rows; ++r)
    for (uint32_t j = 0; j < D; ++j)
      if (j % 13 == 5) x[r * D + j] = 20.0f * x[r * D + j] + 3.0f;
  return x;
}

struct Quantized {
  kernels::KvQuantLayout layout;
  size_t rows;
  std::vector<float> c;
  std::vector<uint16_t> p;
  std::vector<uint8_t> codes;
  kernels::KvQuantRows view() const { return {layout, rows, c.data(), p.data(), codes.data()}; }
};

Quantized quantize(const std::vector<float>& x, kernels::KvQuantLayout l) {
  Quantized q{l, x.size() / l.D, std::vector<float>(l.D), {}, {}};
  q.p.resize(q.rows * l.param_words());
  q.codes.resize(q.rows * l.code_bytes());
  kernels::cpu::kv_quantize_rows(x.data(), {l, q.rows, q.c.data(), q.p.data(), q.codes.data()});
  return q;
}

// Group g's (s, m) of row r, from the spec's formulas (f16 words, or scale code and zero point).
std::pair<float, float> reference_params(const Quantized& q, size_t r, uint32_t g) {
  const kernels::KvQuantLayout& l = q.layout;
  const uint16_t* p = q.p.data() + r * l.param_words();
  if (!l.byte_params) return {f16_to_f32(p[2 * g]), f16_to_f32(p[2 * g + 1])};
  const uint32_t e = p[g] & 0xff, z = p[g] >> 8;
  const float s = std::ldexp(float(16 + e % 16), int(e / 16) - 22);
  return {s, float(-(double(s) * z * std::ldexp(1.0, int(l.bits) - 8)))};
}

// The reference reconstruction, straight from the formula.
std::vector<double> reference_values(const Quantized& q) {
  const kernels::KvQuantLayout& l = q.layout;
  std::vector<double> out(q.rows * l.D);
  for (size_t r = 0; r < q.rows; ++r)
    for (uint32_t j = 0; j < l.D; ++j) {
      const uint32_t g = j / l.group;
      const uint8_t* row = q.codes.data() + r * l.code_bytes();
      const uint32_t code = l.bits == 8 ? row[j] : (row[j / 2] >> (4 * (j % 2))) & 15;
      const auto [s, m] = reference_params(q, r, g);
      out[r * l.D + j] = double(q.c[j] * std::fma(s, float(code), m));  // binary32 product
    }
  if (l.rotated)  // x = H·y, H[i][j] = (-1)^popcount(i & j) / √D, as a matrix product
    for (size_t r = 0; r < q.rows; ++r) {
      const std::vector<double> y(out.begin() + r * l.D, out.begin() + (r + 1) * l.D);
      for (uint32_t i = 0; i < l.D; ++i) {
        double x = 0;
        for (uint32_t j = 0; j < l.D; ++j) x += (std::popcount(i & j) % 2 ? -y[j] : y[j]);
        out[r * l.D + i] = x / std::sqrt(double(l.D));
      }
    }
  return out;
}

}  // namespace

TEST_CASE("kv_quant round trip: every value within its group's bound", "[kernels]") {
  const uint32_t bits = GENERATE(8u, 4u);
  const uint32_t group = GENERATE(64u, 32u, 16u, 2u);
  const bool byte_params = GENERATE(false, true);
  const kernels::KvQuantLayout l{bits, 64, group, false, byte_params};
  const std::vector<float> x = outlier_rows(37, 64, 11 + bits + group);
  const Quantized q = quantize(x, l);
  std::vector<float> back(x.size());
  kernels::cpu::kv_dequantize_rows(q.view(), back.data());
  const std::vector<double> ref = reference_values(q);
  const double levels = double((1u << bits) - 1);
  for (size_t r = 0; r < q.rows; ++r)
    for (uint32_t j = 0; j < 64; ++j) {
      const size_t i = r * 64 + j;
      REQUIRE(double(back[i]) == ref[i]);  // the kernel is the formula, bit for bit
      const uint32_t g = j / group;
      // In the group's normalised units (x / c): half a step, plus (f16) the rounding of the
      // minimum and of the step (relative 2^-11 each, the step's error counted over all levels).
      // Byte parameters are chosen after rounding: half a step, plus, for a value the writer
      // let clip (a zero point ±1 that leaves an extreme past the grid's end, when that lowers
      // the group's squared error), its distance beyond the grid's end.
      const auto [s, m] = reference_params(q, r, g);
      const double y = double(x[i]) / q.c[j];
      const double clip =
          byte_params ? std::max({0.0, double(m) - y, y - (double(m) + levels * s)}) : 0.0;
      const double bound =
          q.c[j] *
          (0.5 * s + clip +
           (byte_params ? 0.0 : std::ldexp(1.0, -11) * (std::fabs(m) + levels * s)) + 1e-7);
      INFO("bits " << bits << " group " << group << " bytes " << byte_params << " row " << r
                   << " channel " << j);
      REQUIRE(std::fabs(double(back[i]) - double(x[i])) <= bound);
    }
  // The channel scales normalise every group into [-1, 1]: steps are at most 2 / levels (byte
  // scales: rounded up to 5 significant bits and up to kKvScaleAbove codes more, at most 1/4 more).
  for (size_t r = 0; r < q.rows; ++r)
    for (uint32_t g = 0; g < l.groups(); ++g)
      REQUIRE(reference_params(q, r, g).first <= 2.0 / levels * (byte_params ? 1.25 : 1.001));
}

TEST_CASE("kv_quant: q4 packs channel 2i in the low nibble, q8 one code per byte", "[kernels]") {
  // One row, D = 4, one group, channel scales 1: the codes are the extremes 0 and 2^b - 1.
  const std::vector<float> x = {-1.0f, 1.0f, -1.0f, 1.0f};  // channel scales 1, y = x
  Quantized q4 = quantize(x, {4, 4, 4});
  CHECK(f16_to_f32(q4.p[1]) == -1.0f);  // minimum
  CHECK(f16_to_f32(q4.p[0]) == f16_to_f32(f32_to_f16(2.0f / 15)));
  CHECK(q4.codes == std::vector<uint8_t>{0xF0, 0xF0});  // codes 0, 15, 0, 15
  Quantized q8 = quantize(x, {8, 4, 2});
  CHECK(q8.codes == std::vector<uint8_t>{0, 255, 0, 255});
  std::vector<float> back(4);
  kernels::cpu::kv_dequantize_rows(q8.view(), back.data());
  for (size_t j = 0; j < 4; ++j)
    CHECK(std::fabs(back[j] - x[j]) <= 255 * std::ldexp(2.0f / 255, -11));  // f16(s) error x 255
}

TEST_CASE("kv_quant: a constant group and an all-zero channel reconstruct exactly", "[kernels]") {
  std::vector<float> x(2 * 8, 0.0f);
  for (uint32_t j = 0; j < 4; ++j) x[j] = x[8 + j] = 0.5f;  // group 0 constant, group 1 zero
  const Quantized q = quantize(x, {4, 8, 4});
  std::vector<float> back(x.size());
  kernels::cpu::kv_dequantize_rows(q.view(), back.data());
  CHECK(back == x);
  CHECK(q.c[7] == 1.0f);  // a channel that is zero everywhere gets scale 1, never 0
}

TEST_CASE(
    "kv_quant rotated rows: the reconstruction is H times the formula, and q4 fits spikes better",
    "[kernels]") {
  const uint32_t bits = GENERATE(8u, 4u);
  const uint32_t group = GENERATE(64u, 16u);
  const uint32_t D = 64;
  // Each row has one spike in a channel of its own: the channel scales cannot divide such
  // token-specific outliers out (every channel's maximum is a spike), the rotation spreads them.
  std::vector<float> x = test::random_vector(41 * D, 23 + bits, -1.0f, 1.0f);
  for (size_t r = 0; r < 41; ++r) x[r * D + (r * 7) % D] *= 20.0f;
  const Quantized plain = quantize(x, {bits, D, group});
  const Quantized rot = quantize(x, {bits, D, group, true});
  std::vector<float> back(x.size()), back_plain(x.size());
  kernels::cpu::kv_dequantize_rows(rot.view(), back.data());
  kernels::cpu::kv_dequantize_rows(plain.view(), back_plain.data());
  const std::vector<double> ref = reference_values(rot);
  double err = 0, err_plain = 0, norm = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    INFO("bits " << bits << " group " << group << " value " << i);
    REQUIRE(std::fabs(double(back[i]) - ref[i]) <= 1e-5 * (1.0 + std::fabs(ref[i])));
    err += (double(back[i]) - x[i]) * (double(back[i]) - x[i]);
    err_plain += (double(back_plain[i]) - x[i]) * (double(back_plain[i]) - x[i]);
    norm += double(x[i]) * x[i];
  }
  INFO("relative error rotated " << std::sqrt(err / norm) << ", plain "
                                 << std::sqrt(err_plain / norm));
  CHECK(std::sqrt(err / norm) < (bits == 8 ? 0.01 : 0.1));
  if (bits == 4 && group == D) CHECK(err < err_plain);  // the reason for the rotation
}

TEST_CASE("attention over quantized K/V equals dequantize-then-attend", "[kernels]") {
  const uint32_t bits = GENERATE(8u, 4u);
  const uint32_t group = GENERATE(64u, 16u);
  const bool rotated = GENERATE(false, true);
  const bool byte_params = GENERATE(false, true);
  const uint32_t D = 64, n_q = 3;
  const size_t R = 301;
  const kernels::KvQuantLayout l{bits, D, group, rotated, byte_params};
  const Quantized k = quantize(outlier_rows(R, D, 5 + bits), l);
  const Quantized v = quantize(test::random_vector(R * D, 9 + group, -2.0f, 2.0f), l);
  const std::vector<float> q = test::random_vector(n_q * D, 3, -1.0f, 1.0f);
  const float scale = 1.0f / 8.0f;
  const std::vector<double> kd = reference_values(k), vd = reference_values(v);

  // Reference in double: logits, softmax, weighted sum, log-sum-exp.
  std::vector<double> logits(n_q * R), want(n_q * D, 0.0), want_lse(n_q);
  for (uint32_t t = 0; t < n_q; ++t) {
    double mx = -INFINITY;
    for (size_t r = 0; r < R; ++r) {
      double s = 0;
      for (uint32_t j = 0; j < D; ++j) s += double(q[t * D + j]) * kd[r * D + j];
      logits[t * R + r] = scale * s;
      mx = std::max(mx, logits[t * R + r]);
    }
    double sum = 0;
    for (size_t r = 0; r < R; ++r) sum += std::exp(logits[t * R + r] - mx);
    want_lse[t] = mx + std::log(sum);
    for (size_t r = 0; r < R; ++r) {
      const double p = std::exp(logits[t * R + r] - mx) / sum;
      for (uint32_t j = 0; j < D; ++j) want[t * D + j] += p * vd[r * D + j];
    }
  }

  std::vector<float> scores(n_q * R);
  kernels::cpu::kv_quant_scores(q.data(), n_q, k.view(), scale, scores.data());
  for (size_t i = 0; i < scores.size(); ++i) {
    INFO("logit " << i);
    REQUIRE(std::fabs(scores[i] - logits[i]) <= 2e-5 * (1.0 + std::fabs(logits[i])));
  }

  std::vector<float> out(n_q * D, NAN), lse(n_q, NAN), work(n_q * R);
  kernels::cpu::kv_quant_attend(
      {q.data(), n_q, k.view(), v.view(), scale, work.data(), out.data(), lse.data()});
  for (size_t i = 0; i < out.size(); ++i) {
    INFO("output " << i << ": " << out[i] << " vs " << want[i]);
    REQUIRE(std::fabs(out[i] - want[i]) <= 1e-5 * (1.0 + std::fabs(want[i])));
  }
  for (uint32_t t = 0; t < n_q; ++t)
    REQUIRE(std::fabs(lse[t] - want_lse[t]) <= 1e-5 * (1.0 + std::fabs(want_lse[t])));
  double psum = 0;
  for (size_t r = 0; r < R; ++r) psum += work[r];
  CHECK(std::fabs(psum - 1.0) < 1e-5);  // the workspace holds the probabilities
}

TEST_CASE("attention over no quantized rows gives zeros and lse -inf", "[kernels]") {
  const kernels::KvQuantLayout l{4, 8, 8};
  std::vector<float> c(8, 1.0f), q(8, 1.0f), out(8, NAN), lse(1, 0.0f);
  kernels::KvQuantRows none{l, 0, c.data(), nullptr, nullptr};
  kernels::cpu::kv_quant_attend({q.data(), 1, none, none, 1.0f, nullptr, out.data(), lse.data()});
  CHECK(out == std::vector<float>(8, 0.0f));
  CHECK(std::isinf(lse[0]));
  CHECK(lse[0] < 0);
}

TEST_CASE("the .kvz reader's reconstruction is the kernel's, bit for bit", "[kernels][format]") {
  for (format::DType t : {format::DType::Q8, format::DType::Q4}) {
    format::CacheHeader h;
    h.n_kv_heads = 2;
    h.head_dim = 32;
    h.kv_dtype = t;
    h.kv_group_size = 8;
    // The file's one layout: rotated rows, byte group parameters.
    const kernels::KvQuantLayout l{format::dtype_bits(t), 32, 8, /*rotated=*/true,
                                   /*byte_params=*/true};
    const std::vector<uint32_t> head_rows = {5, 9};
    format::QuantRows qr;
    std::vector<float> kernel_values;
    size_t at = 0;
    for (uint32_t hd = 0; hd < 2; ++hd) {
      const Quantized q = quantize(outlier_rows(head_rows[hd], 32, 40 + hd), l);
      qr.channel_scale.insert(qr.channel_scale.end(), q.c.begin(), q.c.end());
      qr.params.insert(qr.params.end(), q.p.begin(), q.p.end());
      qr.codes.insert(qr.codes.end(), q.codes.begin(), q.codes.end());
      std::vector<float> back(q.rows * 32);
      kernels::cpu::kv_dequantize_rows(q.view(), back.data());
      kernel_values.insert(kernel_values.end(), back.begin(), back.end());
      at += q.rows;
    }
    std::vector<float> format_values(at * 32, NAN);
    const std::vector<uint32_t> positions(at, 0);  // kv_f16_below 0: no f16 rows
    format::dequantize_rows(h, head_rows, positions, qr, format_values);
    CHECK(format_values == kernel_values);
  }
}

TEST_CASE("attention over quantized K/V: each query row's result is the same bits alone",
          "[kernels]") {
  // A served batch attends several answers' rows in one call; each row must get what it gets by
  // itself. Layouts of one group a row (q8, and q4 in split code order: the unrolled scores) and
  // of several (the general loop), 64 and 128 channels, more rows than one weighted-sum block.
  for (uint32_t bits : {8u, 4u})
    for (uint32_t group : {0u, 16u})
      for (uint32_t D : {64u, 128u}) {
        const kernels::KvQuantLayout l{bits, D, group ? group : D, true, true};
        const size_t R = 301;
        const uint32_t n_q = 3;
        const Quantized k = quantize(outlier_rows(R, D, 7 + bits), l);
        const Quantized v = quantize(test::random_vector(R * D, 11 + D, -2.0f, 2.0f), l);
        const std::vector<float> q = test::random_vector(n_q * D, 13, -1.0f, 1.0f);
        std::vector<float> out(n_q * D, NAN), lse(n_q, NAN), work(n_q * R);
        kernels::cpu::kv_quant_attend(
            {q.data(), n_q, k.view(), v.view(), 0.125f, work.data(), out.data(), lse.data()});
        for (uint32_t t = 0; t < n_q; ++t) {
          std::vector<float> one(D, NAN), w1(R);
          float lse1 = NAN;
          kernels::cpu::kv_quant_attend({q.data() + size_t(t) * D, 1, k.view(), v.view(), 0.125f,
                                         w1.data(), one.data(), &lse1});
          INFO("bits " << bits << ", group " << l.group << ", D " << D << ", row " << t);
          CHECK(std::equal(one.begin(), one.end(), out.begin() + size_t(t) * D));
          CHECK(lse1 == lse[t]);
        }
      }
}
