// config.json -> ModelConfig for the Llama family as transformers writes it. Both spellings of the
// RoPE settings are read: the classic top-level "rope_theta" + "rope_scaling" (what Meta, Qwen and
// Mistral publish) and transformers 5's "rope_parameters" object. Mistral/Qwen2 sliding-window
// attention is not implemented, so a window shorter than the context caps max_context at the
// window: within it, full causal attention is exactly what the model computes.
#include <cmath>
#include <string>

#include "model/detail/config_check.h"
#include "model/detail/hf_json.h"

namespace kvzip::model::detail {
namespace {

struct HfArch {
  const char* model_type;
  const char* arch;  // kvzip / GGUF architecture name
  bool qkv_bias;
};
constexpr HfArch kArchs[] = {{"llama", "llama", false}, {"mistral", "mistral", false}, {"qwen2", "qwen2", true}};

uint32_t u32(const JsonFile& f, std::string_view key, uint64_t v) {
  if (v > UINT32_MAX) f.fail(Errc::corrupt, "key '" + std::string(key) + "' = " + std::to_string(v) + " is too large");
  return uint32_t(v);
}

void read_rope(const JsonFile& f, ModelConfig& c) {
  // transformers 5 folds theta and scaling into one object; older files have them apart.
  const nlohmann::json* params = f.member("rope_parameters");
  const nlohmann::json* scaling = f.member("rope_scaling");
  std::string where = "rope_scaling";
  if (!scaling && params) scaling = params, where = "rope_parameters";
  std::optional<double> theta = f.opt_number("rope_theta");
  if (!theta && params) theta = f.opt_number("rope_theta", params, "rope_parameters.rope_theta");
  c.rope_base = float(theta.value_or(10000.0));
  if (auto prf = f.opt_number("partial_rotary_factor"); prf && *prf != 1.0)
    f.fail(Errc::unsupported, "partial_rotary_factor = " + std::to_string(*prf) + " (partial RoPE) is not supported");
  if (!scaling) return;
  if (!scaling->is_object()) f.fail(Errc::corrupt, "key '" + where + "' is not an object");
  std::optional<std::string> type = f.opt_string("rope_type", scaling, where + ".rope_type");
  if (!type) type = f.opt_string("type", scaling, where + ".type");
  RopeScaling& rs = c.rope_scaling;
  auto number = [&](const char* key) {
    std::optional<double> v = f.opt_number(key, scaling, where + "." + key);
    if (!v) f.fail(Errc::corrupt, "rope type '" + *type + "' needs key '" + where + "." + key + "'");
    return *v;
  };
  if (!type || *type == "default") return;
  if (*type == "linear") {
    rs.kind = RopeScalingKind::Linear;
    rs.factor = float(number("factor"));
  } else if (*type == "llama3") {
    rs.kind = RopeScalingKind::Llama3;
    rs.factor = float(number("factor"));
    rs.low_freq_factor = float(number("low_freq_factor"));
    rs.high_freq_factor = float(number("high_freq_factor"));
    rs.original_context =
        u32(f, "original_max_position_embeddings",
            f.get_uint("original_max_position_embeddings", scaling, where + ".original_max_position_embeddings"));
  } else {
    f.fail(Errc::unsupported, "key '" + where + ".rope_type' = '" + *type +
                                  "' is not supported (supported: default, linear, llama3)");
  }
  if (!(rs.factor > 0.0f))
    f.fail(Errc::corrupt, "key '" + where + ".factor' = " + std::to_string(rs.factor) + ", expected a positive factor");
  if (rs.kind == RopeScalingKind::Llama3 &&
      (!(rs.low_freq_factor > 0.0f) || !(rs.high_freq_factor > rs.low_freq_factor) || rs.original_context == 0))
    f.fail(Errc::corrupt, "llama3 rope scaling needs 0 < low_freq_factor < high_freq_factor and "
                          "original_max_position_embeddings > 0");
}

// Options of the Llama-family classes that change the computation and kvzip does not implement.
void refuse_unsupported(const JsonFile& f, const std::string& model_type) {
  if (auto act = f.opt_string("hidden_act"); act && *act != "silu")
    f.fail(Errc::unsupported, "hidden_act = '" + *act + "' is not supported (kvzip implements SwiGLU with silu)");
  if (f.opt_bool("attention_bias").value_or(false))
    f.fail(Errc::unsupported, "attention_bias = true (biases on q/k/v and o_proj) is not supported for " +
                                  model_type);
  if (f.opt_bool("mlp_bias").value_or(false))
    f.fail(Errc::unsupported, "mlp_bias = true is not supported");
  if (const nlohmann::json* q = f.member("quantization_config")) {
    std::string method = q->is_object() && q->contains("quant_method") ? q->at("quant_method").dump() : "?";
    f.fail(Errc::unsupported, "the checkpoint is quantized (quantization_config.quant_method " + method +
                                  "); kvzip reads F32, F16 and BF16 safetensors, or a quantized GGUF");
  }
}

void check(const JsonFile& f, const ModelConfig& c) {
  auto bad = [&](const std::string& what) { f.fail(Errc::corrupt, what); };
  check_config_shape(c,
                     {{"num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads",
                       "head_dim", "intermediate_size", "vocab_size"},
                      "num_attention_heads", "num_key_value_heads", "head_dim"},
                     bad);
  if (!(c.rope_base > 0.0f) || !std::isfinite(c.rope_base)) bad("rope_theta must be positive");
  if (!(c.rms_eps > 0.0f)) bad("rms_norm_eps must be positive");
  if (!c.max_context) bad("max_position_embeddings must be positive");
}

}  // namespace

ModelConfig hf_config_from_json(const JsonFile& f) {
  std::optional<std::string> model_type = f.opt_string("model_type");
  std::string archs;
  if (const nlohmann::json* a = f.member("architectures"); a && a->is_array())
    for (const nlohmann::json& s : *a)
      if (s.is_string()) archs += (archs.empty() ? "" : ", ") + s.get<std::string>();
  const HfArch* arch = nullptr;
  for (const HfArch& h : kArchs)
    if (model_type && *model_type == h.model_type) arch = &h;
  if (!arch)
    f.fail(model_type ? Errc::unsupported : Errc::corrupt,
           (model_type ? "model_type '" + *model_type + "'" : std::string("no model_type")) +
               (archs.empty() ? "" : " (architectures: " + archs + ")") +
               " is not supported (supported: llama, mistral, qwen2)");
  if (!archs.empty() && archs.find("ForCausalLM") == std::string::npos)
    f.fail(Errc::unsupported, "architectures " + archs + " has no language-model head (expected *ForCausalLM)");
  refuse_unsupported(f, *model_type);

  ModelConfig c;
  c.arch = arch->arch;
  c.qkv_bias = arch->qkv_bias;
  c.n_layers = u32(f, "num_hidden_layers", f.get_uint("num_hidden_layers"));
  c.d_model = u32(f, "hidden_size", f.get_uint("hidden_size"));
  c.n_heads = u32(f, "num_attention_heads", f.get_uint("num_attention_heads"));
  c.n_kv_heads = u32(f, "num_key_value_heads", f.opt_uint("num_key_value_heads").value_or(c.n_heads));
  c.d_ffn = u32(f, "intermediate_size", f.get_uint("intermediate_size"));
  c.vocab_size = u32(f, "vocab_size", f.get_uint("vocab_size"));
  c.max_context = u32(f, "max_position_embeddings", f.get_uint("max_position_embeddings"));
  if (std::optional<uint64_t> hd = f.opt_uint("head_dim")) {
    c.head_dim = u32(f, "head_dim", *hd);
  } else {
    if (c.n_heads == 0 || c.d_model % c.n_heads != 0)
      f.fail(Errc::corrupt, "hidden_size " + std::to_string(c.d_model) + " is not a multiple of num_attention_heads " +
                                std::to_string(c.n_heads) + " and head_dim is absent");
    c.head_dim = c.d_model / c.n_heads;
  }
  c.rms_eps = float(f.opt_number("rms_norm_eps").value_or(1e-6));
  // LlamaConfig, MistralConfig and Qwen2Config all default to untied (transformers omits defaults
  // from older config.json files).
  c.tied_embeddings = f.opt_bool("tie_word_embeddings").value_or(false);
  read_rope(f, c);
  // Qwen2 applies its window only when use_sliding_window is set; Mistral whenever it is given.
  const bool windowed = c.arch == "mistral" || f.opt_bool("use_sliding_window").value_or(false);
  if (std::optional<uint64_t> w = f.opt_uint("sliding_window"); windowed && w && *w > 0 && *w < c.max_context)
    c.max_context = uint32_t(*w);
  check(f, c);
  return c;
}

}  // namespace kvzip::model::detail
