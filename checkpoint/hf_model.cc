// Hugging Face checkpoint folder -> Weights (views into the mapped safetensors files),
// TokenizerData and ModelFingerprint. Tensor names are transformers'
// (model.layers.N.self_attn.q_proj.weight ...); tensors kvzip does not use are ignored but still
// hashed. Hashes are xxh64 with the same tagged, length-prefixed layout as the GGUF fingerprint
// (gguf_weights.cc), over the tensors in name order.
#include "checkpoint/hf_model.h"

#include <xxhash.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>

#include "checkpoint/detail/hf_json.h"
#include "checkpoint/safetensors.h"
#include "common/error.h"

namespace kvzip::model {
namespace fs = std::filesystem;

namespace {

// The mapped shards and where each tensor lives; Weights::storage holds one of these.
struct Checkpoint {
  std::string dir;
  std::vector<std::unique_ptr<safetensors::File>> files;
  std::map<std::string, const safetensors::TensorInfo*, std::less<>> tensors;
  std::map<std::string, const safetensors::File*, std::less<>> file_of;
};

std::string join(const std::string& dir, const std::string& name) {
  return (fs::path(dir) / name).string();
}

void add_file(Checkpoint& c, const std::string& name) {
  c.files.push_back(
      std::make_unique<safetensors::File>(safetensors::File::open(join(c.dir, name))));
  const safetensors::File& f = *c.files.back();
  for (const safetensors::TensorInfo& t : f.tensors()) {
    auto [it, fresh] = c.tensors.emplace(t.name, &t);
    if (!fresh)
      throw Error(Errc::corrupt, "Hugging Face checkpoint '" + c.dir + "': tensor '" + t.name +
                                     "' is in both '" + c.file_of[t.name]->source() + "' and '" +
                                     f.source() + "'");
    c.file_of[t.name] = &f;
  }
}

// Opens the shards: the index's files, else model.safetensors, else every *.safetensors.
std::shared_ptr<Checkpoint> open_checkpoint(const std::string& dir) {
  auto c = std::make_shared<Checkpoint>();
  c->dir = dir;
  const std::string index_path = join(dir, "model.safetensors.index.json");
  if (std::optional<detail::JsonFile> index = detail::JsonFile::read_optional(index_path)) {
    const nlohmann::json* map = index->member("weight_map");
    if (!map || !map->is_object()) index->fail(Errc::corrupt, "missing object 'weight_map'");
    std::vector<std::string> names;
    for (auto it = map->begin(); it != map->end(); ++it) {
      if (!it.value().is_string())
        index->fail(Errc::corrupt, "weight_map['" + it.key() + "'] is not a file name");
      const std::string file = it.value().get<std::string>();
      if (file.find('/') != std::string::npos || file == "..")
        index->fail(Errc::corrupt,
                    "weight_map['" + it.key() + "'] = '" + file + "' is not a file of the folder");
      if (std::find(names.begin(), names.end(), file) == names.end()) names.push_back(file);
    }
    std::sort(names.begin(), names.end());
    for (const std::string& n : names) add_file(*c, n);
    for (auto it = map->begin(); it != map->end(); ++it) {
      auto f = c->file_of.find(it.key());
      if (f == c->file_of.end() ||
          fs::path(f->second->source()).filename() != it.value().get<std::string>())
        index->fail(Errc::corrupt, "weight_map puts tensor '" + it.key() + "' in '" +
                                       it.value().get<std::string>() + "', which does not hold it");
    }
    return c;
  }
  if (fs::exists(join(dir, "model.safetensors"))) {
    add_file(*c, "model.safetensors");
    return c;
  }
  std::vector<std::string> names;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".safetensors") names.push_back(e.path().filename().string());
  if (names.empty())
    throw Error(Errc::not_found,
                "Hugging Face checkpoint '" + dir +
                    "' has no model.safetensors, model.safetensors.index.json or other "
                    "*.safetensors file (kvzip reads safetensors weights only)");
  std::sort(names.begin(), names.end());
  for (const std::string& n : names) add_file(*c, n);
  return c;
}

const safetensors::TensorInfo& need(const Checkpoint& c, const std::string& name, const char* why) {
  auto it = c.tensors.find(name);
  if (it == c.tensors.end())
    throw Error(Errc::corrupt, "Hugging Face checkpoint '" + c.dir + "': tensor '" + name + "' (" +
                                   why + ") is missing from its safetensors files");
  return *it->second;
}

// Checks shape (HF order: rows first) and dtype, naming the tensor and its file.
kernels::quant::GgmlType checked(const Checkpoint& c, const safetensors::TensorInfo& t,
                                 std::vector<uint64_t> want) {
  const std::string where = "tensor '" + t.name + "' in '" + c.file_of.at(t.name)->source() + "'";
  if (t.shape != want) {
    safetensors::TensorInfo w;
    w.shape = want;
    throw Error(Errc::corrupt, where + " has shape " + t.shape_string() + ", expected " +
                                   w.shape_string() + " (from config.json)");
  }
  std::optional<kernels::quant::GgmlType> type = safetensors::ggml_type(t.dtype);
  if (!type)
    throw Error(Errc::unsupported,
                where + " has dtype " + safetensors::dtype_name(t.dtype) +
                    ", which kvzip cannot compute with (supported: F32, F16, BF16); "
                    "convert the checkpoint to one of these or to a GGUF");
  return *type;
}

Matrix load_matrix(const Checkpoint& c, const std::string& name, uint32_t rows, uint32_t cols,
                   const char* why) {
  const safetensors::TensorInfo& t = need(c, name, why);
  Matrix m;
  m.type = checked(c, t, {rows, cols});
  m.rows = rows;
  m.cols = cols;
  m.name = name;
  m.data = t.data;
  // Tensors are packed back to back, so one can start off its element alignment; copy such rare
  // ones rather than hand kernels a misaligned float pointer.
  if (reinterpret_cast<uintptr_t>(t.data) % safetensors::dtype_size(t.dtype) != 0) {
    auto bytes = std::make_shared<std::vector<uint8_t>>(t.data, t.data + t.nbytes);
    m.data = bytes->data();
    m.owned = std::move(bytes);
  }
  KVZIP_ASSERT(m.bytes() == t.nbytes);
  return m;
}

std::vector<float> load_vector(const Checkpoint& c, const std::string& name, uint32_t n,
                               const char* why) {
  const safetensors::TensorInfo& t = need(c, name, why);
  const kernels::quant::GgmlType type = checked(c, t, {n});
  std::vector<uint8_t> bytes(t.data, t.data + t.nbytes);  // aligned copy
  std::vector<float> out(n);
  kernels::quant::dequantize_row(type, bytes.data(), out.data(), n);
  return out;
}

// Gemma stores RMSNorm weights as w and computes with 1 + w (GGUF files hold 1 + w already).
std::vector<float> gemma_norm(std::vector<float> w) {
  for (float& v : w) v += 1.0f;
  return w;
}

// Where the language model's tensors live: "model." (…ForCausalLM), or inside a
// Gemma3ForConditionalGeneration ("model.language_model." in transformers 5,
// "language_model.model." before).
std::string model_prefix(const Checkpoint& c) {
  for (const char* p : {"model.", "model.language_model.", "language_model.model."})
    if (c.tensors.count(std::string(p) + "embed_tokens.weight")) return p;
  return "model.";
}

void load_layer(const Checkpoint& c, const ModelConfig& cfg, const std::string& prefix, uint32_t l,
                LayerWeights& w) {
  const std::string p = prefix + "layers." + std::to_string(l) + ".";
  if (cfg.arch == "gemma3") {  // Gemma's names for the four norms; every norm computes with 1 + w
    const uint32_t E = cfg.d_model, F = cfg.d_ffn, D = cfg.head_dim;
    const uint32_t Q = cfg.n_heads * D, KV = cfg.n_kv_heads * D;
    w.attn_norm = gemma_norm(load_vector(c, p + "input_layernorm.weight", E, "attention norm"));
    w.wq = load_matrix(c, p + "self_attn.q_proj.weight", Q, E, "query projection");
    w.wk = load_matrix(c, p + "self_attn.k_proj.weight", KV, E, "key projection");
    w.wv = load_matrix(c, p + "self_attn.v_proj.weight", KV, E, "value projection");
    w.q_norm = gemma_norm(load_vector(c, p + "self_attn.q_norm.weight", D, "query norm"));
    w.k_norm = gemma_norm(load_vector(c, p + "self_attn.k_norm.weight", D, "key norm"));
    w.wo = load_matrix(c, p + "self_attn.o_proj.weight", E, Q, "attention output");
    w.post_attn_norm =
        gemma_norm(load_vector(c, p + "post_attention_layernorm.weight", E, "post-attention norm"));
    w.ffn_norm = gemma_norm(load_vector(c, p + "pre_feedforward_layernorm.weight", E, "FFN norm"));
    w.post_ffn_norm =
        gemma_norm(load_vector(c, p + "post_feedforward_layernorm.weight", E, "post-FFN norm"));
    w.w_gate = load_matrix(c, p + "mlp.gate_proj.weight", F, E, "FFN gate");
    w.w_up = load_matrix(c, p + "mlp.up_proj.weight", F, E, "FFN up");
    w.w_down = load_matrix(c, p + "mlp.down_proj.weight", E, F, "FFN down");
    return;
  }
  const uint32_t E = cfg.d_model, F = cfg.d_ffn, Q = cfg.n_heads * cfg.head_dim,
                 KV = cfg.n_kv_heads * cfg.head_dim;
  w.attn_norm = load_vector(c, p + "input_layernorm.weight", E, "attention norm");
  w.wq = load_matrix(c, p + "self_attn.q_proj.weight", Q, E, "query projection");
  w.wk = load_matrix(c, p + "self_attn.k_proj.weight", KV, E, "key projection");
  w.wv = load_matrix(c, p + "self_attn.v_proj.weight", KV, E, "value projection");
  if (cfg.qkv_bias) {
    w.bq = load_vector(c, p + "self_attn.q_proj.bias", Q, "query bias");
    w.bk = load_vector(c, p + "self_attn.k_proj.bias", KV, "key bias");
    w.bv = load_vector(c, p + "self_attn.v_proj.bias", KV, "value bias");
  }
  if (cfg.qk_norm) {  // Qwen 3
    w.q_norm = load_vector(c, p + "self_attn.q_norm.weight", cfg.head_dim, "query norm");
    w.k_norm = load_vector(c, p + "self_attn.k_norm.weight", cfg.head_dim, "key norm");
  }
  w.wo = load_matrix(c, p + "self_attn.o_proj.weight", E, Q, "attention output");
  w.ffn_norm = load_vector(c, p + "post_attention_layernorm.weight", E, "FFN norm");
  w.w_gate = load_matrix(c, p + "mlp.gate_proj.weight", F, E, "FFN gate");
  w.w_up = load_matrix(c, p + "mlp.up_proj.weight", F, E, "FFN up");
  w.w_down = load_matrix(c, p + "mlp.down_proj.weight", E, F, "FFN down");
}

void hash_u64(XXH64_state_t* s, uint64_t v) { XXH64_update(s, &v, 8); }
void hash_str(XXH64_state_t* s, std::string_view v) {
  hash_u64(s, v.size());
  XXH64_update(s, v.data(), v.size());
}

// Same parts and tags as the GGUF tokenizer hash, so a faithful conversion hashes alike.
uint64_t tokenizer_hash(const TokenizerData& d, XXH64_state_t* s) {
  XXH64_reset(s, 0);
  hash_str(s, "tokenizer.ggml.tokens");
  hash_u64(s, d.tokens.size());
  for (const std::string& t : d.tokens) hash_str(s, t);
  hash_str(s, "tokenizer.ggml.token_type");
  hash_u64(s, d.token_types.size());
  XXH64_update(s, d.token_types.data(), d.token_types.size() * sizeof(int32_t));
  hash_str(s, "tokenizer.ggml.merges");
  hash_u64(s, d.merges.size());
  for (const std::string& m : d.merges) hash_str(s, m);
  return XXH64_digest(s);
}

uint64_t weights_hash(const Checkpoint& c, XXH64_state_t* s) {
  XXH64_reset(s, 0);
  hash_str(s, "safetensors");
  hash_u64(s, c.tensors.size());
  for (const auto& [name, t] : c.tensors) {
    hash_str(s, name);
    hash_str(s, safetensors::dtype_name(t->dtype));
    hash_u64(s, t->shape.size());
    for (uint64_t d : t->shape) hash_u64(s, d);
  }
  for (const auto& [name, t] : c.tensors) XXH64_update(s, t->data, size_t(t->nbytes));
  return XXH64_digest(s);
}

ModelFingerprint fingerprint(const Checkpoint& c, const ModelConfig& cfg, const TokenizerData& tok,
                             const detail::JsonFile& config) {
  ModelFingerprint fp;
  fp.arch = cfg.arch;
  fp.name = config.opt_string("_name_or_path").value_or("");
  if (fp.name.empty()) fp.name = fs::path(c.dir).lexically_normal().filename().string();
  if (fp.name.empty())
    fp.name = fs::path(c.dir).lexically_normal().parent_path().filename().string();
  std::unique_ptr<XXH64_state_t, decltype(&XXH64_freeState)> s(XXH64_createState(),
                                                               &XXH64_freeState);
  if (!s) throw Error(Errc::out_of_memory, "XXH64_createState failed");
  fp.tokenizer_hash = tokenizer_hash(tok, s.get());
  fp.weights_hash = weights_hash(c, s.get());
  return fp;
}

std::optional<std::string> read_text(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) throw Error(Errc::io, "cannot read '" + path + "'");
  return text;
}

