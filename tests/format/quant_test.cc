// The q8/q4 dtypes in the .kvz (spec "Quantized K/V"): write/read round trips keep the stored rows
// bit for bit (raw and zstd), the writer refuses rows that were never quantized, prune drops rows
// without re-quantizing the others, HDF5 export/import keeps the stored form, and a q8/q4 file is
// v1.1 while every other file stays v1.0.
#include <catch2/catch.hpp>

#include <cmath>

#include "compress/quantize.h"
#include "tests/format/fixtures.h"

using namespace kvzip;
using namespace kvzip::format;
using namespace kvzip::format::testing;

namespace {

// f16_prefix false: the v1.1 layout (every row quantized), whose exact sizes some tests check.
CacheContents quantized(DType t, uint32_t group, uint64_t seed = 3, bool f16_prefix = false) {
  CacheContents c = synthetic(SyntheticSpec{.head_dim = 16, .document = 60, .seed = seed});  // L 3, Hkv 2
  compress::set_kv_dtype(c, {t, group, f16_prefix});
  return c;
}

}  // namespace

TEST_CASE("q8/q4 caches round-trip their stored rows exactly, raw and zstd", "[format]") {
  const DType t = GENERATE(DType::Q8, DType::Q4);
  const uint32_t group = GENERATE(0u, 4u);
  const int zstd = GENERATE(0, 3);
  INFO(dtype_name(t) << " group " << group << " zstd " << zstd);
  const CacheContents c = quantized(t, group);
  CHECK(c.header.kv_group_size == (group ? group : 16u));
  const std::vector<uint8_t> bytes = to_bytes_zstd(c, zstd);
  CacheReader r = CacheReader::open_memory(bytes, {Verify::Full});
  CHECK(r.version_minor() == 1);
  check_loads(r, c);
  check_read_kv(r, c, 1);  // read_kv (the loader's path) gives the same values as load()
  CHECK_FALSE(r.kv_view(0));  // no zero-copy f32 view of quantized rows
}

TEST_CASE("a q4 file is about a seventh of the f32 file's K/V bytes", "[format]") {
  const CacheContents q4 = quantized(DType::Q4, 0);
  uint64_t rows = 0;
  for (const LayerKv& l : q4.layers) rows += l.positions.size();
  CacheContents f32 = q4;
  compress::set_kv_dtype(f32, {DType::F32});
  // K/V payload only (sections are padded to 4 KiB, so compare section sizes, not files).
  auto kv_bytes = [](const std::vector<uint8_t>& file) {
    uint64_t n = 0;
    for (const SectionInfo& s : CacheReader::open_memory(file).sections())
      if (s.name == "kv") n += s.raw_size;
    return n;
  };
  const auto fb = to_bytes(f32), qb = to_bytes(q4);
  CHECK(kv_bytes(fb) == rows * 16 * 2 * 4);
  // Per row and block: 8 code bytes + 4 bytes of (scale, minimum); per layer 2 * Hkv * D * 4.
  CHECK(kv_bytes(qb) == 2 * (rows * 12) + 3 * 2 * 2 * 16 * 4);
  CacheReader r = CacheReader::open_memory(fb);
  CHECK(r.version_minor() == 0);  // not q8/q4: still a v1.0 file
}

TEST_CASE("the writer refuses a q8/q4 cache whose rows were never quantized", "[format]") {
  CacheContents c = quantized(DType::F32, 0);
  c.header.kv_dtype = DType::Q4;
  c.header.kv_group_size = 16;
  CHECK_THROWS_WITH(to_bytes(c), Catch::Matchers::Contains("rows are not quantized"));
  c.header.kv_group_size = 5;
  CHECK_THROWS_WITH(to_bytes(c), Catch::Matchers::Contains("must divide head_dim"));
  CacheContents bad = quantized(DType::Q8, 0);
  bad.layers[2].qv.params[6] = 0x7c00;  // an infinite group scale
  CHECK_THROWS_WITH(to_bytes(bad), Catch::Matchers::Contains("scale is infinite"));
  CHECK_THROWS_AS(compress::set_kv_dtype(bad, {DType::Q4, 3}), Error);  // 3 does not divide 16
}

TEST_CASE("prune re-prunes a q4 cache without re-quantizing the rows it keeps", "[format]") {
  const CacheContents c = quantized(DType::Q4, 8, 5);
  const CacheContents p = prune(c, c.header.achieved_ratio / 2);
  REQUIRE(p.header.kv_dtype == DType::Q4);
  const uint32_t D = 16;
  const size_t P = 2 * D / 8, B = D / 2;
  size_t kept_total = 0;
  for (size_t l = 0; l < c.layers.size(); ++l) {
    const LayerKv &in = c.layers[l], &out = p.layers[l];
    CHECK(out.qk.channel_scale == in.qk.channel_scale);
    CHECK(out.qv.channel_scale == in.qv.channel_scale);
    // Each kept row is found in the input (same head, same position) with the same stored bytes.
    kept_total += for_each_kept_row(in, out, [&](size_t row, size_t j) {
      CHECK(std::equal(out.qk.codes.begin() + row * B, out.qk.codes.begin() + (row + 1) * B, in.qk.codes.begin() + j * B));
      CHECK(std::equal(out.qv.params.begin() + row * P, out.qv.params.begin() + (row + 1) * P, in.qv.params.begin() + j * P));
      CHECK(std::equal(out.k.begin() + row * D, out.k.begin() + (row + 1) * D, in.k.begin() + j * D));
    });
  }
  CHECK(kept_total > 0);
  check_writes_and_loads(p);  // and it writes and reads back as it is
}

TEST_CASE("set_kv_dtype: the same q8/q4 again keeps the stored rows; f16 drops them", "[format]") {
  CacheContents c = quantized(DType::Q8, 4);
  const CacheContents before = c;
  compress::set_kv_dtype(c, {DType::Q8, 4, false});
  std::string why;
  CHECK(same_contents(c, before, &why));
  compress::set_kv_dtype(c, {DType::F16});
  CHECK(c.layers[0].qk.empty());
  CHECK(c.header.kv_group_size == 0);
  CHECK(c.layers[0].k == before.layers[0].k);  // the dequantized values, now stored as f16
}

TEST_CASE("HDF5 export then import keeps a q4 cache's stored rows", "[format]") {
  check_hdf5_round_trip(quantized(DType::Q4, 4, 9));
}
