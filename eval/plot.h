// Line plots for `kvzip eval --plot`, written as SVG (plain text, no drawing library): panels side
// by side, each with a title, gridded and labelled axes, one coloured line with markers per series,
// an optional dashed reference level, and one shared legend below. plot_report draws
// contains-answer (%) and F1 (%) against the ratio kept, one series per method. Any browser or
// image viewer shows the file; `rsvg-convert -o out.png out.svg` (librsvg) turns it into a PNG.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "eval/eval.h"

namespace kvzip::eval {

struct PlotSeries {
  std::string name;
  std::vector<double> x, y;  // (points), drawn in order
};

struct PlotPanel {
  std::string title, x_label;
  double x_min = 0.0, x_max = 1.0, x_tick = 0.1;  // a grid line every tick, a label every 2
  double y_min = 0.0, y_max = 100.0, y_tick = 20.0;
  std::vector<PlotSeries> series;   // series i of every panel shares colour and marker i
  std::optional<double> reference;  // a dashed horizontal line, labelled reference_label
  std::string reference_label;
};

// The SVG document of the panels (640 x 480 user units each, a legend strip below). Throws
// Errc::invalid_argument for no panels or an empty axis range or tick.
std::string render_svg(const std::vector<PlotPanel>& panels);

// The two panels of a report: contains-answer and F1 (%) against the ratio, one series per method
// in row order, the full cache's score as each panel's dashed reference; each y axis zooms to the
// data (at most 6 ticks of 1, 2, 5, 10 or 20 points).
std::vector<PlotPanel> report_panels(const EvalReport& report);
// render_svg(report_panels(report)).
std::string plot_report(const EvalReport& report);
// Writes plot_report(report) to `path` through PATH.tmp and a rename (Errc::io on failure).
void write_plot(const std::string& path, const EvalReport& report);

}  // namespace kvzip::eval
