// A self-contained PNG writer for the evaluation plot: 8-bit RGB, no interlace, filter 0 on every
// scanline, and a zlib stream made of stored (uncompressed) deflate blocks — valid for every PNG
// reader, and simple enough to check byte by byte. CRC-32 (PNG chunks) and Adler-32 (zlib) are
// computed here. Files are written atomically (common/atomic_file.h), so a failure leaves no partial file.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kvzip::eval {

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
  bool operator==(const Rgb&) const = default;
};

struct Image {
  uint32_t width = 0;
  uint32_t height = 0;
  std::vector<uint8_t> rgb;  // (height, width, 3), row-major

  Image() = default;
  Image(uint32_t w, uint32_t h, Rgb fill);
  // Out-of-range coordinates are ignored (drawing may run past the edges).
  void set(int x, int y, Rgb c);
  Rgb at(uint32_t x, uint32_t y) const;
};

// CRC-32 as PNG and zlib's crc32() define it (reflected polynomial 0xEDB88320, init and final
// xor 0xFFFFFFFF). Pass a previous result as `crc` to continue over more bytes.
uint32_t crc32(std::span<const uint8_t> bytes, uint32_t crc = 0);
// Adler-32 of RFC 1950.
uint32_t adler32(std::span<const uint8_t> bytes);

// A zlib stream (RFC 1950: header 0x78 0x01, deflate stored blocks of at most 65535 bytes,
// Adler-32 trailer, big-endian) holding `data` verbatim.
std::vector<uint8_t> zlib_stored(std::span<const uint8_t> data);

// The PNG file: signature, IHDR, one IDAT, IEND. Throws Errc::invalid_argument for an empty image
// or one whose pixel buffer does not match width × height.
std::vector<uint8_t> encode_png(const Image& image);
// Writes encode_png(image) to `path` atomically (Errc::io on failure).
void write_png(const std::string& path, const Image& image);

}  // namespace kvzip::eval
