// `kvzip calibrate`: KVzip-scores one calibration document and writes the per-(layer, KV head)
// maxima as a head-scores file (format/head_scores.h) for `kvzip compress --level head` and
// `kvzip eval --methods kvzip-head`. Arguments are checked before the model loads; the file is
// written atomically. Calibrate on a text other than the documents to compress: that is what
// makes the head-level variant context-independent (spec/methods.md §1 step 9). With --scorer it
// trains the learned scorer instead (compress/learned_scorer.h, methods §1 step 10) on one or more
// texts (files, or folders of them) and writes a .kvp (format/scorer_file.h).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numeric>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "common/atomic_file.h"
#include "common/error.h"
#include "compress/head_level.h"
#include "compress/learned_scorer.h"
#include "format/head_scores.h"
#include "format/scorer_file.h"

namespace kvzip::cli {
namespace {

struct CalibrateOpts {
  std::vector<std::string> docs;
  std::string doc, model, out, system, target = "kvzip+";
  uint32_t chunk = 2000, threads = 0, window = 1000, heldout_every = 10;
  double alpha = 1.0;
  bool quiet = false, force = false, scorer = false;
};

// The heads sorted by score, best first, as "L12.h1 0.9731" lines (the first `n`).
void print_summary(const format::HeadScores& h, const compress::CalibrateResult& r,
                   const std::string& out) {
  const size_t H = h.values.size();
  std::vector<size_t> order(H);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return h.values[a] > h.values[b]; });
  std::fprintf(stderr,
               "%s: %u calibration tokens (+%u prefix), L = %u, Hkv = %u (%zu heads), chunk %u\n"
               "prefill %.2f s, scoring %.2f s; checksum %s\n"
               "head score: max %.4f, median %.4f, min %.4f; best heads:",
               out.c_str(), r.n_doc, r.n_prefix, h.n_layers, h.n_kv_heads, H, h.chunk, r.prefill_s,
               r.scoring_s, format::head_scores_checksum_text(h).c_str(), h.values[order.front()],
               h.values[order[H / 2]], h.values[order.back()]);
  for (size_t i = 0; i < std::min<size_t>(8, H); ++i)
    std::fprintf(stderr, " L%zu.h%zu %.4f", order[i] / h.n_kv_heads, order[i] % h.n_kv_heads,
                 h.values[order[i]]);
  std::fprintf(stderr, "\n");
}

void run_calibrate(const CalibrateOpts& o) {
  if (o.docs.size() != 1)
    throw Error(Errc::invalid_argument, "calibrate: head scores come from one calibration text (" +
                                            std::to_string(o.docs.size()) +
                                            " given); several texts train --scorer only");
  if (o.chunk == 0)
    throw Error(Errc::invalid_argument, "calibrate: --chunk must be at least 1 token");
  const std::string out = o.out.empty() ? default_output(o.doc, ".kvh", "calibrate") : o.out;
  if (o.target != "kvzip+" || o.window != 1000 || o.heldout_every != 10 || o.alpha != 1.0)
    throw Error(
        Errc::invalid_argument,
        "calibrate: --target, --window, --heldout-every and --alpha apply to --scorer only");
  check_writable(out, o.force);  // not after the scoring pass
  const std::string text = read_text(o.doc, "calibration document");

  auto model = load_model(o.model, o.threads);
  const compress::ScorerOptions so =
      compress::make_scorer_options(model->chat(), o.chunk, /*seed=*/0);
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
  h.source =
      o.doc == "-" ? std::string("(stdin)") : std::filesystem::path(o.doc).filename().string();
  h.values = r.head_scores;
  format::write_head_scores_file(h, out, o.force);
  if (!o.quiet) print_summary(h, r, out);
}

