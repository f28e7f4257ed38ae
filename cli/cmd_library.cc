// `kvzip index`, `kvzip search` and `kvzip ask`: a folder of .kvz caches as a library
// (library/library.h). index builds or refreshes the folder's full-text index; search prints the
// BM25 ranking of the caches for a question; ask retrieves the best caches that fit the model's
// context, composes them (loader/compose.h) and answers, naming its sources.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "common/error.h"
#include "common/json.h"
#include "library/library.h"
#include "loader/loader.h"

namespace kvzip::cli {
namespace {

struct LibraryOpts {
  std::string dir, question, model;
  uint32_t top_k = 4, n = 128, threads = 0;
  std::optional<double> blend;  // unset: loader::default_blend of the model
  bool json = false, quiet = false, search_only = false, no_refresh = false;
};

library::WarnFn warn_stderr() {
  return [](const std::string& w) { std::fprintf(stderr, "kvzip: warning: %s\n", w.c_str()); };
}

// The folder's index, refreshed unless asked not to; a folder that cannot be written is read
// as its index stands (Errc::not_found without one).
std::unique_ptr<library::Index> open_index(const LibraryOpts& o, bool progress) {
  library::IndexOptions io;
  io.warn = warn_stderr();
  io.read_only = std::filesystem::is_directory(o.dir) && !library::index_writable(o.dir);
  auto index = std::make_unique<library::Index>(o.dir, io);
  if (io.read_only) {
    if (!o.quiet)
      std::fprintf(stderr, "kvzip: %s cannot be written; using its index as it is\n",
                   o.dir.c_str());
    return index;
  }
  if (o.no_refresh) return index;
  ProgressBarOptions po;
  po.label = "index";
  po.unit = "caches";
  po.quiet = o.quiet || !progress;
  ProgressBar bar(po);
  const auto t0 = std::chrono::steady_clock::now();
  const library::RefreshStats st = index->refresh([&](uint32_t done, uint32_t total) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    bar.update(prefill::PrefillProgress{done, total, s, s > 0 ? done / s : 0.0});
  });
  bar.finish();
  if (!o.quiet && (progress || st.indexed || st.removed))
    std::fprintf(
        stderr, "indexed %s: %u caches, %u new or changed, %u unchanged, %u removed, %u skipped\n",
        o.dir.c_str(), st.files - st.skipped, st.indexed, st.unchanged, st.removed, st.skipped);
  return index;
}

Json sources_json(const std::vector<library::Hit>& hits) {
  Json a = Json::array();
  for (const auto& h : hits)
    a.push_back({{"id", h.id}, {"score", std::round(h.score * 1e4) / 1e4}, {"tokens", h.tokens}});
  return a;
}

void print_ranking(const std::vector<library::Hit>& hits) {
  for (size_t i = 0; i < hits.size(); ++i)
    std::printf("%zu. %s  score %.4f  %llu tokens\n", i + 1, hits[i].id.c_str(), hits[i].score,
                static_cast<unsigned long long>(hits[i].tokens));
}

void run_search(const LibraryOpts& o) {
  check_text(o.question, "a question");
  auto index = open_index(o, false);
  std::unique_ptr<model::Model> model;
  if (!o.model.empty()) model = load_model(o.model, o.threads);
  const auto hits = index->search(o.question, o.top_k, model ? &model->fingerprint() : nullptr);
  if (o.json) {
    std::printf("%s\n",
                json_dump(Json{{"question", o.question}, {"sources", sources_json(hits)}}).c_str());
    return;
  }
  if (hits.empty()) std::fprintf(stderr, "no cache matches a word of the question\n");
  print_ranking(hits);
}

void run_ask(const LibraryOpts& o) {
  check_text(o.question, "a question");
  auto index = open_index(o, false);
  auto model = load_model(o.model, o.threads);
  const library::Selection sel = library::retrieve(*index, *model, o.question, o.top_k, o.n);
  if (!o.quiet)
    for (size_t i = 0; i < sel.left_out.size(); ++i)
      std::fprintf(stderr, "kvzip: left out \"%s\": %s\n", sel.left_out[i].id.c_str(),
                   sel.why[i].c_str());
  if (o.search_only) {
    if (o.json)
      std::printf("%s\n",
                  json_dump(Json{{"question", o.question}, {"sources", sources_json(sel.sources)}})
                      .c_str());
    else print_ranking(sel.sources);
    return;
  }
  std::vector<std::string> paths;
  for (const auto& h : sel.sources) paths.push_back(h.path);
  loader::SessionOptions so;
  so.threads = o.threads;
  so.compose.blend = o.blend;
  loader::QuerySession session(*model, paths, so);
  model::GenerateParams gp;
  gp.max_tokens = o.n;
  gp.stop_tokens = model->chat().stop_tokens();
  if (o.json) {
    const loader::Answer a = session.ask(o.question, gp);
    std::printf("%s\n",
                json_dump(Json{{"question", o.question},
                               {"answer", a.text},
                               {"tokens", a.tokens.size()},
                               {"ms", std::round(a.ms * 10) / 10},
                               {"first_token_ms", std::round(a.first_token_ms * 10) / 10},
                               {"load_ms", std::round(session.load_ms() * 10) / 10},
                               {"compose_ms", std::round(session.compose_stats().ms * 10) / 10},
                               {"stopped", a.stopped},
                               {"sources", sources_json(sel.sources)}})
                    .c_str());
    return;
  }
  std::printf("Q: %s\nA: ", o.question.c_str());
  std::fflush(stdout);
  session.ask(o.question, gp, [](const std::string& piece) {
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
  });
  std::printf("\n\nSources:\n");
  print_ranking(sel.sources);
}

void add_dir_question(CLI::App* c, LibraryOpts& o) {
  c->add_option("dir", o.dir, "Folder of .kvz caches")->required();
  c->add_option("question", o.question, "The question")->required();
  c->add_option("-k,--top-k", o.top_k, "Caches retrieved at most")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();
  c->add_flag("--json", o.json, "One JSON object on stdout");
  c->add_flag("-q,--quiet", o.quiet, "No notes on stderr");
  c->add_flag("--no-refresh", o.no_refresh,
              "Search the index as it stands, without reading new or changed caches");
  add_threads_option(c, o.threads);
}

}  // namespace

