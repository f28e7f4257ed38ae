// PNG encoding (see png.h). Every multi-byte PNG and zlib field is big-endian; the LEN/NLEN
// fields of a stored deflate block are little-endian (RFC 1951 §3.2.4).
#include "eval/png.h"

#include <algorithm>
#include <array>

#include "common/error.h"
#include "common/atomic_file.h"

namespace kvzip::eval {
namespace {

std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t n = 0; n < 256; ++n) {
    uint32_t c = n;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    t[n] = c;
  }
  return t;
}

void put_be32(std::vector<uint8_t>& out, uint32_t v) {
  out.push_back(uint8_t(v >> 24));
  out.push_back(uint8_t(v >> 16));
  out.push_back(uint8_t(v >> 8));
  out.push_back(uint8_t(v));
}

// length, type, data, CRC over type + data.
void put_chunk(std::vector<uint8_t>& out, const char type[4], std::span<const uint8_t> data) {
  put_be32(out, static_cast<uint32_t>(data.size()));
  const size_t type_at = out.size();
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), data.begin(), data.end());
  put_be32(out, crc32(std::span<const uint8_t>(out.data() + type_at, 4 + data.size())));
}

}  // namespace

Image::Image(uint32_t w, uint32_t h, Rgb fill) : width(w), height(h), rgb(size_t(w) * h * 3) {
  for (size_t i = 0; i < size_t(w) * h; ++i) {
    rgb[i * 3] = fill.r;
    rgb[i * 3 + 1] = fill.g;
    rgb[i * 3 + 2] = fill.b;
  }
}

void Image::set(int x, int y, Rgb c) {
  if (x < 0 || y < 0 || uint32_t(x) >= width || uint32_t(y) >= height) return;
  uint8_t* p = rgb.data() + (size_t(y) * width + size_t(x)) * 3;
  p[0] = c.r;
  p[1] = c.g;
  p[2] = c.b;
}

Rgb Image::at(uint32_t x, uint32_t y) const {
  const uint8_t* p = rgb.data() + (size_t(y) * width + x) * 3;
  return Rgb{p[0], p[1], p[2]};
}

uint32_t crc32(std::span<const uint8_t> bytes, uint32_t crc) {
  static const std::array<uint32_t, 256> table = make_crc_table();
  uint32_t c = crc ^ 0xFFFFFFFFu;
  for (uint8_t b : bytes) c = table[(c ^ b) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t adler32(std::span<const uint8_t> bytes) {
  constexpr uint32_t kMod = 65521;
  uint32_t a = 1, b = 0;
  for (uint8_t x : bytes) {
    a = (a + x) % kMod;
    b = (b + a) % kMod;
  }
  return (b << 16) | a;
}

std::vector<uint8_t> zlib_stored(std::span<const uint8_t> data) {
  std::vector<uint8_t> out = {0x78, 0x01};  // deflate, 32K window; (0x7801 % 31) == 0
  size_t pos = 0;
  do {
    const size_t n = std::min<size_t>(65535, data.size() - pos);
    const bool last = pos + n == data.size();
    out.push_back(last ? 1 : 0);  // BFINAL, BTYPE = 00 (stored); the rest of the byte is padding
    out.push_back(uint8_t(n));
    out.push_back(uint8_t(n >> 8));
    out.push_back(uint8_t(~n));
    out.push_back(uint8_t(~n >> 8));
    out.insert(out.end(), data.begin() + pos, data.begin() + pos + n);
    pos += n;
  } while (pos < data.size());
  put_be32(out, adler32(data));
  return out;
}

std::vector<uint8_t> encode_png(const Image& img) {
  if (img.width == 0 || img.height == 0 || img.rgb.size() != size_t(img.width) * img.height * 3)
    throw Error(Errc::invalid_argument,
                "encode_png: image " + std::to_string(img.width) + "x" + std::to_string(img.height) +
                    " with " + std::to_string(img.rgb.size()) + " bytes; expected a non-empty image "
                    "with width*height*3 bytes");
  std::vector<uint8_t> out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  std::vector<uint8_t> ihdr;
  put_be32(ihdr, img.width);
  put_be32(ihdr, img.height);
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});  // bit depth 8, colour type 2 (RGB), deflate,
                                             // filter method 0, no interlace
  put_chunk(out, "IHDR", ihdr);
  const size_t stride = size_t(img.width) * 3;
  std::vector<uint8_t> raw;
  raw.reserve((stride + 1) * img.height);
  for (uint32_t y = 0; y < img.height; ++y) {
    raw.push_back(0);  // filter type None
    raw.insert(raw.end(), img.rgb.begin() + y * stride, img.rgb.begin() + (y + 1) * stride);
  }
  put_chunk(out, "IDAT", zlib_stored(raw));
  put_chunk(out, "IEND", {});
  return out;
}

void write_png(const std::string& path, const Image& image) {
  const std::vector<uint8_t> bytes = encode_png(image);
  write_file_atomically(path, /*force=*/true,
                        std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

}  // namespace kvzip::eval
