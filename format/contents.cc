// Checks on CacheContents before anything is written (validate), and the helpers that connect a
// header to a ModelConfig (set_model, check_shape). validate enforces exactly the invariants the
// reader enforces, so every file the writer produces opens.
#include <bit>
#include <cmath>
#include <set>

#include "common/hadamard.h"
#include "format/detail/dtype.h"
#include "format/detail/layout.h"
#include "format/detail/meta.h"
#include "format/detail/quant.h"
#include "format/format.h"

namespace kvzip::format {
namespace {

[[noreturn]] void invalid(const std::string& what) {
  throw Error(Errc::invalid_argument, "cannot write cache: " + what);
}

void check_string(const std::string& s, const char* field) {
  auto nul = s.find('\0');
  if (nul != std::string::npos)
    invalid(std::string(field) + " contains a NUL byte at offset " + std::to_string(nul) +
            "; the format stores strings without NUL");
}

void check_range(uint64_t v, uint64_t lo, uint64_t hi, const char* field) {
  if (v < lo || v > hi)
    invalid(std::string(field) + " = " + std::to_string(v) + " outside [" + std::to_string(lo) +
            ", " + std::to_string(hi) + "]");
}

void check_float(float f, const char* field) {
  if (!std::isfinite(f)) invalid(std::string(field) + " is not finite");
}

void validate_header(const CacheHeader& h) {
  using namespace detail;
  check_range(h.n_layers, 1, kMaxLayers, "n_layers");
  check_range(h.n_kv_heads, 1, kMaxKvHeads, "n_kv_heads");
  check_range(h.head_dim, 2, kMaxHeadDim, "head_dim");
  if (h.head_dim % 2) invalid("head_dim " + std::to_string(h.head_dim) + " is odd");
  if (h.rope_layout != RopeLayout::HalfSplit) invalid("rope_layout is not a registered id");
  if (!dtype_known(static_cast<uint32_t>(h.kv_dtype)))
    invalid("kv_dtype id " + std::to_string(static_cast<uint32_t>(h.kv_dtype)) +
            " is not registered");
  if (dtype_quantized(h.kv_dtype) && !(h.kv_group_size > 0 && h.head_dim % h.kv_group_size == 0))
    invalid("kv_group_size " + std::to_string(h.kv_group_size) + " must divide head_dim " +
            std::to_string(h.head_dim) + " for " + dtype_name(h.kv_dtype));
  if (h.kv_f16_below > 0 && !dtype_quantized(h.kv_dtype))
    invalid("kv_f16_below " + std::to_string(h.kv_f16_below) + " is set for " +
            dtype_name(h.kv_dtype) + " (f16 rows exist only with q8/q4)");
  if (dtype_quantized(h.kv_dtype) && !hadamard_size(h.head_dim))
    invalid(std::string(dtype_name(h.kv_dtype)) +
            " needs a power-of-two head_dim (its rows are stored "
            "Hadamard-rotated), not " +
            std::to_string(h.head_dim));
  if (h.kv_f16_below > h.logical_length())
    invalid("kv_f16_below " + std::to_string(h.kv_f16_below) + " exceeds the logical length " +
            std::to_string(h.logical_length()));
  check_range(static_cast<uint32_t>(h.rope_scaling.kind), 0, 2, "rope_scaling.kind");
  check_float(h.rope_base, "rope_base");
  if (!h.local_layers.empty()) {
    if (h.local_layers.size() != h.n_layers) invalid("local_layers must have one entry per layer");
    if (h.sliding_window == 0) invalid("sliding_window must be > 0 with local layers");
    check_float(h.rope_local_base, "rope_local_base");
    if (!(h.rope_local_base > 0)) invalid("rope_local_base must be > 0 with local layers");
  }
  if (!(h.rope_base > 0)) invalid("rope_base must be > 0");
  check_float(h.rope_scaling.factor, "rope_scaling.factor");
  check_float(h.rope_scaling.low_freq_factor, "rope_scaling.low_freq_factor");
  check_float(h.rope_scaling.high_freq_factor, "rope_scaling.high_freq_factor");
  check_range(h.logical_length(), 0, kMaxLogicalLength, "logical length");
  if (!(h.requested_ratio >= 0 && h.requested_ratio <= 1))
    invalid("requested_ratio outside [0, 1]");
  if (!(h.achieved_ratio >= 0 && h.achieved_ratio <= 1)) invalid("achieved_ratio outside [0, 1]");
  check_string(h.tool_version, "tool_version");
  check_string(h.model.arch, "model.arch");
  check_string(h.model.name, "model.name");
  check_string(h.document_text, "document_text");
  check_string(h.method, "method");
  std::set<std::string> names;
  for (const auto& [name, value] : h.params) {
    if (name.empty() || !valid_key(kParamPrefix + name))
      invalid("parameter name '" + name + "' must be 1.." +
              std::to_string(kMaxKeyLength - std::string(kParamPrefix).size()) +
              " bytes of [A-Za-z0-9_.-]");
    if (!names.insert(name).second) invalid("parameter '" + name + "' appears twice");
    check_string(value, "a parameter value");
  }
}

// The reader refuses NaN and infinite K/V values (Errc::corrupt), so none may be written: neither
// one computed in f32 nor one that the storage dtype rounds to infinity (f16 above 65504).
void check_kv_values(const CacheHeader& h, const LayerKv& layer, const std::string& at) {
  const float limit = h.kv_dtype == DType::F16    ? 65520.0f  // the f16 rounding boundary to inf
                      : h.kv_dtype == DType::BF16 ? std::bit_cast<float>(0x7f7f8000u)
                                                  : INFINITY;
  for (const std::vector<float>* x : {&layer.k, &layer.v}) {
    size_t j = 0;
    while (j < x->size() && std::fabs((*x)[j]) < limit) ++j;  // false for NaN as well
    if (j == x->size()) continue;
    const uint64_t row = j / h.head_dim;
    uint32_t head = 0;
    uint64_t first = 0;
    while (head + 1 < h.n_kv_heads && row >= first + layer.head_rows[head])
      first += layer.head_rows[head++];
    const float f = (*x)[j];
    invalid(at + " head " + std::to_string(head) + " row " + std::to_string(row - first) + ": " +
            (x == &layer.k ? "key" : "value") + " " +
            (std::isfinite(f)
                 ? std::to_string(f) + " does not fit " + dtype_name(h.kv_dtype) +
                       " (it would become infinite); write with a wider dtype (bf16 or f32)"
                 : std::string(std::isnan(f) ? "NaN" : "infinity") +
                       " is not a value a cache may hold; the model computed it"));
  }
}

void validate_layer(const CacheContents& c, uint32_t l) {
  const CacheHeader& h = c.header;
  const LayerKv& layer = c.layers[l];
  std::string at = "layers[" + std::to_string(l) + "]";
  if (layer.head_rows.size() != h.n_kv_heads)
    invalid(at + ".head_rows has " + std::to_string(layer.head_rows.size()) +
            " entries, n_kv_heads is " + std::to_string(h.n_kv_heads));
  uint64_t rows = 0;
  for (uint32_t n : layer.head_rows) rows += n;
  if (layer.positions.size() != rows)
    invalid(at + ".positions has " + std::to_string(layer.positions.size()) +
            " entries, head_rows sum to " + std::to_string(rows));
  if (layer.k.size() != rows * h.head_dim || layer.v.size() != rows * h.head_dim)
    invalid(at + ".k/.v must hold rows * head_dim = " + std::to_string(rows * h.head_dim) +
            " floats, hold " + std::to_string(layer.k.size()) + " / " +
            std::to_string(layer.v.size()));
  size_t want_scores = c.has_scores ? rows : 0;
  if (layer.scores.size() != want_scores)
    invalid(at + ".scores has " + std::to_string(layer.scores.size()) + " entries, expected " +
            std::to_string(want_scores) + " (every layer has scores, or none)");
  uint64_t row = 0;
  for (uint32_t head = 0; head < h.n_kv_heads; ++head) {
    for (uint32_t i = 0; i < layer.head_rows[head]; ++i, ++row) {
      uint32_t p = layer.positions[row];
      if (p >= h.logical_length())
        invalid(at + " head " + std::to_string(head) + ": position " + std::to_string(p) +
                " >= logical length " + std::to_string(h.logical_length()));
      if (i > 0 && p <= layer.positions[row - 1])
        invalid(at + " head " + std::to_string(head) +
                ": positions not strictly increasing at row " + std::to_string(i));
      if (!layer.scores.empty() && std::isnan(layer.scores[row]))
        invalid(at + ".scores[" + std::to_string(row) + "] is NaN");
    }
  }
  check_kv_values(h, layer, at);
  if (dtype_quantized(h.kv_dtype)) detail::validate_quant(h, layer, at);
}

}  // namespace

void validate(const CacheContents& c) {
  validate_header(c.header);
  if (c.layers.size() != c.header.n_layers)
    invalid("layers has " + std::to_string(c.layers.size()) + " entries, n_layers is " +
            std::to_string(c.header.n_layers));
  for (uint32_t l = 0; l < c.header.n_layers; ++l) validate_layer(c, l);
}

void set_model(CacheHeader& h, const ModelConfig& config, const ModelFingerprint& fp) {
  h.model = fp;
  h.n_layers = config.n_layers;
  h.n_kv_heads = config.n_kv_heads;
  h.head_dim = config.head_dim;
  h.rope_layout = RopeLayout::HalfSplit;
  h.rope_base = config.rope_base;
  h.rope_scaling = config.rope_scaling;
  h.local_layers.clear();
  h.sliding_window = 0;
  h.rope_local_base = 0.0f;
  if (config.hybrid()) {
    h.local_layers = config.local_layers;
    h.sliding_window = config.sliding_window;
    h.rope_local_base = config.rope_local_base;
  }
}

void check_shape(const CacheHeader& h, const ModelConfig& c) {
  auto mismatch = [&](const char* field, const std::string& file, const std::string& model) {
    throw Error(Errc::model_mismatch, std::string("cache ") + field + " is " + file +
                                          " but the model's is " + model +
                                          "; the cache was computed by a different model");
  };
  if (h.n_layers != c.n_layers)
    mismatch("n_layers", std::to_string(h.n_layers), std::to_string(c.n_layers));
  if (h.n_kv_heads != c.n_kv_heads)
    mismatch("n_kv_heads", std::to_string(h.n_kv_heads), std::to_string(c.n_kv_heads));
  if (h.head_dim != c.head_dim)
    mismatch("head_dim", std::to_string(h.head_dim), std::to_string(c.head_dim));
  if (h.rope_base != c.rope_base)
    mismatch("rope_base", std::to_string(h.rope_base), std::to_string(c.rope_base));
  const RopeScaling &a = h.rope_scaling, &b = c.rope_scaling;
  if (a.kind != b.kind || a.factor != b.factor || a.low_freq_factor != b.low_freq_factor ||
      a.high_freq_factor != b.high_freq_factor || a.original_context != b.original_context)
    mismatch(
        "rope_scaling", "kind " + std::to_string(static_cast<uint32_t>(a.kind)),
        "kind " + std::to_string(static_cast<uint32_t>(b.kind)) + " (or other scaling fields)");
  auto locals = [](const std::vector<uint8_t>& v) {
    std::string out;
    for (size_t l = 0; l < v.size(); ++l)
      if (v[l]) {
        if (!out.empty()) out += ',';
        out += std::to_string(l);
      }
    return out.empty() ? std::string("none") : out;
  };
  const std::vector<uint8_t> model_local = c.hybrid() ? c.local_layers : std::vector<uint8_t>{};
  if (locals(h.local_layers) != locals(model_local))
    mismatch("local (sliding-window) layers", locals(h.local_layers), locals(model_local));
  if (!model_local.empty() &&
      (h.sliding_window != c.sliding_window || h.rope_local_base != c.rope_local_base))
    mismatch("sliding window",
             std::to_string(h.sliding_window) + " (local rope base " +
                 std::to_string(h.rope_local_base) + ")",
             std::to_string(c.sliding_window) + " (local rope base " +
                 std::to_string(c.rope_local_base) + ")");
}

}  // namespace kvzip::format
