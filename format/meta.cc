// Meta section encoding and validation (spec "Meta section"). Entries are
//   Key_Length u64 | Key | Value_Type u32 | Value_Flags u32 (0) | Value_Size u64 | Value.
// Unknown keys are skipped (a newer minor version may add them); known keys must have their type
// and a value in range; no structural key has a default.
#include <cmath>
#include <cstring>
#include <map>

#include "common/hadamard.h"
#include "format/detail/dtype.h"
#include "format/detail/layout.h"
#include "format/detail/meta.h"

namespace kvzip::format::detail {
namespace {

// kv.dtype ids 4 … 9 are reserved: kvzip builds before format 1.0 wrote other quantized layouts
// under them, and refusing them is what keeps such a file from being misread.
constexpr uint64_t kReservedDtypeFirst = 4, kReservedDtypeLast = 9;

class MetaWriter {
 public:
  void u64(const std::string& key, uint64_t v) { entry(key, MetaType::U64, &v, 8); }
  void i64(const std::string& key, int64_t v) { entry(key, MetaType::I64, &v, 8); }
  void f64(const std::string& key, double v) { entry(key, MetaType::F64, &v, 8); }
  void str(const std::string& key, const std::string& v) {
    entry(key, MetaType::Str, v.data(), v.size());
  }
  void u32s(const std::string& key, const std::vector<uint32_t>& v) {
    entry(key, MetaType::U32Array, v.data(), v.size() * 4);
  }
  void raw(const std::string& key, MetaType type, const std::vector<uint8_t>& value) {
    entry(key, type, value.data(), value.size());
  }
  std::vector<uint8_t> finish() {  // Entry_Count goes into the 8 bytes reserved up front
    store_u64(body_.data(), count_);
    return std::move(body_);
  }

 private:
  void put_u64(uint64_t v) { put(&v, 8); }
  void put(const void* p, size_t n) {
    auto* b = static_cast<const uint8_t*>(p);
    body_.insert(body_.end(), b, b + n);
  }
  void entry(const std::string& key, MetaType type, const void* value, uint64_t size) {
    put_u64(key.size());
    put(key.data(), key.size());
    uint32_t t = static_cast<uint32_t>(type), flags = 0;
    put(&t, 4);
    put(&flags, 4);
    put_u64(size);
    if (size) put(value, size);
    ++count_;
  }
  std::vector<uint8_t> body_ = std::vector<uint8_t>(8, 0);
  uint64_t count_ = 0;
};

struct Value {
  MetaType type;
  const uint8_t* data;
  uint64_t size;
};

const char* type_name(MetaType t) {
  switch (t) {
    case MetaType::U64: return "u64";
    case MetaType::I64: return "i64";
    case MetaType::F64: return "f64";
    case MetaType::Str: return "string";
    case MetaType::U32Array: return "u32 array";
  }
  return "unknown";
}

// Parsed entries plus typed getters whose errors name the key.
class MetaReader {
 public:
  MetaReader(const uint8_t* data, uint64_t size, const std::string& where) : where_(where) {
    parse(data, size);
  }

  uint64_t u64(const char* key) { return scalar<uint64_t>(key, MetaType::U64); }
  int64_t i64(const char* key) { return scalar<int64_t>(key, MetaType::I64); }
  double f64(const char* key) { return scalar<double>(key, MetaType::F64); }
  std::string str(const char* key) {
    const Value& v = get(key, MetaType::Str);
    std::string s(reinterpret_cast<const char*>(v.data), v.size);
    if (s.find('\0') != std::string::npos)
      fail(key, "string contains a NUL byte at " + std::to_string(s.find('\0')) +
                    "; strings MUST NOT contain NUL");
    return s;
  }
  std::vector<uint32_t> u32s(const char* key) {
    const Value& v = get(key, MetaType::U32Array);
    std::vector<uint32_t> out(v.size / 4);
    if (!out.empty()) std::memcpy(out.data(), v.data, v.size);
    return out;
  }
  float f32(const char* key) {
    double d = f64(key);
    if (!std::isfinite(d) || static_cast<double>(static_cast<float>(d)) != d)
      fail(key, "value " + std::to_string(d) + " is not a finite binary32 value");
    return static_cast<float>(d);
  }
  uint64_t range(const char* key, uint64_t lo, uint64_t hi) {
    uint64_t v = u64(key);
    if (v < lo || v > hi)
      fail(key, "value " + std::to_string(v) + " outside [" + std::to_string(lo) + ", " +
                    std::to_string(hi) + "]");
    return v;
  }
  bool has(const char* key) const { return entries_.count(key) != 0; }
  double ratio(const char* key) {
    double d = f64(key);
    if (!(d >= 0.0 && d <= 1.0)) fail(key, "value " + std::to_string(d) + " outside [0, 1]");
    return d;
  }
  // Params in file order: (name, value) for every kvzip.compress.param.* key.
  std::vector<std::pair<std::string, std::string>> params() {
    std::vector<std::pair<std::string, std::string>> out;
    for (const std::string& key : order_) {
      if (key.rfind(kParamPrefix, 0) != 0) continue;
      std::string name = key.substr(std::strlen(kParamPrefix));
      if (name.empty()) fail(key.c_str(), "parameter name is empty");
      out.emplace_back(name, str(key.c_str()));
    }
    return out;
  }
  std::vector<MetaEntry> in_order() const {
    std::vector<MetaEntry> out;
    for (const std::string& key : order_) {
      const Value& v = entries_.at(key);
      out.push_back({key, v.type, std::vector<uint8_t>(v.data, v.data + v.size)});
    }
    return out;
  }
  [[noreturn]] void fail(const char* key, const std::string& what, Errc code = Errc::corrupt) {
    throw Error(code, where_ + ": meta key '" + key + "': " + what);
  }

