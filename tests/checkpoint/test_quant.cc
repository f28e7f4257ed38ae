// Dequantization of every supported ggml type from hand-written blocks (bytes spelled out, the
// expected values worked out by hand in the comments), F16/BF16 rows decoded like the scalar
// conversion, and the // test-support reference quantizers' error bounds (the conversions
// themselves: tests/common/test_half.cc).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/error.h"
#include "common/half.h"
#include "kernels/quant.h"
#include "tests/support/tiny_gguf.h"

using kvzip::Errc;
using kvzip::Error;
using kvzip::f16_to_f32;
using namespace kvzip::kernels::quant;

namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

std::vector<float> deq(GgmlType t, const std::vector<uint8_t>& block, int64_t n) {
  std::vector<float> y(size_t(n), -999.0f);
  dequantize_row(t, block.data(), y.data(), n);
  return y;
}

}  // namespace

TEST_CASE("the type table has ggml's ids and block geometry", "[checkpoint][gguf][quant]") {
  CHECK(std::string(type_name(GgmlType::Q4_1)) == "Q4_1");
  CHECK(block_elems(GgmlType::Q8_0) == 32);
  CHECK(block_bytes(GgmlType::Q8_0) == 34);
  CHECK(block_bytes(GgmlType::Q4_0) == 18);
  CHECK(block_bytes(GgmlType::Q4_1) == 20);
  CHECK(block_bytes(GgmlType::Q5_0) == 22);
  CHECK(block_bytes(GgmlType::Q5_1) == 24);
  CHECK(block_bytes(GgmlType::Q4_K) == 144);
  CHECK(block_bytes(GgmlType::Q6_K) == 210);
  CHECK(block_elems(GgmlType::Q6_K) == 256);
  CHECK(block_bytes(GgmlType::BF16) == 2);
  CHECK(uint32_t(GgmlType::BF16) == 30);
  CHECK(type_traits(4) == nullptr);   // removed Q4_2
  CHECK(type_traits(31) == nullptr);  // removed Q4_0_4_4
  CHECK(type_traits(1000) == nullptr);
  CHECK(row_bytes(GgmlType::Q4_1, 576) == 18 * 20);
  CHECK_THROWS_MATCHES(
      row_bytes(GgmlType::Q4_1, 33), Error,
      Catch::Predicate<Error>([](const Error& e) { return e.code() == Errc::invalid_argument; }));
}

TEST_CASE("BF16 rows decode to the top halves of fp32", "[checkpoint][gguf][quant]") {
  // Rows: bytes 80 3F | 40 C0 -> 1.0, -3.0
  CHECK(deq(GgmlType::BF16, {0x80, 0x3F, 0x40, 0xC0}, 2) == std::vector<float>{1.0f, -3.0f});
}

TEST_CASE("F16 rows decode like the scalar half conversion, NaNs included",
          "[checkpoint][gguf][quant]") {
  std::vector<uint8_t> src(2 * 0x10000);
  for (uint32_t h = 0; h < 0x10000; ++h) src[2 * h] = uint8_t(h), src[2 * h + 1] = uint8_t(h >> 8);
  const auto y = deq(GgmlType::F16, src, 0x10000);
  int mismatches = 0;
  for (uint32_t h = 0; h < 0x10000; ++h)
    if (bits(y[h]) != bits(f16_to_f32(uint16_t(h)))) ++mismatches;
  CHECK(mismatches == 0);
}

TEST_CASE("F32 rows are copied bit for bit", "[checkpoint][gguf][quant]") {
  // 1.5f = 0x3FC00000, -0.25f = 0xBE800000, little-endian.
  CHECK(deq(GgmlType::F32, {0x00, 0x00, 0xC0, 0x3F, 0x00, 0x00, 0x80, 0xBE}, 2) ==
        std::vector<float>{1.5f, -0.25f});
}

