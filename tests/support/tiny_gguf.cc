// Test-only GGUF writer and tiny random models (see tiny_gguf.h). The writer emits the layout the
// reference writer does: header, KVs, tensor infos, zero padding to the alignment, then each
// tensor at its offset, padded. Quantizers follow ggml's reference (non-SIMD) formulas.
#include "tests/support/tiny_gguf.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>

#include "common/error.h"
#include "common/half.h"
#include "tests/support/random_weights.h"

namespace kvzip::test {
namespace {

using kernels::quant::GgmlType;

template <class T>
void put(std::vector<uint8_t>& out, T v) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &v, sizeof(T));
}
void put_str(std::vector<uint8_t>& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

template <class T>
GgufKv scalar_kv(const std::string& key, model::gguf::ValueType t, T v) {
  GgufKv kv{key, uint32_t(t), {}};
  put(kv.value, v);
  return kv;
}

template <class T>
GgufKv array_kv(const std::string& key, model::gguf::ValueType et, const std::vector<T>& v) {
  GgufKv kv{key, uint32_t(model::gguf::ValueType::Array), {}};
  put<uint32_t>(kv.value, uint32_t(et));
  put<uint64_t>(kv.value, v.size());
  for (const T& x : v) put(kv.value, x);
  return kv;
}

uint64_t align_up(uint64_t o, uint64_t a) { return o + (a - o % a) % a; }

}  // namespace

GgufKv kv_u8(const std::string& k, uint8_t v) {
  return scalar_kv(k, model::gguf::ValueType::U8, v);
}
GgufKv kv_i8(const std::string& k, int8_t v) { return scalar_kv(k, model::gguf::ValueType::I8, v); }
GgufKv kv_u16(const std::string& k, uint16_t v) {
  return scalar_kv(k, model::gguf::ValueType::U16, v);
}
GgufKv kv_i16(const std::string& k, int16_t v) {
  return scalar_kv(k, model::gguf::ValueType::I16, v);
}
GgufKv kv_u32(const std::string& k, uint32_t v) {
  return scalar_kv(k, model::gguf::ValueType::U32, v);
}
GgufKv kv_i32(const std::string& k, int32_t v) {
  return scalar_kv(k, model::gguf::ValueType::I32, v);
}
GgufKv kv_u64(const std::string& k, uint64_t v) {
  return scalar_kv(k, model::gguf::ValueType::U64, v);
}
GgufKv kv_i64(const std::string& k, int64_t v) {
  return scalar_kv(k, model::gguf::ValueType::I64, v);
}
GgufKv kv_f32(const std::string& k, float v) {
  return scalar_kv(k, model::gguf::ValueType::F32, v);
}
GgufKv kv_f64(const std::string& k, double v) {
  return scalar_kv(k, model::gguf::ValueType::F64, v);
}
GgufKv kv_bool(const std::string& k, bool v) {
  return scalar_kv(k, model::gguf::ValueType::Bool, uint8_t(v ? 1 : 0));
}
GgufKv kv_string(const std::string& k, const std::string& v) {
  GgufKv kv{k, uint32_t(model::gguf::ValueType::String), {}};
  put_str(kv.value, v);
  return kv;
}
GgufKv kv_string_array(const std::string& k, const std::vector<std::string>& v) {
  GgufKv kv{k, uint32_t(model::gguf::ValueType::Array), {}};
  put<uint32_t>(kv.value, uint32_t(model::gguf::ValueType::String));
  put<uint64_t>(kv.value, v.size());
  for (const std::string& s : v) put_str(kv.value, s);
  return kv;
}
GgufKv kv_i32_array(const std::string& k, const std::vector<int32_t>& v) {
  return array_kv(k, model::gguf::ValueType::I32, v);
}
GgufKv kv_u32_array(const std::string& k, const std::vector<uint32_t>& v) {
  return array_kv(k, model::gguf::ValueType::U32, v);
}
GgufKv kv_f32_array(const std::string& k, const std::vector<float>& v) {
  return array_kv(k, model::gguf::ValueType::F32, v);
}
GgufKv kv_array_raw(const std::string& k, uint32_t elem_type, uint64_t count,
                    std::vector<uint8_t> payload) {
  GgufKv kv{k, uint32_t(model::gguf::ValueType::Array), {}};
  put<uint32_t>(kv.value, elem_type);
  put<uint64_t>(kv.value, count);
  kv.value.insert(kv.value.end(), payload.begin(), payload.end());
  return kv;
}

