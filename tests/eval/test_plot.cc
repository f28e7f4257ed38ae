// The evaluation plot (eval/plot.h): the report's panels (series per method, the F1 axis zoomed to
// the data), and the SVG checked by a small reader written here: every element closes in order,
// each series is one polyline whose points are the data mapped onto its panel's frame, titles and
// legend names are present and XML-escaped, the reference level is dashed, bad panels are refused,
// and write_plot leaves exactly the document and no temporary file; a CSV's rows read back
// (parse_csv, behind `eval --plot-csv`) draw the same plot, and a foreign CSV is refused.
#include <catch2/catch.hpp>

#include <unistd.h>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "eval/plot.h"

using namespace kvzip;
using namespace kvzip::eval;

namespace {

EvalReport two_methods(const std::string& second = "h2o") {
  EvalReport r;
  // method, ratio, kept, F1, contains, agreement, answer F1, KL, questions, times
  r.rows.push_back({"full", 1.0, 1.0, 40.0, 100.0, 100.0, 100.0, 0.0, 4, 0.0, 1.0});
  for (double ratio : {0.2, 0.6, 1.0}) {
    r.rows.push_back({"kvzip", ratio, ratio, 30.0, 100.0 * ratio, 20.0, 60.0, 0.1, 4, 0.0, 1.0});
    r.rows.push_back({second, ratio, ratio, 10.0, 50.0 * ratio, 10.0, 30.0, 0.5, 4, 0.0, 1.0});
  }
  return r;
}

struct Tag {
  std::string name;
  std::string attrs;  // the raw attribute text
};

// Every start tag in document order; REQUIREs that each element closes in order (a stack of
// names), that the root is <svg>, and that nothing but text lies outside the tags.
std::vector<Tag> parse_tags(const std::string& svg) {
  std::vector<Tag> tags;
  std::vector<std::string> open;
  size_t i = 0;
  while ((i = svg.find('<', i)) != std::string::npos) {
    const size_t end = svg.find('>', i);
    REQUIRE(end != std::string::npos);
    std::string body = svg.substr(i + 1, end - i - 1);
    i = end + 1;
    if (body[0] == '/') {
      REQUIRE(!open.empty());
      REQUIRE(open.back() == body.substr(1));
      open.pop_back();
      continue;
    }
    const bool self = body.back() == '/';
    if (self) body.pop_back();
    const size_t sp = body.find(' ');
    Tag t{body.substr(0, sp), sp == std::string::npos ? "" : body.substr(sp + 1)};
    REQUIRE(t.name.find_first_of("\"=") == std::string::npos);
    if (tags.empty()) REQUIRE(t.name == "svg");
    if (!self) open.push_back(t.name);
    tags.push_back(t);
  }
  REQUIRE(open.empty());
  return tags;
}

std::string attr(const Tag& t, const std::string& key) {
  const size_t at = t.attrs.find(key + "=\"");
  if (at == std::string::npos) return "";
  const size_t b = at + key.size() + 2;
  return t.attrs.substr(b, t.attrs.find('"', b) - b);
}

std::vector<std::pair<double, double>> points(const Tag& t) {
  std::vector<std::pair<double, double>> out;
  std::istringstream in(attr(t, "points"));
  std::string p;
  while (in >> p) {
    const size_t comma = p.find(',');
    out.push_back({std::stod(p.substr(0, comma)), std::stod(p.substr(comma + 1))});
  }
  return out;
}

}  // namespace

