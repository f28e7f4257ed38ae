// ProgressBar (see cli/progress.h). A terminal gets one line redrawn in place (rate-limited); a
// pipe or file gets at most four plain lines, so logs stay short.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>

#include "cli/progress.h"

namespace kvzip::cli {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

ProgressBar::ProgressBar(ProgressBarOptions options) : opt_(std::move(options)) {
  if (opt_.out == nullptr) opt_.quiet = true;
  tty_ = opt_.tty < 0 ? (opt_.out && isatty(fileno(opt_.out)) == 1) : opt_.tty == 1;
}

ProgressBar::~ProgressBar() { finish(); }

std::string ProgressBar::line(const prefill::PrefillProgress& p) const {
  constexpr int kWidth = 30;
  const double frac = p.total ? std::min(1.0, double(p.done) / double(p.total)) : 1.0;
  const int filled = static_cast<int>(frac * kWidth);
  std::string bar(filled, '#');
  bar.append(kWidth - filled, '.');
  char tail[160];
  std::snprintf(tail, sizeof tail, "] %3d%%  %llu/%llu %s  %.0f %s/s", int(frac * 100.0),
                static_cast<unsigned long long>(p.done), static_cast<unsigned long long>(p.total),
                opt_.unit.c_str(), p.tokens_per_s, opt_.unit.c_str());
  std::string out = opt_.label + " [" + bar + tail;
  if (opt_.eta && p.done < p.total && p.tokens_per_s > 0) {
    const long long s = std::llround(double(p.total - p.done) / p.tokens_per_s);
    char eta[48];
    if (s >= 60) std::snprintf(eta, sizeof eta, "  ETA %lldm%02llds", s / 60, s % 60);
    else std::snprintf(eta, sizeof eta, "  ETA %llds", s);
    out += eta;
  }
  return out;
}

void ProgressBar::update(const prefill::PrefillProgress& p) {
  if (opt_.quiet) return;
  const bool complete = p.total == 0 || p.done >= p.total;
  if (tty_) {
    const double t = now_s();
    if (!complete && t - last_draw_s_ < opt_.redraw_s) return;
    last_draw_s_ = t;
    std::fprintf(opt_.out, "\r%s\x1b[K", line(p).c_str());  // \x1b[K clears a longer old line
    std::fflush(opt_.out);
    drawn_ = true;
    return;
  }
  // Plain output: one line per quarter reached (several quarters at once give one line).
  if (next_quarter_ > 4) return;
  const int quarter = p.total ? static_cast<int>(4 * p.done / p.total) : 4;
  if (quarter < next_quarter_) return;
  next_quarter_ = quarter + 1;
  std::fprintf(opt_.out, "%s\n", line(p).c_str());
  std::fflush(opt_.out);
}

void ProgressBar::finish() {
  if (opt_.quiet || !drawn_) return;
  std::fputc('\n', opt_.out);
  std::fflush(opt_.out);
  drawn_ = false;
}

prefill::PrefillProgressFn ProgressBar::callback() {
  return [this](const prefill::PrefillProgress& p) { update(p); };
}

}  // namespace kvzip::cli
