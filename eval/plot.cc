// Panel layout and SVG for plot.h. Sizes are fixed (a 640 x 480 panel, 15-unit text) so the
// figure reads well at its natural size in a README; everything is absolute coordinates, so the
// file needs no CSS and renders the same in every viewer. Markers cycle through five shapes as
// well as eight colours, so the series stay apart in grey print.
#include "eval/plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string_view>

#include "common/atomic_file.h"
#include "common/error.h"

namespace kvzip::eval {
namespace {

constexpr int kPanelW = 640, kPanelH = 480, kLegendH = 56;
constexpr int kLeft = 80, kRight = 24, kTop = 52, kBottom = 76;
constexpr const char* kGrid = "#e4e4e4";
constexpr const char* kAxis = "#3c3c3c";
constexpr const char* kRef = "#828282";
constexpr const char* kColours[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                    "#9467bd", "#8c564b", "#e377c2", "#17becf"};
enum class Marker { Circle, Square, Triangle, Diamond, Cross };
constexpr Marker kMarkers[] = {Marker::Circle, Marker::Square, Marker::Triangle, Marker::Diamond,
                               Marker::Cross};

const char* colour(size_t i) { return kColours[i % std::size(kColours)]; }
Marker marker(size_t i) { return kMarkers[i % std::size(kMarkers)]; }

std::string fmt(const char* f, double a, double b = 0, double c = 0, double d = 0) {
  char buf[128];
  std::snprintf(buf, sizeof buf, f, a, b, c, d);
  return buf;
}

std::string number(double v, int decimals) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

// Text content and attribute values: the five XML specials as entities, everything else verbatim
// (the SVG is UTF-8, as the method names are).
std::string xml_escape(const std::string& s) {
  static constexpr std::string_view kSpecial = "&<>\"'";
  static constexpr const char* kEntity[] = {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"};
  std::string out;
  for (char c : s) {
    const size_t k = kSpecial.find(c);
    if (k == std::string_view::npos) out += c;
    else out += kEntity[k];
  }
  return out;
}

std::string text(double x, double y, const std::string& s, const char* anchor, const char* fill,
                 int size = 15) {
  return fmt("<text x=\"%.1f\" y=\"%.1f\"", x, y) + " font-size=\"" + std::to_string(size) +
         "\" text-anchor=\"" + anchor + "\" fill=\"" + fill + "\">" + xml_escape(s) + "</text>\n";
}

std::string line(double x0, double y0, double x1, double y1, const char* stroke, double width,
                 const char* extra = "") {
  return fmt("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"", x0, y0, x1, y1) +
         " stroke=\"" + stroke + "\" stroke-width=\"" + fmt("%g", width) + "\"" + extra + "/>\n";
}

std::string marker_svg(double x, double y, Marker m, const char* c) {
  const double r = 5.0;
  const std::string fill = std::string(" fill=\"") + c + "\"/>\n";
  switch (m) {
    case Marker::Circle: return fmt("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%.1f\"", x, y, r) + fill;
    case Marker::Square:
      return fmt("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"", x - r, y - r, 2 * r,
                 2 * r) +
             fill;
    case Marker::Triangle:
      return fmt("<polygon points=\"%.1f,%.1f ", x, y - r) +
             fmt("%.1f,%.1f %.1f,%.1f\"", x - r, y + r, x + r, y + r) + fill;
    case Marker::Diamond:
      return fmt("<polygon points=\"%.1f,%.1f %.1f,%.1f ", x, y - r, x + r, y) +
             fmt("%.1f,%.1f %.1f,%.1f\"", x, y + r, x - r, y) + fill;
    case Marker::Cross:
      return line(x - r, y - r, x + r, y + r, c, 2.5) + line(x - r, y + r, x + r, y - r, c, 2.5);
  }
  return "";
}

struct Frame {  // the plot area of one panel, in SVG user units
  double x0, y0, x1, y1;
  const PlotPanel& p;
  double px(double x) const { return x0 + (x - p.x_min) / (p.x_max - p.x_min) * (x1 - x0); }
  double py(double y) const { return y1 - (y - p.y_min) / (p.y_max - p.y_min) * (y1 - y0); }
};

std::string axes(const Frame& f) {
  const PlotPanel& p = f.p;
  const int xdec = p.x_tick < 1 ? 1 : 0, ydec = p.y_tick < 1 ? 1 : 0;
  std::string out;
  for (double y = p.y_min; y <= p.y_max + 1e-9 * (p.y_max - p.y_min); y += p.y_tick) {
    out += line(f.x0, f.py(y), f.x1, f.py(y), kGrid, 1);
    out += text(f.x0 - 8, f.py(y) + 5, number(y, ydec), "end", kAxis);
  }
  int n = 0;
  for (double x = p.x_min; x <= p.x_max + 1e-9 * (p.x_max - p.x_min); x += p.x_tick, ++n) {
    out += line(f.px(x), f.y0, f.px(x), f.y1, kGrid, 1);
    if (n % 2 == 0) out += text(f.px(x), f.y1 + 22, number(x, xdec), "middle", kAxis);
  }
  out += fmt("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"", f.x0, f.y0, f.x1 - f.x0,
             f.y1 - f.y0) +
         " fill=\"none\" stroke=\"" + kAxis + "\" stroke-width=\"1\"/>\n";
  out += text((f.x0 + f.x1) / 2, f.y1 + 52, p.x_label, "middle", kAxis);
  out += text((f.x0 + f.x1) / 2, f.y0 - 20, p.title, "middle", kAxis, 17);
  return out;
}

std::string panel(double left, const PlotPanel& p) {
  const Frame f{left + kLeft, kTop, left + kPanelW - kRight, kPanelH - kBottom, p};
  std::string out = axes(f);
  if (p.reference) {
    const double y = f.py(*p.reference);
    out += line(f.x0, y, f.x1, y, kRef, 2, " stroke-dasharray=\"8 6\"");
    out += text(f.x1 - 6, y - 8, p.reference_label, "end", kRef);
  }
  for (size_t s = 0; s < p.series.size(); ++s) {
    const PlotSeries& ser = p.series[s];
    out += "<polyline fill=\"none\" stroke=\"" + std::string(colour(s)) +
           "\" stroke-width=\"3\" points=\"";
    for (size_t i = 0; i < ser.x.size(); ++i)
      out += fmt(i ? " %.1f,%.1f" : "%.1f,%.1f", f.px(ser.x[i]), f.py(ser.y[i]));
    out += "\"/>\n";
    for (size_t i = 0; i < ser.x.size(); ++i)
      out += marker_svg(f.px(ser.x[i]), f.py(ser.y[i]), marker(s), colour(s));
  }
  return out;
}

std::string legend(const std::vector<PlotSeries>& series, double width) {
  // About 8.5 units per character at size 15: enough to space the entries without measuring text.
  double total = 0;
  for (const PlotSeries& s : series) total += 40 + 8.5 * s.name.size() + 36;
  double x = std::max(8.0, (width - total) / 2);
  const double y = kPanelH + kLegendH / 2.0;
  std::string out;
  for (size_t i = 0; i < series.size(); ++i) {
    out += line(x, y, x + 30, y, colour(i), 3);
    out += marker_svg(x + 15, y, marker(i), colour(i));
    out += text(x + 40, y + 5, series[i].name, "start", kAxis);
    x += 40 + 8.5 * series[i].name.size() + 36;
  }
  return out;
}

}  // namespace

std::string render_svg(const std::vector<PlotPanel>& panels) {
  if (panels.empty()) throw Error(Errc::invalid_argument, "plot: no panels to draw");
  for (const PlotPanel& p : panels)
    if (!(p.x_max > p.x_min) || !(p.y_max > p.y_min) || !(p.x_tick > 0) || !(p.y_tick > 0))
      throw Error(Errc::invalid_argument,
                  "plot: panel '" + p.title + "' has an empty axis range or tick");
  const double W = double(kPanelW) * panels.size(), H = kPanelH + kLegendH;
  std::string out =
      fmt("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
          "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\">\n",
          W, H, W, H);
  out += fmt("<rect width=\"%.0f\" height=\"%.0f\" fill=\"#ffffff\"/>\n", W, H);
  for (size_t i = 0; i < panels.size(); ++i) out += panel(double(i) * kPanelW, panels[i]);
  out += legend(panels[0].series, W);
  return out + "</svg>\n";
}

namespace {

// Zooms a panel's y axis to data reaching `top` (scores of small models are often far below 100):
// at most 6 ticks of 1, 2, 5, 10 or 20 points.
void zoom_to(PlotPanel& p, double top) {
  const double want = std::max(top * 1.1, 1.0);
  for (double step : {1.0, 2.0, 5.0, 10.0, 20.0}) {
    if (want / step > 6.0 && step < 20.0) continue;
    p.y_tick = step;
    p.y_max = std::min(100.0, std::ceil(want / step) * step);
    break;
  }
}

}  // namespace

std::vector<PlotPanel> report_panels(const EvalReport& report) {
  PlotPanel contains{"answers containing a reference (%)",
                     "ratio kept",
                     0.0,
                     1.0,
                     0.1,
                     0.0,
                     100.0,
                     20.0,
                     {},
                     {},
                     "full"};
  PlotPanel f1{"SQuAD F1 (%)", "ratio kept", 0.0, 1.0, 0.1, 0.0, 100.0, 20.0, {}, {}, "full"};
  double top_contains = 0.0, top_f1 = 0.0;
  for (const EvalRow& r : report.rows) {
    if (r.kv_dtype != "f32") continue;  // those compare with f32, not with the full cache
    top_contains = std::max(top_contains, r.contains);
    top_f1 = std::max(top_f1, r.f1);
    if (r.method == "full") {
      contains.reference = r.contains;
      f1.reference = r.f1;
      continue;
    }
    auto it = std::find_if(contains.series.begin(), contains.series.end(),
                           [&](const PlotSeries& s) { return s.name == r.method; });
    if (it == contains.series.end()) {
      contains.series.push_back({r.method, {}, {}});
      f1.series.push_back({r.method, {}, {}});
      it = contains.series.end() - 1;
    }
    const size_t i = static_cast<size_t>(it - contains.series.begin());
    contains.series[i].x.push_back(r.ratio);
    contains.series[i].y.push_back(r.contains);
    f1.series[i].x.push_back(r.ratio);
    f1.series[i].y.push_back(r.f1);
  }
  zoom_to(contains, top_contains);
  zoom_to(f1, top_f1);
  return {contains, f1};
}

std::string plot_report(const EvalReport& report) { return render_svg(report_panels(report)); }

void write_plot(const std::string& path, const EvalReport& report) {
  write_file_atomically(path, /*force=*/true, plot_report(report));
}

}  // namespace kvzip::eval
