// CacheReader::read_quant_layer: the stored q8/q4 rows of a layer as the file holds them (what a
// quantized base is loaded from, loader::quant_base_from_reader). It returns exactly the stored
// bytes (channel scales, f16 rows, parameters, codes; no f32 rows), raw and zstd, v1.1 and v1.2
// layouts; it refuses other dtypes; and it owes the same value checks as read_kv: a row whose
// values overflow to infinity is corrupt naming layer, head and row, while large but finite
// values pass (the bound on c·(s·q + m) fails there, so the exact check decides).
#include <catch2/catch.hpp>

#include <cstring>
#include <functional>

#include "common/half.h"
#include "compress/quantize.h"
#include "tests/format/fixtures.h"
#include "tests/format/patch.h"

using namespace kvzip;
using namespace kvzip::format;
using namespace kvzip::format::testing;

namespace {

CacheContents quantized(DType t, uint32_t group, bool f16_prefix) {
  CacheContents c = synthetic(SyntheticSpec{.head_dim = 16, .document = 60, .seed = 8});
  compress::set_kv_dtype(c, {t, group, f16_prefix});
  return c;
}

// A q4 image (v1.1: every row quantized) whose K channel 0 of head 0 in layer 1 has scale `c`
// and whose first quantized row (head 0, row 0) has group 0 minimum `m`.
std::vector<uint8_t> patched(float c, uint16_t m) {
  const CacheContents q = quantized(DType::Q4, 0, false);
  Image img(to_bytes(q));
  const size_t s = kv_section(q, 1);
  const uint64_t D = q.header.head_dim, H = q.header.n_kv_heads;
  const uint64_t at = img.section_start(s);
  std::memcpy(img.bytes.data() + at, &c, 4);                      // K channel scales (H, D) first
  std::memcpy(img.bytes.data() + at + 8 * H * D + 2, &m, 2);      // after both scale blocks: K row 0 (s, m)
  img.reseal_section(s);
  img.reseal();
  return img.bytes;
}

}  // namespace

TEST_CASE("read_quant_layer returns a layer's stored q8/q4 rows as written", "[format][kvquant-attn]") {
  const DType t = GENERATE(DType::Q8, DType::Q4);
  const uint32_t group = GENERATE(0u, 4u);
  const bool f16_prefix = GENERATE(true, false);
  const int zstd = GENERATE(0, 3);
  INFO(dtype_name(t) << " group " << group << " f16 rows " << f16_prefix << " zstd " << zstd);
  const CacheContents c = quantized(t, group, f16_prefix);
  const std::vector<uint8_t> bytes = to_bytes_zstd(c, zstd);
  const CacheReader r = CacheReader::open_memory(bytes);
  for (uint32_t l = 0; l < c.header.n_layers; ++l) {
    const LayerKv got = r.read_quant_layer(l);
    const LayerKv& want = c.layers[l];
    CHECK(got.head_rows == want.head_rows);
    CHECK(got.positions == want.positions);
    CHECK(got.k.empty());
    CHECK(got.v.empty());
    for (int b = 0; b < 2; ++b) {
      const QuantRows& x = b ? got.qv : got.qk;
      const QuantRows& y = b ? want.qv : want.qk;
      CHECK(x.channel_scale == y.channel_scale);
      CHECK(x.dense == y.dense);
      CHECK(x.params == y.params);
      CHECK(x.codes == y.codes);
    }
    CHECK(got.qk.dense.empty() != f16_prefix);
  }
}

TEST_CASE("read_quant_layer refuses other dtypes and checks values as read_kv does", "[format][kvquant-attn]") {
  const CacheContents f = synthetic({});
  const std::vector<uint8_t> fb = to_bytes(f);
  try {
    (void)CacheReader::open_memory(fb).read_quant_layer(0);
    FAIL("expected Errc::invalid_argument");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::invalid_argument);
  }
  // c = 1e36 and m = 1000: row 0 channel 0 is 1e36 · (s·q + 1000) = infinity.
  const std::vector<uint8_t> inf = patched(1e36f, f32_to_f16(1000.0f));
  const CacheReader r = CacheReader::open_memory(inf);
  CHECK_NOTHROW(r.read_quant_layer(0));
  expect_corrupt([&] { (void)r.read_quant_layer(1); }, "layer 1 head 0 row 0");
  std::vector<float> k(r.layer_rows(1) * r.header().head_dim), v(k.size());
  expect_corrupt([&] { r.read_kv(1, k, v); }, "layer 1 head 0 row 0");
  CHECK_NOTHROW(CacheReader::open_memory(inf, {Verify::Metadata}).read_quant_layer(1));  // asked not to look
  // c = 2e38 with the minimum as written: the bound c·(15·s + |m|) passes FLT_MAX, every value
  // c · (s·q + m) with |s·q + m| <= 1 stays finite, so the exact check lets it through.
  const CacheContents q = quantized(DType::Q4, 0, false);
  uint16_t m0;
  std::memcpy(&m0, &q.layers[1].qk.params[1], 2);
  const std::vector<uint8_t> big = patched(2e38f, m0);
  const CacheReader rb = CacheReader::open_memory(big);
  const LayerKv got = rb.read_quant_layer(1);
  CHECK(got.qk.channel_scale[0] == 2e38f);
}
