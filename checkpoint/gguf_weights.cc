// ModelConfig, Weights (matrices pointing into the mapped file) and ModelFingerprint from a GGUF
// file (see gguf_weights.h).
// GGUF stores a Linear weight of HF shape (out, in) as ne = [in, out], i.e. already row-major
// (out, in), which is the canonical layout; only the Q/K rows of llama-type archs need reordering.
#include "checkpoint/gguf_weights.h"

#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/detail/config_check.h"
#include "checkpoint/detail/rope_freqs.h"
#include "common/error.h"
#include "kernels/quant.h"

namespace kvzip::model {
namespace {

struct ArchInfo {
  const char* name;
  bool qk_permuted;  // llama.cpp's converter interleaved the Q/K rows (LlamaModel.permute)
};
constexpr ArchInfo kArchs[] = {
    {"llama", true}, {"mistral", true}, {"qwen2", false}, {"qwen3", false}, {"gemma3", false}};

const ArchInfo* find_arch(const std::string& arch) {
  for (const ArchInfo& a : kArchs)
    if (arch == a.name) return &a;
  return nullptr;
}

[[noreturn]] void fail(const gguf::File& f, Errc code, const std::string& what) {
  throw Error(code, "GGUF '" + f.source() + "': " + what);
}

// llama.cpp's Gemma 3 constants that the GGUF does not carry: five sliding-window layers, then
// one global (layers 5, 11, 17, ... global), and the local layers' RoPE base.
constexpr uint32_t kGemma3SwaPattern = 6;
constexpr float kGemma3LocalRopeBase = 10000.0f;

void gemma3_config(const gguf::File& f, const std::string& p, ModelConfig& c) {
  c.qk_norm = true;
  c.post_norms = true;
  c.ffn_act = FfnActivation::GeluTanh;
  c.embed_scale = std::sqrt(float(c.d_model));
  c.sliding_window = f.get_u32(p + "attention.sliding_window");
  c.rope_local_base = kGemma3LocalRopeBase;
  c.local_layers.assign(c.n_layers, 1);
  for (uint32_t l = 0; l < c.n_layers; ++l)
    if ((l + 1) % kGemma3SwaPattern == 0) c.local_layers[l] = 0;
  if (c.sliding_window == 0) fail(f, Errc::corrupt, "key '" + p + "attention.sliding_window' is 0");
}

// llama.cpp's converter writes a Llama 3.1-style scaling only as rope_freqs.weight, per-pair
// frequency divisors; kvzip recovers the llama3 parameters they encode (detail/rope_freqs.h).
RopeScaling rope_freqs_scaling(const gguf::File& f, const ModelConfig& c) {
  const gguf::TensorInfo& t = f.tensor("rope_freqs.weight");
  if (t.type != kernels::quant::GgmlType::F32 || t.n_dims != 1 ||
      t.ne[0] != int64_t(c.head_dim / 2))
    fail(f, Errc::corrupt,
         "tensor 'rope_freqs.weight' is " + std::string(kernels::quant::type_name(t.type)) + " " +
             t.shape_string() + ", expected F32 [" + std::to_string(c.head_dim / 2) +
             "] (head_dim / 2)");
  std::vector<float> divisors(c.head_dim / 2);
  std::memcpy(divisors.data(), t.data, divisors.size() * sizeof(float));
  std::optional<RopeScaling> s = detail::scaling_from_rope_freqs(divisors, c.rope_base, c.head_dim);
  if (s) return *s;
  // Divisors no linear or llama3 rule reproduces (or too few pairs to pin one down): applied as
  // they are. The fingerprint covers the tensor, so a cache still names its exact model.
  for (float v : divisors)
    if (!(v > 0.0f) || !std::isfinite(v))
      fail(
          f, Errc::corrupt,
          "tensor 'rope_freqs.weight' holds " + std::to_string(v) + ", expected positive divisors");
  RopeScaling r;
  r.freq_factors = std::move(divisors);
  return r;
}

void read_rope_scaling(const gguf::File& f, const std::string& p, ModelConfig& c) {
  RopeScaling& rs = c.rope_scaling;
  const std::string type = f.get_string_or(p + "rope.scaling.type", "none");
  bool from_freqs = false;
  if (type == "none") {
    if (f.has(p + "rope.scale_linear")) {  // older converters wrote only this key
      rs.kind = RopeScalingKind::Linear;
      rs.factor = f.get_f32(p + "rope.scale_linear");
    } else if (f.find_tensor("rope_freqs.weight")) {
      rs = rope_freqs_scaling(f, c);
      from_freqs = true;
    }
  } else if (type == "linear") {
    rs.kind = RopeScalingKind::Linear;
    rs.factor = f.get_f32(p + "rope.scaling.factor");
  } else if (type == "llama3") {
    rs.kind = RopeScalingKind::Llama3;
    rs.factor = f.get_f32(p + "rope.scaling.factor");
    rs.original_context = f.get_u32(p + "rope.scaling.original_context_length");
    rs.low_freq_factor = f.get_f32_or(p + "rope.scaling.low_freq_factor", 1.0f);
    rs.high_freq_factor = f.get_f32_or(p + "rope.scaling.high_freq_factor", 4.0f);
  } else {
    fail(f, Errc::unsupported,
         "key '" + p + "rope.scaling.type' = '" + type +
             "' is not supported (supported: none, linear, llama3)");
  }
  if (rs.kind != RopeScalingKind::None && !(rs.factor > 0.0f))
    fail(f, Errc::corrupt,
         "key '" + p + "rope.scaling.factor' = " + std::to_string(rs.factor) +
             ", expected a positive factor");
  if (!from_freqs && f.find_tensor("rope_freqs.weight")) {
    // A file with both would scale twice.
    if (rs.kind == RopeScalingKind::Llama3)
      fail(f, Errc::corrupt,
           "both '" + p +
               "rope.scaling.type' = llama3 and tensor "
               "'rope_freqs.weight' are present; they describe the same scaling");
    fail(f, Errc::unsupported,
         "tensor 'rope_freqs.weight' (per-dimension RoPE factors) is present together with '" + p +
             "rope.scaling.type' = " + type + "; such files are not supported");
  }
}

void check_config(const gguf::File& f, const ModelConfig& c) {
  auto bad = [&](const std::string& what) { fail(f, Errc::corrupt, what); };
  detail::check_config_shape(
      c, {{"L", "E", "Hq", "Hkv", "D", "F", "V"}, "head_count", "head_count_kv", "head dimension"},
      bad);
  if (!(c.rope_base > 0.0f)) bad("rope.freq_base must be positive");
  if (!c.rope_scaling.freq_factors.empty() && c.rope_scaling.freq_factors.size() * 2 != c.head_dim)
    bad("tensor 'rope_freqs.weight' has " + std::to_string(c.rope_scaling.freq_factors.size()) +
        " values, expected head_dim / 2 = " + std::to_string(c.head_dim / 2));
  for (float v : c.rope_scaling.freq_factors)
    if (!(v > 0.0f) || !std::isfinite(v))
      bad("tensor 'rope_freqs.weight' holds " + std::to_string(v) + ", expected positive factors");
  if (!(c.rms_eps > 0.0f)) bad("attention.layer_norm_rms_epsilon must be positive");
}

}  // namespace

bool gguf_qk_permuted(const std::string& arch) {
  const ArchInfo* a = find_arch(arch);
  return a && a->qk_permuted;
}

ModelConfig config_from_gguf(const gguf::File& f) {
  ModelConfig c;
  c.arch = f.get_string("general.architecture");
  if (!find_arch(c.arch))
    fail(f, Errc::unsupported,
         "architecture '" + c.arch +
             "' is not supported (supported: llama, mistral, qwen2, qwen3, gemma3)");
  const std::string p = c.arch + ".";
  c.n_layers = f.get_u32(p + "block_count");
  c.d_model = f.get_u32(p + "embedding_length");
  c.n_heads = f.get_u32(p + "attention.head_count");
  c.n_kv_heads = f.get_u32_or(p + "attention.head_count_kv", c.n_heads);
  c.d_ffn = f.get_u32(p + "feed_forward_length");
  c.max_context = f.get_u32(p + "context_length");
  if (!f.has(p + "attention.key_length") && c.n_heads && c.d_model % c.n_heads != 0)
    fail(f, Errc::corrupt,
         "embedding_length " + std::to_string(c.d_model) + " is not a multiple of head_count " +
             std::to_string(c.n_heads) + " and '" + p + "attention.key_length' is absent");
  c.head_dim = f.get_u32_or(p + "attention.key_length", c.n_heads ? c.d_model / c.n_heads : 0);
  if (f.get_u32_or(p + "attention.value_length", c.head_dim) != c.head_dim)
    fail(f, Errc::unsupported,
         "attention.value_length differs from key_length (" + std::to_string(c.head_dim) +
             "); not supported");
  if (f.get_u32_or(p + "rope.dimension_count", c.head_dim) != c.head_dim)
    fail(f, Errc::unsupported,
         "rope.dimension_count " + std::to_string(f.get_u32(p + "rope.dimension_count")) +
             " differs from the head dimension " + std::to_string(c.head_dim) +
             " (partial RoPE unsupported)");
  if (f.has(p + "vocab_size")) c.vocab_size = f.get_u32(p + "vocab_size");
  else if (const gguf::TensorInfo* t = f.find_tensor("token_embd.weight"))
    c.vocab_size = uint32_t(t->ne[1]);
  else c.vocab_size = uint32_t(f.array_size("tokenizer.ggml.tokens"));
  c.rope_base = f.get_f32_or(p + "rope.freq_base", 10000.0f);
  c.rms_eps = f.get_f32(p + "attention.layer_norm_rms_epsilon");
  read_rope_scaling(f, p, c);
  c.tied_embeddings = f.find_tensor("output.weight") == nullptr;
  c.qkv_bias = f.find_tensor("blk.0.attn_q.bias") != nullptr;
  c.qk_norm = c.arch == "qwen3";
  if (c.arch == "gemma3") gemma3_config(f, p, c);
  check_config(f, c);
  return c;
}

namespace {

// llama.cpp's per-head interleave: GGUF row h*D + 2i + p holds HF row h*D + p*D/2 + i. Returns the
// map canonical row -> stored row for n_heads heads of head_dim rows.
std::vector<uint32_t> qk_row_map(uint32_t n_heads, uint32_t head_dim) {
  std::vector<uint32_t> map(size_t(n_heads) * head_dim);
  const uint32_t half = head_dim / 2;
  for (uint32_t h = 0; h < n_heads; ++h)
    for (uint32_t i = 0; i < half; ++i)
      for (uint32_t p = 0; p < 2; ++p) map[h * head_dim + p * half + i] = h * head_dim + 2 * i + p;
  return map;
}

const char* kSupportedTypes = "F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K";

// Checks a tensor's shape (ne = [ne0] for vectors, [ne0, ne1] for matrices) and type.
const gguf::TensorInfo& checked(const gguf::File& f, const std::string& name, int64_t ne0,
                                int64_t ne1) {
  const gguf::TensorInfo& t = f.tensor(name);
  if (t.ne[0] != ne0 || t.ne[1] != ne1 || t.ne[2] != 1 || t.ne[3] != 1) {
    std::string want(1, '[');
    want.append(std::to_string(ne0));
    if (ne1 != 1) want.append(", ").append(std::to_string(ne1));
    want.append("]");
    fail(f, Errc::corrupt,
         "tensor '" + name + "' has shape " + t.shape_string() + ", expected " + want +
             " (from the model metadata)");
  }
  if (!kernels::quant::traits(t.type).dequantizable)
    fail(f, Errc::unsupported,
         "tensor '" + name + "' has type " + kernels::quant::type_name(t.type) +
             ", which kvzip cannot compute with (supported: " + kSupportedTypes +
             "); re-quantize the model to one of these");
  return t;
}

// A small tensor (norm weight, bias) as fp32; map: canonical index -> stored index, or empty.
std::vector<float> load_vector(const gguf::File& f, const std::string& name, int64_t n,
                               const std::vector<uint32_t>& map = {}) {
  const gguf::TensorInfo& t = checked(f, name, n, 1);
  std::vector<float> stored(static_cast<size_t>(n));
  kernels::quant::dequantize_row(t.type, t.data, stored.data(), n);
  if (map.empty()) return stored;
  std::vector<float> out(stored.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = stored[map[i]];
  return out;
}

// A matrix of `rows` rows of `cols` values pointing into the file (GGUF ne = [cols, rows]).
Matrix load_matrix(const gguf::File& f, const std::string& name, int64_t cols, int64_t rows,
                   std::vector<uint32_t> map = {}) {
  const gguf::TensorInfo& t = checked(f, name, cols, rows);
  Matrix m;
  m.type = t.type;
  m.rows = static_cast<uint32_t>(rows);
  m.cols = static_cast<uint32_t>(cols);
  m.data = t.data;
  m.row_map = std::move(map);
  m.name = name;
  KVZIP_ASSERT(uint64_t(m.bytes()) == t.nbytes);
  return m;
}

void load_layer(const gguf::File& f, const ModelConfig& c, uint32_t l, bool permute,
                LayerWeights& w) {
  const std::string b = "blk." + std::to_string(l) + ".";
  const int64_t E = c.d_model, F = c.d_ffn, D = c.head_dim;
  const int64_t q_rows = c.n_heads * D, kv_rows = c.n_kv_heads * D;
  const std::vector<uint32_t> q_map =
      permute ? qk_row_map(c.n_heads, c.head_dim) : std::vector<uint32_t>{};
  const std::vector<uint32_t> k_map =
      permute ? qk_row_map(c.n_kv_heads, c.head_dim) : std::vector<uint32_t>{};
  w.attn_norm = load_vector(f, b + "attn_norm.weight", E);        // (E)
  w.wq = load_matrix(f, b + "attn_q.weight", E, q_rows, q_map);   // (Hq*D, E)
  w.wk = load_matrix(f, b + "attn_k.weight", E, kv_rows, k_map);  // (Hkv*D, E)
  w.wv = load_matrix(f, b + "attn_v.weight", E, kv_rows);         // (Hkv*D, E)
  if (c.qkv_bias) {
    w.bq = load_vector(f, b + "attn_q.bias", q_rows, q_map);   // (Hq*D)
    w.bk = load_vector(f, b + "attn_k.bias", kv_rows, k_map);  // (Hkv*D)
    w.bv = load_vector(f, b + "attn_v.bias", kv_rows);         // (Hkv*D)
  }
  w.wo = load_matrix(f, b + "attn_output.weight", q_rows, E);  // (E, Hq*D)
  if (c.qk_norm) {
    w.q_norm = load_vector(f, b + "attn_q_norm.weight", D);  // (D)
    w.k_norm = load_vector(f, b + "attn_k_norm.weight", D);  // (D)
  }
  if (c.post_norms) {  // llama.cpp's converter already folded Gemma's 1 + w into these
    w.post_attn_norm = load_vector(f, b + "post_attention_norm.weight", E);
    w.post_ffn_norm = load_vector(f, b + "post_ffw_norm.weight", E);
  }
  w.ffn_norm = load_vector(f, b + "ffn_norm.weight", E);   // (E)
  w.w_gate = load_matrix(f, b + "ffn_gate.weight", E, F);  // (F, E)
  w.w_up = load_matrix(f, b + "ffn_up.weight", E, F);      // (F, E)
  w.w_down = load_matrix(f, b + "ffn_down.weight", F, E);  // (E, F)
}

}  // namespace

Weights load_weights(const gguf::File& f) {
  Weights w;
  w.config = config_from_gguf(f);
  const ModelConfig& c = w.config;
  w.tok_embd = load_matrix(f, "token_embd.weight", c.d_model, c.vocab_size);  // (V, E)
  w.output_norm = load_vector(f, "output_norm.weight", c.d_model);            // (E)
  if (!c.tied_embeddings)
    w.output = load_matrix(f, "output.weight", c.d_model, c.vocab_size);  // (V, E)
  const bool permute = gguf_qk_permuted(c.arch);
  w.layers.resize(c.n_layers);
  for (uint32_t l = 0; l < c.n_layers; ++l) load_layer(f, c, l, permute, w.layers[l]);
  return w;
}

Weights load_weights(std::shared_ptr<const gguf::File> file) {
  if (!file) throw Error(Errc::invalid_argument, "load_weights: no file");
  Weights w = load_weights(*file);
  w.storage = std::move(file);
  return w;
}

namespace {

void hash_u64(XXH64_state_t* s, uint64_t v) { XXH64_update(s, &v, 8); }
void hash_str(XXH64_state_t* s, std::string_view v) {
  hash_u64(s, v.size());
  XXH64_update(s, v.data(), v.size());
}

// Each part is tagged and length-prefixed so that moving bytes between parts changes the hash.
uint64_t tokenizer_hash(const gguf::File& f, XXH64_state_t* s) {
  XXH64_reset(s, 0);
  for (const char* key : {"tokenizer.ggml.tokens", "tokenizer.ggml.merges"}) {
    hash_str(s, key);
    if (!f.has(key)) {
      hash_u64(s, ~0ull);
      continue;
    }
    const auto items = f.get_string_array_views(key);
    hash_u64(s, items.size());
    for (std::string_view item : items) hash_str(s, item);
    if (std::string_view(key) == "tokenizer.ggml.tokens") {
      hash_str(s, "tokenizer.ggml.token_type");
      if (!f.has("tokenizer.ggml.token_type")) {
        hash_u64(s, ~0ull);
        continue;
      }
      const auto types = f.get_i32_array("tokenizer.ggml.token_type");
      hash_u64(s, types.size());
      XXH64_update(s, types.data(), types.size() * sizeof(int32_t));
    }
  }
  if (f.has("tokenizer.ggml.scores")) {  // SentencePiece-style: the scores set the merge order
    hash_str(s, "tokenizer.ggml.scores");
    const auto scores = f.get_f32_array("tokenizer.ggml.scores");
    hash_u64(s, scores.size());
    XXH64_update(s, scores.data(), scores.size() * sizeof(float));
  }
  return XXH64_digest(s);
}

uint64_t weights_hash(const gguf::File& f, XXH64_state_t* s,
                      const std::function<void(uint64_t, uint64_t)>& progress) {
  XXH64_reset(s, 0);
  hash_u64(s, f.tensors().size());
  for (const gguf::TensorInfo& t : f.tensors()) {
    hash_str(s, t.name);
    hash_u64(s, uint64_t(t.type));
    hash_u64(s, t.n_dims);
    for (int j = 0; j < 4; ++j) hash_u64(s, uint64_t(t.ne[j]));
  }
  uint64_t total = 0, done = 0;
  for (const gguf::TensorInfo& t : f.tensors()) total += t.nbytes;
  constexpr uint64_t kPiece = uint64_t(64) << 20;  // progress granularity
  if (progress) progress(0, total);
  for (const gguf::TensorInfo& t : f.tensors()) {
    for (uint64_t off = 0; off < t.nbytes; off += kPiece) {
      const uint64_t n = std::min(kPiece, t.nbytes - off);
      XXH64_update(s, t.data + off, size_t(n));
      done += n;
      if (progress && (done % (kPiece * 4) < n || done == total)) progress(done, total);
    }
  }
  return XXH64_digest(s);
}

}  // namespace

ModelFingerprint fingerprint_from_gguf(const gguf::File& f,
                                       const std::function<void(uint64_t, uint64_t)>& progress) {
  ModelFingerprint fp;
  fp.arch = f.get_string("general.architecture");
  fp.name = f.get_string_or("general.name", "");
  XXH64_state_t* s = XXH64_createState();
  if (!s) throw Error(Errc::out_of_memory, "XXH64_createState failed");
  try {
    fp.tokenizer_hash = tokenizer_hash(f, s);
    fp.weights_hash = weights_hash(f, s, progress);
  } catch (...) {
    XXH64_freeState(s);
    throw;
  }
  XXH64_freeState(s);
  return fp;
}

}  // namespace kvzip::model
