// Test-only GGUF writer. Two levels: GgufWriter serializes arbitrary KVs and tensor records
// (raw type ids, any n_dims, forced offsets: enough to build every corrupt file), and
// make_tiny_model writes a small random-weight llama/mistral/qwen2 model with full metadata, a
// default byte-level BPE vocab and ChatML template, applying llama.cpp's Q/K row permutation for
// llama-type archs, and returns the canonical fp32 Weights it encoded (exact for F32, the
// dequantized values for other dtypes). Deterministic for a given spec (own PRNG, no std dists).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/gguf.h"
#include "checkpoint/weights.h"
#include "common/model_config.h"
#include "kernels/quant.h"

namespace kvzip::test {

// ---- low-level writer ----

// One metadata record: key, gguf value type id, and the encoded value bytes after the type field
// (for arrays: elem type, count, elements).
struct GgufKv {
  std::string key;
  uint32_t type = 0;
  std::vector<uint8_t> value;
};

GgufKv kv_u8(const std::string& key, uint8_t v);
GgufKv kv_i8(const std::string& key, int8_t v);
GgufKv kv_u16(const std::string& key, uint16_t v);
GgufKv kv_i16(const std::string& key, int16_t v);
GgufKv kv_u32(const std::string& key, uint32_t v);
GgufKv kv_i32(const std::string& key, int32_t v);
GgufKv kv_u64(const std::string& key, uint64_t v);
GgufKv kv_i64(const std::string& key, int64_t v);
GgufKv kv_f32(const std::string& key, float v);
GgufKv kv_f64(const std::string& key, double v);
GgufKv kv_bool(const std::string& key, bool v);
GgufKv kv_string(const std::string& key, const std::string& v);
GgufKv kv_string_array(const std::string& key, const std::vector<std::string>& v);
GgufKv kv_i32_array(const std::string& key, const std::vector<int32_t>& v);
GgufKv kv_u32_array(const std::string& key, const std::vector<uint32_t>& v);
GgufKv kv_f32_array(const std::string& key, const std::vector<float>& v);
// An array header with any element type and count, followed by `payload` verbatim.
GgufKv kv_array_raw(const std::string& key, uint32_t elem_type, uint64_t count,
                    std::vector<uint8_t> payload);

struct GgufTensor {
  std::string name;
  uint32_t type = 0;               // raw ggml type id
  std::vector<uint64_t> ne;        // n_dims = ne.size(); ne[0] contiguous
  std::vector<uint8_t> data;       // written at the offset, then zero-padded to the alignment
  std::optional<uint64_t> offset;  // default: the running padded offset (reference layout)
};

// Where things landed in the built image (absolute byte offsets).
struct GgufImage {
  std::vector<uint8_t> bytes;
  std::vector<uint64_t> kv_offsets;           // start of each KV record
  std::vector<uint64_t> tensor_info_offsets;  // start of each tensor info record
  uint64_t tensor_infos_end = 0;              // first byte after the tensor table
  uint64_t data_offset = 0;                   // start of the tensor data section
  std::vector<uint64_t> tensor_data_offsets;  // absolute start of each tensor's data
};

struct GgufWriter {
  uint32_t version = 3;
  std::vector<GgufKv> kvs;
  std::vector<GgufTensor> tensors;

  // Layout alignment: a u32 general.alignment in kvs if present and non-zero, else 32.
  uint32_t alignment() const;
  // Replaces the KV with the same key, or appends.
  void set(GgufKv kv);
  void erase(const std::string& key);
  GgufImage build() const;
};

// ---- reference quantizers (ggml's reference formulas) ----

// Encodes n values (n % block == 0) as type t: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1.
std::vector<uint8_t> quantize_row(kernels::quant::GgmlType t, const float* x, int64_t n);

// rows x cols random weights of type t as stored (rows · row_bytes bytes): the 32-element and
// plain types quantize uniform ±1 rows with quantize_row; K-quant blocks are random bytes with
// sane fp16 scales (d 0.002, dmin 0.001; Q6_K d 0.001).
std::vector<uint8_t> random_matrix(kernels::quant::GgmlType t, uint32_t rows, uint32_t cols,
                                   uint64_t seed);

// ---- default tokenizer ----

// The GPT-2 byte -> unicode char map, as UTF-8.
std::string byte_to_unicode(uint8_t b);
struct TinyVocab {
  std::vector<std::string> tokens;  // 17 SmolLM2 specials, 256 byte chars, merge results
  std::vector<int32_t> types;       // 3 (control) for specials, 1 (normal) otherwise
  std::vector<std::string> merges;  // "Ġ t", "Ġ a", "i n", ... (SmolLM2's first merges)
};
TinyVocab tiny_vocab();
inline constexpr uint32_t kTinyVocabSize = 17 + 256 + 9;
extern const char* const kChatMlTemplate;  // SmolLM2's ChatML template with default system prompt

// ---- tiny models ----

ModelConfig tiny_gguf_llama_config();  // L=2 E=64 Hq=4 Hkv=2 D=16 F=96 V=kTinyVocabSize, ctx 256
ModelConfig tiny_gguf_qwen2_config();  // the same dimensions, arch qwen2, qkv_bias

struct TinyModelSpec {
  ModelConfig config;  // arch llama, mistral or qwen2; qkv_bias adds .bias tensors; tied
  uint64_t seed = 1;
  kernels::quant::GgmlType dtype =
      kernels::quant::GgmlType::F32;                   // 2-D weights; norms and biases stay F32
  std::optional<kernels::quant::GgmlType> embd_dtype;  // token_embd / output (default: dtype)
  bool tokenizer = true;  // default vocab (padded with "<pad_N>" up to config.vocab_size)
  std::string name = "tiny-test-model";
  std::vector<GgufKv> extra_kvs;       // replace defaults with the same key, else append
  std::vector<std::string> drop_keys;  // default keys to leave out
};

struct TinyModel {
  GgufWriter writer;  // what was written (edit and rebuild for variants)
  std::vector<uint8_t> bytes;
  model::Weights weights;  // canonical (HF-order) fp32 weights the file encodes
};

TinyModel make_tiny_model(const TinyModelSpec& spec);
model::gguf::File open_bytes(const std::vector<uint8_t>& bytes);
void write_file(const std::string& path, const std::vector<uint8_t>& bytes);

}  // namespace kvzip::test