// ---- GgufWriter ----

uint32_t GgufWriter::alignment() const {
  for (const GgufKv& kv : kvs) {
    if (kv.key == "general.alignment" && kv.type == uint32_t(model::gguf::ValueType::U32)) {
      uint32_t a;
      std::memcpy(&a, kv.value.data(), 4);
      if (a != 0) return a;
    }
  }
  return model::gguf::kDefaultAlignment;
}

void GgufWriter::set(GgufKv kv) {
  for (GgufKv& e : kvs) {
    if (e.key == kv.key) {
      e = std::move(kv);
      return;
    }
  }
  kvs.push_back(std::move(kv));
}

void GgufWriter::erase(const std::string& key) {
  kvs.erase(std::remove_if(kvs.begin(), kvs.end(), [&](const GgufKv& e) { return e.key == key; }),
            kvs.end());
}

GgufImage GgufWriter::build() const {
  GgufImage img;
  std::vector<uint8_t>& out = img.bytes;
  const uint64_t align = alignment();
  put<uint32_t>(out, 0x46554747);  // "GGUF"
  put<uint32_t>(out, version);
  put<uint64_t>(out, tensors.size());
  put<uint64_t>(out, kvs.size());
  for (const GgufKv& kv : kvs) {
    img.kv_offsets.push_back(out.size());
    put_str(out, kv.key);
    put<uint32_t>(out, kv.type);
    out.insert(out.end(), kv.value.begin(), kv.value.end());
  }
  std::vector<uint64_t> offsets;
  uint64_t running = 0;
  for (const GgufTensor& t : tensors) {
    img.tensor_info_offsets.push_back(out.size());
    put_str(out, t.name);
    put<uint32_t>(out, uint32_t(t.ne.size()));
    for (uint64_t ne : t.ne) put<uint64_t>(out, ne);
    put<uint32_t>(out, t.type);
    const uint64_t off = t.offset.value_or(running);
    put<uint64_t>(out, off);
    offsets.push_back(off);
    running = align_up(running + t.data.size(), align);
  }
  img.tensor_infos_end = out.size();
  img.data_offset = align_up(out.size(), align);
  out.resize(img.data_offset, 0);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const uint64_t at = img.data_offset + offsets[i];
    // A forced offset far outside the file is written as recorded but not materialized.
    if (offsets[i] > running + (1u << 20)) {
      img.tensor_data_offsets.push_back(at);
      continue;
    }
    const uint64_t end = align_up(at + tensors[i].data.size(), align);
    if (out.size() < end) out.resize(end, 0);
    std::copy(tensors[i].data.begin(), tensors[i].data.end(), out.begin() + int64_t(at));
    img.tensor_data_offsets.push_back(at);
  }
  return img;
}

// ---- quantizers ----

namespace {

void put_half(std::vector<uint8_t>& out, float f) { put<uint16_t>(out, f32_to_f16(f)); }

void q8_0_block(const float* x, std::vector<uint8_t>& out) {
  float amax = 0;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
  put_half(out, d);
  for (int j = 0; j < 32; ++j) out.push_back(uint8_t(int8_t(std::roundf(x[j] * id))));
}

// The signed value of largest magnitude (Q4_0/Q5_0 scale from it so that it maps to -8/-16).
float signed_absmax(const float* x) {
  float amax = 0, max = 0;
  for (int j = 0; j < 32; ++j) {
    if (std::fabs(x[j]) > amax) amax = std::fabs(x[j]), max = x[j];
  }
  return max;
}

void q4_0_block(const float* x, std::vector<uint8_t>& out) {
  const float d = signed_absmax(x) / -8.0f, id = d != 0 ? 1.0f / d : 0.0f;
  put_half(out, d);
  for (int j = 0; j < 16; ++j) {
    const int a = std::min(15, int(int8_t(x[j] * id + 8.5f)));
    const int b = std::min(15, int(int8_t(x[j + 16] * id + 8.5f)));
    out.push_back(uint8_t(a | b << 4));
  }
}

void q4_1_block(const float* x, std::vector<uint8_t>& out) {
  const float mn = *std::min_element(x, x + 32), mx = *std::max_element(x, x + 32);
  const float d = (mx - mn) / 15.0f, id = d != 0 ? 1.0f / d : 0.0f;
  put_half(out, d);
  put_half(out, mn);
  for (int j = 0; j < 16; ++j) {
    const int a = std::min(15, int(int8_t((x[j] - mn) * id + 0.5f)));
    const int b = std::min(15, int(int8_t((x[j + 16] - mn) * id + 0.5f)));
    out.push_back(uint8_t(a | b << 4));
  }
}

// Q5_0 / Q5_1: 5-bit codes, low nibbles split like Q4, the 5th bits packed into a u32.
void put_q5_codes(const int* q, std::vector<uint8_t>& out) {
  uint32_t qh = 0;
  for (int j = 0; j < 32; ++j) qh |= uint32_t((q[j] >> 4) & 1) << j;
  put<uint32_t>(out, qh);
  for (int j = 0; j < 16; ++j) out.push_back(uint8_t((q[j] & 0xF) | (q[j + 16] & 0xF) << 4));
}

void q5_0_block(const float* x, std::vector<uint8_t>& out) {
  const float d = signed_absmax(x) / -16.0f, id = d != 0 ? 1.0f / d : 0.0f;
  put_half(out, d);
  int q[32];
  for (int j = 0; j < 32; ++j) q[j] = std::min(31, int(int8_t(x[j] * id + 16.5f)));
  put_q5_codes(q, out);
}

void q5_1_block(const float* x, std::vector<uint8_t>& out) {
  const float mn = *std::min_element(x, x + 32), mx = *std::max_element(x, x + 32);
  const float d = (mx - mn) / 31.0f, id = d != 0 ? 1.0f / d : 0.0f;
  put_half(out, d);
  put_half(out, mn);
  int q[32];
  for (int j = 0; j < 32; ++j) q[j] = std::min(31, int(uint8_t((x[j] - mn) * id + 0.5f)));
  put_q5_codes(q, out);
}

}  // namespace

