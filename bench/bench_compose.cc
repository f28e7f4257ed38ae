// Time to first token of a question over K documents: composed from .kvz files (open, compose,
// question) against a joint prefill of the same documents (no file: the model reads them all),
// in the same run, best of R.
// Usage: bench_compose TEXT [--tokens N] [--ks 2,4,8] [--ratio R] [--blends 0,0.2] [--threads T]
//        [--reps R] [--dir D] [--build-chunk N] [--joint 0|1] [--key-tiles 0|1]
//        [--reuse 0|1]
//   TEXT: a text file cut into documents of about N tokens (default 1000) at paragraph breaks
//   (blank lines), reused in turn when K needs more. Each is compressed once (kvzip at R, default
//   0.3) into D (default a temporary folder; --reuse 1 keeps files already there). The model is
//   $KVZIP_MODEL or the default cache path.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "bench/query_setup.h"
#include "common/text_file.h"
#include "compress/pipeline.h"

using namespace kvzip;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

std::vector<double> parse_list(const char* s) {
  std::vector<double> v;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) v.push_back(std::atof(item.c_str()));
  return v;
}

// Paragraphs joined until a document reaches `tokens` tokens.
std::vector<std::string> cut(const model::Tokenizer& tok, const std::string& text, size_t tokens) {
  std::vector<std::string> docs;
  std::string cur;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find("\n\n", at);
    if (end == std::string::npos) end = text.size();
    const std::string para = text.substr(at, end - at);
    at = end + 2;
    if (para.find_first_not_of(" \n\t") == std::string::npos) continue;
    cur += (cur.empty() ? "" : "\n\n") + para;
    if (tok.encode(cur, false).size() >= tokens) docs.push_back(std::move(cur)), cur.clear();
  }
  if (!cur.empty() && (docs.empty() || tok.encode(cur, false).size() >= tokens / 2))
    docs.push_back(cur);
  return docs;
}

}  // namespace

