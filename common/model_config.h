// ModelConfig (the shape and numerics of a Llama-family model) and ModelFingerprint (what
// identifies the exact model that produced a cache): plain data, shared by model/, format/,
// kernels/ and the rest. This is also kvzip's one dimension glossary; every tensor carries a shape
// comment in these letters:
//   L  layers            Hq  query heads      Hkv  key/value heads    G  Hq / Hkv (the GQA group)
//   D  head dimension    E   model width      F    FFN width          V  vocabulary size
//   T  tokens (sequence positions)
// Row-major everywhere: a shape (A, B) means B is contiguous. Keys are stored post-RoPE in the
// canonical half-split (Hugging Face) head-dim order: RoPE rotates the pairs (i, i + D/2).
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace kvzip {

enum class RopeScalingKind : uint32_t { None = 0, Linear = 1, Llama3 = 2 };

struct RopeScaling {
  RopeScalingKind kind = RopeScalingKind::None;
  float factor = 1.0f;            // linear and llama3
  float low_freq_factor = 1.0f;   // llama3
  float high_freq_factor = 4.0f;  // llama3
  uint32_t original_context = 0;  // llama3: original_max_position_embeddings
  // (D/2) per-dimension divisors of the RoPE frequencies, or empty. llama.cpp's converter stores
  // Llama 3.1's scaling this way (tensor rope_freqs.weight, no scaling keys); applied after `kind`.
  std::vector<float> freq_factors{};
};

// The FFN's gate activation: SwiGLU (silu, Llama family) or GeGLU (tanh-approximated GELU, Gemma).
enum class FfnActivation : uint32_t { Silu = 0, GeluTanh = 1 };

struct ModelConfig {
  std::string arch;            // "llama", "qwen2", "qwen3", "gemma3", ...
  uint32_t n_layers = 0;       // L
  uint32_t d_model = 0;        // E
  uint32_t n_heads = 0;        // Hq
  uint32_t n_kv_heads = 0;     // Hkv
  uint32_t head_dim = 0;       // D
  uint32_t d_ffn = 0;          // F
  uint32_t vocab_size = 0;     // V
  uint32_t max_context = 0;    // longest sequence the model was trained for
  float rope_base = 10000.0f;  // theta
  RopeScaling rope_scaling;
  float rms_eps = 1e-5f;
  bool tied_embeddings = false;  // LM head reuses the token embedding
  bool qkv_bias = false;         // q/k/v projections have biases (qwen2)
  // Gemma 3 / Qwen 3 (all defaults describe the Llama family):
  bool qk_norm = false;     // RMSNorm over each head's q and k before RoPE (LayerWeights::q_norm)
  bool post_norms = false;  // RMSNorm on the attention and FFN outputs before each residual add
  FfnActivation ffn_act = FfnActivation::Silu;
  float embed_scale = 1.0f;  // embeddings multiplied by this (Gemma: sqrt(E))
  float query_scale =
      0.0f;  // attention logit scale; 0: 1/sqrt(D) (Gemma: query_pre_attn_scalar^-1/2)
  // Hybrid attention: local layers see only the last `sliding_window` positions (themselves
  // included) and rotate with rope_local_base, unscaled. Empty `local_layers`: every layer global.
  uint32_t sliding_window = 0;
  std::vector<uint8_t> local_layers;  // (L) 1 = sliding-window layer
  float rope_local_base = 10000.0f;

  uint32_t group() const { return n_kv_heads ? n_heads / n_kv_heads : 0; }  // G
  bool is_local(uint32_t layer) const {
    return layer < local_layers.size() && local_layers[layer] != 0;
  }
  bool hybrid() const {
    for (uint8_t v : local_layers)
      if (v) return true;
    return false;
  }
  // query_scale, or 1/sqrt(head_dim) when it is 0.
  float attention_scale() const {
    return query_scale > 0.0f ? query_scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
  }
};

// Identifies the model a cache came from. Two caches are interchangeable only if all fields match.
struct ModelFingerprint {
  std::string arch;             // general.architecture
  std::string name;             // general.name (informational, not compared)
  uint64_t tokenizer_hash = 0;  // xxh64 over the vocabulary, token types and merges
  uint64_t weights_hash = 0;    // xxh64 over the tensor table and tensor bytes as stored

  bool same_model(const ModelFingerprint& o) const {
    return arch == o.arch && tokenizer_hash == o.tokenizer_hash && weights_hash == o.weights_hash;
  }
};

}  // namespace kvzip
