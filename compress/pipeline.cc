// The compress pipeline (pipeline.h) on the CPU, its shared ends (detail/pipeline.h), the cache
// file's contents, and compress_to_file. "full" is special-cased in one place (finish): it never
// evicts, whatever ratio was asked. The GPU pipeline is gpu_compress.cc.
#include "compress/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <limits>

#include "common/error.h"
#include "compress/detail/pipeline.h"
#include "compress/learned_scorer.h"
#include "compress/quantize.h"
#include "kernels/attention.h"

namespace kvzip::compress {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

bool head_level_method(const CompressOptions& o) { return o.method == kHeadLevelMethod; }

}  // namespace

double default_ratio(std::string_view method) {
  return method == kHeadLevelMethod ? kHeadLevelDefaultRatio : kDefaultRatio;
}

void check_options(const CompressOptions& o) {
  check_ratio(o.ratio);
  check_method_name(o.method);
  if (o.stream && o.method != kLearnedMethod)
    throw Error(Errc::invalid_argument,
                "streaming compression drops rows as the document is read, so it needs scores "
                "that are final when a token is prefilled: method kvzap (a scorer file); method '" +
                    o.method + "' scores after the whole document");
  if (!head_level_method(o)) return;
  if (o.head.head_scores.empty())
    throw Error(Errc::invalid_argument,
                "method kvzip-head needs head scores (calibrated once per model on a text other "
                "than the documents)");
  for (size_t i = 0; i < o.head.head_scores.size(); ++i)
    if (std::isnan(o.head.head_scores[i]))
      throw Error(Errc::invalid_argument,
                  "kvzip-head: head score " + std::to_string(i) + " is NaN");
}

void check_device(const CompressOptions& o, kernels::Device device) {
  if (device == kernels::Device::Cpu || o.method == "kvzip" || o.method == "full") return;
  if (head_level_method(o))
    throw Error(Errc::unsupported,
                "method kvzip-head runs on the CPU only (it has no scoring "
                "pass to speed up)");
  std::string m = "a CUDA device compresses with method kvzip or full; method '";
  m.append(o.method).append("' runs on the CPU");
  throw Error(Errc::unsupported, m);
}

std::unique_ptr<Scorer> make_method_scorer(const CompressOptions& o) {
  check_options(o);
  if (!head_level_method(o)) return make_scorer(o.method, o.scorer);
  return make_head_level_scorer(o.head.head_scores);
}

Selection select_for_method(const CompressOptions& o, const DocumentScores& scores, double ratio) {
  return head_level_method(o) ? select_heads(scores, ratio, o.head.window)
                              : select_rows(scores, ratio, o.level);
}

namespace detail {

std::unique_ptr<Scorer> checked_scorer(const ModelConfig& config, size_t n_prefix, size_t n_doc,
                                       const CompressOptions& o) {
  std::unique_ptr<Scorer> scorer = make_method_scorer(o);
  if (head_level_method(o))
    check_head_scores(o.head.head_scores, model::cache_shape(config), "kvzip-head");
  prefill::check_fits_context(config, n_prefix, n_doc, o.prefill.answer_room);
  return scorer;
}

CompressResult finish(const CompressOptions& o, const Scorer& scorer, const model::KvCache& dense,
                      const DocumentScores& scores, double prefill_s, double scoring_s) {
  const auto t = Clock::now();
  const bool head = head_level_method(o);
  const double ratio = o.method == "full" ? 1.0 : o.ratio;
  const Selection sel = select_for_method(o, scores, ratio);
  EvictResult ev = evict(dense, scores, sel, o.room);
  MethodParams params;
  if (head) {
    params = head_level_params(ratio, scores.shape.n_layers * scores.shape.n_kv_heads,
                               o.head.window, ev.achieved_ratio, o.head.source);
  } else {
    params = scorer.params();
    params.emplace_back("level", selection_level_name(o.level));
  }
  const double select_s = seconds_since(t) + (head ? scoring_s : 0.0);
  return CompressResult{
      std::move(ev.cache), std::move(ev.kept_scores), ratio,           ev.achieved_ratio,
      scorer.name(),       std::move(params),         scores.n_prefix, scores.n_doc,
      prefill_s,           head ? 0.0 : scoring_s,    select_s};
}

}  // namespace detail

