// The PNG writer checked by an independent reader written here: signature, IHDR fields, the CRC of
// every chunk (recomputed bit by bit, without the writer's table), the zlib header and Adler-32,
// and the stored deflate blocks decoded back to the exact pixels. Also the plot: glyph coverage
// and that plot_report draws every series.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "common/error.h"
#include "eval/detail/raster.h"
#include "eval/plot.h"
#include "eval/png.h"

using namespace kvzip;
using namespace kvzip::eval;

namespace {

std::span<const uint8_t> bytes_of(const char* s) {
  return {reinterpret_cast<const uint8_t*>(s), std::strlen(s)};
}

// CRC-32 the slow way: one bit at a time, reflected polynomial 0xEDB88320.
uint32_t bitwise_crc(const uint8_t* p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return ~c;
}

uint32_t be32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | p[3];
}

struct Chunk {
  std::string type;
  std::vector<uint8_t> data;
};

// Splits a PNG into chunks, checking each CRC independently.
std::vector<Chunk> read_chunks(const std::vector<uint8_t>& png) {
  const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  REQUIRE(png.size() >= 8);
  REQUIRE(std::memcmp(png.data(), sig, 8) == 0);
  std::vector<Chunk> chunks;
  size_t pos = 8;
  while (pos < png.size()) {
    REQUIRE(pos + 12 <= png.size());
    const uint32_t len = be32(&png[pos]);
    REQUIRE(pos + 12 + len <= png.size());
    Chunk c{std::string(reinterpret_cast<const char*>(&png[pos + 4]), 4),
            std::vector<uint8_t>(png.begin() + pos + 8, png.begin() + pos + 8 + len)};
    CHECK(be32(&png[pos + 8 + len]) == bitwise_crc(&png[pos + 4], 4 + len));
    chunks.push_back(std::move(c));
    pos += 12 + len;
  }
  return chunks;
}

// Decodes a zlib stream of stored blocks only; checks header, LEN/NLEN and Adler-32.
std::vector<uint8_t> inflate_stored(const std::vector<uint8_t>& z) {
  REQUIRE(z.size() >= 6);
  CHECK(z[0] == 0x78);
  CHECK((z[0] * 256 + z[1]) % 31 == 0);
  CHECK((z[1] & 0x20) == 0);  // no preset dictionary
  std::vector<uint8_t> out;
  size_t pos = 2;
  bool final = false;
  while (!final) {
    REQUIRE(pos + 5 <= z.size());
    final = z[pos] & 1;
    REQUIRE(((z[pos] >> 1) & 3) == 0);  // BTYPE 00: stored
    const uint32_t len = z[pos + 1] | (z[pos + 2] << 8), nlen = z[pos + 3] | (z[pos + 4] << 8);
    REQUIRE((len ^ 0xFFFFu) == nlen);
    REQUIRE(pos + 5 + len <= z.size());
    out.insert(out.end(), z.begin() + pos + 5, z.begin() + pos + 5 + len);
    pos += 5 + len;
  }
  REQUIRE(pos + 4 == z.size());
  uint32_t a = 1, b = 0;  // Adler-32 written out plainly
  for (uint8_t x : out) a = (a + x) % 65521, b = (b + a) % 65521;
  CHECK(be32(&z[pos]) == ((b << 16) | a));
  return out;
}

Image test_image(uint32_t w, uint32_t h) {
  Image img(w, h, Rgb{0, 0, 0});
  for (uint32_t y = 0; y < h; ++y)
    for (uint32_t x = 0; x < w; ++x)
      img.set(int(x), int(y), Rgb{uint8_t(x * 7 + y), uint8_t(y * 13), uint8_t(x ^ y)});
  return img;
}

// Decodes an RGB, non-interlaced, filter-0 PNG written by encode_png back to an Image.
Image decode(const std::vector<uint8_t>& png) {
  const std::vector<Chunk> chunks = read_chunks(png);
  REQUIRE(chunks.size() == 3);
  REQUIRE(chunks[0].type == "IHDR");
  REQUIRE(chunks[0].data.size() == 13);
  const uint8_t* h = chunks[0].data.data();
  Image img(be32(h), be32(h + 4), Rgb{});
  CHECK(h[8] == 8);   // bit depth
  CHECK(h[9] == 2);   // colour type RGB
  CHECK(h[10] == 0);  // deflate
  CHECK(h[11] == 0);  // filter method
  CHECK(h[12] == 0);  // no interlace
  REQUIRE(chunks[1].type == "IDAT");
  CHECK(chunks[2].type == "IEND");
  CHECK(chunks[2].data.empty());
  const std::vector<uint8_t> raw = inflate_stored(chunks[1].data);
  const size_t stride = size_t(img.width) * 3;
  REQUIRE(raw.size() == (stride + 1) * img.height);
  for (uint32_t y = 0; y < img.height; ++y) {
    CHECK(raw[y * (stride + 1)] == 0);  // filter None
    std::memcpy(img.rgb.data() + y * stride, raw.data() + y * (stride + 1) + 1, stride);
  }
  return img;
}

}  // namespace

TEST_CASE("CRC-32 and Adler-32 match their published check values", "[eval]") {
  CHECK(crc32(bytes_of("123456789")) == 0xCBF43926u);
  CHECK(crc32(bytes_of("")) == 0u);
  CHECK(crc32(bytes_of("56789"), crc32(bytes_of("1234"))) == 0xCBF43926u);  // continued
  CHECK(adler32(bytes_of("Wikipedia")) == 0x11E60398u);
  CHECK(adler32(bytes_of("")) == 1u);
}

