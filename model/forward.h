// The CPU transformer forward pass of Llama-family models (Llama 2/3, SmolLM, Mistral, Qwen2 with
// q/k/v bias), fp32, over any AttentionCache (the dense KvCache of a prefill, or the RaggedKvCache
// of a compressed document).
// New tokens always continue at cache.logical_length(); prefill processes them in chunks of
// ForwardOptions::chunk tokens, decode is a one-token prefill; every weight product runs on the
// matrices as the model file stores them (kernels/matmul.h, ForwardOptions::matmul). A failed call
// leaves the cache as it was before the call. A chunk whose logits nobody reads (and with no trace)
// stops its last layer after the K/V append and the attention statistics an observer asked for:
// that layer's output would feed only the LM head. A Forward owns a thread pool and scratch
// buffers: one call at a time per Forward object; it keeps a reference to the Weights, which must
// outlive it. step() is the batched entry of a server: several caches advance together in one
// chunk.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "cache/kv_cache.h"
#include "checkpoint/weights.h"
#include "kernels/attention.h"
#include "kernels/matmul.h"

namespace kvzip::kernels {
class ThreadPool;
}  // namespace kvzip::kernels

namespace kvzip::model {

enum class LogitsMode : uint8_t {
  None = 0,  // no LM head (scoring passes)
  Last = 1,  // logits of the last token: (V)
  All = 2,   // logits of every token: (T, V)
};

// A named intermediate tensor of the forward pass, for debug dumps (rows = the chunk's tokens).
struct TraceTensor {
  const char* name = nullptr;   // "embd", "attn_norm", "q_rope", "k_rope", "v", "attn",
                                // "attn_proj", "ffn_inp", "ffn_norm", "ffn_act", "ffn_out",
                                // "layer_out", "out_norm", "logits"
  int layer = -1;               // -1 outside the layers
  const float* data = nullptr;  // (rows, cols)
  uint32_t rows = 0;
  uint32_t cols = 0;
  uint32_t first_position = 0;  // position of row 0
};
using TraceFn = std::function<void(const TraceTensor&)>;

class Forward;
// Forward::set_prompt_bf16(on) for a scope, then back to what it was.
class PromptBf16Scope {
 public:
  PromptBf16Scope(Forward& f, bool on);
  ~PromptBf16Scope();
  PromptBf16Scope(const PromptBf16Scope&) = delete;
  PromptBf16Scope& operator=(const PromptBf16Scope&) = delete;

 private:
  Forward& f_;
  bool was_;
};

struct ForwardOptions {
  uint32_t threads = 0;  // 0 = one per hardware thread; also sets OpenBLAS's thread count
  uint32_t chunk = 512;  // tokens per prefill chunk (bounds scratch memory), >= 1
  TraceFn trace{};       // optional; called with every named tensor when set
  // Fast: the fastest kernels this CPU has; Exact: fp32 arithmetic on dequantized rows (the
  // golden tests' path). See kernels/matmul.h for what differs.
  kernels::MatmulPath matmul = kernels::MatmulPath::Fast;
};

// What an observer sees for one layer of one chunk, after that layer's attention ran.
// Query token i (position positions[i]) attended to rows [0, view.len - T + i] of every head's
// view: all earlier rows plus itself, the new tokens being the last T rows of every view.
struct AttentionObservation {
  uint32_t layer = 0;
  const float* q = nullptr;             // (T, Hq, D) post-RoPE queries of the new tokens
  const uint32_t* positions = nullptr;  // (T) their positions
  uint32_t T = 0;
  uint32_t Hq = 0;
  uint32_t Hkv = 0;  // query head hq reads KV head hq / (Hq / Hkv)
  uint32_t D = 0;
  float scale = 0.0f;                     // the logit scale attention used, 1/sqrt(D)
  const AttentionCache* cache = nullptr;  // cache->view(layer, h): the keys/values attended to
  // The layer's input: the residual stream x (T, E) before the attention block, and the input
  // RMSNorm's output (T, E) that the q/k/v projections read (learned scorers predict from it).
  const float* x = nullptr;
  const float* x_norm = nullptr;
  uint32_t E = 0;
};

// Scorers implement this to compute their own attention statistics. The pointers are valid only
// during the call.
class AttentionObserver {
 public:
  virtual ~AttentionObserver() = default;
  // Asked before each layer's attention runs over a chunk of T tokens. An observer that wants the
  // attention kernel to compute local-softmax statistics for it while it forms the logits anyway
  // (kernels/attention.h LocalMaxProb; rows of the layer's views) fills *request and returns true.
  // At most one observer per forward call may ask. Default: none.
  virtual bool request_local_stats(uint32_t layer, uint32_t T, kernels::LocalMaxProb* request) {
    return false;
  }
  virtual void on_attention(const AttentionObservation& obs) = 0;
};

// One cache's share of a batched step (Forward::step).
struct StepItem {
  AttentionCache* cache = nullptr;  // a different cache for every item of a step
  std::span<const int32_t> tokens;  // (T_i), T_i >= 1: appended at cache->logical_length()
  float* logits = nullptr;          // (V) receives the logits of the last token; null: not wanted
};

class Forward {
 public:
  // Validates every tensor's size against weights.config; throws Errc::invalid_argument naming
  // the tensor and both sizes.
  explicit Forward(const Weights& weights, ForwardOptions options = {});
  ~Forward();
  Forward(const Forward&) = delete;
  Forward& operator=(const Forward&) = delete;

