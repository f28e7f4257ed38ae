// prefill/: reads [prefix ; document] into a full dense KvCache in chunks, reporting progress, and
// checks first that the sequence plus the room a question and its answer need fits the model's
// context. An optional AttentionObserver sees every layer of every chunk (the H2O and SnapKV
// scorers observe the prefill this way). ProgressBar is a ready-made stderr progress display:
// redrawn in place with \r on a terminal, a few plain lines otherwise, nothing when quiet.
#pragma once
#include <cstdint>
#include <cstdio>
#include <functional>
#include <span>
#include <string>

#include "common/model_config.h"
#include "model/forward.h"
#include "model/kv_cache.h"

namespace kvzip {

struct PrefillProgress {
  uint64_t done = 0;          // tokens prefilled so far (prefix included)
  uint64_t total = 0;         // tokens to prefill
  double elapsed_s = 0.0;     // since the prefill started
  double tokens_per_s = 0.0;  // done / elapsed_s (0 before the first chunk)
};
using PrefillProgressFn = std::function<void(const PrefillProgress&)>;

struct PrefillOptions {
  uint32_t chunk = 512;         // tokens per Forward::prefill call: the progress granularity (>= 1)
  uint32_t answer_room = 512;   // tokens a question and its answer need after the document
  PrefillProgressFn progress;   // optional; called once before the first chunk and after each
  AttentionObserver* observer = nullptr;  // optional; sees every layer of every chunk
};

struct PrefillResult {
  KvCache cache;          // (L, Hkv, n_prefix + n_doc, D), rows == positions
  uint32_t n_prefix = 0;  // rows [0, n_prefix) are the prefix
  uint32_t n_doc = 0;     // rows [n_prefix, n_prefix + n_doc) are the document
  double seconds = 0.0;   // wall time of the forward passes
};

// Throws Errc::invalid_argument, stating both numbers, when n_prefix + n_doc + answer_room exceeds
// cfg.max_context (a max_context of 0 means unknown: no check), or when the document is empty.
void check_fits_context(const ModelConfig& cfg, uint64_t n_prefix, uint64_t n_doc,
                        uint64_t answer_room);

// Checks the context (above), then prefills prefix followed by document into a new KvCache with
// room for answer_room more rows. Throws what Forward::prefill throws (bad token ids) and
// Errc::invalid_argument for options.chunk == 0.
PrefillResult prefill_document(Forward& forward, std::span<const int32_t> prefix,
                               std::span<const int32_t> document, const PrefillOptions& options = {});

struct ProgressBarOptions {
  std::string label = "prefill";
  bool quiet = false;        // true: print nothing
  FILE* out = stderr;        // must stay open while the bar is used
  int tty = -1;              // -1: ask isatty(out); 0: plain lines; 1: redraw with \r
  double redraw_s = 0.1;     // a terminal bar is redrawn at most this often (and at 100%)
};

// Formats PrefillProgress as "label [#####.....]  42%  2048/4873 tok  1234 tok/s". On a terminal it
// redraws one line; otherwise it writes a plain line at 25%, 50%, 75% and 100% (at most four).
class ProgressBar {
 public:
  explicit ProgressBar(ProgressBarOptions options = {});
  void update(const PrefillProgress& p);
  // Ends the terminal line (newline) if one was drawn. Called by the destructor too.
  void finish();
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;
  // A callback for PrefillOptions::progress that forwards to this bar (which must outlive it).
  PrefillProgressFn callback();

  bool is_tty() const { return tty_; }

 private:
  std::string line(const PrefillProgress& p) const;

  ProgressBarOptions opt_;
  bool tty_ = false;
  bool drawn_ = false;        // a terminal line is open (needs a newline at finish)
  int next_quarter_ = 1;      // plain mode: next quarter (1..4) to report
  double last_draw_s_ = -1e9;
};

}  // namespace kvzip
