#pragma once
// A Cairo image surface for report figures: shapes in Cairo's own calls, text in a real sans-serif
// font, written as PNG.
#include <cairo.h>

#include <array>
#include <string>
#include <vector>

namespace fasa {

using Rgb = std::array<double, 3>;  // 0..1 per channel

class Figure {
 public:
  Figure(int width, int height);  // white background
  ~Figure();
  Figure(const Figure&) = delete;
  Figure& operator=(const Figure&) = delete;

  cairo_t* cr() const { return cr_; }
  void color(Rgb c) const { cairo_set_source_rgb(cr_, c[0], c[1], c[2]); }
  void line(double x0, double y0, double x1, double y1, Rgb c, double width = 1.5) const;
  // Text at (x, y) = its baseline; align 0 left, 0.5 centred, 1 right of x. `angle` in radians.
  void text(double x, double y, const std::string& s, double size = 13, double align = 0, Rgb c = {0, 0, 0},
            double angle = 0) const;
  double text_width(const std::string& s, double size = 13) const;
  // Throws fasa::Error naming the path when it cannot be written.
  void save_png(const std::string& path) const;

 private:
  cairo_surface_t* surface_;
  cairo_t* cr_;
};

// Viridis at v in [0, 1] (clamped), interpolated between five samples.
Rgb viridis(double v);

// Round axis ticks spanning [lo, hi]: steps of 1, 2, 2.5 or 5 times a power of ten, about `n` of
// them; the first <= lo, the last >= hi (so data that is never negative gets no negative tick).
std::vector<double> nice_ticks(double lo, double hi, int n = 4);
// A tick's label: "%g" of the value rounded to the step's precision (no 0.30000000000000004).
std::string tick_label(double v, double step);

}  // namespace fasa
