// Byte group parameters of q8/q4 (spec §12.1 "Byte parameters", common/kv_params.h): the scale
// codes decode to the exact values the spec's formula gives, the minimum is exact, the writer is
// least squares over the candidates common/kv_params.h names, and every quantized value of a
// stored cache is within half a decoded step of the rotated row it encodes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "common/hadamard.h"
#include "common/kv_params.h"
#include "compress/quantize.h"
#include "tests/format/fixtures.h"
#include "tests/format/patch.h"

using namespace kvzip;
using namespace kvzip::format;
using namespace kvzip::format::testing;

namespace {

constexpr uint32_t kD = 16;

CacheContents stored(DType t, uint32_t group, uint64_t seed = 4) {
  CacheContents c = with_outliers(kD, seed);
  compress::set_kv_dtype(c, {t, group});
  return c;
}

}  // namespace

TEST_CASE(
    "byte scale codes decode to (16 + e mod 16) * 2^(e/16 - 22), increasing; minima are exact",
    "[format]") {
  float prev = 0.0f;
  for (uint32_t e = 0; e < 256; ++e) {
    const float s = kv_byte_scale(e);
    CHECK(double(s) == std::ldexp(16.0 + (e % 16), int(e / 16) - 22));
    CHECK(s > prev);  // the quantizer's search relies on it
    prev = s;
    for (uint32_t z : {0u, 1u, 17u, 128u, 255u})
      for (uint32_t bits : {4u, 8u}) {
        const double m = -double(s) * z * std::ldexp(1.0, int(bits) - 8);
        CHECK(double(kv_byte_min(s, z, bits)) == m);
        // s·q + m is exact as well, so fma and a product then a sum agree
        for (uint32_t q : {0u, 7u, 15u, 255u})
          CHECK(double(std::fma(s, float(q), kv_byte_min(s, z, bits))) == double(s) * q + m);
      }
  }
  const uint16_t w = static_cast<uint16_t>(0x25 | 200 << 8);  // e = 0x25, z = 200
  const KvGroupParams p = kv_group_params(&w, 0, true, 4);
  CHECK(p.s == kv_byte_scale(0x25));
  CHECK(p.m == -(kv_byte_scale(0x25) * 12.5f));
}

namespace {

// Squared error of a group under byte-parameter word w, with the quantizer's rounding.
double group_error(const std::vector<float>& y, uint16_t w, uint32_t bits) {
  const KvGroupParams p = kv_group_params(&w, 0, true, bits);
  const float levels = float((1u << bits) - 1);
  double err = 0;
  for (float v : y) {
    const float q = std::clamp(std::nearbyint((v - p.m) / p.s), 0.0f, levels);
    err += std::pow(double(std::fma(p.s, q, p.m)) - v, 2);
  }
  return err;
}

// Groups of every shape the writer meets: spread, with an outlier, one-signed, constant, tiny.
std::vector<std::vector<float>> writer_groups() {
  std::mt19937 rng(5);
  std::normal_distribution<float> g(0.0f, 0.3f);
  std::vector<std::vector<float>> out;
  for (int k = 0; k < 300; ++k) {
    std::vector<float> y(k % 3 == 0 ? 64 : k % 3 == 1 ? 32 : 4);
    for (float& v : y) v = std::clamp(g(rng), -1.0f, 1.0f);
    if (k % 5 == 1) y[k % y.size()] = (k % 2 ? 1.0f : -1.0f);  // an outlier at the channel scale
    if (k % 7 == 2)
      for (float& v : y) v = std::fabs(v);  // all positive
    if (k % 7 == 3)
      for (float& v : y) v = -std::fabs(v);  // all negative
    if (k % 11 == 4)
      for (float& v : y) v *= 1e-6f;  // tiny
    out.push_back(std::move(y));
  }
  out.push_back(std::vector<float>(8, 0.0f));
  out.push_back(std::vector<float>(8, 0.25f));
  out.push_back({-1.0f, 1.0f});
  return out;
}

}  // namespace