TEST_CASE("the report plot is one SVG polyline per method and panel, on the data", "[eval]") {
  const std::string svg = plot_report(two_methods());
  const std::vector<Tag> tags = parse_tags(svg);
  CHECK(attr(tags[0], "width") == "1280");
  CHECK(attr(tags[0], "height") == "536");
  std::vector<Tag> lines;
  for (const Tag& t : tags)
    if (t.name == "polyline") lines.push_back(t);
  // Panel order, then series order: contains kvzip, contains h2o, F1 kvzip, F1 h2o.
  REQUIRE(lines.size() == 4);
  CHECK(attr(lines[0], "stroke") == "#1f77b4");
  CHECK(attr(lines[1], "stroke") == "#ff7f0e");
  CHECK(attr(lines[2], "stroke") == "#1f77b4");
  // The contains panel's frame: x from 80 to 616 for ratios 0 .. 1, y from 404 (0%) to 52 (100%).
  const auto p = points(lines[0]);
  REQUIRE(p.size() == 3);
  CHECK(p[0].first == Approx(80 + 0.2 * 536).margin(0.06));
  CHECK(p[0].second == Approx(404 - 0.2 * 352).margin(0.06));
  CHECK(p[2].first == Approx(616).margin(0.06));
  CHECK(p[2].second == Approx(52).margin(0.06));
  // The second panel starts 640 units to the right.
  CHECK(points(lines[2])[0].first == Approx(640 + 80 + 0.2 * 536).margin(0.06));
  CHECK(svg.find(">answers containing a reference (%)</text>") != std::string::npos);
  CHECK(svg.find(">SQuAD F1 (%)</text>") != std::string::npos);
  CHECK(svg.find(">kvzip</text>") != std::string::npos);     // legend
  CHECK(svg.find("stroke-dasharray") != std::string::npos);  // the full cache's levels
}

TEST_CASE("method names are escaped in the SVG", "[eval]") {
  const std::string svg = plot_report(two_methods("a<b&\"c\""));
  parse_tags(svg);
  CHECK(svg.find(">a&lt;b&amp;&quot;c&quot;</text>") != std::string::npos);
  CHECK(svg.find("a<b") == std::string::npos);
}

TEST_CASE("a plot without panels or with an empty axis is refused", "[eval]") {
  CHECK_THROWS_AS(render_svg({}), Error);
  PlotPanel p;
  p.x_max = p.x_min;
  try {
    render_svg({p});
    FAIL("an empty axis was accepted");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::invalid_argument);
  }
}

