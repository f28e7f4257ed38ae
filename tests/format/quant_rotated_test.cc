// Hadamard-rotated codes of q8/q4 (v1.3, spec §12.1 "Rotated codes"): set_kv_dtype rotates only
// with f16 rows and a power-of-two D (else the v1.2/v1.1 layout, as asked or as forced), the file
// is v1.3 with dtype id 8/9 and the v1.2 section size, every stored byte round-trips raw and with
// zstd, the reconstruction is H times the unrotated formula, prune copies rotated rows without
// re-quantizing them, HDF5 export/import gives the same bytes, and rotation lowers the error of
// rows with outlier channels.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>

#include "common/hadamard.h"
#include "compress/quantize.h"
#include "tests/format/fixtures.h"
#include "tests/format/patch.h"

using namespace kvzip;
using namespace kvzip::format;
using namespace kvzip::format::testing;

namespace {

constexpr uint32_t kD = 16;

// v1.3: f16 rows, rotated, f16 group parameters (the byte parameters of v1.4 have their own tests).
CacheContents rotated(DType t, uint32_t group, uint64_t seed = 4) {
  CacheContents c = with_outliers(kD, seed);
  compress::set_kv_dtype(c, {t, group, true, true, false});
  return c;
}

}  // namespace

TEST_CASE("rotated q8/q4 round-trip exactly, raw and zstd, as v1.3 files with ids 8/9", "[format]") {
  const DType t = GENERATE(DType::Q8, DType::Q4);
  const uint32_t group = GENERATE(0u, 4u);
  const int zstd = GENERATE(0, 3);
  INFO(dtype_name(t) << " group " << group << " zstd " << zstd);
  const CacheContents c = rotated(t, group);
  REQUIRE(c.header.kv_rotated);
  const std::vector<uint8_t> bytes = to_bytes_zstd(c, zstd);
  CacheReader r = CacheReader::open_memory(bytes, {Verify::Full});
  CHECK(r.version_minor() == 3);
  CHECK(r.header().kv_rotated);
  check_loads(r, c);
  check_read_kv(r, c, 2);
  if (zstd == 0) {  // the Meta section is readable in place only when not compressed
    Image im(bytes);
    CHECK(im.u64(im.meta_value("kv.dtype")) == (t == DType::Q8 ? 8u : 9u));
  }
  // The same rows unrotated (v1.2) take exactly as many bytes: only the meaning changed.
  CacheContents plain = with_outliers(kD);
  compress::set_kv_dtype(plain, {t, group, true, false});
  CHECK_FALSE(plain.header.kv_rotated);
  CHECK(to_bytes(plain).size() == to_bytes(c).size());
}

TEST_CASE("rotated rows reconstruct as H times the unrotated formula", "[format]") {
  const CacheContents c = rotated(DType::Q4, 0);
  CacheHeader unrot = c.header;
  unrot.kv_rotated = false;
  for (const LayerKv& layer : c.layers) {
    std::vector<float> y(layer.k.size());
    dequantize_rows(unrot, layer.head_rows, layer.positions, layer.qk, y);
    for (size_t r = 0; r < layer.positions.size(); ++r) {
      if (layer.positions[r] < c.header.kv_f16_below) {  // f16 rows are not rotated
        for (uint32_t j = 0; j < kD; ++j) REQUIRE(layer.k[r * kD + j] == y[r * kD + j]);
        continue;
      }
      for (uint32_t i = 0; i < kD; ++i) {
        double x = 0;
        for (uint32_t j = 0; j < kD; ++j) x += (std::popcount(i & j) % 2 ? -1.0 : 1.0) * y[r * kD + j];
        x /= std::sqrt(double(kD));
        REQUIRE(std::fabs(layer.k[r * kD + i] - x) <= 1e-5 * (1.0 + std::fabs(x)));
      }
    }
  }
}

TEST_CASE("set_kv_dtype rotates only with f16 rows and a power-of-two head dimension", "[format]") {
  CacheContents c = with_outliers(kD);
  compress::set_kv_dtype(c, {DType::Q4, 0, false});  // no f16 rows: v1.1
  CHECK_FALSE(c.header.kv_rotated);
  CHECK(CacheReader::open_memory(to_bytes(c)).version_minor() == 1);
  CacheContents odd = synthetic(SyntheticSpec{.head_dim = 12});
  compress::set_kv_dtype(odd, {DType::Q8, 0});  // D = 12: v1.2
  CHECK_FALSE(odd.header.kv_rotated);
  CHECK(CacheReader::open_memory(to_bytes(odd)).version_minor() == 2);
  // Switching rotation re-quantizes; asking for what is stored keeps it.
  CacheContents r = rotated(DType::Q8, 4);
  const CacheContents before = r;
  compress::set_kv_dtype(r, {DType::Q8, 4, true, true, false});
  std::string why;
  CHECK(same_contents(r, before, &why));
  compress::set_kv_dtype(r, {DType::Q8, 4, true, false});
  CHECK_FALSE(r.header.kv_rotated);
  CHECK(CacheReader::open_memory(to_bytes(r)).version_minor() == 2);
  compress::set_kv_dtype(r, {DType::F16});
  CHECK_FALSE(r.header.kv_rotated);
  // The writer refuses a rotation the format cannot hold.
  CacheContents bad = with_outliers(12);
  compress::set_kv_dtype(bad, {DType::Q4, 0, true, false});
  bad.header.kv_rotated = true;
  CHECK_THROWS_WITH(to_bytes(bad), Catch::Matchers::Contains("power-of-two head_dim"));
}

TEST_CASE("rotation lowers the q4 error of rows with outlier channels", "[format]") {
  const CacheContents in = with_outliers(kD);
  const CacheContents rot = rotated(DType::Q4, 0);
  CacheContents plain = with_outliers(kD);
  compress::set_kv_dtype(plain, {DType::Q4, 0, true, false});
  double err_rot = 0, err_plain = 0;
  for (size_t l = 0; l < in.layers.size(); ++l)
    for (size_t i = 0; i < in.layers[l].k.size(); ++i) {
      err_rot += std::pow(double(rot.layers[l].k[i]) - in.layers[l].k[i], 2);
      err_plain += std::pow(double(plain.layers[l].k[i]) - in.layers[l].k[i], 2);
    }
  INFO("squared error rotated " << err_rot << ", unrotated " << err_plain);
  CHECK(err_rot < err_plain);
}

TEST_CASE("prune keeps rotated rows as stored, without re-quantizing", "[format]") {
  const CacheContents c = rotated(DType::Q4, 8, 6);
  const CacheContents p = prune(c, c.header.achieved_ratio / 3);
  REQUIRE(p.header.kv_rotated);
  check_pruned_as_stored(c, p);
}

TEST_CASE("HDF5 export then import keeps rotated rows", "[format]") {
  check_hdf5_round_trip(rotated(DType::Q8, 4, 9));
  check_hdf5_round_trip(rotated(DType::Q4, 0, 10));
}
