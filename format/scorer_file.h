// The learned-scorer file (.kvp, spec/scorer_format.md): per layer, a linear predictor from the
// layer's input-normed hidden state (E floats) to the log KVzip score of each KV head, fitted by
// `kvzip calibrate --scorer` (compress/learned_scorer.h; spec/methods.md §1 step 10). A header,
// three strings, the held-out fit quality per layer, the (L, Hkv, E + 1) f32 coefficients and an
// xxh64 over everything before it; versioned like .kvz, written atomically. Parsing checks every
// field before trusting it and throws kvzip::Error naming it; nothing here depends on compress/.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/model_config.h"

namespace kvzip::format {

inline constexpr uint16_t kScorerFileVersionMajor = 1;  // writes v1.0, reads every v1.x
inline constexpr uint16_t kScorerFileVersionMinor = 0;

// What the predictor was trained to predict: the log of KVzip's score (spec/methods.md §1 step 5)
// or of KVzip+ (step 10: each probability divided by the query's hidden-state norm and multiplied
// by the norm of the head's projected value).
enum class ScorerTarget : uint32_t { Kvzip = 0, KvzipPlus = 1 };
const char* scorer_target_name(ScorerTarget t);  // "kvzip", "kvzip+"

struct ScorerFile {
  ModelFingerprint model;   // the model it was trained for (arch, name, hashes)
  uint32_t n_layers = 0;    // L
  uint32_t n_kv_heads = 0;  // Hkv
  uint32_t d_model = 0;     // E: the features of each layer
  ScorerTarget target = ScorerTarget::KvzipPlus;
  uint32_t window = 0;           // calibration window in tokens
  uint32_t train_windows = 0;    // windows the ridge fit saw
  uint32_t heldout_windows = 0;  // windows held back for the fit quality below
  uint64_t train_tokens = 0;
  uint64_t heldout_tokens = 0;
  double alpha = 1.0;           // ridge penalty (the intercept is not penalised)
  std::string source;           // the calibration texts' names (informational)
  std::vector<float> r2;        // (L) held-out R² per layer; NaN: not measured
  std::vector<float> spearman;  // (L) held-out Spearman rank correlation; NaN: not measured
  std::vector<float> weights;   // (L, Hkv, E + 1): E coefficients, then the intercept
  uint64_t checksum = 0;        // the file's stored xxh64 (set by encode and decode)

  // Row of E + 1 floats of (layer, KV head).
  const float* coefficients(uint32_t layer, uint32_t kv_head) const {
    return weights.data() + (size_t(layer) * n_kv_heads + kv_head) * (size_t(d_model) + 1);
  }
};

// Errc::invalid_argument naming the first field the file cannot represent (no layers, heads or
// features, arrays of another count, a non-finite coefficient, an infinite R² or Spearman, a
// string with a NUL byte or over 64 KiB).
void validate(const ScorerFile& scorer);

// The file image. Validates first; sets scorer.checksum to the stored xxh64.
std::vector<uint8_t> encode_scorer_file(ScorerFile& scorer);

// Parses a file image; `where` (the file name) starts every message. Throws Errc::truncated,
// bad_magic, version_unsupported (major > 1), corrupt (impossible field, unknown target, trailing
// bytes, non-finite coefficient) or checksum_mismatch.
ScorerFile decode_scorer_file(std::span<const uint8_t> bytes, const std::string& where);

// Atomic (temporary file, fsync, rename). Refuses an existing path unless force.
void write_scorer_file(ScorerFile& scorer, const std::string& path, bool force);
// Errc::not_found when the file does not exist, io when it cannot be read, else as decode.
ScorerFile read_scorer_file(const std::string& path);

// Errc::model_mismatch when the file's L, Hkv or E differ from the model's, or its fingerprint
// (arch, tokenizer hash, weights hash) differs: a predictor is only meaningful on the hidden
// states of the model it was fitted on.
void check_scorer_model(const ScorerFile& scorer, const ModelConfig& config,
                        const ModelFingerprint& model);

// "0x0123456789abcdef": how params and messages show the checksum.
std::string scorer_checksum_text(const ScorerFile& scorer);

// True when `first_bytes` (a file's start) begin with the .kvp magic.
bool looks_like_scorer_file(std::span<const uint8_t> first_bytes);

// The `kvzip inspect` dump: the fields and the per-layer fit as text, or JSON.
std::string describe_scorer_file(const ScorerFile& scorer, const std::string& file_name, bool json);

}  // namespace kvzip::format
