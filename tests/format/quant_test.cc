// The q8/q4 dtypes in the .kvz (spec "Quantized K/V"): round trips keep every stored byte (raw and
// zstd) under registry ids 10/11; the section has its documented size; the prefix rows are f16
// rows and the channel scales come from the other rows; a quantized row reconstructs as H times
// c·fma(s, q, m); the writer refuses rows that were never quantized, bad f16 values and head
// dimensions that are not a power of two; prune and HDF5 move the stored rows without
// re-quantizing them.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>

#include "common/hadamard.h"
#include "common/half.h"
#include "common/kv_params.h"
#include "compress/quantize.h"
#include "tests/format/fixtures.h"
#include "tests/format/patch.h"

using namespace kvzip;
using namespace kvzip::format;
using namespace kvzip::format::testing;

namespace {

constexpr uint32_t kD = 16;

CacheContents quantized(DType t, uint32_t group, uint64_t seed = 4) {
  CacheContents c = with_outliers(kD, seed);  // L 3, Hkv 2, prefix 4
  compress::set_kv_dtype(c, {t, group});
  return c;
}

uint64_t f16_rows(const CacheContents& c) {
  uint64_t n = 0;
  for (const LayerKv& l : c.layers) n += f16_row_count(c.header, l.positions);
  return n;
}

}  // namespace

TEST_CASE("q8/q4 caches round-trip their stored rows exactly, raw and zstd, with ids 10/11",
          "[format]") {
  const DType t = GENERATE(DType::Q8, DType::Q4);
  const uint32_t group = GENERATE(0u, 4u);
  const int zstd = GENERATE(0, 3);
  INFO(dtype_name(t) << " group " << group << " zstd " << zstd);
  const CacheContents c = quantized(t, group);
  CHECK(c.header.kv_group_size == (group ? group : kD));
  REQUIRE(c.header.kv_f16_below == c.header.prefix_length());
  REQUIRE(f16_rows(c) == 3 * 2 * c.header.prefix_length());  // every head keeps its prefix rows
  const std::vector<uint8_t> bytes = to_bytes_zstd(c, zstd);
  CacheReader r = CacheReader::open_memory(bytes, {Verify::Full});
  CHECK(r.version_minor() == 0);
  CHECK(r.header().kv_f16_below == c.header.prefix_length());
  check_loads(r, c);
  check_read_kv(r, c, 1);     // read_kv (the loader's path) gives the same values as load()
  CHECK_FALSE(r.kv_view(0));  // no zero-copy f32 view of quantized rows
  if (zstd == 0) {            // the Meta section is readable in place only when not compressed
    Image im(bytes);
    CHECK(im.u64(im.meta_value("kv.dtype")) == (t == DType::Q8 ? 10u : 11u));
  }
}

TEST_CASE("a q8/q4 section has the documented size", "[format]") {
  const DType t = GENERATE(DType::Q8, DType::Q4);
  const uint32_t group = GENERATE(0u, 8u);
  const CacheContents c = quantized(t, group);
  const uint64_t b = dtype_bits(t), G = group ? group : kD;
  uint64_t want = 0, f32 = 0;
  for (const LayerKv& l : c.layers) {
    const uint64_t f = f16_row_count(c.header, l.positions), q = l.positions.size() - f;
    want += 2 * (2 * kD * 4 + f * kD * 2 + q * (2 * kD / G + kD * b / 8));
    f32 += 2 * l.positions.size() * kD * 4;
  }
  uint64_t got = 0;
  for (const SectionInfo& s : CacheReader::open_memory(to_bytes(c)).sections())
    if (s.name == "kv") got += s.raw_size;
  CHECK(got == want);
  // Under a third (q4) and a half (q8) of f32 even at D = 16, where the channel scales and the f16
  // rows weigh more than at D = 64.
  CHECK(got * (t == DType::Q4 ? 3 : 2) < f32);
}

TEST_CASE("f16 rows hold the f16 values; the channel scales come from the other rows", "[format]") {
  const CacheContents in = with_outliers(kD);
  const CacheContents c = quantized(DType::Q4, 0);
  for (size_t l = 0; l < c.layers.size(); ++l) {
    const LayerKv &a = in.layers[l], &q = c.layers[l];
    size_t r = 0;
    for (uint32_t hd = 0; hd < a.head_rows.size(); ++hd) {
      std::vector<float> kmax(kD, 0.0f);
      for (uint32_t i = 0; i < a.head_rows[hd]; ++i, ++r) {
        std::vector<float> y(a.k.begin() + r * kD, a.k.begin() + (r + 1) * kD);
        if (a.positions[r] < c.header.kv_f16_below) {
          for (uint32_t j = 0; j < kD; ++j)
            REQUIRE(q.k[r * kD + j] == f16_to_f32(f32_to_f16(y[j])));
          continue;
        }
        hadamard_rotate(y.data(), kD);  // the scales are those of the rotated rows
        for (uint32_t j = 0; j < kD; ++j) kmax[j] = std::max(kmax[j], std::fabs(y[j]));
      }
      for (uint32_t j = 0; j < kD; ++j)
        CHECK(q.qk.channel_scale[hd * kD + j] == (kmax[j] > 0 ? kmax[j] : 1.0f));
    }
  }
}

