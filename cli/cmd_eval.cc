// `kvzip eval`: the multi-query evaluation of spec/methods.md §5 on a SQuAD file — per document
// prefill once, score once per method, compress at every ratio and ask all of the document's
// questions; prints a table (stdout), optionally writes CSV, an SVG plot and every answer
// (JSONL). Everything that can be checked without the model (methods, ratios, output folders,
// the SQuAD file) is checked first; outputs are written only after the whole evaluation succeeded.
#include <cstdio>
#include <filesystem>
#include <memory>

#include "checkpoint/model_path.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "common/atomic_file.h"
#include "common/error.h"
#include "compress/learned_scorer.h"
#include "eval/compose_eval.h"
#include "eval/eval.h"
#include "eval/plot.h"
#include "eval/retrieve_eval.h"
#include "eval/ruler.h"
#include "format/head_scores.h"
#include "format/scorer_file.h"
#include "loader/compose.h"

namespace kvzip::cli {
namespace {

struct EvalOpts {
  eval::EvalOptions eo;  // its defaults are the command's; options bind to its fields directly
  std::string squad, doc = "article", model, csv, plot, answers, level = "global";
  std::string plot_csv;     // --plot-csv: draw --plot from this CSV instead of evaluating
  std::string head_scores;  // kvzip-head: the file of `kvzip calibrate`
  std::string scorer_file;  // kvzap: the file of `kvzip calibrate --scorer`
  std::string device = "cpu";
  uint64_t max_questions = 0;
  bool all_questions = false, quiet = false, exact = false, force_model = false;
  std::string matmul = "fast";
  RemovedKvLayoutOptions removed;  // --kv-rotate, --kv-params: refused with a message
  uint32_t compose = 0;            // > 0: the composition evaluation over this many documents
  std::vector<double> blends = {0.0, 0.3};
  uint32_t retrieve = 0;  // with retrieve_opt given: the library evaluation, this many per question
  bool doc_prefix = false;
  std::string blend_rule = loader::blend_rule_name(loader::ComposeOptions{}.rule);
  // --ruler: RULER's synthetic tasks (eval/ruler.h) instead of a SQuAD file's documents
  std::string ruler, haystack, hotpotqa, kvpress_csv;
  std::vector<uint32_t> lengths = {4096};
  std::vector<std::string> settings = {"agnostic"};
  uint32_t samples = 1;
  uint64_t ruler_seed = 42;
  const CLI::Option* tokens_opt = nullptr;
  const CLI::Option* methods_opt = nullptr;
  const CLI::Option* ratios_opt = nullptr;
  const CLI::Option* blends_opt = nullptr;
  const CLI::Option* retrieve_opt = nullptr;
};

// An output path must name a file in an existing, writable folder (checked before hours of
// work). eval replaces its outputs, as it always has.
void check_output(const std::string& path, const char* option) {
  if (path.empty()) return;
  try {
    check_writable(path, /*force=*/true);
  } catch (const Error& e) {
    throw Error(e.code(), std::string("eval: ") + option + ": " + e.what());
  }
}

// The options every paragraph evaluation (--compose, --retrieve) takes from the flags.
void set_paragraph_options(const EvalOpts& o, eval::ParagraphEvalOptions& p) {
  p.max_answer_tokens = o.eo.max_answer_tokens;
  p.system = o.eo.system;
  p.query_template = o.eo.query_template;
  p.kvzip_chunk = o.eo.kvzip_chunk;
  p.matmul = o.matmul == "exact" ? kernels::MatmulPath::Exact : kernels::MatmulPath::Fast;
  p.threads = o.eo.threads;
}

// `eval --compose K` (eval/compose_eval.h): paragraphs as documents, K per question.
void run_compose(const EvalOpts& o) {
  eval::ComposeEvalOptions co;
  co.k = o.compose;
  if (o.methods_opt->count()) co.methods = o.eo.methods;
  if (o.ratios_opt->count()) {
    co.ratios.clear();
    for (double r : o.eo.ratios)
      if (r < 1.0) co.ratios.push_back(r);
  }
  co.blends = o.blends;
  co.rule = loader::parse_blend_rule(o.blend_rule);
  co.doc_prefix = o.doc_prefix;
  set_paragraph_options(o, co);
  eval::check_compose_options(co);
  check_output(o.csv, "-o");
  eval::SquadOptions so;
  so.unit = eval::DocumentUnit::Paragraph;
  so.all_questions = o.all_questions;  // every paragraph with a question is a document to compose
  co.max_questions = o.max_questions;  // of which the first N questions are asked
  const std::vector<eval::Document> docs = eval::read_squad(o.squad, so);
  eval::check_compose_documents(docs.size(), co.k, o.squad);
  auto model = load_model(o.model, co.threads);
  if (!o.quiet)
    co.log = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  const eval::ComposeEvalReport report = eval::run_compose_eval(*model, docs, co);
  const std::string table = eval::format_compose_table(report);
  std::fwrite(table.data(), 1, table.size(), stdout);
  std::fflush(stdout);
  if (!o.csv.empty()) write_file_atomically(o.csv, true, eval::format_compose_csv(report));
}

// `eval --retrieve K` (eval/retrieve_eval.h): paragraphs as a library, K retrieved per question.
// One method and one ratio (default kvzip 0.5); the blends default to the library's own.
void run_retrieve(const EvalOpts& o) {
  eval::RetrieveEvalOptions ro;
  ro.k = o.retrieve;
  if (o.methods_opt->count()) {
    if (o.eo.methods.size() != 1)
      throw Error(Errc::invalid_argument, "eval --retrieve: give one method (--methods M)");
    ro.method = o.eo.methods[0];
  }
  if (o.ratios_opt->count()) {
    if (o.eo.ratios.size() != 1)
      throw Error(Errc::invalid_argument, "eval --retrieve: give one ratio (--ratios R)");
    ro.ratio = o.eo.ratios[0];
  }
  if (o.blends_opt->count()) ro.blends = o.blends;
  ro.rule = loader::parse_blend_rule(o.blend_rule);
  set_paragraph_options(o, ro);
  ro.max_questions = o.max_questions;
  eval::check_retrieve_options(ro);
  check_output(o.csv, "-o");
  eval::SquadOptions so;
  so.unit = eval::DocumentUnit::Paragraph;
  so.all_questions = o.all_questions;
  const std::vector<eval::Document> docs = eval::read_squad(o.squad, so);
  eval::check_retrieve_documents(docs.size(), ro.k, o.squad);
  auto model = load_model(o.model, ro.threads);
  if (!o.quiet)
    ro.log = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  const eval::RetrieveEvalReport report = eval::run_retrieve_eval(*model, docs, ro);
  const std::string table = eval::format_retrieve_table(report);
  std::fwrite(table.data(), 1, table.size(), stdout);
  std::fflush(stdout);
  if (!o.csv.empty()) write_file_atomically(o.csv, true, eval::format_retrieve_csv(report));
}

// Prefill progress: a fresh bar for each document long enough to take a while.
prefill::PrefillProgressFn progress_bars(bool quiet) {
  if (quiet) return nullptr;
  auto bar = std::make_shared<std::unique_ptr<ProgressBar>>();
  return [bar](const prefill::PrefillProgress& p) {
    if (p.total < 2048) return;
    if (p.done == 0 || !*bar) {
      ProgressBarOptions o;
      o.label = "  prefill";
      *bar = std::make_unique<ProgressBar>(o);
    }
    (*bar)->update(p);
    if (p.done == p.total) bar->reset();
  };
}

// --scorer FILE: method kvzap's scorer file, read before the model loads.
void add_scorer(const EvalOpts& o, eval::EvalOptions& eo) {
  if (o.scorer_file.empty()) return;
  compress::LearnedScorerFile s = compress::load_learned_scorer(o.scorer_file);
  eo.learned = std::move(s.file);
  eo.learned_source = std::move(s.source);
}

// `eval --ruler`'s options from the flags, each checked before any work (the QA sources and the
// lengths against the model come after).
eval::RulerOptions ruler_options(const EvalOpts& o) {
  eval::RulerOptions ro;
  ro.tasks = eval::parse_ruler_tasks(o.ruler);
  ro.lengths = o.lengths;
  if (ro.lengths.empty())
    throw Error(Errc::invalid_argument, "eval --ruler: --len needs at least one length");
  for (uint32_t len : ro.lengths)
    if (len == 0)
      throw Error(Errc::invalid_argument,
                  "eval --ruler: --len 0: a length is a number of tokens, at least 1");
  if (o.samples == 0)
    throw Error(Errc::invalid_argument, "eval --ruler: --samples must be at least 1");
  ro.samples = o.samples;
  ro.settings.clear();
  for (const std::string& s : o.settings) {
    if (s != "agnostic" && s != "aware")
      throw Error(Errc::invalid_argument,
                  "eval --ruler: --setting " + s + " is not agnostic or aware");
    const auto v =
        s == "aware" ? eval::RulerSetting::QueryAware : eval::RulerSetting::QueryAgnostic;
    if (std::find(ro.settings.begin(), ro.settings.end(), v) == ro.settings.end())
      ro.settings.push_back(v);
  }
  ro.eval = o.eo;
  add_scorer(o, ro.eval);
  // RULER tables: 10-75% kept, and the full cache as kept = 1.
  if (!o.ratios_opt->count()) ro.eval.ratios = {0.1, 0.25, 0.5, 0.75};
  ro.eval.level = compress::parse_selection_level(o.level);
  ro.eval.verify_drafts = !o.exact;
  ro.eval.matmul = o.matmul == "exact" ? kernels::MatmulPath::Exact : kernels::MatmulPath::Fast;
  ro.eval.max_answer_tokens =
      o.tokens_opt->count() ? o.eo.max_answer_tokens : 0;  // 0: each task's budget
  {
    eval::EvalOptions probe = ro.eval;
    probe.max_answer_tokens = 1;
    ro.eval = eval::checked(probe);
    ro.eval.max_answer_tokens = o.tokens_opt->count() ? o.eo.max_answer_tokens : 0;
  }
  check_output(o.csv, "-o");
  check_output(o.kvpress_csv, "--kvpress-csv");
  check_output(o.answers, "--answers");
  ro.gen.seed = o.ruler_seed;
  if (!o.haystack.empty()) ro.gen.haystack = read_text(o.haystack, "haystack");
  return ro;
}

void write_ruler_outputs(const EvalOpts& o, const eval::RulerReport& report) {
  const std::string table = eval::format_ruler_table(report);
  std::fwrite(table.data(), 1, table.size(), stdout);
  std::fflush(stdout);
  if (!o.csv.empty()) write_file_atomically(o.csv, true, eval::format_ruler_csv(report));
  if (!o.kvpress_csv.empty())
    write_file_atomically(o.kvpress_csv, true, eval::format_kvpress_csv(report));
  if (!o.answers.empty()) {
    eval::EvalReport er;
    er.answers = report.answers;
    eval::write_answers(o.answers, er);
  }
}

// `eval --ruler TASKS`: every task at every length, per setting, through the eval protocol.
void run_ruler(const EvalOpts& o) {
  eval::RulerOptions ro = ruler_options(o);
  eval::QaSource squad, hotpot;
  const bool wants_qa1 = std::find(ro.tasks.begin(), ro.tasks.end(), "qa_1") != ro.tasks.end();
  const bool wants_qa2 = std::find(ro.tasks.begin(), ro.tasks.end(), "qa_2") != ro.tasks.end();
  if (!o.squad.empty()) {
    eval::SquadOptions so;
    so.unit = eval::DocumentUnit::Paragraph;
    squad = eval::qa_source_from_squad(eval::read_squad(o.squad, so));
    ro.gen.squad = &squad;
  } else if (wants_qa1) {
    throw Error(Errc::invalid_argument,
                "eval --ruler: task qa_1 needs a SQuAD file (--squad FILE)");
  }
  if (!o.hotpotqa.empty()) {
    hotpot = eval::read_hotpotqa(o.hotpotqa);
    ro.gen.hotpotqa = &hotpot;
  } else if (wants_qa2) {
    throw Error(Errc::invalid_argument,
                "eval --ruler: task qa_2 needs a HotpotQA file (--hotpotqa FILE)");
  }
  auto model = load_model(o.model, ro.eval.threads);
  for (uint32_t len : ro.lengths)
    if (len > model->config().max_context)
      throw Error(Errc::invalid_argument,
                  "eval --ruler: --len " + std::to_string(len) + " is more than the model's " +
                      std::to_string(model->config().max_context) + "-token context");
  if (ro.eval.learned)
    format::check_scorer_model(*ro.eval.learned, model->config(), model->fingerprint());
  ro.model_name = std::filesystem::path(model::resolve_model_path(o.model)).stem().string();
  if (!o.quiet) {
    ro.log = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
    ro.eval.log = ro.log;
    ro.eval.prefill_progress = progress_bars(o.quiet);
  }
  write_ruler_outputs(o, eval::run_ruler(*model, ro));
}

// --retrieve and --compose, each its own evaluation over the SQuAD file's paragraphs: true when
// one of them ran.
bool run_paragraph_evaluation(const EvalOpts& o) {
  if (o.retrieve_opt->count()) {
    if (o.compose)
      throw Error(Errc::invalid_argument,
                  "eval: --retrieve and --compose are separate evaluations; give one of them");
    if (!o.ruler.empty())
      throw Error(Errc::invalid_argument,
                  "eval: --retrieve and --ruler are separate evaluations; give one of them");
    if (o.squad.empty())
      throw Error(
          Errc::invalid_argument,
          "eval --retrieve needs --squad FILE: it indexes the file's paragraphs as documents");
    run_retrieve(o);
    return true;
  }
  if (o.compose) {
    if (o.squad.empty())
      throw Error(
          Errc::invalid_argument,
          "eval --compose needs --squad FILE: it composes the file's paragraphs as documents");
    if (!o.ruler.empty())
      throw Error(Errc::invalid_argument,
                  "eval: --compose and --ruler are separate evaluations; give one of them");
    run_compose(o);
    return true;
  }
  return false;
}

void check_plot_output(const std::string& plot) {
  check_output(plot, "--plot");
  if (!plot.empty() && std::filesystem::path(plot).extension() != ".svg")
    throw Error(Errc::invalid_argument,
                "eval: --plot " + plot +
                    ": the plot is written as SVG; name the file .svg "
                    "(rsvg-convert -o plot.png plot.svg makes a PNG of it)");
}

// --plot-csv: the plot of rows evaluated before (one run's -o, or several runs' rows merged into
// one file), no model.
void plot_from_csv(const EvalOpts& o) {
  if (o.plot.empty())
    throw Error(Errc::invalid_argument, "eval --plot-csv: name the SVG to write with --plot FILE");
  check_plot_output(o.plot);
  const eval::EvalReport report = eval::parse_csv(read_text(o.plot_csv, "eval CSV"));
  eval::write_plot(o.plot, report);
  if (!o.quiet) std::fprintf(stderr, "wrote %s\n", o.plot.c_str());
}

void run(const EvalOpts& o) {
  if (!o.plot_csv.empty()) return plot_from_csv(o);
  if (run_paragraph_evaluation(o)) return;
  if (!o.ruler.empty()) return run_ruler(o);
  if (o.squad.empty())
    throw Error(Errc::invalid_argument,
                "eval: give a SQuAD file (--squad FILE) or RULER tasks (--ruler TASKS)");
  if (kernels::parse_device(o.device.c_str()) == kernels::Device::Cuda)
    throw Error(
        Errc::unsupported,
        "eval --device cuda: the evaluation's batched draft answering runs on the CPU in this "
        "version; compress on the GPU with `kvzip compress --device cuda` and answer with "
        "`kvzip query --device cuda`, or run eval with --device cpu");
  eval::EvalOptions eo = o.eo;
  eo.level = compress::parse_selection_level(o.level);
  eo.verify_drafts = !o.exact;
  eo.matmul = o.matmul == "exact" ? kernels::MatmulPath::Exact : kernels::MatmulPath::Fast;
  reject_removed_kv_layout_options(o.removed, "eval");
  eo.keep_answers = !o.answers.empty();
  format::HeadScores hs;
  if (!o.head_scores.empty()) {
    hs = format::read_head_scores_file(o.head_scores);
    eo.head_scores = hs.values;
  }
  add_scorer(o, eo);
  eo = eval::checked(eo);
  check_output(o.csv, "-o");
  check_plot_output(o.plot);
  check_output(o.answers, "--answers");
  eval::SquadOptions so;
  so.unit = eval::parse_document_unit(o.doc);
  so.all_questions = o.all_questions;
  so.max_questions = o.max_questions;
  const std::vector<eval::Document> docs = eval::read_squad(o.squad, so);

  auto model = load_model(o.model, eo.threads);
  if (!o.head_scores.empty() &&
      !format::check_head_scores_model(hs, model->config(), model->fingerprint(), o.force_model) &&
      !o.quiet)
    std::fprintf(stderr, "warning: %s was calibrated on another model (--force-model)\n",
                 o.head_scores.c_str());
  if (eo.learned) format::check_scorer_model(*eo.learned, model->config(), model->fingerprint());
  if (!o.quiet) {
    eo.log = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
    uint64_t questions = 0;
    for (const auto& d : docs) questions += d.questions.size();
    std::fprintf(stderr,
                 "eval: %zu documents, %llu questions, methods full + %zu, %zu ratios, "
                 "answers up to %u tokens\n",
                 docs.size(), static_cast<unsigned long long>(questions), eo.methods.size(),
                 eo.ratios.size(), eo.max_answer_tokens);
  }
  eo.prefill_progress = progress_bars(o.quiet);
  const eval::EvalReport report = eval::run_eval(*model, docs, eo);
  const std::string table = eval::format_table(report);
  std::fwrite(table.data(), 1, table.size(), stdout);
  std::fflush(stdout);
  if (!o.csv.empty()) eval::write_csv(o.csv, report);
  if (!o.plot.empty()) eval::write_plot(o.plot, report);
  if (!o.answers.empty()) eval::write_answers(o.answers, report);
  if (!o.quiet)
    for (const std::string* path : {&o.csv, &o.plot, &o.answers})
      if (!path->empty()) std::fprintf(stderr, "wrote %s\n", path->c_str());
}

// --ruler and the options only it reads.
void add_ruler_options(CLI::App* c, EvalOpts& o) {
  c->add_option(
      "--ruler", o.ruler,
      "RULER tasks instead of SQuAD documents, comma-separated: niah_single_1..3, "
      "niah_multikey_1..3, "
      "niah_multivalue, niah_multiquery, vt, cwe, fwe, qa_1, qa_2, or niah / synthetic / all");
  add_list_option(c, "--len", o.lengths,
                  "With --ruler: sequence lengths in tokens (comma-separated)");
  c->add_option("--samples", o.samples, "With --ruler: samples per task and length")
      ->capture_default_str();
  add_list_option(c, "--setting", o.settings,
                  "With --ruler: agnostic (compress the context alone) and/or aware (the question "
                  "compressed with it; kvzip also scores with it), comma-separated");
  c->add_option("--haystack", o.haystack,
                "With --ruler: essay text for the NIAH essay haystacks (default: the built-in "
                "noise haystack)");
  c->add_option("--hotpotqa", o.hotpotqa, "With --ruler: HotpotQA JSON, the source of task qa_2");
  c->add_option("--ruler-seed", o.ruler_seed, "With --ruler: seed of the generated samples")
      ->capture_default_str();
  c->add_option("--kvpress-csv", o.kvpress_csv,
                "With --ruler: write model,method,compression_ratio,task,score as the kvpress "
                "leaderboard lays it out");
}

// --compose, --retrieve and their options.
void add_paragraph_evaluation_options(CLI::App* c, EvalOpts& o) {
  c->add_option(
       "--compose", o.compose,
       "Composition evaluation: each paragraph a document compressed once, each question "
       "asked over K documents composed (its own and K-1 others) against their joint prefill")
      ->check(CLI::Range(2u, 64u));
  o.retrieve_opt = c->add_option(
      "--retrieve", o.retrieve,
      "Library evaluation: each paragraph a cache in an indexed folder, each question answered "
      "over the K caches a search finds (recall@K; against the oracle and a joint prefill)");
  o.blends_opt =
      add_list_option(c, "--blends", o.blends,
                      "With --compose: recompute fractions to compare (comma-separated); "
                      "with --retrieve: default the library's own");
  c->add_option("--blend-rule", o.blend_rule,
                std::string("With --compose or --retrieve: which tokens the blends recompute (")
                    .append(loader::kBlendRuleNames)
                    .append(")"))
      ->capture_default_str();
  c->add_flag("--doc-prefix", o.doc_prefix,
              "With --compose: keep each later document's own prefix rows");
}

}  // namespace

void add_eval_commands(CLI::App& app) {
  auto o = std::make_shared<EvalOpts>();
  auto* c = app.add_subcommand(
      "eval",
      "Multi-query evaluation on SQuAD: compress each document once per method and ratio, "
      "ask all its questions; contains-answer and F1, first-token KL, agreement with the full "
      "cache");
  c->add_option("--squad", o->squad,
                "SQuAD JSON file (v1.1 or v2.0); with --ruler, the source of task qa_1");
  add_ruler_options(c, *o);
  c->add_option("--doc", o->doc, "Document unit: article (paragraphs joined) | paragraph")
      ->capture_default_str();
  add_paragraph_evaluation_options(c, *o);
  o->methods_opt = add_list_option(
      c, "--methods", o->eo.methods,
      "Comma-separated, any of: kvzip,snapkv,h2o,rest-kv,rkv,streaming,random,kvzip-head,"
      "kvzap,kvzap-stream (kvzip-head needs --head-scores, its ratios are fractions of heads "
      "kept whole; kvzap needs --scorer, kvzap-stream is kvzap evicting while it reads)");
  o->ratios_opt =
      add_list_option(c, "--ratios", o->eo.ratios,
                      "Comma-separated fractions of document KV pairs to keep (--ruler: default "
                      "0.1,0.25,0.5,0.75; the full cache is kept = 1)");
  add_list_option(
      c, "--kv-dtypes", o->eo.kv_dtypes,
      "Comma-separated storage types to compare, each against the f32 cache of the same "
      "method and ratio: f32,f16,bf16,q8,q4 (each cache written and read back as a .kvz)");
  c->add_option("--kv-group", o->eo.kv_group,
                "q8/q4: channels per quantization group (0 = the head dimension)")
      ->capture_default_str();
  add_removed_kv_layout_options(c, o->removed);
  c->add_option("--matmul", o->matmul,
                "fast | exact: matrix products with int8-rounded activations "
                "(the default) or in fp32 (comparing storage types)")
      ->capture_default_str()
      ->check(CLI::IsMember({"fast", "exact"}));
  c->add_option("-o,--output", o->csv, "Write the results as CSV");
  c->add_option("--plot", o->plot,
                "Write an SVG plot (FILE.svg) of contains-answer and F1 against the ratio");
  c->add_option("--plot-csv", o->plot_csv,
                "Only draw --plot from a CSV of this command (-o; several runs' rows may be merged "
                "into one file), without a model");
  c->add_option(
      "--answers", o->answers,
      "Write every answer as JSON lines (method, ratio, question, answer, contains, F1, KL, "
      "agreement, answer F1)");
  c->add_option("--max-questions", o->max_questions, "Only the first N questions of the file");
  c->add_flag("--all-questions", o->all_questions,
              "Also ask unanswerable (is_impossible) questions");
  o->tokens_opt = c->add_option("-n,--max-tokens", o->eo.max_answer_tokens,
                                "Answer tokens at most (--ruler: caps each task's own budget)")
                      ->capture_default_str();
  c->add_option("--level", o->level, "global | per-head | per-layer")->capture_default_str();
  add_model_option(c, o->model);
  c->add_option("--system", o->eo.system, "System prompt (default: the model template's)");
  c->add_option("--chunk", o->eo.kvzip_chunk, "KVzip reconstruction chunk in tokens")
      ->capture_default_str();
  c->add_option("--seed", o->eo.seed, "Seed of the random method");
  c->add_option("-O,--scorer-option", o->eo.scorer_options,
                "KEY=VALUE scorer parameter, repeatable (e.g. snapkv-window=64, restkv-alpha=0.5, "
                "rkv-lambda=0.2; `kvzip compress --help` lists the keys)");
  c->add_option("--scorer", o->scorer_file,
                "kvzap: learned scorer file (.kvp) of `kvzip calibrate --scorer`");
  c->add_option(
      "--head-scores", o->head_scores,
      "kvzip-head: head-scores file of `kvzip calibrate` (calibrate on a text that is not "
      "an evaluated document)");
  c->add_option("--head-window", o->eo.head_window,
                "kvzip-head: last document rows the other heads keep besides the prefix")
      ->capture_default_str();
  c->add_flag("--force-model", o->force_model,
              "kvzip-head: use head scores calibrated on another model (same L and Hkv)");
  add_threads_option(c, o->eo.threads);
  c->add_option("--device", o->device, "cpu | cuda")->capture_default_str();
  c->add_flag("--exact-decode", o->exact,
              "Decode every answer token one at a time as `kvzip query` does (slower; by default "
              "the full-cache answer is verified in one batched pass)");
  c->add_flag("-q,--quiet", o->quiet, "No progress on stderr");
  c->callback([o] { run(*o); });
}

}  // namespace kvzip::cli
