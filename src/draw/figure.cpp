#include "draw/figure.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "fasa/error.h"

namespace fasa {

Figure::Figure(int width, int height)
    : surface_(cairo_image_surface_create(CAIRO_FORMAT_RGB24, width, height)), cr_(cairo_create(surface_)) {
  cairo_set_source_rgb(cr_, 1, 1, 1);
  cairo_paint(cr_);
  cairo_select_font_face(cr_, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
}

Figure::~Figure() {
  cairo_destroy(cr_);
  cairo_surface_destroy(surface_);
}

void Figure::line(double x0, double y0, double x1, double y1, Rgb c, double width) const {
  color(c);
  cairo_set_line_width(cr_, width);
  cairo_move_to(cr_, x0, y0);
  cairo_line_to(cr_, x1, y1);
  cairo_stroke(cr_);
}

double Figure::text_width(const std::string& s, double size) const {
  cairo_set_font_size(cr_, size);
  cairo_text_extents_t e;
  cairo_text_extents(cr_, s.c_str(), &e);
  return e.x_advance;
}

void Figure::text(double x, double y, const std::string& s, double size, double align, Rgb c, double angle) const {
  const double w = text_width(s, size);
  cairo_save(cr_);
  cairo_translate(cr_, x, y);
  cairo_rotate(cr_, angle);
  color(c);
  cairo_move_to(cr_, -align * w, 0);
  cairo_show_text(cr_, s.c_str());
  cairo_restore(cr_);
}

void Figure::save_png(const std::string& path) const {
  cairo_surface_flush(surface_);
  const cairo_status_t st = cairo_surface_write_to_png(surface_, path.c_str());
  if (st != CAIRO_STATUS_SUCCESS) fail(path, std::string("cannot write PNG: ") + cairo_status_to_string(st));
}

Rgb viridis(double v) {
  static const double stops[5][3] = {{68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}};
  v = std::clamp(v, 0.0, 1.0) * 4.0;
  const int i = std::min(3, (int)v);
  const double t = v - i;
  Rgb c;
  for (int k = 0; k < 3; ++k) c[k] = (stops[i][k] + t * (stops[i + 1][k] - stops[i][k])) / 255.0;
  return c;
}

std::vector<double> nice_ticks(double lo, double hi, int n) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) lo = 0, hi = 1;
  if (!(hi > lo)) hi = lo + (lo == 0 ? 1 : std::abs(lo) * 0.1);
  const double raw = (hi - lo) / std::max(1, n), mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = 10 * mag;
  for (double m : {1.0, 2.0, 2.5, 5.0})
    if (m * mag >= raw * (1 - 1e-9)) {
      step = m * mag;
      break;
    }
  // (1e-6: data of float precision on a tick stays on it)
  const double first = std::floor(lo / step + 1e-6) * step, last = std::ceil(hi / step - 1e-6) * step;
  std::vector<double> t;
  for (int i = 0; first + i * step <= last + step * 1e-6; ++i) t.push_back(first + i * step);
  return t;
}

std::string tick_label(double v, double step) {
  const double unit = std::pow(10.0, std::floor(std::log10(step)) - 1);  // 2.5 needs a digit below the step's
  char b[32];
  std::snprintf(b, sizeof b, "%g", std::round(v / unit) * unit + 0.0);  // (+0.0: no "-0")
  return b;
}

}  // namespace fasa
