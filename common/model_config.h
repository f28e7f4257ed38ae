// ModelConfig (the shape and numerics of a Llama-family model) and ModelFingerprint (what identifies
// the exact model that produced a cache): plain data, shared by model/, format/, kernels/ and the
// rest. This is also kvzip's one dimension glossary; every tensor carries a shape comment in these
// letters:
//   L  layers            Hq  query heads      Hkv  key/value heads    G  Hq / Hkv (the GQA group)
//   D  head dimension    E   model width      F    FFN width          V  vocabulary size
//   T  tokens (sequence positions)
// Row-major everywhere: a shape (A, B) means B is contiguous. Keys are stored post-RoPE in the
// canonical half-split (Hugging Face) head-dim order: RoPE rotates the pairs (i, i + D/2).
#pragma once
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
  std::vector<float> freq_factors;
};

struct ModelConfig {
  std::string arch;            // "llama", "qwen2", ...
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

  uint32_t group() const { return n_kv_heads ? n_heads / n_kv_heads : 0; }  // G
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