std::vector<uint8_t> quantize_row(GgmlType t, const float* x, int64_t n) {
  std::vector<uint8_t> out;
  out.reserve(size_t(kernels::quant::row_bytes(t, n)));
  using BlockFn = void (*)(const float*, std::vector<uint8_t>&);
  BlockFn fn = nullptr;
  switch (t) {
    case GgmlType::F32:
      for (int64_t i = 0; i < n; ++i) put<float>(out, x[i]);
      return out;
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) put_half(out, x[i]);
      return out;
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) put<uint16_t>(out, f32_to_bf16(x[i]));
      return out;
    case GgmlType::Q8_0: fn = q8_0_block; break;
    case GgmlType::Q4_0: fn = q4_0_block; break;
    case GgmlType::Q4_1: fn = q4_1_block; break;
    case GgmlType::Q5_0: fn = q5_0_block; break;
    case GgmlType::Q5_1: fn = q5_1_block; break;
    default:
      throw Error(Errc::unsupported,
                  std::string("test quantizer has no encoder for ") + kernels::quant::type_name(t));
  }
  for (int64_t i = 0; i < n; i += 32) fn(x + i, out);
  return out;
}

// ---- tokenizer ----

std::string byte_to_unicode(uint8_t b) {
  // Printable bytes map to themselves; the other 68 to U+0100.. in byte order.
  auto printable = [](int c) {
    return (c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF);
  };
  uint32_t cp = b;
  if (!printable(b)) {
    cp = 256;
    for (int c = 0; c < b; ++c) cp += printable(c) ? 0 : 1;
  }
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else {
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3F));
  }
  return s;
}

TinyVocab tiny_vocab() {
  TinyVocab v;
  v.tokens = {"<|endoftext|>",  "<|im_start|>",    "<|im_end|>",       "<repo_name>",
              "<reponame>",     "<file_sep>",      "<filename>",       "<gh_stars>",
              "<issue_start>",  "<issue_comment>", "<issue_closed>",   "<jupyter_start>",
              "<jupyter_text>", "<jupyter_code>",  "<jupyter_output>", "<jupyter_script>",
              "<empty_output>"};
  v.types.assign(v.tokens.size(), 3);
  // Code-point order of the mapped chars = GPT-2's bs order (printables, then U+0100..).
  std::vector<std::string> chars;
  for (int b = 0; b < 256; ++b) chars.push_back(byte_to_unicode(uint8_t(b)));
  auto cp_of = [](const std::string& s) {
    return s.size() == 1 ? uint32_t(uint8_t(s[0]))
                         : (uint32_t(uint8_t(s[0]) & 0x1F) << 6) | (uint8_t(s[1]) & 0x3F);
  };
  std::sort(chars.begin(), chars.end(),
            [&](const std::string& a, const std::string& b) { return cp_of(a) < cp_of(b); });
  for (const std::string& c : chars) v.tokens.push_back(c), v.types.push_back(1);
  const std::string G = byte_to_unicode(' ');  // "Ġ"
  const std::pair<std::string, std::string> merges[] = {{G, "t"},   {G, "a"},   {"i", "n"},
                                                        {"h", "e"}, {G, G},     {"r", "e"},
                                                        {"o", "n"}, {"e", "r"}, {G + "t", "he"}};
  for (const auto& [l, r] : merges) {
    v.merges.push_back(l + " " + r);
    v.tokens.push_back(l + r);
    v.types.push_back(1);
  }
  return v;
}

