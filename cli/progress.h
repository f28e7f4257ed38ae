// The terminal progress display of the CLI commands: PrefillProgress (model/prefill.h) as
// "label [#####.....]  42%  2048/4873 tok  1234 tok/s" on stderr, redrawn in place with \r on a
// terminal, a few plain lines otherwise, nothing when quiet. Presentation only: the library
// reports progress through callbacks and never prints.
#pragma once
#include <cstdio>
#include <string>

#include "model/prefill.h"

namespace kvzip::cli {

struct ProgressBarOptions {
  std::string label = "prefill";
  std::string unit = "tok";  // what done/total count ("tok/s" is then unit + "/s")
  bool quiet = false;        // true: print nothing
  FILE* out = stderr;        // must stay open while the bar is used
  int tty = -1;              // -1: ask isatty(out); 0: plain lines; 1: redraw with \r
  double redraw_s = 0.1;     // a terminal bar is redrawn at most this often (and at 100%)
  bool eta = false;          // append "ETA 1m05s" (remaining tokens at the rate so far) until done
};

// On a terminal it redraws one line; otherwise it writes a plain line at 25%, 50%, 75% and 100%
// (at most four).
class ProgressBar {
 public:
  explicit ProgressBar(ProgressBarOptions options = {});
  void update(const prefill::PrefillProgress& p);
  // Ends the terminal line (newline) if one was drawn. Called by the destructor too.
  void finish();
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;
  // A callback for PrefillOptions::progress that forwards to this bar (which must outlive it).
  prefill::PrefillProgressFn callback();

  bool is_tty() const { return tty_; }

 private:
  std::string line(const prefill::PrefillProgress& p) const;

  ProgressBarOptions opt_;
  bool tty_ = false;
  bool drawn_ = false;    // a terminal line is open (needs a newline at finish)
  int next_quarter_ = 1;  // plain mode: next quarter (1..4) to report
  double last_draw_s_ = -1e9;
};

}  // namespace kvzip::cli
