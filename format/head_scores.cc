// Head-scores file v1 (format/head_scores.h; spec/head_scores_format.md). Layout,
// little-endian, no padding:
//   0 Magic[8] 89 'K' 'V' 'H' 0D 0A 1A 0A | 8 Major u16 | 10 Minor u16 | 12 Header_Size u32 (64)
//   16 L u32 | 20 Hkv u32 | 24 Calibration_Tokens u64 | 32 Tokenizer_Hash u64 | 40 Weights_Hash u64
//   48 Chunk u32 | 52 Arch_Length u32 | 56 Name_Length u32 | 60 Source_Length u32
//   Header_Size: Arch | Name | Source bytes, then (L, Hkv) f32 scores, then xxh64 u64 of every
//   byte before it. A newer minor may grow the header (Header_Size > 64); v1.0 readers skip that.
#include "format/head_scores.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>

#include "format/detail/codec.h"
#include "format/detail/layout.h"
#include "format/detail/small_file.h"
#include "format/format.h"

namespace kvzip::format {
namespace {

inline constexpr uint8_t kHeadMagic[8] = {0x89, 'K', 'V', 'H', 0x0D, 0x0A, 0x1A, 0x0A};
inline constexpr uint32_t kFixedHeader = 64;
inline constexpr uint32_t kMaxHeader = 4096;   // room for later minor versions' fields
inline constexpr uint32_t kMaxString = 65536;  // arch, name, source
inline constexpr uint32_t kMaxDim = 1024;      // L and Hkv, as .kvz's reader limits
inline constexpr uint64_t kMaxFileBytes = 16ull << 20;

using detail::load_u16;
using detail::load_u32;
using detail::load_u64;

// Appends into a buffer sized up front (no reallocation while writing).
class Writer {
 public:
  explicit Writer(size_t size) : out_(size) {}
  void bytes(const void* p, size_t n) {
    KVZIP_ASSERT(at_ + n <= out_.size());
    if (n) std::memcpy(out_.data() + at_, p, n);
    at_ += n;
  }
  template <class T>
  void le(T v) {
    bytes(&v, sizeof v);
  }
  size_t at() const { return at_; }
  std::vector<uint8_t>& out() { return out_; }

