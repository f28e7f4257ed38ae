// The f16 rows of q8/q4 (v1.2, spec "Quantized K/V"): the prefix rows are stored as f16 values
// and the others quantized with channel scales taken over those others; round trips keep every
// stored byte, the section has its documented size, the file is v1.2 with a dtype id a v1.1
// reader does not know, prune and HDF5 move f16 rows as they are, and v1.1 stays writable.
// Everything here is the unrotated v1.2 layout (rotate false); quant_rotated_test.cc has v1.3.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

#include "common/half.h"
#include "compress/quantize.h"
#include "tests/format/fixtures.h"
#include "tests/format/patch.h"

using namespace kvzip;
using namespace kvzip::format;
using namespace kvzip::format::testing;

namespace {

constexpr uint32_t kD = 16;

// A synthetic cache whose prefix rows are 50x larger than the document rows in channels 0 and 1
// (an attention sink's massive activations sit in a few channels).
CacheContents with_sink(uint64_t seed = 4) {
  CacheContents c = synthetic(SyntheticSpec{.head_dim = kD, .document = 60, .seed = seed});  // L 3, Hkv 2
  for (LayerKv& layer : c.layers)
    for (size_t r = 0; r < layer.positions.size(); ++r)
      if (layer.positions[r] < c.header.prefix_length())
        for (uint32_t j = 0; j < 2; ++j) layer.k[r * kD + j] *= 50.0f, layer.v[r * kD + j] *= 50.0f;
  return c;
}

CacheContents quantized(DType t, uint32_t group, uint64_t seed = 4) {
  CacheContents c = with_sink(seed);
  compress::set_kv_dtype(c, {t, group, true, false});
  return c;
}

uint64_t f16_rows(const CacheContents& c) {
  uint64_t n = 0;
  for (const LayerKv& l : c.layers) n += f16_row_count(c.header, l.positions);
  return n;
}

}  // namespace

TEST_CASE("q8/q4 with f16 rows round-trip exactly, raw and zstd, as v1.2 files", "[format]") {
  const DType t = GENERATE(DType::Q8, DType::Q4);
  const uint32_t group = GENERATE(0u, 4u);
  const int zstd = GENERATE(0, 3);
  INFO(dtype_name(t) << " group " << group << " zstd " << zstd);
  const CacheContents c = quantized(t, group);
  REQUIRE(c.header.kv_f16_below == c.header.prefix_length());
  REQUIRE(f16_rows(c) == 3 * 2 * c.header.prefix_length());  // every head keeps its prefix rows
  const std::vector<uint8_t> bytes = to_bytes_zstd(c, zstd);
  CacheReader r = CacheReader::open_memory(bytes, {Verify::Full});
  CHECK(r.version_minor() == 2);
  CHECK(r.header().kv_f16_below == c.header.prefix_length());
  check_loads(r, c);
  check_read_kv(r, c, 2);
}

TEST_CASE("f16 rows hold the f16 values; the channel scales come from the other rows", "[format]") {
  const CacheContents in = with_sink();
  const CacheContents c = quantized(DType::Q4, 0);
  for (size_t l = 0; l < c.layers.size(); ++l) {
    const LayerKv &a = in.layers[l], &q = c.layers[l];
    size_t r = 0;
    for (uint32_t hd = 0; hd < a.head_rows.size(); ++hd) {
      std::vector<float> kmax(kD, 0.0f);
      for (uint32_t i = 0; i < a.head_rows[hd]; ++i, ++r)
        for (uint32_t j = 0; j < kD; ++j) {
          const float x = a.k[r * kD + j];
          if (a.positions[r] < c.header.kv_f16_below)
            REQUIRE(q.k[r * kD + j] == f16_to_f32(f32_to_f16(x)));
          else
            kmax[j] = std::max(kmax[j], std::fabs(x));
        }
      for (uint32_t j = 0; j < kD; ++j) CHECK(q.qk.channel_scale[hd * kD + j] == kmax[j]);
    }
  }
  // The sink no longer widens the document rows' steps in its channels (in the v1.1 layout the
  // channel scale of channels 0 and 1 is the sink's, 50x the document rows' range there).
  CacheContents old = with_sink();
  compress::set_kv_dtype(old, {DType::Q4, 0, false});
  double err_new = 0, err_old = 0;
  for (size_t l = 0; l < c.layers.size(); ++l)
    for (size_t r = 0; r < in.layers[l].positions.size(); ++r) {
      if (in.layers[l].positions[r] < c.header.prefix_length()) continue;
      for (uint32_t j = 0; j < kD; ++j) {
        const float x = in.layers[l].k[r * kD + j];
        err_new += std::pow(c.layers[l].k[r * kD + j] - x, 2);
        err_old += std::pow(old.layers[l].k[r * kD + j] - x, 2);
      }
    }
  CHECK(err_new * 4 < err_old);
}