// Byte-identical to SmolLM2-135M-Instruct's tokenizer.chat_template (every \n is a real newline).
const char* const kChatMlTemplate =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}";

// ---- tiny models ----

namespace {

// splitmix64: portable, so the same seed gives the same weights everywhere.
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  float uniform() { return float(next() >> 40) / float(1 << 24) * 2.0f - 1.0f; }  // [-1, 1)
};

std::vector<float> random_vec(Rng& rng, size_t n, float center, float scale) {
  std::vector<float> v(n);
  for (float& x : v) x = center + scale * rng.uniform();
  return v;
}

uint32_t file_type_of(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return 0;
    case GgmlType::F16: return 1;
    case GgmlType::Q4_0: return 2;
    case GgmlType::Q4_1: return 3;
    case GgmlType::Q8_0: return 7;
    case GgmlType::Q5_0: return 8;
    case GgmlType::Q5_1: return 9;
    case GgmlType::BF16: return 32;
    default: return 0;
  }
}

// GGUF row g of a head-permuted matrix holds canonical row hf_row(g) (llama.cpp's permute).
int64_t hf_row(int64_t g, uint32_t head_dim) {
  const int64_t h = g / head_dim, r = g % head_dim;
  return h * head_dim + (r % 2) * (head_dim / 2) + r / 2;
}

class ModelBuilder {
 public:
  ModelBuilder(const TinyModelSpec& spec, GgufWriter& w) : spec_(spec), w_(w), rng_{spec.seed} {}

  // A (rows, cols) matrix: random canonical values, quantized to t; `w` receives the
  // dequantized canonical values. perm_head_dim > 0 writes rows in llama.cpp's permuted order.
  void matrix(const std::string& name, GgmlType t, int64_t rows, int64_t cols,
              uint32_t perm_head_dim, model::Matrix& out) {
    std::vector<float> w = random_vec(rng_, size_t(rows * cols), 0.0f, 0.5f);
    std::vector<std::vector<uint8_t>> row_bytes(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      row_bytes[size_t(r)] = quantize_row(t, w.data() + r * cols, cols);
      kernels::quant::dequantize_row(t, row_bytes[size_t(r)].data(), w.data() + r * cols, cols);
    }
    GgufTensor tensor{name, uint32_t(t), {uint64_t(cols), uint64_t(rows)}, {}, std::nullopt};
    for (int64_t g = 0; g < rows; ++g) {
      const auto& src = row_bytes[size_t(perm_head_dim ? hf_row(g, perm_head_dim) : g)];
      tensor.data.insert(tensor.data.end(), src.begin(), src.end());
    }
    w_.tensors.push_back(std::move(tensor));
    out = model::Matrix::from_f32(w, uint32_t(rows), uint32_t(cols), name);
  }

  // An F32 vector (norm weight or bias), permuted like a matrix when perm_head_dim > 0.
  void vector(const std::string& name, int64_t n, float center, uint32_t perm_head_dim,
              std::vector<float>& w) {
    w = random_vec(rng_, size_t(n), center, 0.1f);
    std::vector<float> stored(static_cast<size_t>(n));
    for (int64_t g = 0; g < n; ++g)
      stored[size_t(g)] = w[size_t(perm_head_dim ? hf_row(g, perm_head_dim) : g)];
    w_.tensors.push_back({name,
                          uint32_t(GgmlType::F32),
                          {uint64_t(n)},
                          quantize_row(GgmlType::F32, stored.data(), n),
                          std::nullopt});
  }

