#include "eval/heatmap.h"

#include <stb_image_write.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#include <stb_easy_font.h>
#pragma GCC diagnostic pop

#include "util/error.h"

namespace fasa {

namespace {

using Rgb = std::array<uint8_t, 3>;

// Viridis, sampled at 5 points and interpolated.
Rgb colormap(float v) {
  static const float stops[5][3] = {{68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}};
  v = std::clamp(v, 0.0f, 1.0f) * 4.0f;
  const int i = std::min(3, (int)v);
  const float t = v - (float)i;
  Rgb c;
  for (int k = 0; k < 3; ++k) c[k] = (uint8_t)(stops[i][k] + t * (stops[i + 1][k] - stops[i][k]));
  return c;
}

class Canvas {
 public:
  Canvas(int w, int h) : w_(w), h_(h), px_((size_t)w * h * 3, 255) {}
  void rect(int x0, int y0, int x1, int y1, Rgb c) {
    for (int y = std::max(0, y0); y < std::min(h_, y1); ++y)
      for (int x = std::max(0, x0); x < std::min(w_, x1); ++x) std::memcpy(&px_[((size_t)y * w_ + x) * 3], c.data(), 3);
  }
  // Text with stb_easy_font's quads, scaled up by `scale`.
  void text(int x, int y, const std::string& s, int scale = 2) {
    static char buf[60000];
    std::string copy = s;
    const int quads = stb_easy_font_print(0, 0, copy.data(), nullptr, buf, sizeof buf);
    for (int q = 0; q < quads; ++q) {
      const float* v0 = reinterpret_cast<const float*>(buf + q * 64);       // vertex 0 of the quad
      const float* v2 = reinterpret_cast<const float*>(buf + q * 64 + 32);  // vertex 2 (opposite corner)
      rect(x + (int)(v0[0] * scale), y + (int)(v0[1] * scale), x + (int)(v2[0] * scale), y + (int)(v2[1] * scale),
           {0, 0, 0});
    }
  }
  static int text_width(const std::string& s, int scale = 2) {
    std::string copy = s;
    return stb_easy_font_width(copy.data()) * scale;
  }
  bool save(const std::string& path) const { return stbi_write_png(path.c_str(), w_, h_, 3, px_.data(), w_ * 3) != 0; }

 private:
  int w_, h_;
  std::vector<uint8_t> px_;
};

}  // namespace

void write_heatmap_png(const Heatmap& h, const std::string& path) {
  const int rows = (int)h.row_labels.size(), cols = h.cols;
  if (rows <= 0 || cols <= 0 || h.values.size() != (size_t)rows * cols) throw Error("heatmap: inconsistent shape");
  const int cell = 22, left = 110, top = 60, bar_w = 18;
  const int width = left + cols * cell + 40 + bar_w + 90, height = top + rows * cell + 70;
  Canvas c(width, height);
  c.text(left, 14, h.title, 3);
  for (int r = 0; r < rows; ++r) {
    c.text(left - 10 - Canvas::text_width(h.row_labels[r]), top + r * cell + 5, h.row_labels[r]);
    for (int k = 0; k < cols; ++k)
      c.rect(left + k * cell, top + r * cell, left + (k + 1) * cell - 1, top + (r + 1) * cell - 1,
             colormap(h.values[(size_t)r * cols + k]));
  }
  const int label_step = cols > 32 ? 8 : 4;
  for (int k = 0; k < cols; k += label_step) c.text(left + k * cell + 4, top + rows * cell + 6, std::to_string(k));
  c.text(left, top + rows * cell + 34, h.col_axis);
  c.text(6, top - 22, h.row_axis);
  // Colour bar from 0 (bottom) to 1 (top).
  const int bx = left + cols * cell + 40, bh = std::max(rows * cell, 100);
  for (int y = 0; y < bh; ++y) c.rect(bx, top + y, bx + bar_w, top + y + 1, colormap(1.0f - (float)y / (float)(bh - 1)));
  c.text(bx + bar_w + 4, top - 2, "1.0");
  c.text(bx + bar_w + 4, top + bh - 12, "0.0");
  c.text(bx - 6, top - 22, "mean CA");
  if (!c.save(path)) fail(path, "cannot write PNG");
}

}  // namespace fasa