TEST_CASE("a quantized row reconstructs as H times c·fma(s, q, m)", "[format]") {
  const DType t = GENERATE(DType::Q8, DType::Q4);
  const CacheContents c = quantized(t, 4);
  const uint32_t bits = dtype_bits(t), groups = kD / 4;
  for (const LayerKv& layer : c.layers) {
    size_t r = 0, qi = 0;
    for (uint32_t hd = 0; hd < layer.head_rows.size(); ++hd)
      for (uint32_t i = 0; i < layer.head_rows[hd]; ++i, ++r) {
        if (layer.positions[r] < c.header.kv_f16_below) continue;
        std::vector<double> y(kD);
        for (uint32_t j = 0; j < kD; ++j) {
          const KvGroupParams p = kv_byte_group_params(layer.qk.params[qi * groups + j / 4], bits);
          const uint8_t b = layer.qk.codes[qi * kD * bits / 8 + (bits == 8 ? j : j / 2)];
          const uint32_t code = bits == 8 ? b : (j % 2 ? b >> 4 : b & 15);
          y[j] = layer.qk.channel_scale[hd * kD + j] * std::fma(p.s, float(code), p.m);
        }
        for (uint32_t o = 0; o < kD; ++o) {  // the matrix product, not the butterflies
          double x = 0;
          for (uint32_t j = 0; j < kD; ++j) x += (std::popcount(o & j) % 2 ? -1.0 : 1.0) * y[j];
          x /= std::sqrt(double(kD));
          REQUIRE(std::fabs(layer.k[r * kD + o] - x) <= 1e-5 * (1.0 + std::fabs(x)));
        }
        ++qi;
      }
  }
}

TEST_CASE("the writer refuses q8/q4 rows that were never quantized or hold bad f16 values",
          "[format]") {
  CacheContents c = synthetic(SyntheticSpec{.head_dim = kD, .document = 60});
  c.header.kv_dtype = DType::Q4;
  c.header.kv_group_size = kD;
  c.header.kv_f16_below = 4;
  CHECK_THROWS_WITH(to_bytes(c), Catch::Matchers::Contains("rows are not quantized"));
  c.header.kv_group_size = 5;
  CHECK_THROWS_WITH(to_bytes(c), Catch::Matchers::Contains("must divide head_dim"));
  CacheContents bad = quantized(DType::Q4, 0);
  bad.layers[1].qv.dense.pop_back();
  CHECK_THROWS_WITH(to_bytes(bad), Catch::Matchers::Contains("wrong shape"));
  bad = quantized(DType::Q4, 0);
  bad.layers[1].qk.dense[kD + 3] = 0x7e00;  // NaN in head 0, row 1, channel 3
  CHECK_THROWS_WITH(to_bytes(bad),
                    Catch::Matchers::Contains("K head 0 row 1: f16 value of channel 3 is NaN"));
  CHECK_THROWS_AS(compress::set_kv_dtype(bad, {DType::Q4, 3}), Error);  // 3 does not divide 16
  // f16 rows exist only with q8/q4.
  CacheContents f = quantized(DType::Q8, 0);
  compress::set_kv_dtype(f, {DType::F16});
  CHECK(f.header.kv_f16_below == 0);
  f.header.kv_f16_below = 2;
  CHECK_THROWS_WITH(to_bytes(f), Catch::Matchers::Contains("f16 rows exist only with q8/q4"));
}

TEST_CASE("q8/q4 need a power-of-two head dimension", "[format]") {
  CacheContents odd = synthetic(SyntheticSpec{.head_dim = 12});
  try {
    compress::set_kv_dtype(odd, {DType::Q8, 0});
    FAIL("a head dimension of 12 was quantized");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::invalid_argument);
    CHECK_THAT(e.what(), Catch::Matchers::Contains("power-of-two head dimension") &&
                             Catch::Matchers::Contains("12"));
  }
  // The writer refuses such a header too (what a reader would refuse).
  CacheContents c = quantized(DType::Q4, 0);
  c.header.head_dim = 12;
  c.header.kv_group_size = 4;
  CHECK_THROWS_WITH(to_bytes(c), Catch::Matchers::Contains("power-of-two head_dim"));
}

TEST_CASE("a cache without prefix rows stores every row quantized", "[format]") {
  CacheContents c = synthetic(SyntheticSpec{.head_dim = kD, .prefix = 0, .document = 30});
  compress::set_kv_dtype(c, {DType::Q4, 0});
  CHECK(c.header.kv_f16_below == 0);
  CHECK(f16_rows(c) == 0);
  check_writes_and_loads(c);
}

TEST_CASE("set_kv_dtype: the same q8/q4 again keeps the stored rows; another group or f16 does not",
          "[format]") {
  CacheContents c = quantized(DType::Q8, 4);
  const CacheContents before = c;
  compress::set_kv_dtype(c, {DType::Q8, 4});
  std::string why;
  CHECK(same_contents(c, before, &why));
  compress::set_kv_dtype(c, {DType::Q8, 8});  // re-quantized from the values it holds
  CHECK(c.header.kv_group_size == 8);
  CHECK(c.layers[0].qk.params.size() * 2 == before.layers[0].qk.params.size());
  compress::set_kv_dtype(c, {DType::F16});
  CHECK(c.layers[0].qk.empty());
  CHECK(c.header.kv_group_size == 0);
}

TEST_CASE("prune keeps f16 rows and quantized rows as stored", "[format]") {
  const DType t = GENERATE(DType::Q8, DType::Q4);
  const CacheContents c = quantized(t, 8, 6);
  const CacheContents p = prune(c, c.header.achieved_ratio / 3);
  REQUIRE(p.header.kv_dtype == t);
  REQUIRE(p.header.kv_f16_below == c.header.kv_f16_below);
  CHECK(f16_rows(p) == f16_rows(c));  // prefix rows are never evicted
  check_pruned_as_stored(c, p);
}

TEST_CASE("HDF5 export then import keeps a q8/q4 cache's stored rows", "[format]") {
  check_hdf5_round_trip(quantized(DType::Q8, 4, 9));
  check_hdf5_round_trip(quantized(DType::Q4, 0, 10));
}
