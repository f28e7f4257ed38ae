// Panel layout and drawing for plot.h. Sizes are fixed (a 640 x 480 panel, text at scale 2) so the
// figure reads well at its natural size in a README or a terminal image viewer.
#include "eval/plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/error.h"
#include "eval/detail/raster.h"

namespace kvzip::eval {
namespace {

using detail::Marker;

constexpr int kPanelW = 640, kPanelH = 480, kLegendH = 56;
constexpr int kLeft = 96, kRight = 24, kTop = 52, kBottom = 76;
constexpr int kText = 2;  // font scale
constexpr Rgb kWhite{255, 255, 255}, kGrid{228, 228, 228}, kAxis{60, 60, 60}, kRef{130, 130, 130};
constexpr Rgb kColours[] = {{31, 119, 180}, {255, 127, 14}, {44, 160, 44},   {214, 39, 40},
                            {148, 103, 189}, {140, 86, 75}, {227, 119, 194}, {23, 190, 207}};
constexpr Marker kMarkers[] = {Marker::Circle, Marker::Square, Marker::Triangle, Marker::Diamond,
                               Marker::Cross};

Rgb colour(size_t i) { return kColours[i % std::size(kColours)]; }
Marker marker(size_t i) { return kMarkers[i % std::size(kMarkers)]; }

std::string upper(std::string s) {
  for (char& c : s)
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  return s;
}

std::string number(double v, int decimals) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

struct Frame {  // the plot area of one panel, in image pixels
  int x0, y0, x1, y1;
  const PlotPanel& p;
  int px(double x) const { return x0 + int(std::lround((x - p.x_min) / (p.x_max - p.x_min) * (x1 - x0))); }
  int py(double y) const { return y1 - int(std::lround((y - p.y_min) / (p.y_max - p.y_min) * (y1 - y0))); }
};

void draw_axes(Image& img, const Frame& f) {
  const PlotPanel& p = f.p;
  const int xdec = p.x_tick < 1 ? 1 : 0, ydec = p.y_tick < 1 ? 1 : 0;
  int n = 0;
  for (double y = p.y_min; y <= p.y_max + 1e-9 * (p.y_max - p.y_min); y += p.y_tick, ++n) {
    const int yy = f.py(y);
    detail::draw_line(img, f.x0, yy, f.x1, yy, kGrid);
    const std::string label = number(y, ydec);
    detail::draw_text(img, f.x0 - 8 - detail::text_width(label, kText), yy - 7, label, kAxis, kText);
  }
  n = 0;
  for (double x = p.x_min; x <= p.x_max + 1e-9 * (p.x_max - p.x_min); x += p.x_tick, ++n) {
    const int xx = f.px(x);
    detail::draw_line(img, xx, f.y0, xx, f.y1, kGrid);
    if (n % 2 == 0) {
      const std::string label = number(x, xdec);
      detail::draw_text(img, xx - detail::text_width(label, kText) / 2, f.y1 + 10, label, kAxis, kText);
    }
  }
  detail::draw_line(img, f.x0, f.y0, f.x1, f.y0, kAxis);
  detail::draw_line(img, f.x0, f.y1, f.x1, f.y1, kAxis);
  detail::draw_line(img, f.x0, f.y0, f.x0, f.y1, kAxis);
  detail::draw_line(img, f.x1, f.y0, f.x1, f.y1, kAxis);
  const std::string xl = upper(p.x_label), title = upper(p.title);
  detail::draw_text(img, (f.x0 + f.x1 - detail::text_width(xl, kText)) / 2, f.y1 + 40, xl, kAxis, kText);
  detail::draw_text(img, (f.x0 + f.x1 - detail::text_width(title, kText)) / 2, f.y0 - 32, title,
                    kAxis, kText);
}

void draw_panel(Image& img, int left, const PlotPanel& p) {
  const Frame f{left + kLeft, kTop, left + kPanelW - kRight, kPanelH - kBottom, p};
  draw_axes(img, f);
  if (p.reference) {
    const int yy = f.py(*p.reference);
    detail::draw_dashed(img, f.x0, yy, f.x1, yy, kRef, 8, 6);
    detail::draw_dashed(img, f.x0, yy + 1, f.x1, yy + 1, kRef, 8, 6);
    const std::string label = upper(p.reference_label);
    detail::draw_text(img, f.x1 - 6 - detail::text_width(label, kText), yy - 20, label, kRef, kText);
  }
  for (size_t s = 0; s < p.series.size(); ++s) {
    const PlotSeries& ser = p.series[s];
    for (size_t i = 1; i < ser.x.size(); ++i)
      detail::draw_line(img, f.px(ser.x[i - 1]), f.py(ser.y[i - 1]), f.px(ser.x[i]), f.py(ser.y[i]),
                        colour(s), 3);
    for (size_t i = 0; i < ser.x.size(); ++i)
      detail::draw_marker(img, f.px(ser.x[i]), f.py(ser.y[i]), marker(s), colour(s), 5);
  }
}

void draw_legend(Image& img, const std::vector<PlotSeries>& series) {
  int width = 0;
  for (const PlotSeries& s : series) width += 40 + detail::text_width(upper(s.name), kText) + 36;
  int x = std::max(8, (static_cast<int>(img.width) - width) / 2);
  const int y = kPanelH + kLegendH / 2 - 8;
  for (size_t i = 0; i < series.size(); ++i) {
    detail::draw_line(img, x, y + 7, x + 30, y + 7, colour(i), 3);
    detail::draw_marker(img, x + 15, y + 7, marker(i), colour(i), 5);
    const std::string name = upper(series[i].name);
    detail::draw_text(img, x + 40, y, name, kAxis, kText);
    x += 40 + detail::text_width(name, kText) + 36;
  }
}

}  // namespace

Image render_panels(const std::vector<PlotPanel>& panels) {
  if (panels.empty()) throw Error(Errc::invalid_argument, "plot: no panels to draw");
  for (const PlotPanel& p : panels)
    if (!(p.x_max > p.x_min) || !(p.y_max > p.y_min) || !(p.x_tick > 0) || !(p.y_tick > 0))
      throw Error(Errc::invalid_argument, "plot: panel '" + p.title + "' has an empty axis range or tick");
  Image img(static_cast<uint32_t>(kPanelW * panels.size()), kPanelH + kLegendH, kWhite);
  for (size_t i = 0; i < panels.size(); ++i) draw_panel(img, static_cast<int>(i) * kPanelW, panels[i]);
  draw_legend(img, panels[0].series);
  return img;
}

std::vector<PlotPanel> report_panels(const EvalReport& report) {
  PlotPanel agree{"agreement with full cache (%)", "ratio kept", 0.0, 1.0, 0.1, 0.0, 100.0, 20.0, {}, {}, ""};
  PlotPanel f1{"SQuAD F1 (%)", "ratio kept", 0.0, 1.0, 0.1, 0.0, 100.0, 20.0, {}, {}, "full"};
  double top = 0.0;
  for (const EvalRow& r : report.rows) {
    top = std::max(top, r.f1);
    if (r.method == "full") {
      f1.reference = r.f1;
      continue;
    }
    auto it = std::find_if(agree.series.begin(), agree.series.end(),
                           [&](const PlotSeries& s) { return s.name == r.method; });
    if (it == agree.series.end()) {
      agree.series.push_back({r.method, {}, {}});
      f1.series.push_back({r.method, {}, {}});
      it = agree.series.end() - 1;
    }
    const size_t i = static_cast<size_t>(it - agree.series.begin());
    agree.series[i].x.push_back(r.ratio);
    agree.series[i].y.push_back(r.agreement);
    f1.series[i].x.push_back(r.ratio);
    f1.series[i].y.push_back(r.f1);
  }
  // F1 of small models is often far below 100: zoom to the data, at most 6 ticks of 1, 2, 5,
  // 10 or 20 points.
  const double want = std::max(top * 1.1, 1.0);
  for (double step : {1.0, 2.0, 5.0, 10.0, 20.0}) {
    if (want / step > 6.0 && step < 20.0) continue;
    f1.y_tick = step;
    f1.y_max = std::min(100.0, std::ceil(want / step) * step);
    break;
  }
  return {agree, f1};
}

Image plot_report(const EvalReport& report) { return render_panels(report_panels(report)); }

}  // namespace kvzip::eval
