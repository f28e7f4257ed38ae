// `kvzip query` and `kvzip chat`: answer questions from a compressed .kvz cache. Every question
// sees the same compressed state (the session rolls back after each answer). --rkv-budget bounds
// the cache while each answer is generated (R-KV, cli/rkv_options.h). A q8/q4 cache is attended
// in its stored form on the CPU; with R-KV (which evicts f32 rows) or --device cuda it is
// dequantized at load.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string_view>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/rkv_options.h"
#include "common/error.h"
#include "common/json.h"
#include "loader/loader.h"

namespace kvzip::cli {
namespace {

struct QueryOpts {
  std::string cache, model, questions_file, device = "cpu", matmul = "fast";
  std::vector<std::string> cache_files;  // --cache: one file each, '+' and all
  std::optional<double> blend;           // unset: loader::default_blend of the model
  std::string blend_rule = loader::blend_rule_name(loader::ComposeOptions{}.rule);
  uint32_t max_compose = loader::ComposeOptions{}.max_docs;
  bool doc_prefix = false;
  std::vector<std::string> questions;
  uint32_t n = 128, threads = 0;
  float temp = 0.0f;
  uint64_t seed = 0;
  bool json = false, force = false, verify = false, quiet = false, kv_f32 = false,
       no_key_tiles = false;
  RkvOptions rkv;
};

// One question per line; a line starting with '{' is a JSON object with a "question" field.
// Blank lines are skipped.
std::vector<std::string> read_questions(const std::string& path) {
  const std::string text = read_text(path, "questions file");
  std::vector<std::string> out;
  size_t start = 0, line_no = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const size_t first = line.find_first_not_of(" \t");
    if (first != std::string::npos) {
      if (line[first] == '{') {
        const std::string where = path + ":" + std::to_string(line_no);
        const Json v = parse_json(line, where);
        if (!v.is_object() || !v.contains("question"))
          throw Error(Errc::invalid_argument,
                      where + ": JSON line is not an object with a \"question\" field");
        const Json& q = v["question"];
        if (!q.is_string())
          throw Error(Errc::invalid_argument,
                      where + ": \"question\" is " + json_type_name(q) + ", not a string");
        out.push_back(q.get<std::string>());
      } else {
        out.push_back(line);
      }
    }
    start = end + 1;
  }
  return out;
}

// The caches of the cache argument: "a.kvz+b.kvz+c.kvz" composes three, unless a file exists under
// the whole name (a file name may contain '+'; --cache names one file as written).
std::vector<std::string> split_cache_arg(const std::string& arg) {
  std::error_code ec;
  if (std::filesystem::exists(arg, ec) || arg.find('+') == std::string::npos) return {arg};
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t plus = arg.find('+', start);
    out.push_back(arg.substr(start, plus == std::string::npos ? std::string::npos : plus - start));
    if (out.back().empty())
      throw Error(Errc::invalid_argument, "cache \"" + arg + "\": an empty name between '+' signs");
    if (plus == std::string::npos) return out;
    start = plus + 1;
  }
}

// The caches to answer from: the cache argument, or every --cache in order (then the first
// positional argument, parsed as the cache, is the first question).
std::vector<std::string> cache_paths(const QueryOpts& o, std::vector<std::string>* questions) {
  if (o.cache_files.empty()) {
    if (o.cache.empty())
      throw Error(Errc::invalid_argument,
                  "give a cache: a .kvz argument (a.kvz+b.kvz composes) or --cache FILE");
    return split_cache_arg(o.cache);
  }
  if (!o.cache.empty()) {
    if (!questions)
      throw Error(Errc::invalid_argument,
                  "chat: give the caches either as the argument or by --cache, not both");
    questions->insert(questions->begin(), o.cache);
  }
  for (const std::string& f : o.cache_files)
    if (f.empty()) throw Error(Errc::invalid_argument, "--cache: an empty file name");
  return o.cache_files;
}

std::string caches_label(const std::vector<std::string>& paths) {
  std::string s;
  for (const std::string& p : paths) s += (s.empty() ? "" : " + ") + p;
  return s;
}

// A composed session's summary on stderr: caches, rows, the time to compose.
void note_composition(const loader::QuerySession& s, size_t n_paths) {
  const loader::ComposeStats& c = s.compose_stats();
  std::fprintf(
      stderr,
      "composed %zu caches in %.1f ms (loading %.1f ms): %u positions, %llu rows attended per "
      "token over all layers and heads, %llu tokens recomputed, %.2f MB of K/V in memory\n",
      n_paths, c.ms, s.load_ms(), c.length, static_cast<unsigned long long>(c.rows),
      static_cast<unsigned long long>(c.recomputed), double(s.bytes_in_memory()) / 1e6);
}

