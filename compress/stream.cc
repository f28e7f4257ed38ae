// Streaming compression (compress_streaming, pipeline.h): the document is prefilled a chunk at a
// time into a StreamKvCache; during each chunk an observer predicts every document row's kvzap
// scores from the layer's input-normed hidden state (a row's score is final once it is prefilled),
// and after the chunk a RunningSelection names the rows that cannot be kept at the end, which are
// dropped before the next chunk reads the cache. Only the chunk's scores are held.
#include <algorithm>
#include <chrono>
#include <limits>
#include <string>

#include "cache/stream_cache.h"
#include "common/error.h"
#include "compress/detail/pipeline.h"
#include "compress/learned_scorer.h"
#include "compress/pipeline.h"

namespace kvzip::compress {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Predicts the scores of the document rows of the current chunk into (L, Hkv, chunk); rows of the
// document's last `window` get +inf (kvzap always keeps them).
class ChunkScorer final : public model::AttentionObserver {
 public:
  ChunkScorer(const format::ScorerFile& s, const ModelConfig& c, uint32_t n_prefix, uint32_t n_doc,
              uint32_t chunk, uint32_t window)
      : s_(s),
        c_(c),
        n_p_(n_prefix),
        n_c_(n_doc),
        chunk_(chunk),
        keep_from_(n_doc - std::min(window, n_doc)),
        values_(size_t(c.n_layers) * c.n_kv_heads * chunk) {}
  // The next chunk's document rows start at row j0.
  void begin(uint32_t j0) { j0_ = j0; }
  const float* values() const { return values_.data(); }
  size_t stride() const { return chunk_; }
  double seconds() const { return seconds_; }

  void on_attention(const model::AttentionObservation& obs) override {
    if (c_.is_local(obs.layer)) return;  // local layers keep their window whatever the scores
    KVZIP_ASSERT(obs.x_norm && obs.E == s_.d_model);
    uint32_t t0 = 0;
    while (t0 < obs.T && obs.positions[t0] < n_p_) ++t0;
    if (t0 == obs.T) return;
    const auto t = Clock::now();
    const uint32_t j = obs.positions[t0] - n_p_, n = obs.T - t0;
    KVZIP_ASSERT(j == j0_ && n <= chunk_ && j + n <= n_c_);
    float* out = values_.data() + size_t(obs.layer) * s_.n_kv_heads * chunk_;
    predict_layer(s_, obs.layer, obs.x_norm + size_t(t0) * obs.E, n, out, chunk_);
    for (uint32_t h = 0; h < s_.n_kv_heads; ++h)
      for (uint32_t r = std::max(j, keep_from_); r < j + n; ++r)
        out[h * chunk_ + (r - j)] = std::numeric_limits<float>::infinity();
    seconds_ += seconds_since(t);
  }

 private:
  const format::ScorerFile& s_;
  const ModelConfig& c_;
  uint32_t n_p_, n_c_, chunk_, keep_from_;
  std::vector<float> values_;
  uint32_t j0_ = 0;
  double seconds_ = 0.0;
};

// Drops the named document rows (ascending j) of every head: rows at positions n_p + j.
void drop_rows(model::StreamKvCache& cache, uint32_t n_prefix,
               const std::vector<std::vector<uint32_t>>& drops) {
  const uint32_t H = cache.shape().n_kv_heads;
  std::vector<uint32_t> keep;
  for (size_t i = 0; i < drops.size(); ++i) {
    if (drops[i].empty()) continue;
    const uint32_t l = static_cast<uint32_t>(i / H), h = static_cast<uint32_t>(i % H);
    const model::KvHeadView v = cache.view(l, h);
    keep.clear();
    size_t d = 0;
    for (uint32_t r = 0; r < v.len; ++r) {
      if (d < drops[i].size() && v.positions[r] == n_prefix + drops[i][d]) {
        ++d;
        continue;
      }
      keep.push_back(r);
    }
    if (d != drops[i].size())
      throw Error(Errc::internal, "streaming compression: head " + std::to_string(i) +
                                      " does not hold a row the selection drops");
    cache.retain(l, h, keep);
  }
}

}  // namespace

