#include "eval/heatmap.h"

#include <algorithm>

#include "eval/canvas.h"
#include "fasa/error.h"

namespace fasa {

namespace {

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
  c.save_png(path);
}

}  // namespace fasa
