// Drawing primitives (see raster.h). Every primitive clips through Image::set.
#include "eval/detail/raster.h"

#include <cstdlib>

namespace kvzip::eval::detail {
namespace {

// A square brush of side `t` centred on (x, y).
void stamp(Image& img, int x, int y, Rgb c, int t) {
  const int lo = -(t - 1) / 2, hi = t / 2;
  for (int dy = lo; dy <= hi; ++dy)
    for (int dx = lo; dx <= hi; ++dx) img.set(x + dx, y + dy, c);
}

// Calls f(x, y, i) for each pixel of the Bresenham line, i counting from 0.
template <class F>
void walk_line(int x0, int y0, int x1, int y1, F f) {
  const int dx = std::abs(x1 - x0), sx = x0 < x1 ? 1 : -1;
  const int dy = -std::abs(y1 - y0), sy = y0 < y1 ? 1 : -1;
  int err = dx + dy;
  for (int i = 0;; ++i) {
    f(x0, y0, i);
    if (x0 == x1 && y0 == y1) return;
    const int e2 = 2 * err;
    if (e2 >= dy) err += dy, x0 += sx;
    if (e2 <= dx) err += dx, y0 += sy;
  }
}

}  // namespace

void fill_rect(Image& img, int x0, int y0, int x1, int y1, Rgb c) {
  for (int y = y0; y <= y1; ++y)
    for (int x = x0; x <= x1; ++x) img.set(x, y, c);
}

void draw_line(Image& img, int x0, int y0, int x1, int y1, Rgb c, int thickness) {
  walk_line(x0, y0, x1, y1, [&](int x, int y, int) { stamp(img, x, y, c, thickness); });
}

void draw_dashed(Image& img, int x0, int y0, int x1, int y1, Rgb c, int on, int off) {
  walk_line(x0, y0, x1, y1, [&](int x, int y, int i) {
    if (i % (on + off) < on) img.set(x, y, c);
  });
}

void draw_marker(Image& img, int x, int y, Marker m, Rgb c, int r) {
  for (int dy = -r; dy <= r; ++dy)
    for (int dx = -r; dx <= r; ++dx) {
      bool in = false;
      switch (m) {
        case Marker::Circle: in = dx * dx + dy * dy <= r * r; break;
        case Marker::Square: in = true; break;
        case Marker::Diamond: in = std::abs(dx) + std::abs(dy) <= r; break;
        case Marker::Triangle: in = 2 * std::abs(dx) <= dy + r; break;  // apex up
        case Marker::Cross: in = std::abs(std::abs(dx) - std::abs(dy)) <= 1; break;
      }
      if (in) img.set(x + dx, y + dy, c);
    }
}

int text_width(std::string_view text, int scale) {
  return text.empty() ? 0 : static_cast<int>(text.size()) * 6 * scale - scale;
}

void draw_text(Image& img, int x, int y, std::string_view text, Rgb c, int scale) {
  for (size_t i = 0; i < text.size(); ++i) {
    const uint8_t* rows = glyph5x7(text[i]);
    const int gx = x + static_cast<int>(i) * 6 * scale;
    for (int row = 0; row < 7; ++row)
      for (int col = 0; col < 5; ++col)
        if (rows[row] & (0x10 >> col))
          fill_rect(img, gx + col * scale, y + row * scale, gx + col * scale + scale - 1,
                    y + row * scale + scale - 1, c);
  }
}

void draw_text_vertical(Image& img, int x, int y, std::string_view text, Rgb c, int scale) {
  // Glyph pixel (col, row) of character i goes to (x + row, y + width - 1 - (i*6 + col)).
  const int w = text_width(text, scale);
  for (size_t i = 0; i < text.size(); ++i) {
    const uint8_t* rows = glyph5x7(text[i]);
    for (int row = 0; row < 7; ++row)
      for (int col = 0; col < 5; ++col)
        if (rows[row] & (0x10 >> col)) {
          const int px = x + row * scale;
          const int py = y + w - (static_cast<int>(i) * 6 + col + 1) * scale;
          fill_rect(img, px, py, px + scale - 1, py + scale - 1, c);
        }
  }
}

}  // namespace kvzip::eval::detail
