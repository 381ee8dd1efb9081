#include "eval/canvas.h"

#include <stb_image_write.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#include <stb_easy_font.h>
#pragma GCC diagnostic pop

#include "fasa/error.h"

namespace fasa {

Canvas::Canvas(int w, int h) : w_(w), h_(h), px_((size_t)w * h * 3, 255) {}

void Canvas::rect(int x0, int y0, int x1, int y1, Rgb c) {
  for (int y = std::max(0, y0); y < std::min(h_, y1); ++y)
    for (int x = std::max(0, x0); x < std::min(w_, x1); ++x) std::memcpy(&px_[((size_t)y * w_ + x) * 3], c.data(), 3);
}

void Canvas::line(int x0, int y0, int x1, int y1, Rgb c, int width) {
  const int steps = std::max(std::abs(x1 - x0), std::abs(y1 - y0)) + 1;
  for (int i = 0; i <= steps; ++i) {
    const int x = x0 + (int)std::lround((double)(x1 - x0) * i / steps);
    const int y = y0 + (int)std::lround((double)(y1 - y0) * i / steps);
    rect(x - width / 2, y - width / 2, x - width / 2 + width, y - width / 2 + width, c);
  }
}

void Canvas::text(int x, int y, const std::string& s, int scale, Rgb c) {
  static thread_local char buf[60000];
  std::string copy = s;
  const int quads = stb_easy_font_print(0, 0, copy.data(), nullptr, buf, sizeof buf);
  for (int q = 0; q < quads; ++q) {  // 4 vertices of 16 bytes (x, y, z, rgba) per quad
    const float* v0 = reinterpret_cast<const float*>(buf + q * 64);
    const float* v2 = reinterpret_cast<const float*>(buf + q * 64 + 32);
    rect(x + (int)(v0[0] * scale), y + (int)(v0[1] * scale), x + (int)(v2[0] * scale), y + (int)(v2[1] * scale), c);
  }
}

int Canvas::text_width(const std::string& s, int scale) {
  std::string copy = s;
  return stb_easy_font_width(copy.data()) * scale;
}

void Canvas::save_png(const std::string& path) const {
  if (!stbi_write_png(path.c_str(), w_, h_, 3, px_.data(), w_ * 3)) fail(path, "cannot write PNG");
}

}  // namespace fasa