TEST_CASE("a hand-built Q4_0 block decodes to (q - 8) * d", "[checkpoint][gguf][quant]") {
  // d = half 0x3800 = 0.5. qs[0] = 0x0F: y0 = (15-8)*.5 = 3.5, y16 = (0-8)*.5 = -4.
  // qs[1] = 0x81: y1 = (1-8)*.5 = -3.5, y17 = (8-8)*.5 = 0. Other bytes 0x88 -> 0.
  std::vector<uint8_t> b = {0x00, 0x38, 0x0F, 0x81};
  b.resize(18, 0x88);
  std::vector<float> want(32, 0.0f);
  want[0] = 3.5f, want[16] = -4.0f, want[1] = -3.5f, want[17] = 0.0f;
  CHECK(deq(GgmlType::Q4_0, b, 32) == want);
}

TEST_CASE("a hand-built Q4_1 block decodes to q * d + m", "[checkpoint][gguf][quant]") {
  // d = 0x3400 = 0.25, m = 0xBC00 = -1. qs[0] = 0xF0: y0 = 0*.25-1 = -1, y16 = 15*.25-1 = 2.75.
  // qs[2] = 0x37: y2 = 7*.25-1 = 0.75, y18 = 3*.25-1 = -0.25. Other bytes 0x44 -> 4*.25-1 = 0.
  std::vector<uint8_t> b = {0x00, 0x34, 0x00, 0xBC, 0xF0, 0x44, 0x37};
  b.resize(20, 0x44);
  std::vector<float> want(32, 0.0f);
  want[0] = -1.0f, want[16] = 2.75f, want[2] = 0.75f, want[18] = -0.25f;
  CHECK(deq(GgmlType::Q4_1, b, 32) == want);
}

TEST_CASE("a hand-built Q5_0 block takes the 5th bit from qh", "[checkpoint][gguf][quant]") {
  // d = 1.0; qh = 0x00010001 (bits 0 and 16). qs[0] = 0xF0: y0 = (0|16)-16 = 0,
  // y16 = (15|16)-16 = 15. qs[1] = 0x5A: y1 = 10-16 = -6, y17 = 5-16 = -11. Others 0x88: -8.
  std::vector<uint8_t> b = {0x00, 0x3C, 0x01, 0x00, 0x01, 0x00, 0xF0, 0x5A};
  b.resize(22, 0x88);
  std::vector<float> want(32, -8.0f);
  want[0] = 0.0f, want[16] = 15.0f, want[1] = -6.0f, want[17] = -11.0f;
  CHECK(deq(GgmlType::Q5_0, b, 32) == want);
}

TEST_CASE("a hand-built Q5_1 block decodes to q * d + m with 5-bit q",
          "[checkpoint][gguf][quant]") {
  // d = 0.5, m = 2.0 (0x4000); qh = 0x80000000 (bit 31 = element 31).
  // qs[0] = 0x00: y0 = y16 = 2. qs[15] = 0x1F: y15 = 15*.5+2 = 9.5, y31 = (1|16)*.5+2 = 10.5.
  // Other bytes 0x21: low 1 -> 2.5, high 2 -> 3.
  std::vector<uint8_t> b = {0x00, 0x38, 0x00, 0x40, 0x00, 0x00, 0x00, 0x80};
  b.resize(24, 0x21);
  b[8] = 0x00, b[8 + 15] = 0x1F;
  std::vector<float> want(32);
  for (int j = 0; j < 16; ++j) want[j] = 2.5f, want[j + 16] = 3.0f;
  want[0] = want[16] = 2.0f;
  want[15] = 9.5f, want[31] = 10.5f;
  CHECK(deq(GgmlType::Q5_1, b, 32) == want);
}

TEST_CASE("a hand-built Q8_0 block decodes to q * d", "[checkpoint][gguf][quant]") {
  // d = 0.5; qs[j] = j - 16 except qs[0] = 127 -> 63.5, qs[1] = -128 -> -64, qs[2] = -1 -> -0.5.
  std::vector<uint8_t> b = {0x00, 0x38};
  for (int j = 0; j < 32; ++j) b.push_back(uint8_t(int8_t(j - 16)));
  b[2] = 0x7F, b[3] = 0x80, b[4] = 0xFF;
  std::vector<float> want(32);
  for (int j = 0; j < 32; ++j) want[j] = 0.5f * float(j - 16);
  want[0] = 63.5f, want[1] = -64.0f, want[2] = -0.5f;
  CHECK(deq(GgmlType::Q8_0, b, 32) == want);
}