  model::LayerWeights layer(uint32_t l, bool permute) {
    const ModelConfig& c = spec_.config;
    const std::string b = "blk." + std::to_string(l) + ".";
    const int64_t E = c.d_model, F = c.d_ffn, D = c.head_dim;
    const int64_t q_rows = c.n_heads * D, kv_rows = c.n_kv_heads * D;
    const uint32_t perm = permute ? c.head_dim : 0;
    const GgmlType t = spec_.dtype;
    model::LayerWeights w;
    vector(b + "attn_norm.weight", E, 1.0f, 0, w.attn_norm);
    matrix(b + "attn_q.weight", t, q_rows, E, perm, w.wq);
    matrix(b + "attn_k.weight", t, kv_rows, E, perm, w.wk);
    matrix(b + "attn_v.weight", t, kv_rows, E, 0, w.wv);
    if (c.qkv_bias) {
      vector(b + "attn_q.bias", q_rows, 0.0f, perm, w.bq);
      vector(b + "attn_k.bias", kv_rows, 0.0f, perm, w.bk);
      vector(b + "attn_v.bias", kv_rows, 0.0f, 0, w.bv);
    }
    matrix(b + "attn_output.weight", t, E, q_rows, 0, w.wo);
    vector(b + "ffn_norm.weight", E, 1.0f, 0, w.ffn_norm);
    matrix(b + "ffn_gate.weight", t, F, E, 0, w.w_gate);
    matrix(b + "ffn_up.weight", t, F, E, 0, w.w_up);
    matrix(b + "ffn_down.weight", t, E, F, 0, w.w_down);
    return w;
  }

 private:
  const TinyModelSpec& spec_;
  GgufWriter& w_;
  Rng rng_;
};

void add_tokenizer(GgufWriter& w, uint32_t vocab_size) {
  TinyVocab v = tiny_vocab();
  if (vocab_size < v.tokens.size())
    throw Error(Errc::invalid_argument, "tiny model vocab_size " + std::to_string(vocab_size) +
                                            " is below the default vocab's " +
                                            std::to_string(v.tokens.size()) + " tokens");
  for (uint32_t i = uint32_t(v.tokens.size()); i < vocab_size; ++i)
    v.tokens.push_back("<pad_" + std::to_string(i) + ">"), v.types.push_back(5);
  w.set(kv_bool("tokenizer.ggml.add_space_prefix", false));
  w.set(kv_bool("tokenizer.ggml.add_bos_token", false));
  w.set(kv_string("tokenizer.ggml.model", "gpt2"));
  w.set(kv_string("tokenizer.ggml.pre", "smollm"));
  w.set(kv_string_array("tokenizer.ggml.tokens", v.tokens));
  w.set(kv_i32_array("tokenizer.ggml.token_type", v.types));
  w.set(kv_string_array("tokenizer.ggml.merges", v.merges));
  w.set(kv_u32("tokenizer.ggml.bos_token_id", 1));
  w.set(kv_u32("tokenizer.ggml.eos_token_id", 2));
  w.set(kv_u32("tokenizer.ggml.unknown_token_id", 0));
  w.set(kv_u32("tokenizer.ggml.padding_token_id", 2));
  w.set(kv_string("tokenizer.chat_template", kChatMlTemplate));
}

void add_hparams(GgufWriter& w, const TinyModelSpec& spec) {
  const ModelConfig& c = spec.config;
  const std::string p = c.arch + ".";
  w.set(kv_string("general.architecture", c.arch));
  w.set(kv_string("general.name", spec.name));
  w.set(kv_u32(p + "block_count", c.n_layers));
  w.set(kv_u32(p + "context_length", c.max_context));
  w.set(kv_u32(p + "embedding_length", c.d_model));
  w.set(kv_u32(p + "feed_forward_length", c.d_ffn));
  w.set(kv_u32(p + "attention.head_count", c.n_heads));
  w.set(kv_u32(p + "attention.head_count_kv", c.n_kv_heads));
  if (c.head_dim * c.n_heads != c.d_model) {
    w.set(kv_u32(p + "attention.key_length", c.head_dim));
    w.set(kv_u32(p + "attention.value_length", c.head_dim));
  }
  w.set(kv_f32(p + "rope.freq_base", c.rope_base));
  w.set(kv_f32(p + "attention.layer_norm_rms_epsilon", c.rms_eps));
  w.set(kv_u32("general.file_type", file_type_of(spec.dtype)));
  w.set(kv_u32(p + "vocab_size", c.vocab_size));
  w.set(kv_u32(p + "rope.dimension_count", c.head_dim));
  const RopeScaling& rs = c.rope_scaling;
  if (rs.kind == RopeScalingKind::Linear) {
    w.set(kv_string(p + "rope.scaling.type", "linear"));
    w.set(kv_f32(p + "rope.scaling.factor", rs.factor));
  } else if (rs.kind == RopeScalingKind::Llama3) {
    w.set(kv_string(p + "rope.scaling.type", "llama3"));
    w.set(kv_f32(p + "rope.scaling.factor", rs.factor));
    w.set(kv_u32(p + "rope.scaling.original_context_length", rs.original_context));
    w.set(kv_f32(p + "rope.scaling.low_freq_factor", rs.low_freq_factor));
    w.set(kv_f32(p + "rope.scaling.high_freq_factor", rs.high_freq_factor));
  }
}

}  // namespace