TEST_CASE("a PNG decodes back to the exact pixels with valid chunk CRCs", "[eval]") {
  const Image img = test_image(5, 3);
  const Image back = decode(encode_png(img));
  CHECK(back.width == 5);
  CHECK(back.height == 3);
  CHECK(back.rgb == img.rgb);
}

TEST_CASE("an image larger than one stored block spans several blocks", "[eval]") {
  const Image img = test_image(200, 120);  // 120 * 601 = 72120 bytes > 65535
  const std::vector<uint8_t> png = encode_png(img);
  CHECK(decode(png).rgb == img.rgb);
}

TEST_CASE("an empty or inconsistent image is refused", "[eval]") {
  CHECK_THROWS_AS(encode_png(Image{}), Error);
  Image bad(2, 2, Rgb{});
  bad.rgb.pop_back();
  CHECK_THROWS_AS(encode_png(bad), Error);
}

TEST_CASE("write_png leaves exactly the encoded bytes and no temporary file", "[eval]") {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("kvzip-png-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "p.png").string();
  const Image img = test_image(4, 4);
  write_png(path, img);
  std::ifstream in(path, std::ios::binary);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(bytes == encode_png(img));
  size_t entries = 0;  // p.png only: no temporary of any name is left
  for (const auto& e : std::filesystem::directory_iterator(dir)) entries += e.path().filename() == "p.png" ? 1 : 100;
  CHECK(entries == 1);
  CHECK_THROWS_AS(write_png((dir / "missing" / "p.png").string(), img), Error);
  std::filesystem::remove_all(dir);
}

TEST_CASE("the bitmap font has a distinct glyph for every character the plot uses", "[eval]") {
  const std::string chars = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ .,%()-_:/=+|'?";
  for (size_t i = 0; i < chars.size(); ++i)
    for (size_t j = i + 1; j < chars.size(); ++j) {
      INFO(chars[i] << " vs " << chars[j]);
      CHECK(std::memcmp(detail::glyph5x7(chars[i]), detail::glyph5x7(chars[j]), 7) != 0);
    }
  CHECK(detail::glyph5x7('k') == detail::glyph5x7('K'));
  CHECK(detail::glyph5x7('~') == detail::glyph5x7('?'));
}

TEST_CASE("text is drawn pixel for pixel from the glyph rows", "[eval]") {
  Image img(12, 9, Rgb{255, 255, 255});
  const Rgb ink{0, 0, 0};
  detail::draw_text(img, 1, 1, "T1", ink, 1);
  const uint8_t* t = detail::glyph5x7('T');
  const uint8_t* one = detail::glyph5x7('1');
  for (int row = 0; row < 7; ++row)
    for (int col = 0; col < 5; ++col) {
      CHECK((img.at(1 + col, 1 + row) == ink) == bool(t[row] & (0x10 >> col)));
      CHECK((img.at(7 + col, 1 + row) == ink) == bool(one[row] & (0x10 >> col)));
    }
  CHECK(img.at(6, 1) == Rgb{255, 255, 255});  // the gap column between characters
}

TEST_CASE("the report plot draws one coloured line per method", "[eval]") {
  EvalReport r;
  r.rows.push_back({"full", 1.0, 1.0, 40.0, 50.0, 100.0, 0.0, 4, 0.0, 1.0});
  for (double ratio : {0.2, 0.6, 1.0}) {
    r.rows.push_back({"kvzip", ratio, ratio, 30.0, 40.0, 100.0 * ratio, 0.1, 4, 0.0, 1.0});
    r.rows.push_back({"h2o", ratio, ratio, 10.0, 20.0, 50.0 * ratio, 0.5, 4, 0.0, 1.0});
  }
  const Image img = plot_report(r);
  CHECK(img.width == 1280);
  CHECK(img.height == 536);
  auto count = [&](Rgb c) {
    size_t n = 0;
    for (uint32_t y = 0; y < img.height; ++y)
      for (uint32_t x = 0; x < img.width; ++x) n += img.at(x, y) == c;
    return n;
  };
  CHECK(count(Rgb{31, 119, 180}) > 200);  // kvzip, the first series colour
  CHECK(count(Rgb{255, 127, 14}) > 200);  // h2o, the second
  CHECK(count(Rgb{44, 160, 44}) == 0);    // no third series
}

TEST_CASE("the F1 panel zooms to small scores with readable ticks", "[eval]") {
  EvalReport r;
  r.rows.push_back({"full", 1.0, 1.0, 7.6, 15.0, 100.0, 0.0, 96, 0.0, 1.0});
  r.rows.push_back({"kvzip", 0.1, 0.1, 5.9, 11.0, 6.0, 0.1, 96, 0.0, 1.0});
  r.rows.push_back({"kvzip", 0.5, 0.5, 7.3, 15.0, 81.0, 0.0, 96, 0.0, 1.0});
  std::vector<PlotPanel> p = report_panels(r);
  REQUIRE(p.size() == 2);
  CHECK(p[0].y_max == 100.0);
  REQUIRE(p[0].series.size() == 1);
  CHECK(p[0].series[0].x == std::vector<double>{0.1, 0.5});
  CHECK(p[0].series[0].y == std::vector<double>{6.0, 81.0});
  CHECK(p[1].y_max == 10.0);  // 7.6 * 1.1 = 8.4 -> ticks of 2 up to 10
  CHECK(p[1].y_tick == 2.0);
  REQUIRE(p[1].reference);
  CHECK(*p[1].reference == 7.6);
  r.rows[0].f1 = 62.0;
  p = report_panels(r);
  CHECK(p[1].y_max == 80.0);  // 68.2 -> ticks of 20
  CHECK(p[1].y_tick == 20.0);
}