TEST_CASE("a hand-built Q4_K block uses 6-bit scales and subtracts dmin * m",
          "[checkpoint][gguf][quant]") {
  // d = 1.0, dmin = 0.5. Scale bytes give (sc, m) per sub-block:
  //   j0 (2,4) j1 (3,0) j2 (1,2) j3 (1,0) j4 (1,2) j5 (0,0) j6 (19,49) j7 (0,0)
  // where j6 takes its top 2 bits from q[2] >> 6 (sc: 3 | 1<<4) and q[6] >> 6 (m: 1 | 3<<4).
  std::vector<uint8_t> b = {0x00, 0x3C, 0x00, 0x38, 2,    3,    0x41, 1,
                            4,    0,    0xC2, 0,    0x21, 0x00, 0x13, 0x00};
  // Chunk c covers qs[32c..32c+31]: low nibble -> sub-block 2c, high -> 2c+1.
  const uint8_t chunk_byte[4] = {0x5A, 0x0F, 0xF1, 0x07};
  for (int c = 0; c < 4; ++c) b.insert(b.end(), 32, chunk_byte[c]);
  REQUIRE(b.size() == 144);
  std::vector<float> want(256);
  for (int l = 0; l < 32; ++l) {
    want[l] = 2 * 10 - 0.5f * 4;         // 18
    want[32 + l] = 3 * 5 - 0;            // 15
    want[64 + l] = 1 * 15 - 0.5f * 2;    // 14
    want[96 + l] = 0;                    // 1 * 0 - 0
    want[128 + l] = 1 * 1 - 0.5f * 2;    // 0
    want[160 + l] = 0;                   // sc 0, m 0
    want[192 + l] = 19 * 7 - 0.5f * 49;  // 108.5
    want[224 + l] = 0;
  }
  CHECK(deq(GgmlType::Q4_K, b, 256) == want);
}

TEST_CASE("a hand-built Q5_K block adds the fifth bit from qh per 64-group half",
          "[checkpoint][gguf][quant]") {
  // Same d, dmin and scales as the Q4_K case; qh bit 0 set for every l (group 0, low half: +16)
  // and bit 3 set for l < 8 (group 1, high half: +16).
  std::vector<uint8_t> b = {0x00, 0x3C, 0x00, 0x38, 2,    3,    0x41, 1,
                            4,    0,    0xC2, 0,    0x21, 0x00, 0x13, 0x00};
  for (int l = 0; l < 32; ++l) b.push_back(uint8_t(0x01 | (l < 8 ? 0x08 : 0)));
  const uint8_t chunk_byte[4] = {0x5A, 0x0F, 0xF1, 0x07};
  for (int c = 0; c < 4; ++c) b.insert(b.end(), 32, chunk_byte[c]);
  REQUIRE(b.size() == 176);
  std::vector<float> want(256);
  for (int l = 0; l < 32; ++l) {
    want[l] = 2 * (10 + 16) - 0.5f * 4;   // 50
    want[32 + l] = 3 * 5 - 0;             // 15
    want[64 + l] = 1 * 15 - 0.5f * 2;     // 14
    want[96 + l] = l < 8 ? 16.0f : 0.0f;  // sc 1, q 0 (+16 where bit 3), m 0
    want[128 + l] = 1 * 1 - 0.5f * 2;     // 0
    want[160 + l] = 0;                    // sc 0, m 0
    want[192 + l] = 19 * 7 - 0.5f * 49;   // 108.5
    want[224 + l] = 0;
  }
  CHECK(deq(GgmlType::Q5_K, b, 256) == want);
}

