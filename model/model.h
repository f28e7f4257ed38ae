// The public face of model/: a loaded model (config, fp32 weights, tokenizer, chat template,
// fingerprint) plus the generation loop and perplexity used by the CLI and query sessions.
// Generation can bound the cache as it goes (GenerateParams::rkv, model/rkv.h).
// A Model is created once and never moved (the chat template points into its tokenizer).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "checkpoint/weights.h"
#include "common/model_config.h"
#include "model/forward.h"
#include "model/rkv.h"
#include "model/sampling.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace kvzip::model {

struct LoadOptions {
  uint32_t threads = 0;  // unused since the weights are mapped, not decoded; kept for callers
  // Called while the weights are read once to fingerprint them (bytes done, bytes in all).
  std::function<void(uint64_t done, uint64_t total)> progress{};
  // Refuse (Errc::out_of_memory) a model whose weights exceed the memory available, before
  // reading them. Headroom: what the model file needs besides its weights (KV cache, activations).
  bool check_memory = true;
  // Where a GGUF's weights live: mapped from the file (its pages shared with other processes and
  // reclaimable), read into private memory (2 MiB pages: 8-17% faster decode on a 1B model, but
  // reading costs load time: +0.3 s for 0.7 GB, +0.5 s to +8 s for 4.5 GB when the kernel must
  // first compact memory into 2 MiB pages), or Auto: in memory when the file is at most half the
  // memory available and either at most 1 GiB or the process is long_running (a server), else
  // mapped. A Hugging Face folder's shards are always mapped.
  enum class Weights { Auto, Memory, Map };
  Weights weights = Weights::Auto;
  bool long_running = false;
};

class Model {
 public:
  // Opens a GGUF model file or a Hugging Face checkpoint folder (checkpoint/hf_model.h) and
  // validates it; the weights stay in the mapped file(s).
  static std::unique_ptr<Model> load(const std::string& path, const LoadOptions& options = {});

  const std::string& path() const { return path_; }
  // The weights were read into private memory (LoadOptions::Weights), not mapped.
  bool weights_in_memory() const { return weights_in_memory_; }
  const ModelConfig& config() const { return weights_.config; }
  const Weights& weights() const { return weights_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const ChatTemplate& chat() const { return *chat_; }
  const ModelFingerprint& fingerprint() const { return fingerprint_; }

 private:
  Model() = default;
  std::string path_;
  bool weights_in_memory_ = false;
  Weights weights_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ChatTemplate> chat_;
  ModelFingerprint fingerprint_;
};

struct GenerateParams {
  uint32_t max_tokens = 128;         // new tokens at most
  SamplingParams sampling;           // greedy by default
  std::vector<int32_t> stop_tokens;  // generation ends after producing one of these (not emitted)
  // Bound the cache while generating (R-KV or streaming, model/rkv.h). The cache must then be a
  // RaggedKvCache (compacted in place) or a dense KvCache (copied once into a ragged cache that
  // generation runs on; the dense cache itself is left as it was, without even the prompt).
  std::optional<RkvParams> rkv;
};

struct GenerateResult {
  std::vector<int32_t> tokens;      // generated ids, stop token excluded
  bool stopped = false;             // ended on a stop token (false: max_tokens or context limit)
  std::vector<float> first_logits;  // (V) logits that chose the first token
  uint64_t evicted = 0;             // with rkv: rows evicted, summed over (layer, KV head)
  uint32_t compressions = 0;        // with rkv: compression passes that evicted rows
};

// Called with every generated token as it is chosen; return false to stop early.
using TokenCallback = std::function<bool(int32_t token)>;

// The check every answer loop (generate, eval's greedy answers) runs before its prompt's prefill:
// Errc::invalid_argument, starting with `who`, for an empty prompt, and one naming both numbers
// when the cache's `cached` positions plus the prompt would run past cfg.max_context.
void check_prompt_fits(const ModelConfig& cfg, uint64_t cached, size_t prompt_tokens,
                       const char* who);

// Appends `prompt` to the cache (prefill), then samples up to params.max_tokens tokens, feeding
// each back. Stops at a stop token, at max_tokens, or when the cache reaches max_context.
GenerateResult generate(Forward& forward, AttentionCache& cache, std::span<const int32_t> prompt,
                        const GenerateParams& params, const TokenCallback& on_token = nullptr);

struct PerplexityResult {
  double perplexity = 0.0;
  double mean_nll = 0.0;  // nats per scored token
  uint64_t scored = 0;    // tokens scored
  uint32_t windows = 0;
};

// Perplexity of `tokens` over consecutive non-overlapping windows of `context` tokens: in each
// window every token after the first is predicted from the earlier ones of the same window. With
// `bos` >= 0 every window starts with that token and holds context - 1 text tokens, all scored (a
// model that adds BOS, as llama.cpp does per window; Gemma is far off without it).
PerplexityResult perplexity(Forward& forward, std::span<const int32_t> tokens, uint32_t context,
                            int32_t bos = -1);

// Perplexity counted the way llama.cpp's `llama-perplexity` counts it, so the two figures compare:
// the stream is `bos` (when >= 0) followed by `tokens`, cut into floor(stream / context) windows of
// `context` tokens whose first token is replaced by `bos`; in each window only the predictions of
// its second half are scored (positions context/2 .. context-1, each seeing at least context/2
// tokens). Needs a stream of at least 2 * context tokens (Errc::invalid_argument otherwise).
PerplexityResult perplexity_second_half(Forward& forward, std::span<const int32_t> tokens,
                                        uint32_t context, int32_t bos = -1);

}  // namespace kvzip::model
