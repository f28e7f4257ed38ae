// The head-scores file (.kvh, spec/head_scores_format.md): one importance score per
// (layer, KV head) of one model, from KVzip's reconstruction scoring of a calibration document
// (spec/methods.md §1 step 9). Small (a header, three strings, L·Hkv f32 values, an xxh64 over
// everything before it), versioned like .kvz, written atomically. Parsing checks every field
// before trusting it and throws kvzip::Error naming it; nothing here depends on compress/.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/model_config.h"

namespace kvzip::format {

inline constexpr uint16_t kHeadScoresVersionMajor = 1;  // writes v1.0, reads every v1.x
inline constexpr uint16_t kHeadScoresVersionMinor = 0;

struct HeadScores {
  ModelFingerprint model;           // the model that was calibrated (arch, name, hashes)
  uint32_t n_layers = 0;            // L
  uint32_t n_kv_heads = 0;          // Hkv
  uint64_t calibration_tokens = 0;  // n_c of the calibration document
  uint32_t chunk = 0;               // KVzip reconstruction chunk m used for the scoring
  std::string source;               // the calibration document's name (informational)
  std::vector<float> values;        // (L, Hkv) head_score = max_j score[l, h, j]; finite
  uint64_t checksum = 0;            // the file's stored xxh64 (set by encode and decode)

  float at(uint32_t layer, uint32_t kv_head) const {
    return values[size_t(layer) * n_kv_heads + kv_head];
  }
};

// Errc::invalid_argument naming the first field the file cannot represent (no layers or heads,
// values of another count, a non-finite value, a string with a NUL byte or over 64 KiB).
void validate(const HeadScores& scores);

// The file image. Validates first; sets scores.checksum to the stored xxh64.
std::vector<uint8_t> encode_head_scores(HeadScores& scores);

// Parses a file image; `where` (the file name) starts every message. Throws Errc::truncated,
// bad_magic, version_unsupported (major > 1), corrupt (impossible field, trailing bytes,
// non-finite value) or checksum_mismatch.
HeadScores decode_head_scores(std::span<const uint8_t> bytes, const std::string& where);

// Atomic (temporary file, fsync, rename). Refuses an existing path unless force.
void write_head_scores_file(HeadScores& scores, const std::string& path, bool force);
// Errc::not_found when the file does not exist, io when it cannot be read, else as decode.
HeadScores read_head_scores_file(const std::string& path);

// Errc::model_mismatch when the file's L or Hkv differ from the model's (always: the scores
// cannot be applied), or when its fingerprint differs (unless force; then returns false).
// Returns true when the fingerprints match.
bool check_head_scores_model(const HeadScores& scores, const ModelConfig& config,
                             const ModelFingerprint& model, bool force);

// "0x0123456789abcdef": how params and messages show the checksum.
std::string head_scores_checksum_text(const HeadScores& scores);

// True when `first_bytes` (a file's start) begin with the .kvh magic: lets `kvzip inspect` tell
// a head-scores file from a .kvz before parsing either.
bool looks_like_head_scores(std::span<const uint8_t> first_bytes);

// The `kvzip inspect` dump of a head-scores file (head_scores_describe.cc): text in a fixed field
// order with every score as an L x Hkv table and each head's rank, or JSON with the same facts.
// Strings from the file are escaped (they are not trusted to be UTF-8).
std::string describe_head_scores(const HeadScores& scores, const std::string& file_name, bool json);

}  // namespace kvzip::format