loader::SessionOptions session_options(const QueryOpts& o) {
  loader::SessionOptions so;
  so.compose.blend = o.blend;
  so.compose.rule = loader::parse_blend_rule(o.blend_rule);
  so.compose.doc_prefix = o.doc_prefix;
  so.compose.max_docs = o.max_compose;
  so.threads = o.threads;
  so.device = kernels::parse_device(o.device.c_str());
  so.force = o.force;
  so.verify = o.verify ? format::Verify::Full : format::Verify::OnAccess;
  // q8/q4 rows are attended in place, except under R-KV, which evicts rows of an f32 cache.
  if (o.kv_f32 || rkv_params(o.rkv)) so.kv_form = loader::KvForm::F32;
  so.matmul = o.matmul == "exact" ? kernels::MatmulPath::Exact : kernels::MatmulPath::Fast;
  so.key_tiles = !o.no_key_tiles && !rkv_params(o.rkv);  // R-KV's evictions would drop them
  return so;
}

model::GenerateParams generate_params(const QueryOpts& o, const model::Model& model) {
  model::GenerateParams gp;
  gp.max_tokens = o.n;
  gp.sampling.temperature = o.temp;
  gp.sampling.seed = o.seed;
  gp.stop_tokens = model.chat().stop_tokens();
  check_rkv_scorer(o.rkv, model);
  gp.rkv = rkv_params(o.rkv);
  return gp;
}

// Why an answer ended: a stop token, the -n limit, or the model's context (the cache plus the
// question and answer filled max_context positions before either).
const char* stop_reason(const loader::Answer& a, const model::GenerateParams& gp) {
  if (a.stopped) return "stop_token";
  return a.tokens.size() >= gp.max_tokens ? "max_tokens" : "context_full";
}

void note_context_full(const loader::Answer& a, const model::GenerateParams& gp,
                       const model::Model& model) {
  std::fprintf(stderr,
               "kvzip: note: the answer stopped after %zu of the %u tokens -n allows: the model's "
               "context of %u tokens is full (the cache's document, the question and the answer "
               "fill it); compress a shorter document for longer answers\n",
               a.tokens.size(), gp.max_tokens, model.config().max_context);
}

void run_query(const QueryOpts& o) {
  rkv_params(o.rkv);  // bad --rkv-* options fail before anything is loaded
  std::vector<std::string> questions = o.questions;
  const std::vector<std::string> paths = cache_paths(o, &questions);
  if (!o.questions_file.empty()) {
    auto more = read_questions(o.questions_file);
    questions.insert(questions.end(), more.begin(), more.end());
  }
  if (questions.empty())
    throw Error(Errc::invalid_argument,
                "query: no questions; give QUESTION arguments or --questions FILE");
  for (const auto& q : questions) check_text(q, "a question");
  if (paths.size() > o.max_compose)  // before the model is loaded
    throw Error(Errc::invalid_argument,
                std::to_string(paths.size()) + " caches given; a composition takes at most " +
                    std::to_string(o.max_compose) + " (--max-compose raises it)");
  auto model = load_model(o.model, o.threads);
  loader::QuerySession session(*model, paths, session_options(o));
  if (session.composed() && !o.quiet) note_composition(session, paths.size());
  if (!o.quiet && !o.json && !session.composed()) {
    const uint64_t tiles = session.base().bytes_in_memory() - session.base().bytes_kept();
    char extra[64] = "";
    if (tiles)
      std::snprintf(extra, sizeof extra, ", + %.2f MB of keys kept transposed",
                    double(tiles) / 1e6);
    std::fprintf(stderr,
                 "loaded %s in %.1f ms: %zu document tokens, %s at ratio %.3f, K/V %.2f MB in "
                 "memory (%s%s)\n",
                 caches_label(paths).c_str(), session.load_ms(),
                 session.header().document_tokens.size(), session.header().method.c_str(),
                 session.header().achieved_ratio, double(session.base().bytes_kept()) / 1e6,
                 session.quantized() ? format::dtype_name(session.header().kv_dtype) : "f32",
                 extra);
  }
  const model::GenerateParams gp = generate_params(o, *model);
  for (const auto& q : questions) {
    loader::Answer a;
    if (o.json) {
      a = session.ask(q, gp);
      // "stopped" (true only for a stop token) stays for readers written before "stop_reason".
      // Times are rounded to 0.1 ms, as the text output shows them.
      const Json line = {{"question", q},
                         {"answer", a.text},
                         {"tokens", a.tokens.size()},
                         {"ms", std::round(a.ms * 10) / 10},
                         {"first_token_ms", std::round(a.first_token_ms * 10) / 10},
                         {"stopped", a.stopped},
                         {"stop_reason", stop_reason(a, gp)},
                         {"caches", paths}};
      std::printf("%s\n", json_dump(line).c_str());
      std::fflush(stdout);
    } else {
      std::printf("Q: %s\nA: ", q.c_str());
      std::fflush(stdout);
      a = session.ask(q, gp, [](const std::string& piece) {
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
      });
      std::printf("\n\n");
      std::fflush(stdout);
    }
    if (!o.quiet && std::string_view(stop_reason(a, gp)) == "context_full")
      note_context_full(a, gp, *model);
  }
}

