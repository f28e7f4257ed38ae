// `kvzip compress`: the options of compress_to_file (compress/pipeline.h: document -> prefill ->
// scoring -> eviction -> .kvz file, written atomically) and the summary it prints; with
// --manifest, corpus mode (compress/corpus.h: many documents, resumable, sharded). Arguments are
// validated before the model loads. `--level head` (or --method kvzip-head) is head-level KVzip:
// no scoring pass; the head scores of `kvzip calibrate` decide which heads keep the whole document.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "common/atomic_file.h"
#include "common/error.h"
#include "common/hadamard.h"
#include "common/json.h"
#include "compress/corpus.h"
#include "compress/learned_scorer.h"
#include "compress/pipeline.h"
#include "format/format.h"
#include "format/head_scores.h"
#include "format/scorer_file.h"
#include "kernels/device.h"

namespace kvzip::cli {
namespace {

struct CompressOpts {
  std::string doc, model, out, method = "kvzip", level = "global", system, dtype = kDefaultKvDtype;
  RemovedKvLayoutOptions removed;  // --kv-rotate, --kv-params: refused with a message
  std::string query_template = format::kDefaultQueryTemplate;
  std::string head_scores;  // --level head: the file of `kvzip calibrate`
  std::string scorer_file;  // --scorer: the learned scorer of `kvzip calibrate --scorer` (kvzap)
  bool stream = false;      // --stream: evict while the document is read (kvzap)
  std::string device = "cpu", matmul = "fast";
  std::string manifest, out_dir, shard = "0/1", summary;  // corpus mode
  double ratio = compress::kDefaultRatio;
  bool ratio_given = false;  // if not, the method's compress::default_ratio
  uint32_t chunk = 2000, threads = 0, seed = 0, head_window = 0, kv_group = 0;
  std::vector<std::string> scorer_options;  // KEY=VALUE (set_scorer_option)
  int zstd = 0;
  bool quiet = false, force = false, force_model = false;
};

// True for head-level KVzip; refuses options that belong to the other path.
bool head_level(const CompressOpts& o) {
  const bool head = o.level == "head" || o.method == compress::kHeadLevelMethod;
  if (head && o.method != "kvzip" && o.method != compress::kHeadLevelMethod)
    throw Error(Errc::invalid_argument,
                "compress: --level head is KVzip's head-level variant; "
                "--method " +
                    o.method + " cannot be combined with it");
  if (head && o.level != "head" && o.level != "global")
    throw Error(Errc::invalid_argument,
                "compress: --method kvzip-head selects whole heads; "
                "--level " +
                    o.level + " does not apply");
  if (head && o.head_scores.empty())
    throw Error(Errc::invalid_argument,
                "compress: --level head needs --head-scores FILE "
                "(make it with `kvzip calibrate TEXT -o FILE`)");
  if (!head && !o.head_scores.empty())
    throw Error(Errc::invalid_argument, "compress: --head-scores applies only to --level head");
  return head;
}

// Corpus mode after the model is loaded: a line per document on stderr, the JSON summary on
// stdout (or --summary FILE, written atomically); any failed document makes the exit status that
// of the first failure, after every other document was done.
void run_corpus(const model::Model& model, const std::vector<compress::CorpusEntry>& entries,
                const compress::CompressFileOptions& fo, const CompressOpts& o,
                compress::Shard shard) {
  compress::CorpusOptions co;
  co.file = fo;
  co.out_dir = o.out_dir;
  co.shard = shard;
  const compress::CorpusSummary s = compress::compress_corpus(
      model, entries, co, [&](const compress::CorpusOutcome& r, size_t i, size_t n) {
        if (o.quiet) return;
        if (r.status == compress::CorpusStatus::Failed)
          std::fprintf(stderr, "[%zu/%zu] %s: failed [%s]: %s\n", i + 1, n, r.id.c_str(),
                       errc_name(r.code), r.error.c_str());
        else
          std::fprintf(stderr, "[%zu/%zu] %s: %s, ratio %.3f, %.1f s\n", i + 1, n, r.id.c_str(),
                       compress::corpus_status_name(r.status), r.achieved_ratio, r.seconds);
      });
  const std::string json = json_dump(s.to_json()) + "\n";
  if (o.summary.empty()) std::fwrite(json.data(), 1, json.size(), stdout);
  else write_file_atomically(o.summary, /*force=*/true, json);
  if (s.failed) {
    const auto first =
        std::find_if(s.outcomes.begin(), s.outcomes.end(), [](const compress::CorpusOutcome& r) {
          return r.status == compress::CorpusStatus::Failed;
        });
    throw Error(first->code, std::to_string(s.failed) + " of " + std::to_string(s.in_shard) +
                                 " documents failed (the summary lists each); first: " + first->id +
                                 ": " + first->error);
  }
}

// The method the flags ask for: --scorer FILE is the learned scorer (method kvzap), which needs
// it; --method's default, kvzip, counts as not given.
std::string method_of(const CompressOpts& o) {
  try {
    return compress::method_with_scorer(o.method == "kvzip" ? std::string() : o.method,
                                        !o.scorer_file.empty());
  } catch (const Error& e) {
    throw Error(e.code(), std::string("compress: ").append(e.what()));
  }
}

// Flags that only the command line has: the level's extra value "head", scorer options (parsed
// here, applied once the model gives its chat template), one document or a manifest.
void check_flags(const CompressOpts& o, bool head) {
  {
    compress::ScorerOptions
        probe;  // unknown keys and unparsable values fail before the model loads
    for (const std::string& kv : o.scorer_options) compress::set_scorer_option(probe, kv);
    if (head && !o.scorer_options.empty())
      throw Error(Errc::invalid_argument,
                  "compress: --scorer-option does not apply to --level head (no scoring pass)");
  }
  reject_removed_kv_layout_options(o.removed, "compress");
  const bool corpus = !o.manifest.empty();
  if (corpus == !o.doc.empty())
    throw Error(Errc::invalid_argument,
                "compress: give a DOCUMENT or --manifest FILE (one of them)");
  if (corpus && !o.out.empty())
    throw Error(Errc::invalid_argument,
                "compress: with --manifest the outputs are --out-dir DIR/<id>.kvz; drop -o");
  if (!corpus && (!o.out_dir.empty() || o.shard != "0/1" || !o.summary.empty()))
    throw Error(Errc::invalid_argument,
                "compress: --out-dir, --shard and --summary belong to --manifest");
  if (corpus && o.out_dir.empty())
    throw Error(Errc::invalid_argument, "compress: --manifest needs --out-dir DIR");
}

// The library's options from the flags (all but the scorer options, which need the model's chat
// template), checked by the library's own check_file_options; its errors gain the command's name.
compress::CompressFileOptions file_options(const CompressOpts& o, bool head,
                                           const format::HeadScores& hs) {
  compress::CompressFileOptions fo;
  fo.compress.method = head ? compress::kHeadLevelMethod : o.method;
  fo.compress.ratio = o.ratio_given ? o.ratio : compress::default_ratio(fo.compress.method);
  if (!head) fo.compress.level = compress::parse_selection_level(o.level);
  fo.compress.stream = o.stream;
  if (head) fo.compress.head = compress::head_level_options(hs, o.head_scores, o.head_window);
  fo.system = o.system;
  fo.query_template = o.query_template;
  fo.kv = {parse_kv_dtype(o.dtype, "compress"), o.kv_group};
  fo.write.zstd_level = o.zstd;
  fo.write.force = o.force;
  fo.device = kernels::parse_device(o.device.c_str());
  fo.threads = o.threads;
  fo.matmul = o.matmul == "exact" ? kernels::MatmulPath::Exact : kernels::MatmulPath::Fast;
  // On a GPU the prefill goes in calls of 2048 tokens, GpuForward's own chunk (the CPU's 512
  // would only shrink its GEMMs); the progress bar then moves every 2048 tokens.
  if (fo.device == kernels::Device::Cuda) fo.compress.prefill.chunk = 2048;
  try {
    compress::check_file_options(fo);
  } catch (const Error& e) {
    throw Error(e.code(), std::string("compress: ").append(e.what()));
  }
  return fo;
}

// The model's share of the options: q8/q4 need a power-of-two head dimension, head scores and a
// learned scorer must come from this model; the scorer options take its chat template.
void fit_model(const model::Model& model, const CompressOpts& o, bool head,
               const format::HeadScores& hs, const compress::LearnedScorerFile& learned,
               compress::CompressFileOptions& fo) {
  if (format::dtype_quantized(fo.kv.dtype) &&
      !hadamard_size(model.config().head_dim))  // not after the prefill
    throw Error(Errc::invalid_argument,
                "compress: --kv-dtype " + o.dtype + " needs a power-of-two head dimension " +
                    "(q8/q4 rows are stored Hadamard-rotated); this model's is " +
                    std::to_string(model.config().head_dim) + ": use f16 or bf16");
  if (head &&
      !format::check_head_scores_model(hs, model.config(), model.fingerprint(), o.force_model) &&
      !o.quiet)
    std::fprintf(stderr, "warning: %s was calibrated on another model (--force-model)\n",
                 o.head_scores.c_str());
  fo.compress.scorer =
      compress::make_scorer_options(model.chat(), o.chunk, o.seed, o.scorer_options);
  if (learned) compress::use_learned_scorer(fo.compress.scorer, learned, model);
}

// The summary of one compressed document on stderr.
void print_summary(const model::Model& model, const compress::CompressResult& r,
                   const CompressOpts& o, bool head, const std::string& out, double total_s) {
  const double full_mb = 2.0 * model.config().n_layers * model.config().n_kv_heads *
                         model.config().head_dim * 4.0 * (r.n_prefix + r.n_doc) / 1e6;
  if (head)
    std::fprintf(stderr,
                 "head level: %s of the heads keep the whole document, the others the "
                 "prefix + %u recent rows\n",
                 std::find_if(r.params.begin(), r.params.end(),
                              [](const auto& p) { return p.first == "heads_kept"; })
                     ->second.c_str(),
                 o.head_window);
  std::fprintf(stderr,
               "%s: %u document tokens (+%u prefix), method %s, ratio %.3f kept (asked %.3f)\n"
               "prefill %.2f s (%.0f tok/s), scoring %.2f s (%.2fx prefill), select %.2f s; "
               "compress %.2fx prefill; total %.2f s\n"
               "file %.2f MB (full f32 cache %.2f MB)\n",
               out.c_str(), r.n_doc, r.n_prefix, r.method.c_str(), r.achieved_ratio,
               r.requested_ratio, r.prefill_s, (r.n_prefix + r.n_doc) / r.prefill_s, r.scoring_s,
               r.scoring_s / r.prefill_s, r.select_s,
               (r.prefill_s + r.scoring_s + r.select_s) / r.prefill_s, total_s,
               std::filesystem::file_size(out) / 1e6, full_mb);
  if (r.peak_rows > 0)
    std::fprintf(
        stderr,
        "streamed: at most %llu rows held (%.2f MB allocated), %.1f%% of the full "
        "cache's\n",
        static_cast<unsigned long long>(r.peak_rows), r.peak_bytes / 1e6,
        100.0 * r.peak_rows /
            (double(model.config().n_layers) * model.config().n_kv_heads * (r.n_prefix + r.n_doc)));
}

// One document into its file, with a progress bar and the summary.
void run_document(const model::Model& model, const std::string& text,
                  compress::CompressFileOptions fo, const CompressOpts& o, bool head,
                  const std::string& out) {
  ProgressBarOptions pb;
  pb.quiet = o.quiet;
  ProgressBar bar(pb);
  fo.compress.prefill.progress = bar.callback();
  const auto t0 = std::chrono::steady_clock::now();
  const compress::CompressResult r = compress::compress_to_file(model, text, fo, out);
  bar.finish();
  const double total_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!o.quiet) print_summary(model, r, o, head, out, total_s);
}

void run_compress(const CompressOpts& o_in) {
  // Everything that can be checked without the model comes first.
  CompressOpts o = o_in;
  o.method = method_of(o);
  compress::check_method_name(o.method);
  if (o.level != "global" && o.level != "per-head" && o.level != "per-layer" && o.level != "head")
    throw Error(Errc::invalid_argument, "compress: unknown --level '" + o.level +
                                            "'; known levels: global, per-head, per-layer, head");
  const bool head = head_level(o);
  check_flags(o, head);
  const bool corpus = !o.manifest.empty();
  const compress::Shard shard = compress::parse_shard(o.shard);
  const format::HeadScores hs =
      head ? format::read_head_scores_file(o.head_scores) : format::HeadScores{};
  compress::CompressFileOptions fo = file_options(o, head, hs);
  std::string out, text;
  std::vector<compress::CorpusEntry> entries;
  if (corpus) {
    entries = compress::parse_manifest(read_text(o.manifest, "manifest"), o.manifest,
                                       std::filesystem::path(o.manifest).parent_path().string());
    if (!o.summary.empty()) check_writable(o.summary, true);
  } else {
    out = o.out.empty() ? default_output(o.doc, ".kvz", "compress") : o.out;
    check_writable(out, o.force);  // not after minutes of prefill and scoring
    text = read_text(o.doc, "document");
  }
  compress::LearnedScorerFile learned;
  if (!o.scorer_file.empty()) learned = compress::load_learned_scorer(o.scorer_file);

  auto model = load_model(o.model, o.threads);
  fit_model(*model, o, head, hs, learned, fo);
  if (corpus) run_corpus(*model, entries, fo, o, shard);
  else run_document(*model, text, fo, o, head, out);
}

}  // namespace

