#pragma once
// A small RGB raster for report figures: filled rectangles, lines, and text (stb_easy_font glyphs).
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace fasa {

using Rgb = std::array<uint8_t, 3>;

class Canvas {
 public:
  Canvas(int w, int h);
  void rect(int x0, int y0, int x1, int y1, Rgb c);          // [x0, x1) x [y0, y1)
  void line(int x0, int y0, int x1, int y1, Rgb c, int width = 2);
  void text(int x, int y, const std::string& s, int scale = 2, Rgb c = {0, 0, 0});
  static int text_width(const std::string& s, int scale = 2);
  // Throws fasa::Error naming the path when it cannot be written.
  void save_png(const std::string& path) const;

 private:
  int w_, h_;
  std::vector<uint8_t> px_;  // [h, w, 3]
};

}  // namespace fasa