TEST_CASE("write_plot leaves exactly the SVG and no temporary file", "[eval]") {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("kvzip-plot-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const EvalReport r = two_methods();
  const std::string path = (dir / "p.svg").string();
  write_plot(path, r);
  std::ifstream in(path, std::ios::binary);
  const std::string got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(got == plot_report(r));
  CHECK(std::distance(std::filesystem::directory_iterator(dir),
                      std::filesystem::directory_iterator()) == 1);
  std::filesystem::remove_all(dir);
}

TEST_CASE("the contains and F1 panels zoom to small scores with readable ticks", "[eval]") {
  EvalReport r;
  r.rows.push_back({"full", 1.0, 1.0, 7.6, 15.0, 100.0, 100.0, 0.0, 96, 0.0, 1.0});
  r.rows.push_back({"kvzip", 0.1, 0.1, 5.9, 11.0, 6.0, 40.0, 0.1, 96, 0.0, 1.0});
  r.rows.push_back({"kvzip", 0.5, 0.5, 7.3, 14.0, 81.0, 90.0, 0.0, 96, 0.0, 1.0});
  std::vector<PlotPanel> p = report_panels(r);
  REQUIRE(p.size() == 2);
  CHECK(p[0].y_max == 20.0);  // 15 * 1.1 = 16.5 -> ticks of 5 up to 20
  CHECK(p[0].y_tick == 5.0);
  REQUIRE(p[0].reference);
  CHECK(*p[0].reference == 15.0);
  REQUIRE(p[0].series.size() == 1);
  CHECK(p[0].series[0].x == std::vector<double>{0.1, 0.5});
  CHECK(p[0].series[0].y == std::vector<double>{11.0, 14.0});
  CHECK(p[1].y_max == 10.0);  // 7.6 * 1.1 = 8.4 -> ticks of 2 up to 10
  CHECK(p[1].y_tick == 2.0);
  REQUIRE(p[1].reference);
  CHECK(*p[1].reference == 7.6);
  r.rows[0].f1 = 62.0;
  p = report_panels(r);
  CHECK(p[1].y_max == 80.0);  // 68.2 -> ticks of 20
  CHECK(p[1].y_tick == 20.0);
}

TEST_CASE("a CSV's rows read back draw the plot of the report that wrote it", "[eval]") {
  const EvalReport r = two_methods();
  const EvalReport back = parse_csv(format_csv(r));
  REQUIRE(back.rows.size() == r.rows.size());
  CHECK_FALSE(back.with_kv_dtypes);
  for (size_t i = 0; i < r.rows.size(); ++i) {
    INFO("row " << i);
    CHECK(back.rows[i].method == r.rows[i].method);
    CHECK(back.rows[i].ratio == Approx(r.rows[i].ratio));
    CHECK(back.rows[i].achieved_ratio == Approx(r.rows[i].achieved_ratio));
    CHECK(back.rows[i].contains == Approx(r.rows[i].contains));
    CHECK(back.rows[i].f1 == Approx(r.rows[i].f1));
    CHECK(back.rows[i].kl == Approx(r.rows[i].kl));
    CHECK(back.rows[i].agreement == Approx(r.rows[i].agreement));
    CHECK(back.rows[i].answer_f1 == Approx(r.rows[i].answer_f1));
    CHECK(back.rows[i].questions == r.rows[i].questions);
    CHECK(back.rows[i].answer_s == Approx(r.rows[i].answer_s));
  }
  CHECK(plot_report(back) == plot_report(r));
  // Two runs' rows merged into one file (one header) draw every row; CRLF line ends are read too.
  const std::string csv = format_csv(r);
  const std::string body = csv.substr(csv.find('\n') + 1);
  std::string crlf;
  for (char c : body) crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
  CHECK(parse_csv(csv + crlf + "\n").rows.size() == 2 * r.rows.size());
}

TEST_CASE("a CSV with storage-type columns reads them back", "[eval]") {
  EvalReport r = two_methods();
  r.with_kv_dtypes = true;
  r.rows[1].kv_dtype = "q8";
  r.rows[1].file_bytes = 12345;
  r.rows[1].load_ms = 2.5;
  const EvalReport back = parse_csv(format_csv(r));
  CHECK(back.with_kv_dtypes);
  REQUIRE(back.rows.size() == r.rows.size());
  CHECK(back.rows[1].kv_dtype == "q8");
  CHECK(back.rows[1].file_bytes == 12345);
  CHECK(back.rows[1].load_ms == Approx(2.5));
  CHECK(back.rows[0].kv_dtype == "f32");
}

TEST_CASE("a CSV that is not eval's is refused with its line", "[eval]") {
  const std::string header =
      "method,ratio,achieved_ratio,contains,f1,kl,agreement,answer_f1,questions,compress_s,"
      "answer_s\n";
  const auto refused = [](const std::string& text, const std::string& what) {
    try {
      parse_csv(text);
      FAIL("accepted: " << text);
    } catch (const Error& e) {
      CHECK(e.code() == Errc::invalid_argument);
      CHECK_THAT(e.what(), Catch::Matchers::Contains(what));
    }
  };
  refused("", "empty");
  refused("setting,length,task,method,ratio\n", "line 1: expected the header");
  refused(header + "kvzip,0.5,0.5,10,10,0.1,50,60,4,1.0\n", "line 2: 10 fields, the header has 11");
  refused(header + "full,1,1,40,100,0,100,100,4,0,1\nkvzip,0.5,half,10,10,0.1,50,60,4,1,1\n",
          "line 3: 'half' is not a number");
  refused(header + "kvzip,0.5,0.5,10,10,0.1,50,60,-4,1,1\n", "'-4' is not a number");
  refused(header + "kvzip,0.5,,10,10,0.1,50,60,4,1,1\n", "'' is not a number");
}
