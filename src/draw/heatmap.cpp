#include "draw/heatmap.h"

#include <algorithm>
#include <cstdio>

#include "draw/figure.h"
#include "fasa/error.h"

namespace fasa {

void write_heatmap_png(const Heatmap& h, const std::string& path) {
  const int rows = (int)h.row_labels.size(), cols = h.cols;
  if (rows <= 0 || cols <= 0 || h.values.size() != (size_t)rows * cols || (!h.marked.empty() && (int)h.marked.size() != rows))
    throw Error("heatmap: inconsistent shape");
  const double cell = 22, left = 90, top = 56, bar_w = 18;
  const double bx = left + cols * cell + 36, bh = std::max(rows * cell, 120.0);
  Figure f((int)(bx + bar_w + 60), (int)(top + std::max(rows * cell, bh) + 64));
  cairo_t* cr = f.cr();
  // The colours span the data's range, rounded out to the colour bar's ticks.
  const auto [min_v, max_v] = std::minmax_element(h.values.begin(), h.values.end());
  const std::vector<double> ticks = nice_ticks(*min_v, *max_v);
  const double lo = ticks.front(), hi = ticks.back();
  auto scaled = [&](double v) { return (v - lo) / (hi - lo); };
  f.text(left, 26, h.title, 16);
  for (int r = 0; r < rows; ++r) {
    f.text(left - 8, top + r * cell + cell * 0.68, h.row_labels[r], 12, 1);
    for (int k = 0; k < cols; ++k) {
      f.color(viridis(scaled(h.values[(size_t)r * cols + k])));
      cairo_rectangle(cr, left + k * cell, top + r * cell, cell, cell);
      cairo_fill(cr);
    }
  }
  // Each row's chosen columns: a white frame inside a dark one, visible on every colour of the map.
  if (!h.marked.empty())
    for (int r = 0; r < rows; ++r)
      for (int k : h.marked[r]) {
        if (k < 0 || k >= cols) continue;
        for (const auto& [inset, c] : {std::pair{1.5, Rgb{0, 0, 0}}, std::pair{3.5, Rgb{1, 1, 1}}}) {
          f.color(c);
          cairo_set_line_width(cr, 2);
          cairo_rectangle(cr, left + k * cell + inset, top + r * cell + inset, cell - 2 * inset, cell - 2 * inset);
          cairo_stroke(cr);
        }
      }
  const int step = cols > 32 ? 8 : 4;
  for (int k = 0; k < cols; k += step) {
    const double x = left + (k + 0.5) * cell;
    f.line(x, top + rows * cell, x, top + rows * cell + 5, {0, 0, 0}, 1);
    f.text(x, top + rows * cell + 18, std::to_string(k), 11, 0.5);
  }
  f.text(left + cols * cell / 2, top + rows * cell + 38, h.col_axis + (h.marked.empty() ? "" : " (outlined: chosen)"),
         13, 0.5);
  f.text(18, top + rows * cell / 2, h.row_axis, 13, 0.5, {0, 0, 0}, -1.5707963);
  // Colour bar from lo (bottom) to hi (top), at the ticks.
  for (int y = 0; y < (int)bh; ++y) {
    f.color(viridis(1.0 - y / (bh - 1)));
    cairo_rectangle(cr, bx, top + y, bar_w, 1.5);
    cairo_fill(cr);
  }
  for (double v : ticks) {
    const double y = top + bh - bh * scaled(v);
    f.line(bx + bar_w, y, bx + bar_w + 4, y, {0, 0, 0}, 1);
    f.text(bx + bar_w + 7, y + 4, tick_label(v, ticks[1] - ticks[0]), 11);
  }
  f.text(bx + bar_w / 2, top - 8, h.value_label, 12, 0.5);
  f.save_png(path);
}

}  // namespace fasa
