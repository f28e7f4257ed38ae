// config.json -> ModelConfig for the Llama family as transformers writes it. Both spellings of the
// RoPE settings are read: the classic top-level "rope_theta" + "rope_scaling" (what Meta, Qwen and
// Mistral publish) and transformers 5's "rope_parameters" object. Mistral/Qwen2 sliding-window
// attention is not implemented, so a window shorter than the context caps max_context at the
// window: within it, full causal attention is exactly what the model computes.
#include <cmath>
#include <string>

#include "checkpoint/detail/config_check.h"
#include "checkpoint/detail/hf_json.h"

namespace kvzip::model::detail {
namespace {

struct HfArch {
  const char* model_type;
  const char* arch;  // kvzip / GGUF architecture name
  bool qkv_bias;
};
constexpr HfArch kArchs[] = {{"llama", "llama", false},
                             {"mistral", "mistral", false},
                             {"qwen2", "qwen2", true},
                             {"qwen3", "qwen3", false},
                             {"gemma3_text", "gemma3", false}};

uint32_t u32(const JsonFile& f, std::string_view key, uint64_t v) {
  if (v > UINT32_MAX)
    f.fail(Errc::corrupt,
           "key '" + std::string(key) + "' = " + std::to_string(v) + " is too large");
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
    f.fail(Errc::unsupported,
           "partial_rotary_factor = " + std::to_string(*prf) + " (partial RoPE) is not supported");
  if (!scaling) return;
  if (!scaling->is_object()) f.fail(Errc::corrupt, "key '" + where + "' is not an object");
  std::optional<std::string> type = f.opt_string("rope_type", scaling, where + ".rope_type");
  if (!type) type = f.opt_string("type", scaling, where + ".type");
  RopeScaling& rs = c.rope_scaling;
  auto number = [&](const char* key) {
    std::optional<double> v = f.opt_number(key, scaling, where + "." + key);
    if (!v)
      f.fail(Errc::corrupt, "rope type '" + *type + "' needs key '" + where + "." + key + "'");
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
    rs.original_context = u32(f, "original_max_position_embeddings",
                              f.get_uint("original_max_position_embeddings", scaling,
                                         where + ".original_max_position_embeddings"));
  } else {
    f.fail(Errc::unsupported, "key '" + where + ".rope_type' = '" + *type +
                                  "' is not supported (supported: default, linear, llama3)");
  }
  if (!(rs.factor > 0.0f))
    f.fail(Errc::corrupt, "key '" + where + ".factor' = " + std::to_string(rs.factor) +
                              ", expected a positive factor");
  if (rs.kind == RopeScalingKind::Llama3 &&
      (!(rs.low_freq_factor > 0.0f) || !(rs.high_freq_factor > rs.low_freq_factor) ||
       rs.original_context == 0))
    f.fail(Errc::corrupt,
           "llama3 rope scaling needs 0 < low_freq_factor < high_freq_factor and "
           "original_max_position_embeddings > 0");
}

// Theta and a default/linear scaling from one rope object (Gemma 3's per-layer-type parameters).
void read_rope_object(const JsonFile& f, const nlohmann::json& obj, const std::string& where,
                      float* theta, RopeScaling* rs) {
  if (auto t = f.opt_number("rope_theta", &obj, where + ".rope_theta")) *theta = float(*t);
  const std::string type =
      f.opt_string("rope_type", &obj, where + ".rope_type").value_or("default");
  if (type == "default") return;
  if (type != "linear" || !rs)
    f.fail(Errc::unsupported, "key '" + where + ".rope_type' = '" + type +
                                  "' is not supported here (" +
                                  (rs ? "default, linear" : "default") + ")");
  rs->kind = RopeScalingKind::Linear;
  rs->factor = float(f.opt_number("factor", &obj, where + ".factor").value_or(0.0));
  if (!(rs->factor > 0.0f)) f.fail(Errc::corrupt, "key '" + where + ".factor' must be positive");
}

// Gemma 3: GeGLU, QK-norm, post-norms, sqrt(E) embeddings, query_pre_attn_scalar, and local
// (sliding-window) layers from layer_types, or from the older sliding_window_pattern (every
// pattern-th layer global). RoPE: transformers 5's rope_parameters per layer type, or the classic
// rope_theta + rope_scaling (global) and rope_local_base_freq (local).
void read_gemma3(const JsonFile& f, ModelConfig& c) {
  if (auto act = f.opt_string("hidden_activation");
      act && *act != "gelu_pytorch_tanh" && *act != "gelu_tanh")
    f.fail(Errc::unsupported,
           "hidden_activation = '" + *act + "' is not supported (Gemma 3: gelu_pytorch_tanh)");
  for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping"})
    if (f.opt_number(key))
      f.fail(Errc::unsupported, std::string(key) + " is set; logit soft-capping is not supported");
  if (f.opt_bool("use_bidirectional_attention").value_or(false))
    f.fail(Errc::unsupported,
           "use_bidirectional_attention = true is not supported (kvzip is causal)");
  c.qk_norm = true;
  c.post_norms = true;
  c.ffn_act = FfnActivation::GeluTanh;
  c.embed_scale = std::sqrt(float(c.d_model));
  c.query_scale =
      float(1.0 / std::sqrt(f.opt_number("query_pre_attn_scalar").value_or(c.head_dim)));
  c.tied_embeddings = f.opt_bool("tie_word_embeddings").value_or(true);
  c.sliding_window = u32(f, "sliding_window", f.get_uint("sliding_window"));
  c.local_layers.assign(c.n_layers, 0);
  if (const nlohmann::json* types = f.member("layer_types")) {
    if (!types->is_array() || types->size() != c.n_layers)
      f.fail(Errc::corrupt,
             "layer_types must list one type per layer (" + std::to_string(c.n_layers) + ")");
    for (uint32_t l = 0; l < c.n_layers; ++l) {
      const nlohmann::json& t = (*types)[l];
      if (!t.is_string() || (t != "sliding_attention" && t != "full_attention"))
        f.fail(Errc::unsupported, "layer_types[" + std::to_string(l) + "] = " + t.dump() +
                                      " (expected sliding_attention or full_attention)");
      c.local_layers[l] = t == "sliding_attention";
    }
  } else {
    uint64_t pattern = f.opt_uint("sliding_window_pattern")
                           .value_or(f.opt_uint("_sliding_window_pattern").value_or(6));
    if (pattern == 0) f.fail(Errc::corrupt, "sliding_window_pattern is 0");
    for (uint32_t l = 0; l < c.n_layers; ++l) c.local_layers[l] = (l + 1) % pattern != 0;
  }
  const nlohmann::json* params = f.member("rope_parameters");
  if (params && params->is_object() && params->contains("full_attention")) {
    c.rope_base = 10000.0f;
    read_rope_object(f, params->at("full_attention"), "rope_parameters.full_attention",
                     &c.rope_base, &c.rope_scaling);
    c.rope_local_base = 10000.0f;
    if (params->contains("sliding_attention"))
      read_rope_object(f, params->at("sliding_attention"), "rope_parameters.sliding_attention",
                       &c.rope_local_base, nullptr);
  } else {
    c.rope_local_base = float(f.opt_number("rope_local_base_freq").value_or(10000.0));
  }
  if (c.sliding_window == 0) f.fail(Errc::corrupt, "sliding_window is 0");
}

// Options of the Llama-family classes that change the computation and kvzip does not implement.
void refuse_unsupported(const JsonFile& f, const std::string& model_type) {
  if (auto act = f.opt_string("hidden_act"); act && *act != "silu")
    f.fail(Errc::unsupported,
           "hidden_act = '" + *act + "' is not supported (kvzip implements SwiGLU with silu)");
  if (f.opt_bool("attention_bias").value_or(false))
    f.fail(Errc::unsupported,
           "attention_bias = true (biases on q/k/v and o_proj) is not supported for " + model_type);
  if (f.opt_bool("mlp_bias").value_or(false))
    f.fail(Errc::unsupported, "mlp_bias = true is not supported");
  if (const nlohmann::json* q = f.member("quantization_config")) {
    std::string method =
        q->is_object() && q->contains("quant_method") ? q->at("quant_method").dump() : "?";
    f.fail(Errc::unsupported,
           "the checkpoint is quantized (quantization_config.quant_method " + method +
               "); kvzip reads F32, F16 and BF16 safetensors, or a quantized GGUF");
  }
}

void check(const JsonFile& f, const ModelConfig& c) {
  auto bad = [&](const std::string& what) { f.fail(Errc::corrupt, what); };
  check_config_shape(c,
                     {{"num_hidden_layers", "hidden_size", "num_attention_heads",
                       "num_key_value_heads", "head_dim", "intermediate_size", "vocab_size"},
                      "num_attention_heads",
                      "num_key_value_heads",
                      "head_dim"},
                     bad);
  if (!(c.rope_base > 0.0f) || !std::isfinite(c.rope_base)) bad("rope_theta must be positive");
  if (!(c.rms_eps > 0.0f)) bad("rms_norm_eps must be positive");
  if (!c.max_context) bad("max_position_embeddings must be positive");
}

}  // namespace

ModelConfig hf_config_from_json(const JsonFile& top) {
  // Gemma3ForConditionalGeneration: the language model's config is text_config.
  const bool multimodal = top.opt_string("model_type").value_or("") == "gemma3";
  const JsonFile nested = multimodal ? top.nested("text_config") : JsonFile();
  const JsonFile& f = multimodal ? nested : top;
  std::optional<std::string> model_type =
      multimodal ? std::optional<std::string>("gemma3_text") : f.opt_string("model_type");
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
               " is not supported (supported: llama, mistral, qwen2, qwen3, gemma3_text, gemma3)");
  if (!archs.empty() && archs.find("ForCausalLM") == std::string::npos && !multimodal)
    f.fail(Errc::unsupported,
           "architectures " + archs + " has no language-model head (expected *ForCausalLM)");
  refuse_unsupported(f, *model_type);

