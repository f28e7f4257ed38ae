// Model loading (a GGUF file or a Hugging Face folder -> weights mapped from the file(s) +
// tokenizer + chat template), the generation loop and perplexity. The mapping lives as long as the
// Model (its matrices point into it).
#include "model/model.h"

#include "model/detail/generate_loop.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "cache/ragged_cache.h"
#include "checkpoint/gguf.h"
#include "checkpoint/gguf_tokenizer.h"
#include "checkpoint/gguf_weights.h"
#include "checkpoint/hf_model.h"
#include "common/error.h"
#include "model/detail/sysmem.h"

namespace kvzip::model {
namespace {

// The weights are mapped, so a model needs about its file size, plus room for the KV cache and
// activations (kHeadroom covers the default model's and a short document's). Refusing here says
// so at once instead of paging the file in and out for minutes.
void check_fits(const std::string& path, uint64_t file_bytes) {
  constexpr uint64_t kHeadroom = uint64_t(256) << 20;
  const std::optional<uint64_t> avail = detail::available_memory_bytes();
  if (!avail || file_bytes + kHeadroom <= *avail) return;
  auto gb = [](uint64_t b) {
    char s[32];
    std::snprintf(s, sizeof s, "%.2f GB", double(b) / 1e9);
    return std::string(s);
  };
  throw Error(Errc::out_of_memory,
              path + ": the model needs about " + gb(file_bytes + kHeadroom) + " of memory (" +
                  gb(file_bytes) + " of weights, mapped from the file, plus " + gb(kHeadroom) +
                  " for the cache and activations) but only " + gb(*avail) +
                  " is available; free memory, or use a smaller model or quantization");
}

// Bytes of a checkpoint folder's weights: every *.safetensors file in it.
uint64_t safetensors_bytes(const std::string& dir) {
  uint64_t n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.path().extension() == ".safetensors" && e.is_regular_file(ec)) n += e.file_size(ec);
  return n;
}

// LoadOptions::Weights for a GGUF file: Auto reads it into memory when it is at most half of what
// is available (the rest stays for the cache, activations and other processes) and its load time
// pays off (a small file, or a server decoding for hours), else maps it.
bool read_into_memory(const std::string& path, const LoadOptions& o) {
  if (o.weights != LoadOptions::Weights::Auto) return o.weights == LoadOptions::Weights::Memory;
  std::error_code ec;
  const uint64_t bytes = std::filesystem::file_size(path, ec);
  const std::optional<uint64_t> avail = detail::available_memory_bytes();
  constexpr uint64_t kSmall = uint64_t(1) << 30;
  return !ec && avail && 2 * bytes <= *avail && (o.long_running || bytes <= kSmall);
}

}  // namespace

std::unique_ptr<Model> Model::load(const std::string& path, const LoadOptions& options) {
  std::unique_ptr<Model> m(new Model());
  m->path_ = path;
  if (is_hf_checkpoint_dir(
          path)) {  // a Hugging Face folder: config.json, tokenizer.json, safetensors
    if (options.check_memory) check_fits(path, safetensors_bytes(path));
    HfModel hf = load_hf_model(path);
    m->weights_ = std::move(hf.weights);
    m->tokenizer_ = std::make_unique<Tokenizer>(std::move(hf.tokenizer));
    m->fingerprint_ = std::move(hf.fingerprint);
  } else {
    // Checked before the file is read: a model read into memory that does not fit would not fail
    // cleanly but take the machine's memory.
    std::error_code ec;
    const uint64_t bytes = std::filesystem::file_size(path, ec);
    if (options.check_memory && !ec) check_fits(path, bytes);
    m->weights_in_memory_ = read_into_memory(path, options);
    auto shared = std::make_shared<const gguf::File>(gguf::File::open(path, m->weights_in_memory_));
    m->weights_ = load_weights(shared);
    m->tokenizer_ = std::make_unique<Tokenizer>(tokenizer_data_from_gguf(*shared));
    m->fingerprint_ = fingerprint_from_gguf(*shared, options.progress);
  }
  if (m->tokenizer_->vocab_size() != static_cast<int32_t>(m->weights_.config.vocab_size))
    throw Error(Errc::corrupt, path + ": tokenizer has " +
                                   std::to_string(m->tokenizer_->vocab_size()) +
                                   " tokens but the model's vocabulary size is " +
                                   std::to_string(m->weights_.config.vocab_size));
  m->chat_ = std::make_unique<ChatTemplate>(*m->tokenizer_);
  return m;
}

