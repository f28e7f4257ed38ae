// Tiny drawing primitives for the evaluation plot, on an eval::Image: filled rectangles, thick
// lines (Bresenham, stamping a square brush), dashed lines, five marker shapes, and text in a
// built-in 5x7 bitmap font (upper case, digits, common punctuation; lower case is drawn as upper
// case, unknown characters as '?'). Coordinates are pixels, origin top-left, y down.
#pragma once
#include <cstdint>
#include <string_view>

#include "eval/png.h"

namespace kvzip::eval::detail {

// The 7 rows of a glyph, top first; bit 4 of each row is the leftmost of its 5 columns.
const uint8_t* glyph5x7(char c);

enum class Marker : uint8_t { Circle, Square, Triangle, Diamond, Cross };

void fill_rect(Image& img, int x0, int y0, int x1, int y1, Rgb c);  // inclusive corners
void draw_line(Image& img, int x0, int y0, int x1, int y1, Rgb c, int thickness = 1);
// A line drawn only on `on` pixels out of every `on + off` along it.
void draw_dashed(Image& img, int x0, int y0, int x1, int y1, Rgb c, int on, int off);
void draw_marker(Image& img, int x, int y, Marker m, Rgb c, int radius);

// Width in pixels of `text` at `scale` (6·scale per character, the last one without its gap).
int text_width(std::string_view text, int scale);
// Draws text with its top-left corner at (x, y); each font pixel is a scale × scale block.
void draw_text(Image& img, int x, int y, std::string_view text, Rgb c, int scale);
// The same, rotated 90° counter-clockwise (reads bottom to top), top-left of the rotated box at (x, y).
void draw_text_vertical(Image& img, int x, int y, std::string_view text, Rgb c, int scale);

}  // namespace kvzip::eval::detail