TEST_CASE("a v1.2 section has the documented size and a dtype id v1.1 readers do not know", "[format]") {
  const DType t = GENERATE(DType::Q8, DType::Q4);
  const CacheContents c = quantized(t, 8);
  const uint64_t b = dtype_bits(t);
  uint64_t want = 0;
  for (const LayerKv& l : c.layers) {
    const uint64_t f = f16_row_count(c.header, l.positions), q = l.positions.size() - f;
    want += 2 * (2 * kD * 4 + f * kD * 2 + q * (4 * kD / 8 + kD * b / 8));
  }
  const std::vector<uint8_t> bytes = to_bytes(c);
  uint64_t got = 0;
  for (const SectionInfo& s : CacheReader::open_memory(bytes).sections())
    if (s.name == "kv") got += s.raw_size;
  CHECK(got == want);
  // kv.dtype is 6 (q8) or 7 (q4): a v1.1 reader's registry ends at 5, so it stops there with
  // `unsupported` instead of misreading the section (spec §18).
  Image im(bytes);
  CHECK(im.u64(im.meta_value("kv.dtype")) == (t == DType::Q8 ? 6u : 7u));
  // This reader treats an id beyond its registry the same way.
  im.set_u64(im.meta_value("kv.dtype"), 12);
  im.reseal_section(0);
  im.reseal();
  try {
    CacheReader::open_memory(im.bytes);
    FAIL("an unknown dtype id was accepted");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::unsupported);
    CHECK_THAT(e.what(), Catch::Matchers::Contains("id 12 is not in this reader's dtype registry"));
  }
}

TEST_CASE("prune keeps f16 rows and quantized rows as stored", "[format]") {
  const CacheContents c = quantized(DType::Q4, 8, 6);
  const CacheContents p = prune(c, c.header.achieved_ratio / 3);
  REQUIRE(p.header.kv_f16_below == c.header.kv_f16_below);
  CHECK(f16_rows(p) == f16_rows(c));  // prefix rows are never evicted
  check_pruned_as_stored(c, p);
}

TEST_CASE("set_kv_dtype switches between the v1.1 and v1.2 layouts", "[format]") {
  CacheContents c = quantized(DType::Q8, 4);
  const CacheContents before = c;
  compress::set_kv_dtype(c, {DType::Q8, 4, true, false});  // same layout: kept as stored
  std::string why;
  CHECK(same_contents(c, before, &why));
  compress::set_kv_dtype(c, {DType::Q8, 4, false});  // v1.1: re-quantized, every row coded
  CHECK(c.header.kv_f16_below == 0);
  CHECK(c.layers[0].qk.dense.empty());
  CHECK(CacheReader::open_memory(to_bytes(c)).version_minor() == 1);
  CacheContents f = c;
  compress::set_kv_dtype(f, {DType::F16});
  CHECK(f.header.kv_f16_below == 0);
  // f16 rows exist only with q8/q4.
  f.header.kv_f16_below = 2;
  CHECK_THROWS_WITH(to_bytes(f), Catch::Matchers::Contains("f16 rows exist only with q8/q4"));
}

TEST_CASE("the writer refuses f16 rows of the wrong shape or value", "[format]") {
  CacheContents c = quantized(DType::Q4, 0);
  c.layers[1].qv.dense.pop_back();
  CHECK_THROWS_WITH(to_bytes(c), Catch::Matchers::Contains("wrong shape"));
  c = quantized(DType::Q4, 0);
  c.layers[1].qk.dense[kD + 3] = 0x7e00;  // NaN in head 0, row 1, channel 3
  CHECK_THROWS_WITH(to_bytes(c), Catch::Matchers::Contains("K head 0 row 1: f16 value of channel 3 is NaN"));
}

TEST_CASE("HDF5 export then import keeps the f16 rows", "[format]") {
  check_hdf5_round_trip(quantized(DType::Q8, 4, 9));
}
