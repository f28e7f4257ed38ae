// Byte group parameters of rotated q8/q4 (v1.4, spec §12.1 "Byte parameters", common/kv_params.h):
// the scale codes decode to the exact values the spec's formula gives, the minimum is exact,
// set_kv_dtype writes them by default for rotated rows only, the file is v1.4 with dtype id 10/11
// and a section 2 bytes a group smaller than v1.3's, every stored byte round-trips raw and with
// zstd, prune copies the rows without re-quantizing them, HDF5 export/import gives the same bytes,
// and the error stays within half a step of the decoded scale.
#include <catch2/catch.hpp>

#include <cmath>

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

CacheContents stored(DType t, uint32_t group, bool byte_params, uint64_t seed = 4) {
  CacheContents c = with_outliers(kD, seed);
  compress::set_kv_dtype(c, {t, group, true, true, byte_params});
  return c;
}

uint64_t kv_raw_bytes(const CacheReader& r) {
  uint64_t n = 0;
  for (const SectionInfo& s : r.sections())
    if (s.name == "kv") n += s.raw_size;
  return n;
}

}  // namespace

TEST_CASE("byte scale codes decode to (16 + e mod 16) * 2^(e/16 - 22), increasing; minima are exact", "[format]") {
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

TEST_CASE("kv_byte_params_for covers the group's range within half a step", "[format]") {
  for (uint32_t bits : {4u, 8u})
    for (auto [lo, hi] : {std::pair{-1.0f, 1.0f}, std::pair{-0.3f, 0.9f}, std::pair{-0.8f, 0.01f},
                          std::pair{0.2f, 0.7f}, std::pair{-0.6f, -0.1f}, std::pair{0.0f, 0.0f},
                          std::pair{-1e-7f, 3e-7f}}) {
      INFO(bits << " bits, [" << lo << ", " << hi << "]");
      const uint16_t w = kv_byte_params_for(lo, hi, bits);
      const KvGroupParams p = kv_group_params(&w, 0, true, bits);
      const float levels = float((1u << bits) - 1);
      for (float y : {lo, hi, 0.5f * (lo + hi), std::min(lo, 0.0f), std::max(hi, 0.0f)}) {
        const float q = std::clamp(std::nearbyint((y - p.m) / p.s), 0.0f, levels);
        CHECK(std::fabs(std::fma(p.s, q, p.m) - y) <= 0.5f * p.s * (1 + 1e-5f));
      }
      // a scale that covers the range (0 included), at most kKvScaleSearch codes above the smallest
      const float need = (std::max(hi, 0.0f) - std::min(lo, 0.0f)) / levels;
      CHECK(p.s >= need);
      const uint32_t e = w & 255;
      if (e > kKvScaleSearch) CHECK(kv_byte_scale(e - kKvScaleSearch - 1) < need);
      // the extreme of larger magnitude sits on the grid, to the zero point's resolution
      const float big = std::fabs(hi) >= std::fabs(lo) ? std::max(hi, 0.0f) : std::min(lo, 0.0f);
      const float qb = std::clamp(std::nearbyint((big - p.m) / p.s), 0.0f, levels);
      CHECK(std::fabs(std::fma(p.s, qb, p.m) - big) <= 0.5f * p.s * (bits == 8 ? 1.0f : 1.0f / 16) * (1 + 1e-5f));
    }
}

TEST_CASE("kv_byte_params_for takes, of the scales it tries, the one that puts the other extreme nearest the grid",
          "[format]") {
  // q4, the maximum anchored: [-0.37, 0.9] needs s >= 1.27/15; the smallest covering scale leaves
  // the minimum off the grid, a slightly larger one puts it closer.
  const float lo = -0.37f, hi = 0.9f;
  const uint16_t w = kv_byte_params_for(lo, hi, 4);
  const KvGroupParams p = kv_group_params(&w, 0, true, 4);
  auto err_at = [](float s, float m, float y) {
    return std::fabs(std::fma(s, std::clamp(std::nearbyint((y - m) / s), 0.0f, 15.0f), m) - y);
  };
  const float need = (hi - lo) / 15;
  uint32_t e0 = 0;
  while (kv_byte_scale(e0) < need) ++e0;
  const uint32_t e = w & 255;
  CHECK(e >= e0);
  CHECK(e <= e0 + kKvScaleSearch);
  for (uint32_t k = e0; k <= e0 + kKvScaleSearch; ++k) {  // no tried scale does better
    const float s = kv_byte_scale(k);
    const float z = std::clamp(std::nearbyint(-(hi - 15 * s) / s * 16), 0.0f, 255.0f);
    CHECK(err_at(p.s, p.m, lo) <= err_at(s, kv_byte_min(s, uint32_t(z), 4), lo));
  }
  CHECK(err_at(p.s, p.m, hi) <= p.s / 32 * (1 + 1e-5f));  // the anchored end
}

TEST_CASE("byte-parameter q8/q4 round-trip exactly, raw and zstd, as v1.4 files with ids 10/11", "[format]") {
  const DType t = GENERATE(DType::Q8, DType::Q4);
  const uint32_t group = GENERATE(0u, 4u);
  const int zstd = GENERATE(0, 3);
  INFO(dtype_name(t) << " group " << group << " zstd " << zstd);
  const CacheContents c = stored(t, group, true);
  REQUIRE(c.header.kv_rotated);
  REQUIRE(c.header.kv_byte_params);
  const std::vector<uint8_t> bytes = to_bytes_zstd(c, zstd);
  CacheReader r = CacheReader::open_memory(bytes, {Verify::Full});
  CHECK(r.version_minor() == 4);
  CHECK(r.header().kv_byte_params);
  check_loads(r, c);
  check_read_kv(r, c, 2);
  if (zstd == 0) {
    Image im(bytes);
    CHECK(im.u64(im.meta_value("kv.dtype")) == (t == DType::Q8 ? 10u : 11u));
  }
  // The same rows with f16 parameters (v1.3): 2 bytes more per quantized row, group and block.
  const CacheContents f16 = stored(t, group, false);
  const std::vector<uint8_t> b16 = to_bytes(f16);
  CacheReader r16 = CacheReader::open_memory(b16);
  CHECK(r16.version_minor() == 3);
  uint64_t quantized = 0;
  for (const LayerKv& l : c.layers) quantized += l.positions.size() - f16_row_count(c.header, l.positions);
  const uint64_t groups = kD / (group ? group : kD);
  CHECK(kv_raw_bytes(r16) - kv_raw_bytes(r) == 2 * 2 * groups * quantized);
}

TEST_CASE("byte parameters keep every quantized value within half a decoded step", "[format]") {
  const DType t = GENERATE(DType::Q8, DType::Q4);
  const CacheContents in = with_outliers(kD);
  const CacheContents c = stored(t, 4, true);
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
        const KvGroupParams p = kv_group_params(layer.qk.params.data() + qi * groups, g, true, bits);
        for (uint32_t j = g * 4; j < g * 4 + 4; ++j) {
          const float cj = layer.qk.channel_scale[head * kD + j];
          const uint8_t b = layer.qk.codes[qi * kD * bits / 8 + (bits == 8 ? j : j / 2)];
          const uint32_t code = bits == 8 ? b : (j % 2 ? b >> 4 : b & 15);
          REQUIRE(std::fabs(std::fma(p.s, float(code), p.m) - y[j] / cj) <= 0.5f * p.s * (1 + 1e-4f) + 1e-6f);
        }
      }
      ++qi;
    }
  }
}