namespace {

// The cache generation runs on and, with R-KV, the policy bounding it.
struct Bounded {
  AttentionCache* target = nullptr;
  std::optional<RaggedKvCache> own;  // a dense cache's rows, copied once
  RaggedKvCache* ragged = nullptr;
  std::unique_ptr<RkvPolicy> policy;
};

RaggedKvCache ragged_copy(const KvCache& dense) {
  const CacheShape s = dense.shape();
  std::vector<std::vector<uint32_t>> keep(size_t(s.n_layers) * s.n_kv_heads);
  for (auto& rows : keep)
    for (uint32_t i = 0; i < dense.logical_length(); ++i) rows.push_back(i);
  return RaggedKvCache::from_dense(dense, keep);
}

void setup_bound(Bounded& b, AttentionCache& cache, const GenerateParams& params,
                 const ModelConfig& cfg, size_t prompt_len) {
  b.target = &cache;
  if (!params.rkv) return;
  if (cfg.hybrid())  // evicting inside a sliding-window layer would break its row = position run
    throw Error(Errc::unsupported,
                "generate: a bounded cache (R-KV, streaming) is not supported on a model "
                "with sliding-window layers (" +
                    cfg.arch + ")");
  b.ragged = dynamic_cast<RaggedKvCache*>(&cache);
  if (!b.ragged) {
    const auto* dense = dynamic_cast<const KvCache*>(&cache);
    if (!dense)
      throw Error(Errc::invalid_argument,
                  "generate: a bounded cache (R-KV) needs a KvCache or a RaggedKvCache");
    b.own = ragged_copy(*dense);
    b.ragged = &*b.own;
  }
  b.policy = std::make_unique<RkvPolicy>(*params.rkv, cfg);
  const uint64_t first = params.rkv->doc_candidates
                             ? params.rkv->pinned
                             : uint64_t(b.ragged->logical_length()) + prompt_len;
  b.policy->begin(static_cast<uint32_t>(std::min<uint64_t>(first, UINT32_MAX)));
  b.target = b.ragged;
}

}  // namespace

// R-KV's calls around every forward step of the shared loop (detail/generate_loop.h).
struct RkvHooks {
  Bounded& b;
  AttentionObserver* observer() const { return b.policy.get(); }
  void after_prefill() {
    if (b.policy) b.policy->after_prefill(*b.ragged);
  }
  void after_decode() {
    if (b.policy) b.policy->after_decode(*b.ragged);
  }
};

void check_prompt_fits(const ModelConfig& cfg, uint64_t cached, size_t prompt_tokens,
                       const char* who) {
  if (prompt_tokens == 0)
    throw Error(Errc::invalid_argument, std::string(who) + ": the prompt has no tokens");
  const uint64_t need = cached + prompt_tokens;
  if (cfg.max_context && need > cfg.max_context)
    throw Error(Errc::invalid_argument, "the prompt needs " + std::to_string(need) +
                                            " positions but the model's context is " +
                                            std::to_string(cfg.max_context) +
                                            " tokens; shorten the input");
}

GenerateResult generate(Forward& forward, AttentionCache& cache, std::span<const int32_t> prompt,
                        const GenerateParams& params, const TokenCallback& on_token) {
  const ModelConfig& cfg = forward.config();
  if (prompt.empty()) throw Error(Errc::invalid_argument, "generate: the prompt has no tokens");
  Bounded b;
  setup_bound(b, cache, params, cfg, prompt.size());
  GenerateResult result =
      detail::generate_loop(forward, *b.target, prompt, params, on_token, RkvHooks{b});
  if (b.policy) {
    result.evicted = b.policy->evicted();
    result.compressions = b.policy->compressions();
  }
  return result;
}