TEST_CASE("kv_byte_params_for: least squares over the scale codes and zero points the header names",
          "[format]") {
  // An independent enumeration of the candidates common/kv_params.h describes: the smallest
  // covering scale code and kKvScaleAbove more, and zero points that put the grid's bottom, top or
  // middle on the range's, rounded, and ±1.
  for (uint32_t bits : {4u, 8u}) {
    const float levels = float((1u << bits) - 1), unit = bits == 8 ? 1.0f : 16.0f;
    for (const std::vector<float>& y : writer_groups()) {
      const float lo = std::min(0.0f, *std::min_element(y.begin(), y.end()));
      const float hi = std::max(0.0f, *std::max_element(y.begin(), y.end()));
      uint32_t e0 = 0;
      while (e0 < 255 && kv_byte_scale(e0) < (hi - lo) / levels) ++e0;
      double best = INFINITY, anchored = INFINITY;
      for (uint32_t e = e0; e <= std::min(e0 + kKvScaleAbove, 255u); ++e) {
        const float s = kv_byte_scale(e);
        const float zb = -lo / s * unit, zt = (levels * s - hi) / s * unit;
        for (float zc : {zb, zt, (zb + zt) / 2})
          for (int dz = -1; dz <= 1; ++dz) {
            const float z = std::clamp(std::nearbyint(zc) + float(dz), 0.0f, 255.0f);
            const double err = group_error(y, uint16_t(e | uint32_t(z) << 8), bits);
            best = std::min(best, err);
            if (dz == 0 && zc != (zb + zt) / 2) anchored = std::min(anchored, err);
          }
      }
      const uint16_t w = kv_byte_params_for(y.data(), uint32_t(y.size()), bits);
      INFO(bits << " bits, " << y.size() << " values in [" << lo << ", " << hi << "], word " << w);
      CHECK(group_error(y, w, bits) == best);
      CHECK(group_error(y, w, bits) <= anchored);  // never worse than an end put on the grid
      const uint32_t e = w & 255u;
      CHECK(e >= e0);  // a covering scale
      CHECK(e <= e0 + kKvScaleAbove);
    }
  }
}

TEST_CASE(
    "kv_byte_params_for: a value inside the grid is within half a step, one outside clips to its "
    "end, close by",
    "[format]") {
  for (uint32_t bits : {4u, 8u}) {
    const float levels = float((1u << bits) - 1);
    for (const std::vector<float>& y : writer_groups()) {
      const uint16_t w = kv_byte_params_for(y.data(), uint32_t(y.size()), bits);
      const KvGroupParams p = kv_group_params(&w, 0, true, bits);
      const float top = std::fma(p.s, levels, p.m);
      for (float v : y) {
        const float q = kv_code(v, p, levels), back = std::fma(p.s, q, p.m);
        INFO(bits << " bits, value " << v << ", grid [" << p.m << ", " << top << "] step " << p.s);
        if (v >= p.m && v <= top) {
          CHECK(std::fabs(back - v) <= 0.5f * p.s * (1 + 1e-5f));
        } else {  // clipped: to the grid's end, at most 1.5 zero-point units past it
          CHECK(back == (v < p.m ? p.m : top));
          CHECK(std::fabs(back - v) <= 1.5f * p.s * (bits == 8 ? 1.0f : 1.0f / 16) * (1 + 1e-5f));
        }
      }
      CHECK(p.m <= 0.0f);  // z >= 0: the grid reaches 0 from below or at its bottom
    }
  }
}

TEST_CASE("byte parameters keep every quantized value within half a decoded step", "[format]") {
  const DType t = GENERATE(DType::Q8, DType::Q4);
  const CacheContents in = with_outliers(kD);
  const CacheContents c = stored(t, 4);
  // The bound is about the rotated rows divided by the channel scales (what the codes encode):
  // rotate the input here and compare with each code's value.
  const uint32_t bits = dtype_bits(t), groups = kD / 4;
  for (size_t l = 0; l < c.layers.size(); ++l) {
    const LayerKv& layer = c.layers[l];
    std::vector<float> rot(in.layers[l].k);
    size_t qi = 0;
    for (size_t r = 0; r < layer.positions.size(); ++r) {
      if (layer.positions[r] < c.header.kv_f16_below) continue;
      float* y = rot.data() + r * kD;
      hadamard_rotate(y, kD);
      uint32_t head = 0;
      for (size_t acc = layer.head_rows[0]; r >= acc; acc += layer.head_rows[++head]) {}
      for (uint32_t g = 0; g < groups; ++g) {
        const KvGroupParams p =
            kv_group_params(layer.qk.params.data() + qi * groups, g, true, bits);
        for (uint32_t j = g * 4; j < g * 4 + 4; ++j) {
          const float cj = layer.qk.channel_scale[head * kD + j];
          const uint8_t b = layer.qk.codes[qi * kD * bits / 8 + (bits == 8 ? j : j / 2)];
          const uint32_t code = bits == 8 ? b : (j % 2 ? b >> 4 : b & 15);
          REQUIRE(std::fabs(std::fma(p.s, float(code), p.m) - y[j] / cj) <=
                  0.5f * p.s * (1 + 1e-4f) + 1e-6f);
        }
      }
      ++qi;
    }
  }
}