CompressResult compress(model::Forward& forward, std::span<const int32_t> prefix,
                        std::span<const int32_t> document, const CompressOptions& options) {
  if (options.stream) return compress_streaming(forward, prefix, document, options);
  std::unique_ptr<Scorer> scorer =
      detail::checked_scorer(forward.config(), prefix.size(), document.size(), options);
  const uint32_t n_p = static_cast<uint32_t>(prefix.size());
  const uint32_t n_c = static_cast<uint32_t>(document.size());
  prefill::PrefillOptions po = options.prefill;
  ObserverFanout fan;
  fan.add(options.prefill.observer);
  fan.add(scorer->prefill_observer(forward, n_p, n_c));
  po.observer = fan.empty() ? nullptr : &fan;
  po.scoring_room = std::max(po.scoring_room, scorer->appended_rows(n_c));
  prefill::PrefillResult pre = prefill::prefill_document(forward, prefix, document, po);

  const auto t = Clock::now();
  const DocumentScores scores = scorer->score(ScoreInput{&forward, &pre.cache, n_p, document});
  return detail::finish(options, *scorer, pre.cache, scores, pre.seconds, seconds_since(t));
}

// ---- The cache file --------------------------------------------------------------------------

std::vector<format::LayerKv> layers_from_cache(const model::RaggedKvCache& cache,
                                               const std::vector<std::vector<float>>& kept_scores) {
  const model::CacheShape s = cache.shape();
  const size_t D = s.head_dim;
  if (!kept_scores.empty() && kept_scores.size() != s.n_layers)
    throw Error(Errc::internal, "layers_from_cache: scores for " +
                                    std::to_string(kept_scores.size()) + " layers, cache has " +
                                    std::to_string(s.n_layers));
  std::vector<format::LayerKv> layers(s.n_layers);
  for (uint32_t l = 0; l < s.n_layers; ++l) {
    format::LayerKv& out = layers[l];
    size_t R = 0;
    for (uint32_t h = 0; h < s.n_kv_heads; ++h) R += cache.kept(l, h);
    out.head_rows.resize(s.n_kv_heads);
    out.positions.resize(R);
    out.k.resize(R * D);
    out.v.resize(R * D);
    size_t row = 0;
    for (uint32_t h = 0; h < s.n_kv_heads; ++h) {
      const size_t n = cache.kept(l, h);
      out.head_rows[h] = static_cast<uint32_t>(n);
      std::memcpy(out.k.data() + row * D, cache.k_rows(l, h), n * D * sizeof(float));
      std::memcpy(out.v.data() + row * D, cache.v_rows(l, h), n * D * sizeof(float));
      std::memcpy(out.positions.data() + row, cache.positions(l, h), n * sizeof(uint32_t));
      row += n;
    }
    if (!kept_scores.empty()) {
      if (kept_scores[l].size() != R)
        throw Error(Errc::internal, "layers_from_cache: layer " + std::to_string(l) + " has " +
                                        std::to_string(R) + " rows but " +
                                        std::to_string(kept_scores[l].size()) + " scores");
      out.scores = kept_scores[l];
    }
  }
  return layers;
}

format::CacheContents make_contents(const model::Model& model, const model::RaggedKvCache& cache,
                                    const std::vector<std::vector<float>>& kept_scores,
                                    const CacheDescription& d) {
  const uint64_t n_p = d.prefix.size(), n_c = d.document.size();
  if (cache.base_length() != n_p + n_c)
    throw Error(Errc::internal, "make_contents: cache holds " +
                                    std::to_string(cache.base_length()) +
                                    " positions, prompt has " + std::to_string(n_p + n_c));
  return make_contents(model, layers_from_cache(cache, kept_scores), !kept_scores.empty(), d);
}