 private:
  template <class T>
  T scalar(const char* key, MetaType type) {
    const Value& v = get(key, type);
    T out;
    std::memcpy(&out, v.data, 8);
    return out;
  }
  const Value& get(const char* key, MetaType type) {
    auto it = entries_.find(key);
    if (it == entries_.end())
      throw Error(Errc::corrupt, where_ + ": required meta key '" + key +
                                     "' is missing (v1 has no defaults for it)");
    if (it->second.type != type)
      fail(key,
           std::string("has type ") + type_name(it->second.type) + ", expected " + type_name(type));
    return it->second;
  }
  void parse(const uint8_t* data, uint64_t size);
  [[noreturn]] void bad(uint64_t at, const std::string& what) {
    throw Error(Errc::corrupt, where_ + ": at byte " + std::to_string(at) + ": " + what);
  }

  std::string where_;
  std::map<std::string, Value> entries_;
  std::vector<std::string> order_;
};

void MetaReader::parse(const uint8_t* data, uint64_t size) {
  if (size < 8) bad(0, "Entry_Count needs 8 bytes, section has " + std::to_string(size));
  uint64_t count = load_u64(data);
  if (count > kMaxMetaEntries)
    bad(0, "Entry_Count " + std::to_string(count) + " exceeds the reader limit " +
               std::to_string(kMaxMetaEntries));
  uint64_t at = 8;
  auto need = [&](uint64_t n, const char* field) {
    if (n > size - at)
      bad(at, std::string(field) + " needs " + std::to_string(n) + " bytes, only " +
                  std::to_string(size - at) + " remain in the section");
  };
  for (uint64_t i = 0; i < count; ++i) {
    need(8, "Key_Length");
    uint64_t klen = load_u64(data + at);
    if (klen == 0 || klen > kMaxKeyLength)
      bad(at, "Key_Length " + std::to_string(klen) + " outside [1, 255]");
    at += 8;
    need(klen, "Key");
    std::string key(reinterpret_cast<const char*>(data + at), klen);
    if (!valid_key(key)) bad(at, "key '" + key + "' has a byte outside [A-Za-z0-9_.-]");
    at += klen;
    need(16, "Value_Type/Value_Flags/Value_Size");
    uint32_t type = load_u32(data + at), flags = load_u32(data + at + 4);
    uint64_t vsize = load_u64(data + at + 8);
    if (flags != 0)
      bad(at + 4,
          "Value_Flags of key '" + key + "' is " + std::to_string(flags) + "; reserved, MUST be 0");
    at += 16;
    need(vsize, "Value");
    bool scalar = type >= 1 && type <= 3;
    if (scalar && vsize != 8)
      bad(at, "key '" + key + "': Value_Size " + std::to_string(vsize) + ", scalar needs 8");
    if (type == static_cast<uint32_t>(MetaType::U32Array) && vsize % 4 != 0)
      bad(at, "key '" + key + "': u32 array Value_Size " + std::to_string(vsize) +
                  " is not a multiple of 4");
    if (!entries_.emplace(key, Value{static_cast<MetaType>(type), data + at, vsize}).second)
      bad(at, "duplicate key '" + key + "'");
    order_.push_back(key);
    at += vsize;
  }
  if (at != size)
    bad(at, std::to_string(size - at) + " bytes follow the last entry; the section must end there");
}

}  // namespace

bool valid_key(const std::string& key) {
  if (key.empty() || key.size() > kMaxKeyLength) return false;
  for (char c : key) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::vector<MetaEntry> meta_entries(const uint8_t* data, uint64_t size, const std::string& where) {
  return MetaReader(data, size, where).in_order();
}

std::vector<uint8_t> encode_meta_entries(const std::vector<MetaEntry>& entries) {
  MetaWriter w;
  for (const MetaEntry& e : entries) w.raw(e.key, e.type, e.value);
  return w.finish();
}

std::vector<uint8_t> encode_meta(const CacheHeader& h) {
  MetaWriter w;
  w.str("kvzip.tool_version", h.tool_version);
  w.i64("kvzip.created_unix", h.created_unix);
  w.str("model.arch", h.model.arch);
  w.str("model.name", h.model.name);
  w.u64("model.tokenizer_hash", h.model.tokenizer_hash);
  w.u64("model.weights_hash", h.model.weights_hash);
  w.u64("model.n_layers", h.n_layers);
  w.u64("model.n_kv_heads", h.n_kv_heads);
  w.u64("model.head_dim", h.head_dim);
  w.u64("model.rope_layout", static_cast<uint32_t>(h.rope_layout));
  w.f64("model.rope_base", h.rope_base);
  w.u64("model.rope_scaling.kind", static_cast<uint32_t>(h.rope_scaling.kind));
  w.f64("model.rope_scaling.factor", h.rope_scaling.factor);
  w.f64("model.rope_scaling.low_freq_factor", h.rope_scaling.low_freq_factor);
  w.f64("model.rope_scaling.high_freq_factor", h.rope_scaling.high_freq_factor);
  w.u64("model.rope_scaling.original_context", h.rope_scaling.original_context);
  if (!h.local_layers.empty()) {  // v1.1: hybrid attention (sliding-window layers)
    std::vector<uint32_t> local;
    for (uint32_t l = 0; l < h.local_layers.size(); ++l)
      if (h.local_layers[l]) local.push_back(l);
    w.u32s("model.local_layers", local);
    w.u64("model.sliding_window", h.sliding_window);
    w.f64("model.rope_local_base", h.rope_local_base);
  }
  w.u64("kv.dtype", static_cast<uint32_t>(h.kv_dtype));
  if (dtype_quantized(h.kv_dtype)) {
    w.u64("kv.quant.group_size", h.kv_group_size);
    w.u64("kv.quant.f16_below", h.kv_f16_below);
  }
  w.u64("kv.logical_length", h.logical_length());
  w.u64("kv.prefix_length", h.prefix_length());
  w.u32s("text.prefix_tokens", h.prefix_tokens);
  w.u32s("text.suffix_tokens", h.suffix_tokens);
  w.u32s("text.document_tokens", h.document_tokens);
  w.str("text.document", h.document_text);
  w.str("kvzip.compress.method", h.method);
  w.f64("kvzip.compress.requested_ratio", h.requested_ratio);
  w.f64("kvzip.compress.achieved_ratio", h.achieved_ratio);
  for (const auto& [name, value] : h.params) w.str(kParamPrefix + name, value);
  return w.finish();
}

namespace {

// The model.* keys: fingerprint, shape, RoPE and (v1.1) the local layers.
void decode_model_meta(MetaReader& m, CacheHeader& h) {
  h.model.arch = m.str("model.arch");
  h.model.name = m.str("model.name");
  h.model.tokenizer_hash = m.u64("model.tokenizer_hash");
  h.model.weights_hash = m.u64("model.weights_hash");
  h.n_layers = static_cast<uint32_t>(m.range("model.n_layers", 1, kMaxLayers));
  h.n_kv_heads = static_cast<uint32_t>(m.range("model.n_kv_heads", 1, kMaxKvHeads));
  h.head_dim = static_cast<uint32_t>(m.range("model.head_dim", 2, kMaxHeadDim));
  if (h.head_dim % 2 != 0)
    m.fail("model.head_dim", "value " + std::to_string(h.head_dim) + " is odd");
  uint64_t layout = m.u64("model.rope_layout");
  if (layout != static_cast<uint32_t>(RopeLayout::HalfSplit))
    m.fail("model.rope_layout",
           "id " + std::to_string(layout) + " unknown (registry: 1 = half-split)",
           Errc::unsupported);
  h.rope_base = m.f32("model.rope_base");
  if (!(h.rope_base > 0)) m.fail("model.rope_base", "must be > 0");
  uint64_t kind = m.u64("model.rope_scaling.kind");
  if (kind > 2)
    m.fail("model.rope_scaling.kind",
           "id " + std::to_string(kind) + " unknown (0 none, 1 linear, 2 llama3)",
           Errc::unsupported);
  h.rope_scaling.kind = static_cast<RopeScalingKind>(kind);
  h.rope_scaling.factor = m.f32("model.rope_scaling.factor");
  h.rope_scaling.low_freq_factor = m.f32("model.rope_scaling.low_freq_factor");
  h.rope_scaling.high_freq_factor = m.f32("model.rope_scaling.high_freq_factor");
  h.rope_scaling.original_context =
      static_cast<uint32_t>(m.range("model.rope_scaling.original_context", 0, 0xFFFFFFFFull));
  if (m.has("model.local_layers")) {  // v1.1: all three keys together
    h.local_layers.assign(h.n_layers, 0);
    for (uint32_t l : m.u32s("model.local_layers")) {
      if (l >= h.n_layers || h.local_layers[l])
        m.fail("model.local_layers",
               "layer " + std::to_string(l) + " is out of range or listed twice");
      h.local_layers[l] = 1;
    }
    h.sliding_window = static_cast<uint32_t>(m.range("model.sliding_window", 1, 0xFFFFFFFFull));
    h.rope_local_base = m.f32("model.rope_local_base");
    if (!(h.rope_local_base > 0)) m.fail("model.rope_local_base", "must be > 0");
  }
}

// The kv.* keys but the prefix length: the dtype and, for q8/q4, its layout. Returns
// kv.logical_length, checked against the text keys once they are read.
uint64_t decode_kv_meta(MetaReader& m, CacheHeader& h) {
  const uint64_t dtype = m.u64("kv.dtype");
  if (dtype >= kReservedDtypeFirst && dtype <= kReservedDtypeLast)
    m.fail("kv.dtype",
           "id " + std::to_string(dtype) +
               " is reserved (a quantized layout of kvzip builds before format 1.0, which this "
               "reader does not read); compress the document again",
           Errc::unsupported);
  if (!dtype_known(dtype > 0xFFFFFFFFull ? 0 : static_cast<uint32_t>(dtype)))
    m.fail("kv.dtype",
           "id " + std::to_string(dtype) +
               " is not in this reader's dtype registry (1 f32, 2 f16, 3 bf16, 10 q8, 11 q4); "
               "the file needs a newer kvzip",
           Errc::unsupported);
  h.kv_dtype = static_cast<DType>(dtype);
  uint64_t logical = m.range("kv.logical_length", 0, kMaxLogicalLength);
  if (dtype_quantized(h.kv_dtype)) {  // required with q8/q4, ignored otherwise
    if (!hadamard_size(h.head_dim))
      m.fail("model.head_dim", "value " + std::to_string(h.head_dim) +
                                   " is not a power of two, which " + dtype_name(h.kv_dtype) +
                                   " (Hadamard-rotated rows) needs");
    h.kv_group_size = static_cast<uint32_t>(m.range("kv.quant.group_size", 1, h.head_dim));
    if (h.head_dim % h.kv_group_size != 0)
      m.fail("kv.quant.group_size", "value " + std::to_string(h.kv_group_size) +
                                        " does not divide head_dim " + std::to_string(h.head_dim));
    h.kv_f16_below = static_cast<uint32_t>(m.range("kv.quant.f16_below", 0, logical));
  }
  return logical;
}

}  // namespace

CacheHeader decode_meta(const uint8_t* data, uint64_t size, const std::string& where) {
  MetaReader m(data, size, where);
  CacheHeader h;
  h.tool_version = m.str("kvzip.tool_version");
  h.created_unix = m.i64("kvzip.created_unix");
  decode_model_meta(m, h);
  const uint64_t logical = decode_kv_meta(m, h);
  uint64_t prefix = m.u64("kv.prefix_length");
  h.prefix_tokens = m.u32s("text.prefix_tokens");
  h.suffix_tokens = m.u32s("text.suffix_tokens");
  h.document_tokens = m.u32s("text.document_tokens");
  if (prefix != h.prefix_tokens.size())
    m.fail("kv.prefix_length", "value " + std::to_string(prefix) + " differs from the " +
                                   std::to_string(h.prefix_tokens.size()) + " prefix tokens");
  if (logical != h.logical_length())
    m.fail("kv.logical_length",
           "value " + std::to_string(logical) +
               " differs from prefix + document tokens = " + std::to_string(h.logical_length()));
  h.document_text = m.str("text.document");
  h.method = m.str("kvzip.compress.method");
  h.requested_ratio = m.ratio("kvzip.compress.requested_ratio");
  h.achieved_ratio = m.ratio("kvzip.compress.achieved_ratio");
  h.params = m.params();
  return h;
}

}  // namespace kvzip::format::detail