namespace {

void check_perplexity_context(const ModelConfig& cfg, uint32_t context) {
  if (context < 2) throw Error(Errc::invalid_argument, "perplexity: context must be >= 2 tokens");
  if (cfg.max_context && context > cfg.max_context)
    throw Error(Errc::invalid_argument, "perplexity: context " + std::to_string(context) +
                                            " exceeds the model's context of " +
                                            std::to_string(cfg.max_context) + " tokens");
}

// Runs one window from an empty cache and adds -log p(window[t+1] | window[..t]) for every t in
// [first, size - 2]. The window goes in pieces: a piece's (T, V) logits are all that is held.
void score_window(Forward& forward, KvCache& cache, std::span<const int32_t> window, size_t first,
                  double& nll, PerplexityResult& r) {
  constexpr uint32_t kPiece = 128;
  const uint32_t V = forward.config().vocab_size;
  cache.rollback(0);
  for (size_t p0 = 0; p0 < window.size(); p0 += kPiece) {
    const size_t pn = std::min<size_t>(kPiece, window.size() - p0);
    const bool any = p0 + pn > first && p0 + 1 < window.size();
    const std::vector<float> logits =
        forward.prefill(cache, window.subspan(p0, pn), any ? LogitsMode::All : LogitsMode::Last);
    if (!any) continue;
    for (size_t i = 0; i < pn; ++i) {
      const size_t t = p0 + i;  // predicts window[t + 1]
      if (t < first) continue;
      if (t + 1 >= window.size()) break;
      const float* row = logits.data() + i * V;
      const float mx = *std::max_element(row, row + V);
      double sum = 0.0;
      for (uint32_t v = 0; v < V; ++v) sum += std::exp(double(row[v]) - mx);
      nll += (std::log(sum) + mx) - row[window[t + 1]];
      ++r.scored;
    }
  }
  ++r.windows;
}

}  // namespace

PerplexityResult perplexity(Forward& forward, std::span<const int32_t> tokens, uint32_t context,
                            int32_t bos) {
  check_perplexity_context(forward.config(), context);
  if (tokens.size() < 2)
    throw Error(Errc::invalid_argument, "perplexity: the text has fewer than 2 tokens");
  PerplexityResult r;
  double nll = 0.0;
  KvCache cache(forward.config(),
                std::min<uint32_t>(context, static_cast<uint32_t>(tokens.size()) + 1));
  const uint32_t text = bos >= 0 ? context - 1 : context;  // text tokens per window
  std::vector<int32_t> window;
  for (size_t w0 = 0; w0 + 1 < tokens.size(); w0 += text) {
    const size_t wn = std::min<size_t>(text, tokens.size() - w0);
    if (wn < 2) break;
    window.clear();
    if (bos >= 0) window.push_back(bos);
    window.insert(window.end(), tokens.begin() + w0, tokens.begin() + w0 + wn);
    score_window(forward, cache, window, 0, nll, r);
  }
  r.mean_nll = nll / double(r.scored);
  r.perplexity = std::exp(r.mean_nll);
  return r;
}

PerplexityResult perplexity_second_half(Forward& forward, std::span<const int32_t> tokens,
                                        uint32_t context, int32_t bos) {
  check_perplexity_context(forward.config(), context);
  std::vector<int32_t> stream;
  stream.reserve(tokens.size() + 1);
  if (bos >= 0) stream.push_back(bos);
  stream.insert(stream.end(), tokens.begin(), tokens.end());
  if (stream.size() < 2 * size_t(context))
    throw Error(Errc::invalid_argument,
                "perplexity: the text has " + std::to_string(stream.size()) +
                    " tokens; scoring second halves of windows of " + std::to_string(context) +
                    " needs at least " + std::to_string(2 * size_t(context)));
  PerplexityResult r;
  double nll = 0.0;
  KvCache cache(forward.config(), context);
  std::vector<int32_t> window(context);
  for (size_t start = 0; start + context <= stream.size(); start += context) {
    std::copy(stream.begin() + start, stream.begin() + start + context, window.begin());
    if (bos >= 0) window[0] = bos;
    score_window(forward, cache, window, context / 2, nll, r);
  }
  r.mean_nll = nll / double(r.scored);
  r.perplexity = std::exp(r.mean_nll);
  return r;
}

}  // namespace kvzip::model