// Over 80 lines on purpose: a benchmark's main is its measurement script, read top to bottom.
int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: bench_compose TEXT [--tokens N] [--ks 2,4,8] [--ratio R] [--blends 0,0.2] "
                 "[--threads T] [--reps R] [--dir D]\n");
    return 2;
  }
  size_t tokens = 1000;
  std::vector<double> ks = {2, 4, 8}, blends = {0.0, 0.2};
  double ratio = 0.3;
  uint32_t threads = 2, reps = 3, build_chunk = 0;
  bool joint_on = true, key_tiles = true, reuse = false;
  std::string dir = (std::filesystem::temp_directory_path() / "kvzip_bench_compose").string();
  for (int i = 2; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--tokens")) tokens = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--ks")) ks = parse_list(argv[i + 1]);
    if (!std::strcmp(argv[i], "--ratio")) ratio = std::atof(argv[i + 1]);
    if (!std::strcmp(argv[i], "--blends")) blends = parse_list(argv[i + 1]);
    if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--dir")) dir = argv[i + 1];
    if (!std::strcmp(argv[i], "--build-chunk")) build_chunk = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--key-tiles")) key_tiles = std::atoi(argv[i + 1]) != 0;
    if (!std::strcmp(argv[i], "--reuse")) reuse = std::atoi(argv[i + 1]) != 0;
    if (!std::strcmp(argv[i], "--joint")) joint_on = std::atoi(argv[i + 1]) != 0;
  }
  try {
    bench::QuerySetup q = bench::query_setup(threads);
    const model::Model& model = *q.model;
    const std::vector<std::string> texts =
        cut(model.tokenizer(), read_text(argv[1], "TEXT"), tokens);
    const size_t kmax = size_t(*std::max_element(ks.begin(), ks.end()));
    std::filesystem::create_directories(dir);
    std::vector<std::string> paths;
    for (size_t i = 0; i < std::min(kmax, texts.size()); ++i) {
      compress::CompressFileOptions o;
      o.compress.method = ratio < 1.0 ? "kvzip" : "full";
      o.compress.ratio = ratio;
      o.compress.scorer = compress::make_scorer_options(model.chat(), 2000, 0);
      o.threads = threads;
      o.write.force = true;
      paths.push_back(dir + "/doc" + std::to_string(i) + ".kvz");
      if (reuse && std::filesystem::exists(paths.back())) continue;  // compressed by an earlier run
      const auto t0 = Clock::now();
      compress::compress_to_file(model, texts[i], o, paths.back());
      std::fprintf(stderr, "compressed document %zu (%zu tokens) in %.1f s\n", i,
                   model.tokenizer().encode(texts[i], false).size(), ms_since(t0) / 1e3);
    }
    model::GenerateParams one;
    one.max_tokens = 1;
    std::printf("| K | positions | joint prefill (ms) |");
    for (double b : blends) std::printf(" composed, blend %.2f (ms) | speed-up |", b);
    std::printf("\n|---|---|---|");
    for (size_t i = 0; i < blends.size(); ++i) std::printf("---|---|");
    std::printf("\n");
    model::ForwardOptions fopt;
    fopt.threads = threads;
    model::Forward fw(model.weights(), fopt);
    for (double kd : ks) {
      const size_t K = size_t(kd);
      std::vector<std::string> use;
      for (size_t i = 0; i < K; ++i) use.push_back(paths[i % paths.size()]);
      // The joint sequence: the first cache's prefix, the documents with blank lines between, the
      // question.
      std::vector<format::CacheHeader> hs;
      for (const std::string& p : use) hs.push_back(format::CacheReader::open(p).header());
      std::vector<int32_t> seq(hs[0].prefix_tokens.begin(), hs[0].prefix_tokens.end());
      const std::vector<int32_t> sep = model.tokenizer().encode("\n\n", false);
      for (size_t i = 0; i < K; ++i) {
        if (i) seq.insert(seq.end(), sep.begin(), sep.end());
        seq.insert(seq.end(), hs[i].document_tokens.begin(), hs[i].document_tokens.end());
      }
      const size_t positions = seq.size();
      const std::vector<int32_t> qt = loader::question_tokens(model.tokenizer(), hs[0], q.question);
      seq.insert(seq.end(), qt.begin(), qt.end());
      if (seq.size() + 1 > model.config().max_context) {
        std::fprintf(stderr, "K = %zu: %zu positions exceed the model's context of %u; skipped\n",
                     K, seq.size(), model.config().max_context);
        continue;
      }
      double joint = 1e30;
      for (uint32_t r = 0; r < (joint_on ? reps : 0); ++r) {
        model::KvCache cache(model::cache_shape(model.config()));
        const auto t0 = Clock::now();
        fw.prefill(cache, seq, model::LogitsMode::Last);
        joint = std::min(joint, ms_since(t0));
      }
      std::printf("| %zu | %zu | %.0f |", K, positions, joint);
      for (double b : blends) {
        loader::SessionOptions so = q.session;
        so.compose.blend = b;
        if (build_chunk) so.compose.build_chunk = build_chunk;
        so.key_tiles = key_tiles;
        double best = 1e30;
        for (uint32_t r = 0; r < reps; ++r) {
          const auto t0 = Clock::now();
          loader::QuerySession s(model, use, so);
          const loader::Answer a = s.ask(q.question, one);
          const double ms = ms_since(t0);
          if (ms < best) {  // where the best run's time went, phase by phase
            const loader::ComposeStats& c = s.compose_stats();
            std::fprintf(stderr,
                         "K = %zu blend %.2f: %.0f ms = open %.0f + separators %.0f + probe %.0f + "
                         "recompute %.0f "
                         "(%llu tokens) + other %.0f + question and first token %.0f\n",
                         K, b, ms, s.load_ms(), c.separator_ms, c.probe_ms, c.recompute_ms,
                         static_cast<unsigned long long>(c.recomputed),
                         ms - s.load_ms() - c.ms - a.first_token_ms +
                             (c.ms - c.separator_ms - c.probe_ms - c.recompute_ms),
                         a.first_token_ms);
          }
          best = std::min(best, ms);
        }
        std::printf(" %.0f | %.1fx |", best, joint / best);
      }
      std::printf("\n");
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_compose: %s\n", e.what());
    return 1;
  }
  return 0;
}