 private:
  std::vector<uint8_t> out_;
  size_t at_ = 0;
};

void check_string(const std::string& s, const char* field) {
  if (s.find('\0') != std::string::npos)
    throw Error(Errc::invalid_argument, std::string("head scores: ") + field +
                                            " contains a NUL byte at " +
                                            std::to_string(s.find('\0')));
  if (s.size() > kMaxString)
    throw Error(Errc::invalid_argument, std::string("head scores: ") + field + " is " +
                                            std::to_string(s.size()) + " bytes; at most " +
                                            std::to_string(kMaxString) + " fit the file");
}

[[noreturn]] void fail(Errc code, const std::string& where, const std::string& what) {
  throw Error(code, where + ": " + what);
}

}  // namespace

void validate(const HeadScores& s) {
  if (s.n_layers == 0 || s.n_layers > kMaxDim || s.n_kv_heads == 0 || s.n_kv_heads > kMaxDim)
    throw Error(Errc::invalid_argument, "head scores: L = " + std::to_string(s.n_layers) +
                                            " and Hkv = " + std::to_string(s.n_kv_heads) +
                                            " must each be in 1.." + std::to_string(kMaxDim));
  if (s.values.size() != size_t(s.n_layers) * s.n_kv_heads)
    throw Error(Errc::invalid_argument,
                "head scores: " + std::to_string(s.values.size()) +
                    " values for L·Hkv = " + std::to_string(size_t(s.n_layers) * s.n_kv_heads));
  for (size_t i = 0; i < s.values.size(); ++i)
    if (!std::isfinite(s.values[i]))
      throw Error(Errc::invalid_argument, "head scores: value " + std::to_string(i) + " (layer " +
                                              std::to_string(i / s.n_kv_heads) + ", head " +
                                              std::to_string(i % s.n_kv_heads) + ") is not finite");
  if (s.model.arch.empty())
    throw Error(Errc::invalid_argument, "head scores: the model fingerprint has no architecture");
  check_string(s.model.arch, "arch");
  check_string(s.model.name, "model name");
  check_string(s.source, "source");
}

std::vector<uint8_t> encode_head_scores(HeadScores& s) {
  validate(s);
  const size_t checksum_at = kFixedHeader + s.model.arch.size() + s.model.name.size() +
                             s.source.size() + s.values.size() * sizeof(float);
  Writer w(checksum_at + 8);
  w.bytes(kHeadMagic, 8);
  w.le<uint16_t>(kHeadScoresVersionMajor);
  w.le<uint16_t>(kHeadScoresVersionMinor);
  w.le<uint32_t>(kFixedHeader);
  w.le<uint32_t>(s.n_layers);
  w.le<uint32_t>(s.n_kv_heads);
  w.le<uint64_t>(s.calibration_tokens);
  w.le<uint64_t>(s.model.tokenizer_hash);
  w.le<uint64_t>(s.model.weights_hash);
  w.le<uint32_t>(s.chunk);
  w.le<uint32_t>(static_cast<uint32_t>(s.model.arch.size()));
  w.le<uint32_t>(static_cast<uint32_t>(s.model.name.size()));
  w.le<uint32_t>(static_cast<uint32_t>(s.source.size()));
  KVZIP_ASSERT(w.at() == kFixedHeader);
  w.bytes(s.model.arch.data(), s.model.arch.size());
  w.bytes(s.model.name.data(), s.model.name.size());
  w.bytes(s.source.data(), s.source.size());
  w.bytes(s.values.data(), s.values.size() * sizeof(float));
  KVZIP_ASSERT(w.at() == checksum_at);
  s.checksum = detail::xxh64(w.out().data(), checksum_at);
  w.le<uint64_t>(s.checksum);
  return std::move(w.out());
}

namespace {

// The 16-byte preamble (magic, version, Header_Size) against the file's size; returns Header_Size.
uint32_t read_head_preamble(std::span<const uint8_t> b, const std::string& where) {
  const uint64_t size = b.size();
  if (size == 0) fail(Errc::truncated, where, "file is empty");
  const size_t magic_seen = std::min<size_t>(size, 8);
  if (std::memcmp(b.data(), kHeadMagic, magic_seen) != 0)
    fail(Errc::bad_magic, where,
         "not a kvzip head-scores file (magic bytes differ; expected "
         "89 4B 56 48 0D 0A 1A 0A, as the head calibration writes)");
  if (size < 16)
    fail(Errc::truncated, where,
         "file is " + std::to_string(size) + " bytes, shorter than the 16-byte preamble");
  const uint16_t major = load_u16(b.data() + 8), minor = load_u16(b.data() + 10);
  if (major != kHeadScoresVersionMajor)
    fail(Errc::version_unsupported, where,
         "head-scores version " + std::to_string(major) + "." + std::to_string(minor) +
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

}  // namespace

HeadScores decode_head_scores(std::span<const uint8_t> b, const std::string& where) {
  const uint64_t size = b.size();
  const uint32_t header = read_head_preamble(b, where);
  HeadScores s;
  s.n_layers = load_u32(b.data() + 16);
  s.n_kv_heads = load_u32(b.data() + 20);
  s.calibration_tokens = load_u64(b.data() + 24);
  s.model.tokenizer_hash = load_u64(b.data() + 32);
  s.model.weights_hash = load_u64(b.data() + 40);
  s.chunk = load_u32(b.data() + 48);
  const uint32_t arch_len = load_u32(b.data() + 52), name_len = load_u32(b.data() + 56),
                 source_len = load_u32(b.data() + 60);
  if (s.n_layers == 0 || s.n_layers > kMaxDim || s.n_kv_heads == 0 || s.n_kv_heads > kMaxDim)
    fail(Errc::corrupt, where,
         "L = " + std::to_string(s.n_layers) + ", Hkv = " + std::to_string(s.n_kv_heads) +
             "; each must be in 1.." + std::to_string(kMaxDim));
  if (arch_len == 0 || arch_len > kMaxString || name_len > kMaxString || source_len > kMaxString)
    fail(Errc::corrupt, where,
         "string lengths arch " + std::to_string(arch_len) + ", name " + std::to_string(name_len) +
             ", source " + std::to_string(source_len) + "; arch must be 1.." +
             std::to_string(kMaxString) + " bytes, the others at most that");
  // All terms are bounded above, so the sum cannot overflow.
  const uint64_t n_values = uint64_t(s.n_layers) * s.n_kv_heads;
  const uint64_t strings_at = header, values_at = strings_at + arch_len + name_len + source_len;
  const uint64_t checksum_at = values_at + 4 * n_values, total = checksum_at + 8;
  if (size < total)
    fail(Errc::truncated, where,
         "file is " + std::to_string(size) +
             " bytes; its header (L = " + std::to_string(s.n_layers) +
             ", Hkv = " + std::to_string(s.n_kv_heads) + ") needs " + std::to_string(total));
  if (size > total)
    fail(Errc::corrupt, where,
         std::to_string(size - total) + " bytes after the checksum at " +
             std::to_string(checksum_at) + " (file is " + std::to_string(size) +
             " bytes, expected " + std::to_string(total) + ")");
  s.checksum = load_u64(b.data() + checksum_at);
  const uint64_t actual = detail::xxh64(b.data(), checksum_at);
  if (actual != s.checksum)
    fail(Errc::checksum_mismatch, where,
         "stored xxh64 " + detail::hex64(s.checksum) + " but the data hashes to " +
             detail::hex64(actual) + "; the file is damaged — run the head calibration again");
  auto str = [&](uint64_t at, uint32_t len, const char* field) {
    std::string v(reinterpret_cast<const char*>(b.data() + at), len);
    if (v.find('\0') != std::string::npos)
      fail(Errc::corrupt, where,
           std::string(field) + " string contains a NUL byte at " + std::to_string(v.find('\0')));
    return v;
  };
  s.model.arch = str(strings_at, arch_len, "arch");
  s.model.name = str(strings_at + arch_len, name_len, "model name");
  s.source = str(strings_at + arch_len + name_len, source_len, "source");
  s.values.resize(n_values);
  std::memcpy(s.values.data(), b.data() + values_at, 4 * n_values);
  for (size_t i = 0; i < s.values.size(); ++i)
    if (!std::isfinite(s.values[i]))
      fail(Errc::corrupt, where,
           "score of layer " + std::to_string(i / s.n_kv_heads) + ", head " +
               std::to_string(i % s.n_kv_heads) + " is not finite");
  return s;
}

void write_head_scores_file(HeadScores& scores, const std::string& path, bool force) {
  const std::vector<uint8_t> bytes = encode_head_scores(scores);
  write_file_atomically(path, force, [&](Sink& sink) { sink.write(bytes.data(), bytes.size()); });
}

HeadScores read_head_scores_file(const std::string& path) {
  return decode_head_scores(detail::read_small_file(path, {"head-scores file", ".kvh",
                                                           "the head calibration", kMaxFileBytes}),
                            path);
}

bool check_head_scores_model(const HeadScores& s, const ModelConfig& config,
                             const ModelFingerprint& model, bool force) {
  if (s.n_layers != config.n_layers || s.n_kv_heads != config.n_kv_heads)
    throw Error(Errc::model_mismatch,
                "head scores are for L = " + std::to_string(s.n_layers) +
                    ", Hkv = " + std::to_string(s.n_kv_heads) +
                    " but the model has L = " + std::to_string(config.n_layers) +
                    ", Hkv = " + std::to_string(config.n_kv_heads) + "; calibrate this model");
  if (s.model.same_model(model)) return true;
  if (force) return false;
  throw Error(Errc::model_mismatch,
              "head scores were calibrated on another model: file " + s.model.arch + " '" +
                  s.model.name + "' tokenizer " + detail::hex64(s.model.tokenizer_hash) +
                  " weights " + detail::hex64(s.model.weights_hash) + ", loaded " + model.arch +
                  " '" + model.name + "' tokenizer " + detail::hex64(model.tokenizer_hash) +
                  " weights " + detail::hex64(model.weights_hash) +
                  "; calibrate this model, or use them anyway (option force_model)");
}

std::string head_scores_checksum_text(const HeadScores& scores) {
  return detail::hex64(scores.checksum);
}

}  // namespace kvzip::format