TEST_CASE("a hand-built Q6_K block assembles 6-bit values with d last",
          "[checkpoint][gguf][quant]") {
  // ql all 0, qh all 0xAA (every 2-bit high field = 2 -> q = 32 - 32 = 0), scales 1, d = 0.5.
  std::vector<uint8_t> b(210, 0);
  for (int i = 128; i < 192; ++i) b[i] = 0xAA;
  for (int i = 192; i < 208; ++i) b[i] = 1;
  b[208] = 0x00, b[209] = 0x38;
  b[192 + 0] = 2;                    // sc[0] = 2
  b[192 + 6] = uint8_t(int8_t(-3));  // sc[6] = -3
  b[192 + 9] = 5;                    // sc[9] = 5
  std::vector<float> want(256, 0.0f);
  b[0] = 0x21;  // l=0: q1 = 1 -> y0 = .5*2*1 = 1; q3 = 2 -> y64 = .5*sc[4]*2 = 1
  want[0] = 1.0f, want[64] = 1.0f;
  b[128 + 1] = 0x00;           // l=1 high bits 0: q1..q4 = -32
  want[1] = 0.5f * 2 * -32;    // sc[0]: -32
  want[33] = 0.5f * 1 * -32;   // sc[2]: -16
  want[65] = 0.5f * 1 * -32;   // sc[4]: -16
  want[97] = 0.5f * -3 * -32;  // sc[6]: 48
  b[52] = 0xF0;  // ql[l+32] for l=20 (is=1): q2 = 0, q4 = 15 -> y116 = .5*sc[7]*15 = 7.5
  want[116] = 7.5f;
  b[64 + 17] = 0x0F;  // second half, l=17 (is=1): q1 = 15 -> y145 = .5*sc[9]*15 = 37.5
  want[145] = 37.5f;
  b[128 + 32 + 31] = 0xFF;    // second half, l=31: high fields 3 -> q = 48 - 32 = 16 (ql = 0)
  want[159] = 0.5f * 5 * 16;  // sc[9] -> 40
  want[191] = 0.5f * 1 * 16;  // sc[11] -> 8
  want[223] = 0.5f * 1 * 16;  // sc[13]
  want[255] = 0.5f * 1 * 16;  // sc[15]
  CHECK(deq(GgmlType::Q6_K, b, 256) == want);
}

TEST_CASE("dequantizing an unsupported type names it", "[checkpoint][gguf][quant]") {
  std::vector<uint8_t> b(84, 0);
  std::vector<float> y(256);
  try {
    dequantize_row(GgmlType::Q2_K, b.data(), y.data(), 256);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::unsupported);
    CHECK_THAT(e.what(), Catch::Contains("Q2_K"));
  }
  CHECK_THROWS_AS(dequantize_row(GgmlType::Q4_0, b.data(), y.data(), 31), Error);
}

TEST_CASE("multi-threaded row dequantization matches single-threaded",
          "[checkpoint][gguf][quant]") {
  const int64_t rows = 600, n = 576;
  std::vector<float> x(size_t(rows * n));
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(float(i) * 0.37f) * 3.0f;
  std::vector<uint8_t> q;
  for (int64_t r = 0; r < rows; ++r) {
    auto row = kvzip::test::quantize_row(GgmlType::Q4_1, x.data() + r * n, n);
    q.insert(q.end(), row.begin(), row.end());
  }
  std::vector<float> a(x.size()), b(x.size());
  dequantize_rows(GgmlType::Q4_1, q.data(), a.data(), n, rows, 1);
  dequantize_rows(GgmlType::Q4_1, q.data(), b.data(), n, rows, 4);
  CHECK(a == b);
}

TEST_CASE("the test quantizers stay within half a step of the input", "[checkpoint][gguf][quant]") {
  std::vector<float> x(64);
  for (int i = 0; i < 64; ++i) x[i] = std::cos(float(i) * 1.3f) * (i < 32 ? 2.0f : 0.01f);
  struct Case {
    GgmlType t;
    float steps;  // max error = range / steps / 2 (Q4_0/Q5_0 clamp the top code: one full step)
  };
  for (const Case c : {Case{GgmlType::Q8_0, 254}, Case{GgmlType::Q4_0, 8}, Case{GgmlType::Q4_1, 15},
                       Case{GgmlType::Q5_0, 16}, Case{GgmlType::Q5_1, 31}}) {
    const auto q = kvzip::test::quantize_row(c.t, x.data(), 64);
    REQUIRE(q.size() == row_bytes(c.t, 64));
    std::vector<float> y(64);
    dequantize_row(c.t, q.data(), y.data(), 64);
    for (int blk = 0; blk < 2; ++blk) {
      const float range = blk == 0 ? 4.0f : 0.02f;
      for (int j = 0; j < 32; ++j) {
        INFO(type_name(c.t) << " element " << blk * 32 + j);
        CHECK(std::fabs(y[blk * 32 + j] - x[blk * 32 + j]) <= range / c.steps * 0.5f * 1.25f);
      }
    }
  }
}
