// The CLI's progress bar (cli/progress.h): at most four plain lines when not on a terminal, one
// line redrawn in place on a terminal (ended once by finish), nothing when quiet.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/progress.h"

using namespace kvzip;
using namespace kvzip::cli;

namespace {

// What a bar with options `o` (its `out` replaced by a temporary file) writes for `updates`,
// destructor included; *tty gets the bar's is_tty().
std::string drawn(ProgressBarOptions o, const std::vector<prefill::PrefillProgress>& updates,
                  bool* tty = nullptr) {
  FILE* f = std::tmpfile();
  REQUIRE(f);
  o.out = f;
  {
    ProgressBar bar(o);
    if (tty) *tty = bar.is_tty();
    for (const prefill::PrefillProgress& p : updates) bar.update(p);
  }
  std::string s;
  std::rewind(f);
  char buf[512];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  std::fclose(f);
  return s;
}

size_t count(const std::string& s, char c) { return size_t(std::count(s.begin(), s.end(), c)); }

}  // namespace

TEST_CASE("the progress bar writes at most four plain lines when not on a terminal", "[cli]") {
  ProgressBarOptions o;
  o.tty = 0;
  std::vector<prefill::PrefillProgress> updates;
  for (uint64_t done = 0; done <= 1000; done += 10)
    updates.push_back({done, 1000, 1.0, 10.0 * done});
  const std::string s = drawn(o, updates);
  INFO(s);
  CHECK(count(s, '\n') == 4);
  CHECK(count(s, '\r') == 0);
  CHECK(s.find("100%  1000/1000 tok  10000 tok/s") != std::string::npos);
}

TEST_CASE("the progress bar redraws one line on a terminal and is silent when quiet", "[cli]") {
  ProgressBarOptions o;
  o.tty = 1;
  o.redraw_s = 0.0;
  o.label = "doc";
  bool tty = false;
  const std::string s = drawn(o, {{5, 10, 0.5, 10}, {10, 10, 1.0, 10}}, &tty);
  CHECK(tty);
  CHECK(count(s, '\r') == 2);
  CHECK(count(s, '\n') == 1);  // finish() ends the line once
  CHECK(s.find("doc [###############...............]  50%") != std::string::npos);

  ProgressBarOptions quiet;
  quiet.quiet = true;
  CHECK(drawn(quiet, {{10, 10, 1.0, 10}}).empty());
}

TEST_CASE("the progress bar's ETA is the remaining tokens at the rate so far, gone when done",
          "[cli]") {
  ProgressBarOptions o;
  o.tty = 0;
  o.eta = true;
  // 250 of 1000 tokens at 5 tok/s: 150 s left; 500 at 10 tok/s: 50 s.
  std::string s =
      drawn(o, {{250, 1000, 50.0, 5.0}, {500, 1000, 50.0, 10.0}, {1000, 1000, 60.0, 16.0}});
  INFO(s);
  CHECK(s.find(" 25%  250/1000 tok  5 tok/s  ETA 2m30s\n") != std::string::npos);
  CHECK(s.find(" 50%  500/1000 tok  10 tok/s  ETA 50s\n") != std::string::npos);
  CHECK(s.find("100%  1000/1000 tok  16 tok/s\n") != std::string::npos);
  o.eta = false;
  s = drawn(o, {{250, 1000, 50.0, 5.0}});
  CHECK(s.find("ETA") == std::string::npos);
}