  ModelConfig c;
  c.arch = arch->arch;
  c.qkv_bias = arch->qkv_bias;
  c.n_layers = u32(f, "num_hidden_layers", f.get_uint("num_hidden_layers"));
  c.d_model = u32(f, "hidden_size", f.get_uint("hidden_size"));
  c.n_heads = u32(f, "num_attention_heads", f.get_uint("num_attention_heads"));
  c.n_kv_heads =
      u32(f, "num_key_value_heads", f.opt_uint("num_key_value_heads").value_or(c.n_heads));
  c.d_ffn = u32(f, "intermediate_size", f.get_uint("intermediate_size"));
  c.vocab_size = u32(f, "vocab_size", f.get_uint("vocab_size"));
  c.max_context = u32(f, "max_position_embeddings", f.get_uint("max_position_embeddings"));
  if (std::optional<uint64_t> hd = f.opt_uint("head_dim")) {
    c.head_dim = u32(f, "head_dim", *hd);
  } else {
    if (c.n_heads == 0 || c.d_model % c.n_heads != 0)
      f.fail(Errc::corrupt, "hidden_size " + std::to_string(c.d_model) +
                                " is not a multiple of num_attention_heads " +
                                std::to_string(c.n_heads) + " and head_dim is absent");
    c.head_dim = c.d_model / c.n_heads;
  }
  c.rms_eps = float(f.opt_number("rms_norm_eps").value_or(1e-6));
  // LlamaConfig, MistralConfig and Qwen2Config all default to untied (transformers omits defaults
  // from older config.json files).
  c.tied_embeddings = f.opt_bool("tie_word_embeddings").value_or(false);
  c.qk_norm = c.arch == "qwen3";
  read_rope(f, c);
  if (c.arch == "gemma3") read_gemma3(f, c);
  // Qwen2 applies its window only when use_sliding_window is set; Mistral whenever it is given.
  const bool windowed = c.arch == "mistral" ||
                        (c.arch != "gemma3" && f.opt_bool("use_sliding_window").value_or(false));
  if (std::optional<uint64_t> w = f.opt_uint("sliding_window");
      windowed && w && *w > 0 && *w < c.max_context)
    c.max_context = uint32_t(*w);
  check(f, c);
  return c;
}

}  // namespace kvzip::model::detail
