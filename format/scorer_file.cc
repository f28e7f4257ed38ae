// Learned-scorer file v1 (format/scorer_file.h; spec/scorer_format.md). Layout, little-endian,
// no padding:
//   0 Magic[8] 89 'K' 'V' 'P' 0D 0A 1A 0A | 8 Major u16 | 10 Minor u16 | 12 Header_Size u32 (96)
//   16 L u32 | 20 Hkv u32 | 24 E u32 | 28 Target u32 | 32 Tokenizer_Hash u64 | 40 Weights_Hash u64
//   48 Window u32 | 52 Train_Windows u32 | 56 Heldout_Windows u32 | 60 Arch_Length u32
//   64 Train_Tokens u64 | 72 Heldout_Tokens u64 | 80 Alpha f64 | 88 Name_Length u32
//   92 Source_Length u32 | Header_Size: Arch | Name | Source bytes, (L) f32 R², (L) f32 Spearman,
//   (L, Hkv, E + 1) f32 coefficients, then xxh64 u64 of every byte before it.
#include "format/scorer_file.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/atomic_file.h"
#include "format/detail/codec.h"
#include "format/detail/escape.h"
#include "format/detail/layout.h"
#include "format/detail/small_file.h"

namespace kvzip::format {
namespace {

inline constexpr uint8_t kScorerMagic[8] = {0x89, 'K', 'V', 'P', 0x0D, 0x0A, 0x1A, 0x0A};
inline constexpr uint32_t kFixedHeader = 96;
inline constexpr uint32_t kMaxHeader = 4096;   // room for later minor versions' fields
inline constexpr uint32_t kMaxString = 65536;  // arch, name, source
inline constexpr uint32_t kMaxDim = 1024;      // L and Hkv, as .kvz's reader limits
inline constexpr uint32_t kMaxFeatures = 65536;
inline constexpr uint64_t kMaxFileBytes = 1ull << 30;

using detail::load_u16;
using detail::load_u32;
using detail::load_u64;

void put(std::vector<uint8_t>& out, const void* p, size_t n) {
  const size_t at = out.size();
  out.resize(at + n);
  if (n > 0) std::memcpy(out.data() + at, p, n);
}
template <class T>
void put_le(std::vector<uint8_t>& out, T v) {
  put(out, &v, sizeof v);
}

[[noreturn]] void bad(const std::string& what) {
  throw Error(Errc::invalid_argument, "scorer file: " + what);
}
[[noreturn]] void fail(Errc code, const std::string& where, const std::string& what) {
  throw Error(code, where + ": " + what);
}

void check_string(const std::string& s, const char* field) {
  if (s.find('\0') != std::string::npos) bad(std::string(field) + " contains a NUL byte");
  if (s.size() > kMaxString)
    bad(std::string(field) + " is " + std::to_string(s.size()) + " bytes; at most " +
        std::to_string(kMaxString) + " fit the file");
}

bool dims_ok(uint32_t L, uint32_t H, uint32_t E) {
  return L >= 1 && L <= kMaxDim && H >= 1 && H <= kMaxDim && E >= 1 && E <= kMaxFeatures;
}

std::string num(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

}  // namespace

const char* scorer_target_name(ScorerTarget t) {
  return t == ScorerTarget::Kvzip ? "kvzip" : "kvzip+";
}

void validate(const ScorerFile& s) {
  if (!dims_ok(s.n_layers, s.n_kv_heads, s.d_model))
    bad("L = " + std::to_string(s.n_layers) + ", Hkv = " + std::to_string(s.n_kv_heads) +
        ", E = " + std::to_string(s.d_model) + " outside 1.." + std::to_string(kMaxDim) +
        " (E: 1.." + std::to_string(kMaxFeatures) + ")");
  if (s.target != ScorerTarget::Kvzip && s.target != ScorerTarget::KvzipPlus)
    bad("unknown target " + std::to_string(static_cast<uint32_t>(s.target)));
  const size_t n_w = size_t(s.n_layers) * s.n_kv_heads * (size_t(s.d_model) + 1);
  if (s.weights.size() != n_w)
    bad(std::to_string(s.weights.size()) +
        " coefficients for L·Hkv·(E + 1) = " + std::to_string(n_w));
  if (s.r2.size() != s.n_layers || s.spearman.size() != s.n_layers)
    bad("fit quality needs one R² and one Spearman value per layer (" + std::to_string(s.n_layers) +
        ")");
  for (size_t i = 0; i < n_w; ++i)
    if (!std::isfinite(s.weights[i])) bad("coefficient " + std::to_string(i) + " is not finite");
  for (uint32_t l = 0; l < s.n_layers; ++l)
    if (std::isinf(s.r2[l]) || std::isinf(s.spearman[l]))
      bad("fit quality of layer " + std::to_string(l) + " is infinite");
  if (!std::isfinite(s.alpha) || s.alpha < 0) bad("ridge alpha must be finite and >= 0");
  if (s.model.arch.empty()) bad("the model fingerprint has no architecture");
  check_string(s.model.arch, "arch");
  check_string(s.model.name, "model name");
  check_string(s.source, "source");
}

std::vector<uint8_t> encode_scorer_file(ScorerFile& s) {
  validate(s);
  std::vector<uint8_t> out;
  out.reserve(kFixedHeader + s.model.arch.size() + s.model.name.size() + s.source.size() +
              4 * (2 * s.r2.size() + s.weights.size()) + 8);
  put(out, kScorerMagic, 8);
  put_le<uint16_t>(out, kScorerFileVersionMajor);
  put_le<uint16_t>(out, kScorerFileVersionMinor);
  put_le<uint32_t>(out, kFixedHeader);
  put_le<uint32_t>(out, s.n_layers);
  put_le<uint32_t>(out, s.n_kv_heads);
  put_le<uint32_t>(out, s.d_model);
  put_le<uint32_t>(out, static_cast<uint32_t>(s.target));
  put_le<uint64_t>(out, s.model.tokenizer_hash);
  put_le<uint64_t>(out, s.model.weights_hash);
  put_le<uint32_t>(out, s.window);
  put_le<uint32_t>(out, s.train_windows);
  put_le<uint32_t>(out, s.heldout_windows);
  put_le<uint32_t>(out, static_cast<uint32_t>(s.model.arch.size()));
  put_le<uint64_t>(out, s.train_tokens);
  put_le<uint64_t>(out, s.heldout_tokens);
  put_le<double>(out, s.alpha);
  put_le<uint32_t>(out, static_cast<uint32_t>(s.model.name.size()));
  put_le<uint32_t>(out, static_cast<uint32_t>(s.source.size()));
  KVZIP_ASSERT(out.size() == kFixedHeader);
  put(out, s.model.arch.data(), s.model.arch.size());
  put(out, s.model.name.data(), s.model.name.size());
  put(out, s.source.data(), s.source.size());
  put(out, s.r2.data(), 4 * s.r2.size());
  put(out, s.spearman.data(), 4 * s.spearman.size());
  put(out, s.weights.data(), 4 * s.weights.size());
  s.checksum = detail::xxh64(out.data(), out.size());
  put_le<uint64_t>(out, s.checksum);
  return out;
}

namespace {

// The 16-byte preamble (magic, version, Header_Size) against the file's size; returns Header_Size.
uint32_t read_preamble(std::span<const uint8_t> b, const std::string& where) {
  const uint64_t size = b.size();
  if (size == 0) fail(Errc::truncated, where, "file is empty");
  if (std::memcmp(b.data(), kScorerMagic, std::min<size_t>(size, 8)) != 0)
    fail(Errc::bad_magic, where,
         "not a kvzip scorer file (magic bytes differ; expected "
         "89 4B 56 50 0D 0A 1A 0A, as the scorer calibration writes)");
  if (size < 16)
    fail(Errc::truncated, where,
         "file is " + std::to_string(size) + " bytes, shorter than the 16-byte preamble");
  const uint16_t major = load_u16(b.data() + 8), minor = load_u16(b.data() + 10);
  if (major != kScorerFileVersionMajor)
    fail(Errc::version_unsupported, where,
         "scorer file version " + std::to_string(major) + "." + std::to_string(minor) +
             "; this build reads version 1.x — use a newer kvzip or calibrate again");
  const uint32_t header = load_u32(b.data() + 12);
  if (header < kFixedHeader || header > kMaxHeader)
    fail(Errc::corrupt, where,
         "Header_Size " + std::to_string(header) + " outside " + std::to_string(kFixedHeader) +
             ".." + std::to_string(kMaxHeader));
  if (size < header)
    fail(Errc::truncated, where,
         "file is " + std::to_string(size) + " bytes, shorter than its " + std::to_string(header) +
             "-byte header");
  return header;
}

struct StringLengths {
  uint32_t arch, name, source;
};

// The fixed header's fields into s, each checked; returns the lengths of the strings after it.
StringLengths read_fixed_header(const uint8_t* p, ScorerFile& s, const std::string& where) {
  s.n_layers = load_u32(p + 16);
  s.n_kv_heads = load_u32(p + 20);
  s.d_model = load_u32(p + 24);
  const uint32_t target = load_u32(p + 28);
  s.model.tokenizer_hash = load_u64(p + 32);
  s.model.weights_hash = load_u64(p + 40);
  s.window = load_u32(p + 48);
  s.train_windows = load_u32(p + 52);
  s.heldout_windows = load_u32(p + 56);
  const uint32_t arch_len = load_u32(p + 60);
  s.train_tokens = load_u64(p + 64);
  s.heldout_tokens = load_u64(p + 72);
  std::memcpy(&s.alpha, p + 80, 8);
  const uint32_t name_len = load_u32(p + 88), source_len = load_u32(p + 92);
  if (!dims_ok(s.n_layers, s.n_kv_heads, s.d_model))
    fail(Errc::corrupt, where,
         "L = " + std::to_string(s.n_layers) + ", Hkv = " + std::to_string(s.n_kv_heads) +
             ", E = " + std::to_string(s.d_model) + "; L and Hkv must be in 1.." +
             std::to_string(kMaxDim) + ", E in 1.." + std::to_string(kMaxFeatures));
  if (target > static_cast<uint32_t>(ScorerTarget::KvzipPlus))
    fail(Errc::corrupt, where, "unknown target " + std::to_string(target) + " (0 kvzip, 1 kvzip+)");
  s.target = static_cast<ScorerTarget>(target);
  if (!std::isfinite(s.alpha) || s.alpha < 0)
    fail(Errc::corrupt, where, "ridge alpha " + num("%g", s.alpha) + " is not a finite value >= 0");
  if (arch_len == 0 || arch_len > kMaxString || name_len > kMaxString || source_len > kMaxString)
    fail(Errc::corrupt, where,
         "string lengths arch " + std::to_string(arch_len) + ", name " + std::to_string(name_len) +
             ", source " + std::to_string(source_len) + "; arch must be 1.." +
             std::to_string(kMaxString) + " bytes, the others at most that");
  return {arch_len, name_len, source_len};
}

// The strings, fit quality and coefficients after the header (their extent already checked).
void read_body(const uint8_t* p, uint64_t header, const StringLengths& n, ScorerFile& s,
               const std::string& where) {
  const uint32_t arch_len = n.arch, name_len = n.name, source_len = n.source;
  const uint64_t n_w = uint64_t(s.n_layers) * s.n_kv_heads * (uint64_t(s.d_model) + 1);
  const uint64_t fit_at = header + arch_len + name_len + source_len;
  const uint64_t weights_at = fit_at + 8ull * s.n_layers;
  auto str = [&](uint64_t at, uint32_t len, const char* field) {
    std::string v(reinterpret_cast<const char*>(p + at), len);
    if (v.find('\0') != std::string::npos)
      fail(Errc::corrupt, where, std::string(field) + " string contains a NUL byte");
    return v;
  };
  s.model.arch = str(header, arch_len, "arch");
  s.model.name = str(uint64_t(header) + arch_len, name_len, "model name");
  s.source = str(uint64_t(header) + arch_len + name_len, source_len, "source");
  s.r2.resize(s.n_layers);
  s.spearman.resize(s.n_layers);
  s.weights.resize(n_w);
  std::memcpy(s.r2.data(), p + fit_at, 4ull * s.n_layers);
  std::memcpy(s.spearman.data(), p + fit_at + 4ull * s.n_layers, 4ull * s.n_layers);
  std::memcpy(s.weights.data(), p + weights_at, 4 * n_w);
  for (uint32_t l = 0; l < s.n_layers; ++l)
    if (std::isinf(s.r2[l]) || std::isinf(s.spearman[l]))
      fail(Errc::corrupt, where, "fit quality of layer " + std::to_string(l) + " is infinite");
  for (uint64_t i = 0; i < n_w; ++i)
    if (!std::isfinite(s.weights[i]))
      fail(Errc::corrupt, where, "coefficient " + std::to_string(i) + " is not finite");
}

}  // namespace

ScorerFile decode_scorer_file(std::span<const uint8_t> b, const std::string& where) {
  const uint64_t size = b.size();
  const uint32_t header = read_preamble(b, where);
  ScorerFile s;
  const uint8_t* p = b.data();
  const StringLengths n = read_fixed_header(p, s, where);
  const uint32_t arch_len = n.arch, name_len = n.name, source_len = n.source;
  // Every term is bounded above, so the sums cannot overflow 64 bits.
  const uint64_t n_w = uint64_t(s.n_layers) * s.n_kv_heads * (uint64_t(s.d_model) + 1);
  const uint64_t fit_at = uint64_t(header) + arch_len + name_len + source_len;
  const uint64_t weights_at = fit_at + 8ull * s.n_layers, checksum_at = weights_at + 4 * n_w;
  const uint64_t total = checksum_at + 8;
  if (size < total)
    fail(Errc::truncated, where,
         "file is " + std::to_string(size) + " bytes; its header (L = " +
             std::to_string(s.n_layers) + ", Hkv = " + std::to_string(s.n_kv_heads) +
             ", E = " + std::to_string(s.d_model) + ") needs " + std::to_string(total));
  if (size > total)
    fail(Errc::corrupt, where,
         std::to_string(size - total) + " bytes after the checksum (file is " +
             std::to_string(size) + " bytes, expected " + std::to_string(total) + ")");
  s.checksum = load_u64(p + checksum_at);
  const uint64_t actual = detail::xxh64(p, checksum_at);
  if (actual != s.checksum)
    fail(Errc::checksum_mismatch, where,
         "stored xxh64 " + detail::hex64(s.checksum) + " but the data hashes to " +
             detail::hex64(actual) + "; the file is damaged — run the scorer calibration again");
  read_body(p, header, n, s, where);
  return s;
}

void write_scorer_file(ScorerFile& scorer, const std::string& path, bool force) {
  const std::vector<uint8_t> bytes = encode_scorer_file(scorer);
  kvzip::write_file_atomically(
      path, force, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

ScorerFile read_scorer_file(const std::string& path) {
  return decode_scorer_file(
      detail::read_small_file(path,
                              {"scorer file", ".kvp", "the scorer calibration", kMaxFileBytes}),
      path);
}

void check_scorer_model(const ScorerFile& s, const ModelConfig& config,
                        const ModelFingerprint& model) {
  if (s.n_layers != config.n_layers || s.n_kv_heads != config.n_kv_heads ||
      s.d_model != config.d_model)
    throw Error(Errc::model_mismatch,
                "the scorer is for L = " + std::to_string(s.n_layers) + ", Hkv = " +
                    std::to_string(s.n_kv_heads) + ", E = " + std::to_string(s.d_model) +
                    " but the model has L = " + std::to_string(config.n_layers) + ", Hkv = " +
                    std::to_string(config.n_kv_heads) + ", E = " + std::to_string(config.d_model) +
                    "; train one for this model with the scorer calibration");
  if (s.model.same_model(model)) return;
  throw Error(Errc::model_mismatch,
              "the scorer was trained on another model: file " + s.model.arch + " '" +
                  s.model.name + "' tokenizer " + detail::hex64(s.model.tokenizer_hash) +
                  " weights " + detail::hex64(s.model.weights_hash) + ", loaded " + model.arch +
                  " '" + model.name + "' tokenizer " + detail::hex64(model.tokenizer_hash) +
                  " weights " + detail::hex64(model.weights_hash) +
                  "; its predictions read this model's hidden states only — train one for this "
                  "model with the scorer calibration");
}

std::string scorer_checksum_text(const ScorerFile& scorer) {
  return detail::hex64(scorer.checksum);
}

bool looks_like_scorer_file(std::span<const uint8_t> first_bytes) {
  return first_bytes.size() >= 8 && std::memcmp(first_bytes.data(), kScorerMagic, 8) == 0;
}

std::string describe_scorer_file(const ScorerFile& s, const std::string& file_name, bool json) {
  using detail::escape;
  auto f = [json](float v) {
    return std::isnan(v) ? std::string(json ? "null" : "-") : num("%.4f", v);
  };
  std::ostringstream o;
  if (json) {
    o << "{\"file\":\"" << escape(file_name, true) << "\",\"kind\":\"scorer\",\"version\":\""
      << kScorerFileVersionMajor << "." << kScorerFileVersionMinor << "\",\"model\":{\"arch\":\""
      << escape(s.model.arch, true) << "\",\"name\":\"" << escape(s.model.name, true)
      << "\",\"tokenizer_hash\":\"" << detail::hex64(s.model.tokenizer_hash)
      << "\",\"weights_hash\":\"" << detail::hex64(s.model.weights_hash)
      << "\"},\"n_layers\":" << s.n_layers << ",\"n_kv_heads\":" << s.n_kv_heads
      << ",\"d_model\":" << s.d_model << ",\"target\":\"" << scorer_target_name(s.target)
      << "\",\"alpha\":" << num("%g", s.alpha) << ",\"window\":" << s.window
      << ",\"train_windows\":" << s.train_windows << ",\"heldout_windows\":" << s.heldout_windows
      << ",\"train_tokens\":" << s.train_tokens << ",\"heldout_tokens\":" << s.heldout_tokens
      << ",\"source\":\"" << escape(s.source, true) << "\",\"checksum\":\""
      << detail::hex64(s.checksum) << "\",\"layers\":[";
    for (uint32_t l = 0; l < s.n_layers; ++l)
      o << (l ? "," : "") << "{\"r2\":" << f(s.r2[l]) << ",\"spearman\":" << f(s.spearman[l])
        << "}";
    o << "]}\n";
    return o.str();
  }
  o << "file: " << escape(file_name, false) << "\nkind: learned scorer (.kvp) v"
    << kScorerFileVersionMajor << "." << kScorerFileVersionMinor
    << "\nmodel: " << escape(s.model.arch, false) << " '" << escape(s.model.name, false)
    << "' tokenizer " << detail::hex64(s.model.tokenizer_hash) << " weights "
    << detail::hex64(s.model.weights_hash) << "\nshape: L = " << s.n_layers
    << ", Hkv = " << s.n_kv_heads << ", E = " << s.d_model << "\ntarget: log "
    << scorer_target_name(s.target) << "; ridge alpha " << num("%g", s.alpha)
    << " (intercept not penalised)\ncalibration: " << escape(s.source, false) << "; windows of "
    << s.window << " tokens, " << s.train_windows << " fitted (" << s.train_tokens << " tokens), "
    << s.heldout_windows << " held out (" << s.heldout_tokens
    << " tokens)\nchecksum: " << detail::hex64(s.checksum) << "\nlayer  held-out R2  Spearman\n";
  for (uint32_t l = 0; l < s.n_layers; ++l)
    o << num("%5.0f", l) << "  " << f(s.r2[l]) << "  " << f(s.spearman[l]) << "\n";
  return o.str();
}

}  // namespace kvzip::format
