// CacheReader::read_quant_layer: the stored q8/q4 rows of a layer as the file holds them (what a
// quantized base is loaded from, loader::quant_base_from_reader). It returns exactly the stored
// bytes (channel scales, f16 rows, parameters, codes; no f32 rows), raw and zstd; it refuses other
// dtypes; and it owes the same value checks as read_kv: a row whose values overflow to infinity
// is corrupt naming layer, head and row, while large but finite values pass (the bound on
// c·(s·q + m) fails there, so the exact check decides).
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

CacheContents quantized(DType t, uint32_t group) {
  CacheContents c =
      synthetic(SyntheticSpec{.head_dim = 16, .document = 60, .seed = 8});  // prefix 4
  compress::set_kv_dtype(c, {t, group});
  return c;
}

// A q4 image (one group a row) whose K channel 0 of head 0 in layer 1 has scale `c`; with `top`,
// the first quantized row of layer 1 (head 0 row 4, after the 4 prefix rows) also gets the
// largest scale code, zero point 0 and code 15 in channel 0: a value of c · 15 · 31·2^-7.
std::vector<uint8_t> patched(float c, bool top) {
  const CacheContents q = quantized(DType::Q4, 0);
  Image img(to_bytes(q));
  const size_t s = kv_section(q, 1);
  const uint64_t D = q.header.head_dim, H = q.header.n_kv_heads;
  const uint64_t F = f16_row_count(q.header, q.layers[1].positions),
                 Q = q.layers[1].positions.size() - F;
  const uint64_t at = img.section_start(s), params = at + 8 * H * D + 4 * F * D,
                 codes = params + 4 * Q;
  std::memcpy(img.bytes.data() + at, &c, 4);  // K channel scales (H, D) first
  if (top) {
    img.bytes[params] = 255;    // scale code
    img.bytes[params + 1] = 0;  // zero point
    img.bytes[codes] |= 0x0f;   // channel 0 in the low nibble
  }
  img.reseal_section(s);
  img.reseal();
  return img.bytes;
}

}  // namespace

TEST_CASE("read_quant_layer returns a layer's stored q8/q4 rows as written",
          "[format][kvquant-attn]") {
  const DType t = GENERATE(DType::Q8, DType::Q4);
  const uint32_t group = GENERATE(0u, 4u);
  const int zstd = GENERATE(0, 3);
  INFO(dtype_name(t) << " group " << group << " zstd " << zstd);
  const CacheContents c = quantized(t, group);
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
    CHECK_FALSE(got.qk.dense.empty());  // the prefix rows
  }
}

TEST_CASE("read_quant_layer refuses other dtypes and checks values as read_kv does",
          "[format][kvquant-attn]") {
  const CacheContents f = synthetic({});
  const std::vector<uint8_t> fb = to_bytes(f);
  try {
    (void)CacheReader::open_memory(fb).read_quant_layer(0);
    FAIL("expected Errc::invalid_argument");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::invalid_argument);
  }
  // c = 3e38 under the largest scale code: head 0 row 4 channel 0 is 3e38 · 15 · 0.242 = infinity.
  const std::vector<uint8_t> inf = patched(3e38f, true);
  const CacheReader r = CacheReader::open_memory(inf);
  CHECK_NOTHROW(r.read_quant_layer(0));
  expect_corrupt([&] { (void)r.read_quant_layer(1); }, "layer 1 head 0 row 4");
  std::vector<float> k(r.layer_rows(1) * r.header().head_dim), v(k.size());
  expect_corrupt([&] { r.read_kv(1, k, v); }, "layer 1 head 0 row 4");
  CHECK_NOTHROW(
      CacheReader::open_memory(inf, {Verify::Metadata}).read_quant_layer(1));  // asked not to look
  // c = 5e37 with the parameters as written: the bound c·(15·s + |m|) passes FLT_MAX / D, but
  // every value c·(s·q + m) (|s·q + m| about 1 at most) and the rotation of the row stay
  // finite, so the exact check lets it through.
  const std::vector<uint8_t> big = patched(5e37f, false);
  const CacheReader rb = CacheReader::open_memory(big);
  const LayerKv got = rb.read_quant_layer(1);
  CHECK(got.qk.channel_scale[0] == 5e37f);
  CHECK_NOTHROW(rb.read_kv(1, k, v));
}
