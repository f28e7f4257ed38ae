// The CLI's progress bar (cli/progress.h): at most four plain lines when not on a terminal, one
// line redrawn in place on a terminal (ended once by finish), nothing when quiet.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <string>

#include "cli/progress.h"

using namespace kvzip;
using namespace kvzip::cli;

namespace {

std::string read_all(FILE* f) {
  std::string s;
  std::rewind(f);
  char buf[512];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  return s;
}

size_t count(const std::string& s, char c) { return size_t(std::count(s.begin(), s.end(), c)); }

}  // namespace

TEST_CASE("the progress bar writes at most four plain lines when not on a terminal",
          "[cli]") {
  FILE* f = std::tmpfile();
  REQUIRE(f);
  {
    ProgressBarOptions o;
    o.out = f;
    o.tty = 0;
    ProgressBar bar(o);
    for (uint64_t done = 0; done <= 1000; done += 10) bar.update(PrefillProgress{done, 1000, 1.0, 10.0 * done});
  }
  const std::string s = read_all(f);
  INFO(s);
  CHECK(count(s, '\n') == 4);
  CHECK(count(s, '\r') == 0);
  CHECK(s.find("100%  1000/1000 tok  10000 tok/s") != std::string::npos);
  std::fclose(f);
}

TEST_CASE("the progress bar redraws one line on a terminal and is silent when quiet",
          "[cli]") {
  FILE* f = std::tmpfile();
  REQUIRE(f);
  {
    ProgressBarOptions o;
    o.out = f;
    o.tty = 1;
    o.redraw_s = 0.0;
    o.label = "doc";
    ProgressBar bar(o);
    CHECK(bar.is_tty());
    bar.update(PrefillProgress{5, 10, 0.5, 10});
    bar.update(PrefillProgress{10, 10, 1.0, 10});
  }
  std::string s = read_all(f);
  CHECK(count(s, '\r') == 2);
  CHECK(count(s, '\n') == 1);  // finish() ends the line once
  CHECK(s.find("doc [###############...............]  50%") != std::string::npos);
  std::fclose(f);

  f = std::tmpfile();
  {
    ProgressBarOptions o;
    o.out = f;
    o.quiet = true;
    ProgressBar bar(o);
    bar.update(PrefillProgress{10, 10, 1.0, 10});
  }
  CHECK(read_all(f).empty());
  std::fclose(f);
}
