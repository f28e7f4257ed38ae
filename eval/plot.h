// Line plots for `kvzip eval --plot`: panels side by side, each with a title, gridded axes, one
// coloured line with markers per series, an optional dashed reference level, and one shared
// legend below. plot_report draws agreement (%) and F1 (%) against the ratio kept, per method.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "eval/eval.h"
#include "eval/png.h"

namespace kvzip::eval {

struct PlotSeries {
  std::string name;
  std::vector<double> x, y;  // (points), drawn in order
};

struct PlotPanel {
  std::string title, x_label;
  double x_min = 0.0, x_max = 1.0, x_tick = 0.1;  // a grid line every tick, a label every 2
  double y_min = 0.0, y_max = 100.0, y_tick = 20.0;
  std::vector<PlotSeries> series;  // series i of every panel shares colour and marker i
  std::optional<double> reference;  // a dashed horizontal line, labelled reference_label
  std::string reference_label;
};

// Throws Errc::invalid_argument for no panels or an empty axis range.
Image render_panels(const std::vector<PlotPanel>& panels);

// The two panels of a report: agreement and F1 (%) against the ratio, one series per method in
// row order, the full cache's F1 as the dashed reference; the F1 axis zooms to the data (at most 6
// ticks of 1, 2, 5, 10 or 20 points).
std::vector<PlotPanel> report_panels(const EvalReport& report);
// render_panels(report_panels(report)).
Image plot_report(const EvalReport& report);

}  // namespace kvzip::eval