void run_chat(const QueryOpts& o) {
  rkv_params(o.rkv);
  const std::vector<std::string> paths = cache_paths(o, nullptr);
  if (paths.size() > o.max_compose)
    throw Error(Errc::invalid_argument,
                std::to_string(paths.size()) + " caches given; a composition takes at most " +
                    std::to_string(o.max_compose) + " (--max-compose raises it)");
  auto model = load_model(o.model, o.threads);
  loader::QuerySession session(*model, paths, session_options(o));
  if (session.composed()) note_composition(session, paths.size());
  const model::GenerateParams gp = generate_params(o, *model);
  std::fprintf(stderr,
               "kvzip chat: %s (%zu document tokens). One question per line; "
               "empty line or Ctrl-D to quit.\n",
               caches_label(paths).c_str(), session.header().document_tokens.size());
  std::string line;
  while (true) {
    std::fprintf(stderr, "> ");
    std::fflush(stderr);
    if (!std::getline(std::cin, line)) break;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) break;
    if (!is_valid_utf8(line)) {
      std::fprintf(stderr, "(that line is not valid UTF-8; try again)\n");
      continue;
    }
    const loader::Answer a = session.ask(line, gp, [](const std::string& piece) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    });
    std::printf("\n");
    std::fflush(stdout);
    if (std::string_view(stop_reason(a, gp)) == "context_full") note_context_full(a, gp, *model);
  }
}

void add_common(CLI::App* c, QueryOpts& o) {
  c->add_option(
      "cache", o.cache,
      "Compressed cache file (.kvz); several joined by '+' (a.kvz+b.kvz) are composed into "
      "one context, in that order");
  c->add_option(
       "--cache", o.cache_files,
       "One cache file, its name taken as written ('+' included); repeat to compose several, "
       "in that order (instead of the cache argument)")
      ->allow_extra_args(false);  // one file per --cache: the arguments after it stay questions
  c->add_option("--max-compose", o.max_compose,
                "Composed caches: at most this many in one composition")
      ->check(CLI::Range(2u, 1024u))
      ->capture_default_str();
  c->add_option("--blend", o.blend,
                "Composed caches: fraction of each later document's tokens recomputed with the "
                "documents before it in view (0 = none; default: the model's, docs/composing.md)")
      ->check(CLI::Range(0.0, 1.0));
  c->add_option("--blend-rule", o.blend_rule,
                std::string("Composed caches: which tokens --blend recomputes (")
                    .append(loader::kBlendRuleNames)
                    .append("; docs/composing.md)"))
      ->capture_default_str();
  c->add_flag("--doc-prefix", o.doc_prefix,
              "Composed caches: keep each later document's own prefix rows (template opener) too");
  add_model_option(c, o.model);
  c->add_option("-n,--max-tokens", o.n, "Answer tokens at most")->capture_default_str();
  c->add_option("--temp", o.temp, "Temperature; 0 = greedy")->capture_default_str();
  c->add_option("--seed", o.seed, "Random seed for sampling");
  add_threads_option(c, o.threads);
  c->add_option("--device", o.device, "cpu | cuda (cuda: the cache is loaded into GPU memory)")
      ->capture_default_str();
  c->add_flag("--force", o.force, "Use a cache written by another model anyway");
  c->add_flag("--verify", o.verify,
              "Check the whole file before answering (every checksum, every K/V section decoded)");
  c->add_option("--matmul", o.matmul,
                "fast | exact: matrix products with int8-rounded activations where the CPU has "
                "the kernels (fast), or in fp32 (exact, for comparing caches)")
      ->check(CLI::IsMember({"fast", "exact"}))
      ->capture_default_str();
  c->add_flag(
      "--kv-f32", o.kv_f32,
      "Dequantize a q8/q4 cache to f32 rows at load instead of attending to its stored rows");
  c->add_flag("--no-key-tiles", o.no_key_tiles,
              "Keep an f32 cache's keys once in memory (by default they are also kept transposed, "
              "for faster decoding at about the K bytes again)");
  add_rkv_options(c, o.rkv);
}

}  // namespace

void add_query_commands(CLI::App& app) {
  auto q = std::make_shared<QueryOpts>();
  auto* query = app.add_subcommand("query", "Answer questions from a compressed cache");
  add_common(query, *q);
  query->add_option("questions", q->questions, "Questions (each answered from the same cache)");
  query->add_option("--questions", q->questions_file,
                    "File with one question per line, or JSON lines with a \"question\" field");
  query->add_flag("--json", q->json, "One JSON object per answer and line");
  query->add_flag("-q,--quiet", q->quiet, "No load summary on stderr");
  query->callback([q] { run_query(*q); });

  auto c = std::make_shared<QueryOpts>();
  auto* chat = app.add_subcommand("chat", "Ask questions interactively against a compressed cache");
  add_common(chat, *c);
  chat->callback([c] { run_chat(*c); });
}

}  // namespace kvzip::cli