void add_compress_commands(CLI::App& app) {
  auto o = std::make_shared<CompressOpts>();
  auto* c =
      app.add_subcommand("compress", "Prefill a document, evict KV pairs, write a .kvz cache");
  c->add_option("document", o->doc, "UTF-8 text file ('-' = standard input); or --manifest");
  add_model_option(c, o->model);
  c->add_option("-o,--output", o->out, "Output .kvz (default: the document's name with .kvz)");
  c->add_option("-r,--ratio", o->ratio,
                "Fraction of document KV pairs to keep, in (0, 1]; with --level head the fraction "
                "of KV heads that keep the whole document (default there 0.6)")
      ->capture_default_str()
      ->each([o](const std::string&) { o->ratio_given = true; });
  c->add_option("--method", o->method,
                "kvzip | kvzip-head | kvzap (with --scorer) | snapkv | h2o | rest-kv | rkv | "
                "streaming | random | full")
      ->capture_default_str();
  c->add_option("--level", o->level, "global | per-head | per-layer | head")->capture_default_str();
  c->add_option("--scorer", o->scorer_file,
                "Learned scorer file (.kvp) of `kvzip calibrate --scorer`: method kvzap, scored "
                "during the prefill (no reconstruction pass)");
  c->add_flag("--stream", o->stream,
              "With --scorer: evict while the document is read, so memory follows the kept rows "
              "instead of the document");
  c->add_option("--head-scores", o->head_scores,
                "--level head: head-scores file of `kvzip calibrate`");
  c->add_option("--head-window", o->head_window,
                "--level head: last document rows the other heads keep besides the prefix")
      ->capture_default_str();
  c->add_flag("--force-model", o->force_model,
              "--level head: use head scores calibrated on another model (same L and Hkv)");
  c->add_option("--chunk", o->chunk, "KVzip reconstruction chunk in tokens")->capture_default_str();
  c->add_option("--system", o->system, "System prompt (default: the model template's)");
  c->add_option("--query-template", o->query_template,
                "How questions follow the document; must contain {question}")
      ->capture_default_str();
  c->add_option("--kv-dtype,--dtype", o->dtype, kKvDtypeHelp)->capture_default_str();
  c->add_option("--kv-group", o->kv_group, kKvGroupHelp)->capture_default_str();
  add_removed_kv_layout_options(c, o->removed);
  c->add_option("--zstd", o->zstd, "zstd level per section, 0 = off")->capture_default_str();
  c->add_option("--seed", o->seed, "Seed of --method random");
  c->add_option("-O,--scorer-option", o->scorer_options,
                "KEY=VALUE scorer parameter, repeatable; keys: chunk, hint, seed, sink, "
                "snapkv-window, snapkv-kernel, h2o-recent, restkv-window, restkv-alpha, "
                "restkv-kmin, rkv-window, rkv-lambda, rkv-threshold, rkv-kernel, kvzap-window");
  add_threads_option(c, o->threads);
  c->add_option("--matmul", o->matmul,
                "fast | exact: matrix products of the prefill and the scoring with int8-rounded "
                "activations where the CPU has the kernels (fast), or in fp32 (exact, to check "
                "the kept set against a reference; recorded in the file)")
      ->check(CLI::IsMember({"fast", "exact"}))
      ->capture_default_str();
  c->add_option("--device", o->device, "cpu | cuda (cuda: prefill and kvzip scoring on the GPU)")
      ->capture_default_str();
  c->add_option("--manifest", o->manifest,
                "Corpus mode: JSON lines {\"id\", \"path\" | \"text\", \"method\"?, \"ratio\"?}; "
                "outputs --out-dir/<id>.kvz, finished ones skipped on a rerun");
  c->add_option("--out-dir", o->out_dir, "Corpus mode: folder of the .kvz outputs (must exist)");
  c->add_option("--shard", o->shard,
                "Corpus mode: I/N, this task's stable share of the manifest (by id hash)")
      ->capture_default_str();
  c->add_option("--summary", o->summary,
                "Corpus mode: write the JSON summary here (default stdout)");
  c->add_flag("-q,--quiet", o->quiet, "No progress bar or summary");
  add_force_option(c, o->force);
  c->callback([o] { run_compress(*o); });
}

}  // namespace kvzip::cli