ModelConfig tiny_gguf_llama_config() {
  ModelConfig c = tiny_llama_config();  // the random-weight tests' dimensions
  c.vocab_size = kTinyVocabSize;        // the tiny tokenizer's vocabulary
  c.max_context = 256;
  c.rope_base = 100000.0f;
  return c;
}

ModelConfig tiny_gguf_qwen2_config() {
  ModelConfig c = tiny_gguf_llama_config();
  c.arch = "qwen2";
  c.rope_base = 1000000.0f;
  c.rms_eps = 1e-6f;
  c.tied_embeddings = false;
  c.qkv_bias = true;
  return c;
}

TinyModel make_tiny_model(const TinyModelSpec& spec) {
  const ModelConfig& c = spec.config;
  TinyModel m;
  GgufWriter& w = m.writer;
  add_hparams(w, spec);
  if (spec.dtype != GgmlType::F32 || spec.embd_dtype.value_or(GgmlType::F32) != GgmlType::F32)
    w.set(kv_u32("general.quantization_version", 2));
  if (spec.tokenizer) add_tokenizer(w, c.vocab_size);
  for (const std::string& key : spec.drop_keys) w.erase(key);
  for (const GgufKv& kv : spec.extra_kvs) w.set(kv);

  ModelBuilder b(spec, w);
  model::Weights& out = m.weights;
  out.config = c;
  const GgmlType embd = spec.embd_dtype.value_or(spec.dtype);
  b.matrix("token_embd.weight", embd, c.vocab_size, c.d_model, 0, out.tok_embd);
  b.vector("output_norm.weight", c.d_model, 1.0f, 0, out.output_norm);
  if (!c.tied_embeddings) b.matrix("output.weight", embd, c.vocab_size, c.d_model, 0, out.output);
  // Decided here, not by the library, so the round trip tests the loader's arch table too:
  // llama.cpp's LlamaModel converter (llama, mistral) permutes; its Qwen2 converter does not.
  const bool permute = c.arch == "llama" || c.arch == "mistral";
  for (uint32_t l = 0; l < c.n_layers; ++l) out.layers.push_back(b.layer(l, permute));
  m.bytes = w.build().bytes;
  return m;
}

model::gguf::File open_bytes(const std::vector<uint8_t>& bytes) {
  return model::gguf::File::from_bytes(bytes);
}

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  if (!f) throw Error(Errc::io, "cannot write test file " + path);
}

namespace {
void put_half(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  p[0] = uint8_t(h & 0xFF);
  p[1] = uint8_t(h >> 8);
}

}  // namespace

std::vector<uint8_t> random_matrix(GgmlType t, uint32_t rows, uint32_t cols, uint64_t seed) {
  const size_t rb = kernels::quant::row_bytes(t, cols);
  std::vector<uint8_t> out(rows * rb);
  if (t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K) {
    const std::vector<float> u = random_vector(out.size(), seed, 0.0f, 256.0f);
    for (size_t i = 0; i < out.size(); ++i) out[i] = uint8_t(std::min(255.0f, u[i]));
    const size_t bb = size_t(kernels::quant::block_bytes(t));
    for (size_t b = 0; b < out.size() / bb; ++b) {
      uint8_t* blk = out.data() + b * bb;
      if (t == GgmlType::Q6_K) {
        put_half(blk + 208, 0.001f);
      } else {
        put_half(blk, 0.002f);
        put_half(blk + 2, 0.001f);
      }
    }
    return out;
  }
  for (uint32_t r = 0; r < rows; ++r) {
    const std::vector<float> v = random_vector(cols, seed + r, -1.0f, 1.0f);
    const std::vector<uint8_t> q = quantize_row(t, v.data(), cols);
    std::memcpy(out.data() + r * rb, q.data(), rb);
  }
  return out;
}

}  // namespace kvzip::test
