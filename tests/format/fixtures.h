// Test fixtures for the .kvz format tests: deterministic synthetic caches (any shape, dtype,
// with or without scores), the fixed contents of the committed golden files, bitwise comparison
// of two CacheContents, and a self-deleting temporary directory.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "format/format.h"
#include "tests/support/source_path.h"

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

// A synthetic cache (L 3, Hkv 2, 60 document rows, head dimension D) whose keys have two outlier
// channels, 3 and 10 (x -> 12x + 2: keys' typical shape), for the quantized-row tests.
CacheContents with_outliers(uint32_t D, uint64_t seed = 4);

// The contents of tests/golden/kvz/tiny_v1_f32.kvz and tiny_v1_bf16_zstd.kvz (dtype differs).
CacheContents golden_contents(DType dtype);

// Bitwise equality (floats compared by bits); on a difference, `why` names the first field.
bool same_contents(const CacheContents& a, const CacheContents& b, std::string* why = nullptr);

std::vector<uint8_t> read_bytes(const std::string& path);
void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes);
std::vector<uint8_t> to_bytes(const CacheContents& c, const WriteOptions& o = {});
std::vector<uint8_t> to_bytes_zstd(const CacheContents& c, int zstd_level);  // 0: raw

// Section index of layer l's K/V in files written from `c` (meta, index, positions[, scores],
// kv...).
inline size_t kv_section(const CacheContents& c, uint32_t l) { return (c.has_scores ? 4 : 3) + l; }

// Checks (Catch2) that f throws an Error with code Errc::corrupt whose message contains
// `fragment`; FAILs the test case when f returns.
void expect_corrupt(const std::function<void()>& f, const std::string& fragment);

// Catch2 checks the q8/q4 tests share.
// CHECKs that r.load() is bitwise `c`, naming the first difference.
void check_loads(const CacheReader& r, const CacheContents& c);
// CHECKs that r.read_kv(l) gives layer l's K and V of `c`.
void check_read_kv(const CacheReader& r, const CacheContents& c, uint32_t l);
// Writes `c`, opens it with Verify::Full and check_loads it.
void check_writes_and_loads(const CacheContents& c);
// Skips without HDF5; else CHECKs that an HDF5 export then import gives `c` back, bitwise and as
// the same .kvz bytes.
void check_hdf5_round_trip(const CacheContents& c);
// Calls f(row, j) for each row of `out`, a prune of `in`, with j the row of `in` that holds the
// same head's row at the same position. Returns the number of rows of `out`.
size_t for_each_kept_row(const LayerKv& in, const LayerKv& out,
                         const std::function<void(size_t row, size_t j)>& f);
// A pruned q8/q4 cache `p` of `c` kept the stored form: the channel scales and f16 rows as they
// were and every kept row's values bit for bit (nothing re-quantized); then p writes and loads.
void check_pruned_as_stored(const CacheContents& c, const CacheContents& p);

inline std::string source_path(const std::string& rel) { return kvzip::test::source_path(rel); }

class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  std::vector<std::string> list() const;                            // file names inside, sorted
  static std::vector<std::string> list_of(const std::string& dir);  // the same for any folder
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

}  // namespace kvzip::format::testing
