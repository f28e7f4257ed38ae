// `kvzip calibrate`: KVzip-scores one calibration document and writes the per-(layer, KV head)
// maxima as a head-scores file (format/head_scores.h) for `kvzip compress --level head` and
// `kvzip eval --methods kvzip-head`. Arguments are checked before the model loads; the file is
// written atomically. Calibrate on a text other than the documents to compress: that is what
// makes the head-level variant context-independent (spec/methods.md §1 step 9).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <numeric>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "common/atomic_file.h"
#include "common/error.h"
#include "compress/head_level.h"
#include "format/head_scores.h"

namespace kvzip::cli {
namespace {

struct CalibrateOpts {
  std::string doc, model, out, system;
  uint32_t chunk = 2000, threads = 0;
  bool quiet = false, force = false;
};

// The heads sorted by score, best first, as "L12.h1 0.9731" lines (the first `n`).
void print_summary(const format::HeadScores& h, const compress::CalibrateResult& r, const std::string& out) {
  const size_t H = h.values.size();
  std::vector<size_t> order(H);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return h.values[a] > h.values[b]; });
  std::fprintf(stderr,
               "%s: %u calibration tokens (+%u prefix), L = %u, Hkv = %u (%zu heads), chunk %u\n"
               "prefill %.2f s, scoring %.2f s; checksum %s\n"
               "head score: max %.4f, median %.4f, min %.4f; best heads:",
               out.c_str(), r.n_doc, r.n_prefix, h.n_layers, h.n_kv_heads, H, h.chunk,
               r.prefill_s, r.scoring_s, format::head_scores_checksum_text(h).c_str(),
               h.values[order.front()], h.values[order[H / 2]], h.values[order.back()]);
  for (size_t i = 0; i < std::min<size_t>(8, H); ++i)
    std::fprintf(stderr, " L%zu.h%zu %.4f", order[i] / h.n_kv_heads, order[i] % h.n_kv_heads,
                 h.values[order[i]]);
  std::fprintf(stderr, "\n");
}

void run_calibrate(const CalibrateOpts& o) {
  if (o.chunk == 0) throw Error(Errc::invalid_argument, "calibrate: --chunk must be at least 1 token");
  const std::string out = o.out.empty() ? default_output(o.doc, ".kvh", "calibrate") : o.out;
  check_writable(out, o.force);  // not after the scoring pass
  const std::string text = read_text(o.doc, "calibration document");

  auto model = load_model(o.model, o.threads);
  const compress::ScorerOptions so = compress::make_scorer_options(model->chat(), o.chunk, /*seed=*/0);
  const std::vector<int32_t> prefix = model->chat().prefix(o.system);
  const std::vector<int32_t> document = model->chat().encode_document(text);
  ProgressBarOptions pb;
  pb.quiet = o.quiet;
  ProgressBar bar(pb);
  prefill::PrefillOptions po;
  po.progress = bar.callback();
  model::ForwardOptions fo;
  fo.threads = o.threads;
  model::Forward fwd(model->weights(), fo);
  compress::CalibrateResult r = compress::calibrate_heads(fwd, prefix, document, so, po);
  bar.finish();

  format::HeadScores h;
  h.model = model->fingerprint();
  h.n_layers = r.shape.n_layers;
  h.n_kv_heads = r.shape.n_kv_heads;
  h.calibration_tokens = r.n_doc;
  h.chunk = o.chunk;
  h.source = o.doc == "-" ? std::string("(stdin)") : std::filesystem::path(o.doc).filename().string();
  h.values = r.head_scores;
  format::write_head_scores_file(h, out, o.force);
  if (!o.quiet) print_summary(h, r, out);
}

}  // namespace

void add_calibrate_commands(CLI::App& app) {
  auto o = std::make_shared<CalibrateOpts>();
  auto* c = app.add_subcommand(
      "calibrate", "KVzip-score a calibration document once and write per-head scores (.kvh) for "
                   "head-level compression (compress --level head)");
  c->add_option("document", o->doc, "UTF-8 text file ('-' = standard input); best not a document "
                                    "you will compress")
      ->required();
  add_model_option(c, o->model);
  c->add_option("-o,--output", o->out, "Output head-scores file (default: the document's name with .kvh)");
  c->add_option("--chunk", o->chunk, "KVzip reconstruction chunk in tokens")->capture_default_str();
  c->add_option("--system", o->system, "System prompt (default: the model template's)");
  add_threads_option(c, o->threads);
  c->add_flag("-q,--quiet", o->quiet, "No progress bar or summary");
  add_force_option(c, o->force);
  c->callback([o] { run_calibrate(*o); });
}

}  // namespace kvzip::cli
