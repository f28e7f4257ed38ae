// What Verify::Full vouches for and the K/V value check: a section marked zstd that holds no
// decodable frame (checksums recomputed over it) fails `--verify`, not only the later load; a NaN
// or infinity in K/V is Errc::corrupt naming layer, head and row on first access and under Full;
// and the writer refuses values the reader would refuse (including f16 overflow to infinity).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>

#include "tests/format/fixtures.h"
#include "tests/format/patch.h"
#include "tests/support/thrown.h"

using namespace kvzip;
using namespace kvzip::format;
using namespace kvzip::format::testing;

TEST_CASE("--verify decodes every zstd section: raw bytes under a zstd label fail it", "[format]") {
  CacheContents c = synthetic({});
  WriteOptions o;
  o.zstd_level = 3;
  Image img(to_bytes(c, o));
  const size_t s = kv_section(c, 1);
  // Same Stored_Size, bytes that are no zstd frame, every checksum recomputed over them.
  std::memset(img.bytes.data() + img.section_start(s), 0xAB, img.stored(s));
  img.reseal_section(s);
  img.reseal();
  expect_corrupt([&] { CacheReader::open_memory(img.bytes, {Verify::Full}); }, "not a zstd frame");
  // Without --verify the file opens and the damage surfaces where the layer is read, as before.
  CacheReader r = CacheReader::open_memory(img.bytes);
  expect_corrupt([&] { r.load(); }, "not a zstd frame");
  expect_corrupt([&] { r.verify(); }, "not a zstd frame");
}

TEST_CASE("whatever opens with Verify::Full loads, re-prunes and exports", "[format]") {
  // Damage a zstd K/V section byte by byte, checksums recomputed: a frame that still decodes may
  // pass, but then every later use must pass too (the sweep's "verify over-claims" count).
  CacheContents c = synthetic({});
  WriteOptions o;
  o.zstd_level = 3;
  const std::vector<uint8_t> good = to_bytes(c, o);
  const size_t s = kv_section(c, 2);
  int passed = 0, refused = 0;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    Image img(good);
    const uint64_t at = img.section_start(s) + (seed * 2654435761u) % img.stored(s);
    img.bytes[at] ^= static_cast<uint8_t>(1u << (seed % 8));
    img.reseal_section(s);
    img.reseal();
    std::optional<CacheReader> r;
    try {
      r.emplace(CacheReader::open_memory(img.bytes, {Verify::Full}));
    } catch (const Error& e) {
      CHECK((e.code() == Errc::corrupt || e.code() == Errc::checksum_mismatch));
      ++refused;
      continue;
    }
    ++passed;
    INFO("seed " << seed << " passed --verify");
    CHECK_NOTHROW(prune(r->load(), 0.25));
  }
  CHECK(passed + refused == 200);
  CHECK(refused > 0);
}

TEST_CASE("a NaN key is corrupt, naming layer, head, row and position, before anything uses it",
          "[format]") {
  CacheContents c = synthetic({});
  Image img(to_bytes(c));
  const uint32_t D = c.header.head_dim, h0 = c.layers[1].head_rows[0];
  const size_t s = kv_section(c, 1);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(img.bytes.data() + img.section_start(s) + uint64_t{h0} * D * 4, &nan,
              4);  // head 1, row 0
  img.reseal_section(s);
  img.reseal();
  const std::string where = "layer 1 head 1 row 0 (position " +
                            std::to_string(c.layers[1].positions[h0]) + ") holds a NaN key";
  CacheReader r = CacheReader::open_memory(img.bytes);  // small sections only: opens
  CHECK_NOTHROW(r.load_layer(0));
  expect_corrupt([&] { r.kv_view(1); }, where);
  expect_corrupt([&] { r.load_layer(1); }, where);
  expect_corrupt([&] { CacheReader::open_memory(img.bytes, {Verify::Full}); }, where);
  CacheReader trusted =
      CacheReader::open_memory(img.bytes, {Verify::Metadata});  // asked not to look
  CHECK(std::isnan(trusted.load_layer(1).k[uint64_t{h0} * D]));
}

TEST_CASE("an infinite f16 value in a zstd section is corrupt once decoded", "[format]") {
  SyntheticSpec spec;
  spec.dtype = DType::F16;
  CacheContents c = synthetic(spec);
  WriteOptions o;
  o.zstd_level = 0;
  Image img(to_bytes(c, o));
  const size_t s = kv_section(c, 0);
  const uint64_t rows = c.layers[0].positions.size();
  const uint16_t inf = 0x7c00;
  std::memcpy(img.bytes.data() + img.section_start(s) + rows * c.header.head_dim * 2, &inf,
              2);  // V row 0
  img.reseal_section(s);
  img.reseal();
  expect_corrupt([&] { CacheReader::open_memory(img.bytes).load(); }, "layer 0 head 0 row 0");
  expect_corrupt([&] { CacheReader::open_memory(img.bytes, {Verify::Full}); }, "infinite value");
}

TEST_CASE("the writer refuses K/V values the reader would refuse", "[format]") {
  TempDir dir;
  CacheContents c = synthetic({});
  c.layers[2].v[3] = std::numeric_limits<float>::infinity();
  const Error e = test::error_from([&] { write_cache_file(c, dir.path("x.kvz")); }, "no error");
  CHECK(e.code() == Errc::invalid_argument);
  CHECK_THAT(e.what(), Catch::Matchers::Contains("layers[2] head 0 row 0: value infinity"));
  SyntheticSpec spec;
  spec.dtype = DType::F16;
  CacheContents h = synthetic(spec);
  h.layers[0].k[0] = 70000.0f;  // finite in f32, infinity in f16
  const Error e2 = test::error_from([&] { write_cache_file(h, dir.path("y.kvz")); }, "no error");
  CHECK(e2.code() == Errc::invalid_argument);
  CHECK_THAT(e2.what(), Catch::Matchers::Contains("does not fit f16") &&
                            Catch::Matchers::Contains("bf16 or f32"));
  h.header.kv_dtype = DType::BF16;  // the same value fits bf16
  CHECK_NOTHROW(write_cache_file(h, dir.path("z.kvz")));
  CHECK(dir.list() == std::vector<std::string>{"z.kvz"});
}

TEST_CASE("a directory given as a cache file says it is a directory", "[format]") {
  TempDir dir;
  const Error e = test::error_from([&] { CacheReader::open(dir.dir()); }, "no error");
  CHECK(e.code() == Errc::invalid_argument);
  CHECK_THAT(e.what(), Catch::Matchers::Contains("is a directory"));
}