TEST_CASE("set_kv_dtype writes byte parameters only for rotated rows, and keeps what is stored", "[format]") {
  CacheContents plain = with_outliers(kD);
  compress::set_kv_dtype(plain, {DType::Q4, 0, true, false, true});  // unrotated: f16 parameters (v1.2)
  CHECK_FALSE(plain.header.kv_byte_params);
  CHECK(CacheReader::open_memory(to_bytes(plain)).version_minor() == 2);
  CacheContents r = stored(DType::Q8, 4, true);
  const CacheContents before = r;
  compress::set_kv_dtype(r, {DType::Q8, 4});  // the defaults ask for what is stored
  std::string why;
  CHECK(same_contents(r, before, &why));
  compress::set_kv_dtype(r, {DType::Q8, 4, true, true, false});  // f16 parameters: re-quantized, v1.3
  CHECK_FALSE(r.header.kv_byte_params);
  CHECK(CacheReader::open_memory(to_bytes(r)).version_minor() == 3);
  // The writer refuses byte parameters without rotation (no dtype id holds them).
  CacheContents bad = with_outliers(kD);
  compress::set_kv_dtype(bad, {DType::Q4, 0, true, false});
  bad.header.kv_byte_params = true;
  CHECK_THROWS_WITH(to_bytes(bad), Catch::Matchers::Contains("kv_byte_params is set without kv_rotated"));
}

TEST_CASE("prune keeps byte-parameter rows as stored, without re-quantizing", "[format]") {
  const CacheContents c = stored(DType::Q4, 8, true, 6);
  const CacheContents p = prune(c, c.header.achieved_ratio / 3);
  REQUIRE(p.header.kv_byte_params);
  check_pruned_as_stored(c, p);
}

TEST_CASE("HDF5 export then import keeps byte-parameter rows", "[format]") {
  check_hdf5_round_trip(stored(DType::Q8, 4, true, 9));
  check_hdf5_round_trip(stored(DType::Q4, 0, true, 10));
}
