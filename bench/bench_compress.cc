// bench_compress — what compression costs relative to reading the document. On random weights with
// SmolLM2-135M shapes (L=30 E=576 Hq=9 Hkv=3 D=64 F=1536 V=49152) and a random ~6,000-token
// document: the plain prefill time, then per method the extra time it adds (KVzip: the
// reconstruction passes; SnapKV/H2O: the prefill observer; all: selection + eviction at the ratio),
// printed as seconds and as a multiple of the plain prefill; then the whole compress (prefill +
// extra) as a multiple of the prefill. KVzip's target: whole compress <= 2.5x prefill.
// Defaults (6,000 tokens; kvzip, snapkv, streaming, random) take about 1.5 minutes on 2 idle cores.
// With --model GGUF --text FILE it runs the real model on that document instead (prefix and
// reconstruction prompts from the model's chat template, as `kvzip compress` builds them).
// Usage: bench_compress [--tokens N] [--threads T] [--ratio R] [--split] [--methods a,b,...]
//                       [--model GGUF --text FILE]
// (--split also times KVzip's reconstruction passes without scoring: forward vs the statistics the
// attention kernel adds for the scores.)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_shapes.h"
#include "common/error.h"
#include "compress/selection.h"
#include "model/model.h"
#include "model/prefill.h"

using namespace kvzip;

namespace {

struct Options {
  uint32_t tokens = 6000;
  uint32_t threads = 2;
  double ratio = 0.3;
  // h2o is left out by default: it re-runs the whole prefill with an observer over every query.
  std::vector<std::string> methods = {"kvzip", "snapkv", "streaming", "random"};
  bool split = false;  // kvzip: also time the reconstruction forward passes without the statistics
  std::string model, text;  // real model and document (both or neither)
};

// Deterministic values uniform in ±a (an LCG: fast, and timing does not depend on the values).
std::vector<float> filled(size_t n, uint32_t seed, float a) {
  std::vector<float> v(n);
  for (auto& x : v) {
    seed = seed * 1664525u + 1013904223u;
    x = a * (float(seed >> 8) * (2.0f / 16777216.0f) - 1.0f);
  }
  return v;
}

model::Weights smollm2_shaped_weights() {
  uint32_t seed = 1;
  auto mat = [&](size_t out, size_t in) {
    return model::Matrix::from_f32(filled(out * in, ++seed, 1.0f / std::sqrt(float(in))),
                                   uint32_t(out), uint32_t(in));
  };
  auto embedding = [&](size_t V, size_t E) {
    return model::Matrix::from_f32(filled(V * E, ++seed, 1.0f), uint32_t(V), uint32_t(E));
  };
  auto ones = [](size_t n) { return std::vector<float>(n, 1.0f); };
  return test::shaped_weights(bench::smollm2_135m_config(), mat, embedding, ones, ones);
}

std::vector<int32_t> tokens_of(size_t n, uint32_t seed, uint32_t V) {
  std::vector<int32_t> t(n);
  for (auto& x : t) {
    seed = seed * 1664525u + 1013904223u;
    x = int32_t((seed >> 8) % V);
  }
  return t;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "--tokens" && v) {
      o.tokens = uint32_t(std::atoi(v));
    } else if (a == "--threads" && v) {
      o.threads = uint32_t(std::atoi(v));
    } else if (a == "--ratio" && v) {
      o.ratio = std::atof(v);
    } else if (a == "--model" && v) {
      o.model = v;
    } else if (a == "--text" && v) {
      o.text = v;
    } else if (a == "--split") {
      o.split = true;
      continue;
    } else if (a == "--methods" && v) {
      o.methods.clear();
      std::stringstream ss(v);
      for (std::string m; std::getline(ss, m, ',');) o.methods.push_back(m);
    } else {
      std::fprintf(stderr,
                   "usage: bench_compress [--tokens N] [--threads T] [--ratio R] [--split]\n"
                   "                      [--methods kvzip,snapkv,streaming,random,h2o,full]\n"
                   "                      [--model GGUF --text FILE]\n");
      std::exit(2);
    }
    ++i;
  }
  if (o.model.empty() != o.text.empty()) {
    std::fprintf(stderr, "bench_compress: --model and --text go together\n");
    std::exit(2);
  }
  return o;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(Errc::io, "bench_compress: cannot read " + path);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Wall time and process CPU time (all threads). On a shared machine the CPU time is the steadier
// measure of work: it does not grow while other processes hold the cores.
struct Span {
  double wall = 0, cpu = 0;
  Span operator-(const Span& o) const { return {wall - o.wall, cpu - o.cpu}; }
  Span operator+(const Span& o) const { return {wall + o.wall, cpu + o.cpu}; }
};

