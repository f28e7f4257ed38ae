// Test fixtures for the .kvz format tests: deterministic synthetic caches (any shape, dtype,
// with or without scores), the fixed contents of the committed golden files, bitwise comparison
// of two CacheContents, and a self-deleting temporary directory.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "format/format.h"

// Catch2 v2 has no SKIP(): report why and leave the test case.
#define KVZIP_FORMAT_SKIP(why) \
  do {                         \
    WARN("skipped: " << why);  \
    return;                    \
  } while (0)

namespace kvzip::format::testing {

struct SyntheticSpec {
  uint32_t n_layers = 3;     // L
  uint32_t n_kv_heads = 2;   // Hkv
  uint32_t head_dim = 8;     // D
  uint32_t prefix = 4;       // n_p
  uint32_t document = 40;    // n_c
  double keep = 0.5;         // chance that a document row is kept
  DType dtype = DType::F32;  // values are rounded so they survive this dtype exactly
  bool scores = true;
  uint64_t seed = 1;
};

CacheContents synthetic(const SyntheticSpec& spec);

// The contents of tests/golden/kvz/tiny_v1_f32.kvz and tiny_v1_bf16_zstd.kvz (dtype differs).
CacheContents golden_contents(DType dtype);

// Bitwise equality (floats compared by bits); on a difference, `why` names the first field.
bool same_contents(const CacheContents& a, const CacheContents& b, std::string* why = nullptr);

std::vector<uint8_t> read_bytes(const std::string& path);
void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes);
std::vector<uint8_t> to_bytes(const CacheContents& c, const WriteOptions& o = {});

inline std::string source_path(const std::string& rel) { return std::string(KVZIP_SOURCE_DIR) + "/" + rel; }

class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  std::vector<std::string> list() const;  // file names inside, sorted
  static std::vector<std::string> list_of(const std::string& dir);  // the same for any folder
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

}  // namespace kvzip::format::testing