format::CacheContents make_contents(const model::Model& model, std::vector<format::LayerKv> layers,
                                    bool has_scores, const CacheDescription& d) {
  const ModelConfig& cfg = model.config();
  const model::CacheShape s = model::cache_shape(cfg);
  const uint64_t n_p = d.prefix.size(), n_c = d.document.size();
  if (layers.size() != s.n_layers)
    throw Error(Errc::internal, "make_contents: " + std::to_string(layers.size()) +
                                    " layers for a model of " + std::to_string(s.n_layers));
  format::CacheContents c;
  format::CacheHeader& h = c.header;
  h.tool_version = std::string("kvzip ") + KVZIP_VERSION;
  h.created_unix = static_cast<int64_t>(std::time(nullptr));
  format::set_model(h, cfg, model.fingerprint());
  h.kv_dtype = d.kv.dtype;
  auto to_u32 = [](const std::vector<int32_t>& v) {
    return std::vector<uint32_t>(v.begin(), v.end());
  };
  h.prefix_tokens = to_u32(d.prefix);
  h.document_tokens = to_u32(d.document);
  h.suffix_tokens = to_u32(d.suffix);
  h.document_text = d.document_text;
  h.method = d.method;
  h.params = d.params;
  h.requested_ratio = d.requested_ratio;
  // Hybrid models: the ratio counts the global layers' document rows (compress/selection.h); the
  // fraction over every layer is recorded beside it as the parameter "all_layers_ratio".
  uint64_t doc_rows = 0, all_rows = 0, global_layers = 0;
  for (uint32_t l = 0; l < s.n_layers; ++l) {
    global_layers += !cfg.is_local(l);
    const std::vector<uint32_t>& pos = layers[l].positions;
    if (!pos.empty() && std::max_element(pos.begin(), pos.end())[0] >= n_p + n_c)
      throw Error(Errc::internal, "make_contents: layer " + std::to_string(l) +
                                      " holds a position past the prompt's " +
                                      std::to_string(n_p + n_c));
    const uint64_t rows = static_cast<uint64_t>(
        std::count_if(pos.begin(), pos.end(), [&](uint32_t p) { return p >= n_p; }));
    all_rows += rows;
    if (!cfg.is_local(l)) doc_rows += rows;
  }
  const uint64_t total = global_layers * s.n_kv_heads * n_c,
                 total_all = uint64_t(s.n_layers) * s.n_kv_heads * n_c;
  h.achieved_ratio = total ? double(doc_rows) / double(total) : 1.0;
  if (cfg.hybrid()) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6f", total_all ? double(all_rows) / double(total_all) : 1.0);
    h.params.emplace_back("all_layers_ratio", buf);
  }
  c.layers = std::move(layers);
  c.has_scores = has_scores;
  set_kv_dtype(c, d.kv);  // the kept rows only: selection, then quantization
  return c;
}

// ---- A document into a file ------------------------------------------------------------------

DocumentPrompt document_prompt(const model::ChatTemplate& chat, std::string_view text,
                               std::string_view system) {
  return DocumentPrompt{chat.prefix(system), chat.encode_document(text), chat.suffix("")};
}

HeadLevelOptions head_level_options(const format::HeadScores& scores, const std::string& file_name,
                                    uint32_t window) {
  HeadLevelOptions o;
  o.head_scores = scores.values;
  o.window = window;
  o.source = {{"head_scores", std::filesystem::path(file_name).filename().string()},
              {"head_scores_xxh64", format::head_scores_checksum_text(scores)},
              {"calibration_source", scores.source},
              {"calibration_tokens", std::to_string(scores.calibration_tokens)}};
  return o;
}

void check_file_options(const CompressFileOptions& o) {
  check_options(o.compress);
  if (o.query_template.find("{question}") == std::string::npos)
    throw Error(Errc::invalid_argument, "the query template must contain {question}");
  format::check_write_options(o.write);
  check_device(o.compress, o.device);
  if (o.device == kernels::Device::Cuda && o.matmul == kernels::MatmulPath::Exact)
    throw Error(Errc::unsupported,
                "the exact matrix products (option matmul) are the CPU's fp32 "
                "ones; a CUDA device has its own (compress on the CPU)");
}