  // Appends `tokens` to the cache and returns logits per `mode` (empty for None or no tokens;
  // All is T·V floats, so callers with long inputs and big vocabularies should chunk). Throws
  // Errc::invalid_argument for a token id outside [0, V) or a cache of another shape. `chunk`
  // (tokens per forward chunk) overrides ForwardOptions::chunk for this call when not 0; scratch
  // grows to it and stays so.
  std::vector<float> prefill(AttentionCache& cache, std::span<const int32_t> tokens,
                             LogitsMode mode = LogitsMode::Last,
                             AttentionObserver* observer = nullptr, uint32_t chunk = 0);
  // The values (T, Hkv, D) that layer `layer` computes for `tokens` appended to the cache in one
  // chunk (whatever ForwardOptions::chunk; scratch grows to T), running layers [0, layer) and of
  // layer `layer` only its norm and V projection.
  // The cache is left as it was. For choosing which rows of a composed cache to recompute
  // (loader/compose.h): a probe of the first layers costs about (layer + 0.1) / L of a prefill.
  std::vector<float> layer_values(AttentionCache& cache, std::span<const int32_t> tokens,
                                  uint32_t layer);
  // One token: prefill(cache, {token}, Last, observer), always with fp32 attention (an answer's
  // step, whatever set_prompt_bf16 says). Returns (V) logits.
  std::vector<float> decode(AttentionCache& cache, int32_t token,
                            AttentionObserver* observer = nullptr);
  // One forward chunk over several caches at once (continuous batching): the items' tokens are
  // the rows of one chunk of ΣT_i rows, so every weight product is one matmul with T = ΣT_i (each
  // weight read once for all items), while each item's rows attend only to its own cache. Mixes
  // decode items (T_i = 1) and prefill pieces freely. Per row the arithmetic is prefill()'s up to
  // the matmul's summation order for another T (kernels/matmul.h). Throws Errc::invalid_argument
  // for no items, an empty item, ΣT_i > ForwardOptions::chunk, a cache given twice, a cache of
  // another shape or a bad token id; any failure rolls every cache back. No observer, no trace.
  void step(std::span<const StepItem> items);

  const ModelConfig& config() const;
  // The weights this forward runs (scorers that need a projection, e.g. ReST-KV's W_o, read them).
  const Weights& weights() const;
  uint32_t threads() const;
  kernels::MatmulPath matmul_path() const;
  kernels::ThreadPool& pool();

  // Attention on bf16 operands for multi-block prompts (kernels::AttentionArgs::bf16) on the Fast
  // path: off by default, so questions and answers keep fp32 attention and the same bits in every
  // batch and cache layout; a document's prefill and KVzip's passes turn it on for their
  // duration (PromptBf16Scope), where the CPU has AVX-512 BF16. decode() ignores it.
  void set_prompt_bf16(bool on);
  bool prompt_bf16() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvzip::model