namespace detail {

StreamRun stream_document(model::Forward& forward, std::span<const int32_t> prefix,
                          std::span<const int32_t> document, const CompressOptions& o) {
  const ModelConfig& cfg = forward.config();
  std::unique_ptr<Scorer> scorer = checked_scorer(cfg, prefix.size(), document.size(), o);
  if (!o.stream || o.method != kLearnedMethod)
    throw Error(Errc::invalid_argument, "streaming compression: needs method kvzap");
  const format::ScorerFile& file = *o.scorer.learned;  // make_method_scorer refused a null one
  check_scorer_shape(file, cfg);
  const uint32_t n_p = static_cast<uint32_t>(prefix.size());
  const uint32_t n_c = static_cast<uint32_t>(document.size());
  const uint32_t chunk = o.prefill.chunk;
  if (chunk == 0)
    throw Error(Errc::invalid_argument, "PrefillOptions.chunk is 0, expected >= 1 (default 512)");

  DocumentScores layout{model::cache_shape(cfg), n_p, n_c, {}, {}, 0};
  set_hybrid_layout(layout, cfg);
  RunningSelection running(layout.shape, n_p, n_c, o.ratio, o.level, layout.local_layers,
                           layout.window);
  ChunkScorer chunk_scorer(file, cfg, n_p, n_c, chunk, o.scorer.kvzap_window);
  ObserverFanout fan;
  fan.add(o.prefill.observer);
  fan.add(&chunk_scorer);

  StreamRun run(layout.shape);
  model::StreamKvCache& cache = run.cache;
  const model::PromptBf16Scope bf16(forward, o.prefill.attention_bf16);
  uint64_t fed = 0;  // tokens of [prefix ; document] prefilled
  run.prefill_s =
      prefill::prefill_in_chunks(prefix, document, o.prefill, [&](std::span<const int32_t> c) {
        const uint32_t j0 = running.done();
        chunk_scorer.begin(j0);
        forward.prefill(cache, c, model::LogitsMode::None, &fan);
        fed += c.size();
        run.peak_rows = std::max(run.peak_rows, cache.rows_total());
        run.peak_bytes = std::max(run.peak_bytes, cache.bytes_allocated());
        const auto t = Clock::now();
        const uint32_t doc_rows = static_cast<uint32_t>(fed > n_p ? fed - n_p : 0) - j0;
        if (doc_rows > 0) {
          drop_rows(cache, n_p,
                    running.add(doc_rows, chunk_scorer.values(), chunk_scorer.stride()));
          cache.shrink(chunk);
        }
        run.select_s += seconds_since(t);
      });
  const auto t = Clock::now();
  const Selection sel = running.selection();
  for (size_t i = 0; i < sel.keep.size(); ++i)
    if (sel.keep[i].size() !=
        cache.rows(uint32_t(i / layout.shape.n_kv_heads), uint32_t(i % layout.shape.n_kv_heads)))
      throw Error(Errc::internal, "streaming compression: head " + std::to_string(i) +
                                      " holds other rows than its selection");
  run.kept_scores = running.kept_scores();
  run.achieved_ratio = sel.achieved_ratio;
  run.method = scorer->name();
  run.params = scorer->params();
  run.params.emplace_back("level", selection_level_name(o.level));
  run.params.emplace_back("stream", "on");
  run.scoring_s = chunk_scorer.seconds();
  run.prefill_s -= run.scoring_s + run.select_s;
  run.select_s += seconds_since(t);
  return run;
}

std::vector<format::LayerKv> layers_from_stream(
    model::StreamKvCache& cache, const std::vector<std::vector<float>>& kept_scores) {
  const model::CacheShape s = cache.shape();
  const size_t D = s.head_dim;
  std::vector<format::LayerKv> layers(s.n_layers);
  for (uint32_t l = 0; l < s.n_layers; ++l) {
    format::LayerKv& out = layers[l];
    size_t R = 0;
    for (uint32_t h = 0; h < s.n_kv_heads; ++h) R += cache.rows(l, h);
    if (kept_scores[l].size() != R)
      throw Error(Errc::internal, "layers_from_stream: layer " + std::to_string(l) + " has " +
                                      std::to_string(R) + " rows but " +
                                      std::to_string(kept_scores[l].size()) + " scores");
    out.head_rows.resize(s.n_kv_heads);
    out.positions.resize(R);
    out.k.resize(R * D);
    out.v.resize(R * D);
    size_t row = 0;
    for (uint32_t h = 0; h < s.n_kv_heads; ++h) {
      const model::KvHeadView v = cache.view(l, h);
      out.head_rows[h] = v.len;
      std::copy_n(v.k, size_t(v.len) * D, out.k.begin() + row * D);
      std::copy_n(v.v, size_t(v.len) * D, out.v.begin() + row * D);
      std::copy_n(v.positions, v.len, out.positions.begin() + row);
      row += v.len;
    }
    out.scores = kept_scores[l];
    cache.release(l);
  }
  return layers;
}

}  // namespace detail

CompressResult compress_streaming(model::Forward& forward, std::span<const int32_t> prefix,
                                  std::span<const int32_t> document, const CompressOptions& o) {
  detail::StreamRun run = detail::stream_document(forward, prefix, document, o);
  return CompressResult{run.cache.take(o.room),
                        std::move(run.kept_scores),
                        o.ratio,
                        run.achieved_ratio,
                        std::move(run.method),
                        std::move(run.params),
                        static_cast<uint32_t>(prefix.size()),
                        static_cast<uint32_t>(document.size()),
                        run.prefill_s,
                        run.scoring_s,
                        run.select_s,
                        run.peak_rows,
                        run.peak_bytes};
}

}  // namespace kvzip::compress