void require_dir(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw Error(Errc::not_found, "Hugging Face checkpoint folder '" + dir + "' does not exist");
}

}  // namespace

bool is_hf_checkpoint_dir(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec);
}

ModelConfig hf_config(const std::string& dir) {
  require_dir(dir);
  return detail::hf_config_from_json(detail::JsonFile::read(
      join(dir, "config.json"), "the model's architecture (a Hugging Face checkpoint)"));
}

HfModel load_hf_model(const std::string& dir) {
  require_dir(dir);
  const detail::JsonFile config = detail::JsonFile::read(
      join(dir, "config.json"), "the model's architecture (a Hugging Face checkpoint)");
  HfModel out;
  Weights& w = out.weights;
  w.config = detail::hf_config_from_json(config);
  const ModelConfig& cfg = w.config;
  const detail::JsonFile tok = detail::JsonFile::read(join(dir, "tokenizer.json"), "the tokenizer");
  const std::optional<detail::JsonFile> tok_cfg =
      detail::JsonFile::read_optional(join(dir, "tokenizer_config.json"));
  out.tokenizer =
      detail::hf_tokenizer_from_json(tok, tok_cfg ? &*tok_cfg : nullptr, config,
                                     read_text(join(dir, "chat_template.jinja")), cfg.vocab_size);

  std::shared_ptr<Checkpoint> c = open_checkpoint(dir);
  const std::string prefix = model_prefix(*c);
  w.tok_embd = load_matrix(*c, prefix + "embed_tokens.weight", cfg.vocab_size, cfg.d_model,
                           "token embedding");
  w.output_norm = load_vector(*c, prefix + "norm.weight", cfg.d_model, "final norm");
  if (cfg.arch == "gemma3") w.output_norm = gemma_norm(std::move(w.output_norm));
  if (!cfg.tied_embeddings)
    w.output = load_matrix(*c, "lm_head.weight", cfg.vocab_size, cfg.d_model,
                           "LM head; config.json says tie_word_embeddings is false");
  w.layers.resize(cfg.n_layers);
  for (uint32_t l = 0; l < cfg.n_layers; ++l) load_layer(*c, cfg, prefix, l, w.layers[l]);
  out.fingerprint = fingerprint(*c, cfg, out.tokenizer, config);
  w.storage = std::move(c);
  return out;
}

}  // namespace kvzip::model