void add_library_commands(CLI::App& app) {
  auto i = std::make_shared<LibraryOpts>();
  auto* index =
      app.add_subcommand("index", "Build or refresh the full-text index of a folder of caches");
  index->add_option("dir", i->dir, "Folder of .kvz caches")->required();
  index->add_flag("-q,--quiet", i->quiet, "No progress or summary on stderr");
  index->callback([i] { open_index(*i, true); });

  auto s = std::make_shared<LibraryOpts>();
  auto* search = app.add_subcommand("search", "Rank the caches of a folder for a question (BM25)");
  add_dir_question(search, *s);
  search->add_option("-m,--model", s->model,
                     "Only caches of this GGUF model (default: every model)");
  search->callback([s] { run_search(*s); });

  auto a = std::make_shared<LibraryOpts>();
  auto* ask = app.add_subcommand(
      "ask", "Answer from the caches of a folder that a question needs, composed");
  add_dir_question(ask, *a);
  add_model_option(ask, a->model);
  ask->add_option(
         "--blend", a->blend,
         "Fraction of each later document's tokens recomputed with the documents before it in view "
         "(default: the model's, docs/composing.md)")
      ->check(CLI::Range(0.0, 1.0));
  ask->add_option("-n,--max-tokens", a->n, "Answer tokens at most")->capture_default_str();
  ask->add_flag("--search-only", a->search_only,
                "Print the caches that would be composed, and answer nothing");
  ask->callback([a] { run_ask(*a); });
}

}  // namespace kvzip::cli