void print_fits(const compress::TrainResult& r, const format::ScorerFile& f,
                const std::string& out) {
  std::fprintf(
      stderr,
      "%s: target log %s, %u windows of %u tokens fitted (%llu tokens), %u held out "
      "(%llu tokens), %.1f s; checksum %s\nlayer  R2 kvzip  rho kvzip  R2 kvzip+  rho kvzip+\n",
      out.c_str(), format::scorer_target_name(f.target), f.train_windows, f.window,
      static_cast<unsigned long long>(f.train_tokens), f.heldout_windows,
      static_cast<unsigned long long>(f.heldout_tokens), r.seconds,
      format::scorer_checksum_text(f).c_str());
  // The mean is over the layers with a fit: a sliding-window layer (Gemma 3) has none.
  double mean[4] = {0, 0, 0, 0};
  uint32_t fitted = 0;
  for (uint32_t l = 0; l < f.n_layers; ++l) {
    const float v[4] = {r.fits[0].r2[l], r.fits[0].spearman[l], r.fits[1].r2[l],
                        r.fits[1].spearman[l]};
    std::fprintf(stderr, "%5u  %8.4f  %9.4f  %9.4f  %10.4f\n", l, v[0], v[1], v[2], v[3]);
    if (std::isnan(v[0])) continue;
    ++fitted;
    for (int i = 0; i < 4; ++i) mean[i] += v[i];
  }
  for (double& m : mean) m = fitted ? m / fitted : std::nan("");
  std::fprintf(stderr, " mean  %8.4f  %9.4f  %9.4f  %10.4f  (%u layers with a fit)\n", mean[0],
               mean[1], mean[2], mean[3], fitted);
}

void run_train_scorer(const CalibrateOpts& o) {
  if (o.docs.empty())
    throw Error(Errc::invalid_argument, "calibrate --scorer: give at least one text");
  compress::CalibrateScorerOptions co;
  co.train.target = compress::parse_scorer_target(o.target);
  co.train.window = o.window;
  co.train.heldout_every = o.heldout_every;
  co.train.alpha = o.alpha;
  co.system = o.system;
  co.threads = o.threads;
  co.force = o.force;
  compress::check_train_options(co.train);
  const std::string out =
      o.out.empty() ? default_output(o.docs.front(), ".kvp", "calibrate") : o.out;
  check_writable(out, o.force);
  const std::vector<compress::CalibrationText> texts = compress::read_calibration_texts(o.docs);

  auto model = load_model(o.model, o.threads);
  ProgressBarOptions pb;
  pb.quiet = o.quiet;
  pb.label = "calibrate";
  pb.eta = true;
  ProgressBar bar(pb);
  const auto start = std::chrono::steady_clock::now();
  co.progress = [&](uint64_t done, uint64_t total) {
    const double t =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    bar.update(prefill::PrefillProgress{done, total, t, t > 0 ? double(done) / t : 0.0});
  };
  const compress::TrainResult r = compress::calibrate_scorer_file(*model, texts, out, co);
  bar.finish();
  if (!o.quiet) print_fits(r, r.file, out);
}

}  // namespace

void add_calibrate_commands(CLI::App& app) {
  auto o = std::make_shared<CalibrateOpts>();
  auto* c = app.add_subcommand(
      "calibrate",
      "KVzip-score a calibration document once and write per-head scores (.kvh) for "
      "head-level compression (compress --level head)");
  c->add_option("documents", o->docs,
                "UTF-8 text file ('-' = standard input); best not a document "
                "you will compress. --scorer: one or more files or folders")
      ->required();
  add_model_option(c, o->model);
  c->add_option("-o,--output", o->out,
                "Output head-scores file (default: the document's name with "
                ".kvh; --scorer: .kvp)");
  c->add_option("--chunk", o->chunk, "KVzip reconstruction chunk in tokens")->capture_default_str();
  c->add_option("--system", o->system, "System prompt (default: the model template's)");
  add_threads_option(c, o->threads);
  c->add_flag("-q,--quiet", o->quiet, "No progress bar or summary");
  add_force_option(c, o->force);
  c->add_flag("--scorer", o->scorer,
              "Train the learned scorer (.kvp) for compress --scorer instead of head scores");
  c->add_option("--target", o->target, "--scorer: what to predict, kvzip or kvzip+")
      ->capture_default_str();
  c->add_option("--window", o->window, "--scorer: tokens per calibration window")
      ->capture_default_str();
  c->add_option("--heldout-every", o->heldout_every,
                "--scorer: hold every k-th window back for the fit quality (0: none)")
      ->capture_default_str();
  c->add_option("--alpha", o->alpha, "--scorer: ridge penalty")->capture_default_str();
  c->callback([o] {
    if (o->scorer) return run_train_scorer(*o);
    o->doc = o->docs.empty() ? std::string() : o->docs.front();
    run_calibrate(*o);
  });
}

}  // namespace kvzip::cli