namespace {

// What the file records besides the rows.
CacheDescription describe(const DocumentPrompt& prompt, std::string_view text,
                          const CompressFileOptions& o, const std::string& method,
                          const MethodParams& params, double requested_ratio) {
  CacheDescription d;
  d.prefix = prompt.prefix;
  d.document = prompt.document;
  d.suffix = prompt.suffix;
  d.document_text = std::string(text);
  d.method = method;
  d.params = params;
  d.params.emplace_back("query_template", o.query_template);
  if (o.matmul == kernels::MatmulPath::Exact) d.params.emplace_back("matmul", "exact");
  // The rows carry the bf16 attention products' rounding (docs/cpu-kernels.md): say so.
  if (o.matmul == kernels::MatmulPath::Fast && o.device == kernels::Device::Cpu &&
      kernels::attention_bf16_available()) {
    const bool kvzip = method == "kvzip" && o.compress.scorer.kvzip_bf16;
    const bool prefill = o.compress.prefill.attention_bf16;
    if (prefill || kvzip)
      d.params.emplace_back(
          "attention", std::string("bf16 products in ") + (prefill ? "the document prefill" : "") +
                           (prefill && kvzip ? " and " : "") + (kvzip ? "the KVzip passes" : ""));
  }
  d.params.insert(d.params.end(), o.extra_params.begin(), o.extra_params.end());
  d.requested_ratio = requested_ratio;
  d.kv = o.kv;
  return d;
}

}  // namespace

CompressResult compress_to_file(const model::Model& model, std::string_view text,
                                const CompressFileOptions& o, const std::string& path) {
  check_file_options(o);  // a bad option fails before the prefill
  if (format::dtype_quantized(o.kv.dtype) && o.kv.group &&
      model.config().head_dim % o.kv.group != 0) {
    std::string m = "quantization group ";
    m.append(std::to_string(o.kv.group))
        .append(" does not divide the model's head dimension ")
        .append(std::to_string(model.config().head_dim));
    throw Error(Errc::invalid_argument, m);
  }
  const DocumentPrompt prompt = document_prompt(model.chat(), text, o.system);
  auto forward_options = [&] {
    model::ForwardOptions fo;
    fo.threads = o.threads;
    fo.matmul = o.matmul;
    return fo;
  };
  if (o.compress.stream) {  // the rows go from the stream cache to the file, never held twice
    detail::StreamRun run = [&] {
      model::Forward forward(model.weights(), forward_options());
      return detail::stream_document(forward, prompt.prefix, prompt.document, o.compress);
    }();
    const CacheDescription d = describe(prompt, text, o, run.method, run.params, o.compress.ratio);
    format::write_cache_file(
        make_contents(model, detail::layers_from_stream(run.cache, run.kept_scores), true, d), path,
        o.write);
    const auto n_p = static_cast<uint32_t>(prompt.prefix.size());
    const auto n_c = static_cast<uint32_t>(prompt.document.size());
    const model::CacheShape shape = model::cache_shape(model.config());
    return CompressResult{
        model::RaggedKvCache(shape, n_p + n_c,
                             std::vector<uint32_t>(size_t(shape.n_layers) * shape.n_kv_heads), 0),
        {},
        o.compress.ratio,
        run.achieved_ratio,
        std::move(run.method),
        std::move(run.params),
        n_p,
        n_c,
        run.prefill_s,
        run.scoring_s,
        run.select_s,
        run.peak_rows,
        run.peak_bytes};
  }
  CompressResult r = [&] {
    if (o.device == kernels::Device::Cuda) {
      model::GpuForward gpu(model.weights());
      return compress_gpu(gpu, prompt.prefix, prompt.document, o.compress);
    }
    model::Forward forward(model.weights(), forward_options());
    return compress(forward, prompt.prefix, prompt.document, o.compress);
  }();
  const CacheDescription d = describe(prompt, text, o, r.method, r.params, r.requested_ratio);
  format::write_cache_file(make_contents(model, r.cache, r.kept_scores, d), path, o.write);
  return r;
}

}  // namespace kvzip::compress