Span now() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  return {wall, double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec)};
}

void print_row(const char* name, const char* what, Span s, Span prefill) {
  std::printf("%-10s %-24s %8.2f s wall %8.2f s cpu   %5.2fx / %5.2fx prefill (wall / cpu)\n", name,
              what, s.wall, s.cpu, s.wall / prefill.wall, s.cpu / prefill.cpu);
}

}  // namespace

// Over 80 lines on purpose: a benchmark's main is its measurement script, read top to bottom.
int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  try {
    std::unique_ptr<model::Model> model;
    model::Weights random;
    std::vector<int32_t> prefix, doc;
    compress::ScorerOptions so;
    if (!o.model.empty()) {
      model = model::Model::load(o.model, model::LoadOptions{o.threads});
      prefix = model->chat().prefix("");
      doc = model->chat().encode_document(read_file(o.text));
      so.prompts = compress::reconstruction_prompts(model->chat());
    } else {
      random = smollm2_shaped_weights();
      const uint32_t V = random.config.vocab_size;
      // Stand-ins for the chat template's token pieces (their lengths are what matter here).
      prefix = tokens_of(32, 7, V);
      doc = tokens_of(o.tokens, 8, V);
      so.prompts.first = tokens_of(8, 9, V);
      so.prompts.next = tokens_of(13, 10, V);
      so.prompts.turn_end = tokens_of(5, 11, V);
    }
    const model::Weights& w = model ? model->weights() : random;
    const ModelConfig& c = w.config;
    model::Forward fwd(w, model::ForwardOptions{o.threads, 512, {}});
    const uint32_t n_p = uint32_t(prefix.size()), n_c = uint32_t(doc.size());

    std::printf("bench_compress: %s, %u threads, prefix %u + document %u tokens, ratio %.2f\n",
                model ? o.model.c_str() : "SmolLM2-135M shapes, random weights", fwd.threads(), n_p,
                n_c, o.ratio);
    Span t0 = now();
    prefill::PrefillResult base = prefill::prefill_document(fwd, prefix, doc);
    const Span prefill = now() - t0;
    print_row("prefill", "document prefill", prefill, prefill);
    std::printf("%-10s %.0f tok/s wall\n", "", double(n_p + n_c) / prefill.wall);
    for (const std::string& m : o.methods) {
      std::unique_ptr<compress::Scorer> scorer = compress::make_scorer(m, so);
      prefill::PrefillOptions po;
      po.observer = scorer->prefill_observer(fwd, n_p, n_c);
      Span extra;
      prefill::PrefillResult pre_obs{model::KvCache(c), 0, 0, 0.0};
      prefill::PrefillResult* pre = &base;
      if (po.observer) {  // this method must observe its own prefill: count what it adds
        t0 = now();
        pre_obs = prefill::prefill_document(fwd, prefix, doc, po);
        const Span observed = now() - t0;
        extra = observed - prefill;
        pre = &pre_obs;
        print_row(m.c_str(), "prefill observer (extra)", extra, prefill);
      }
      t0 = now();
      const compress::DocumentScores s =
          scorer->score(compress::ScoreInput{&fwd, &pre->cache, n_p, doc});
      const Span scoring = now() - t0;
      t0 = now();
      const compress::Selection sel =
          compress::select_rows(s, o.ratio, compress::SelectionLevel::Global);
      compress::EvictResult ev = compress::evict(pre->cache, s, sel);
      const Span select = now() - t0;
      if (scoring.wall > 0.01) print_row(m.c_str(), "scoring", scoring, prefill);
      print_row(m.c_str(), "select + evict", select, prefill);
      print_row(m.c_str(), "compress (extra total)", extra + scoring + select, prefill);
      print_row(m.c_str(), "compress incl. prefill", prefill + extra + scoring + select, prefill);
      std::printf("%-10s kept %.3f of the document rows\n", m.c_str(), ev.achieved_ratio);
      std::fflush(stdout);
      if (m == "kvzip" && o.split) {  // the reconstruction passes alone, without the statistics
        const uint32_t full = n_p + n_c;
        t0 = now();
        for (uint32_t b = 0; b < n_c; b += so.kvzip_chunk) {
          const uint32_t e = std::min(n_c, b + so.kvzip_chunk);
          fwd.prefill(base.cache,
                      compress::reconstruction_input(so.prompts, doc, b, e, so.kvzip_hint),
                      model::LogitsMode::None);
          base.cache.rollback(full);
        }
        const Span bare = now() - t0;
        print_row("kvzip", "  reconstruction forward", bare, prefill);
        print_row("kvzip", "  score statistics", scoring - bare, prefill);
      }
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_compress: %s\n", e.what());
    return 1;
  }
  return 0;
}
