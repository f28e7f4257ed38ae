// libFuzzer target for the .kvz reader: any byte string goes through CacheReader::open_memory
// with full verification, then every accessor, the inspect dump and (for small caches) prune and
// a re-write. Only kvzip::Error may come out; a crash, a sanitizer report, any other exception or
// a leak is a finding. Each input is tried twice: as is, and with every checksum recomputed
// (reseal), since random edits almost never keep xxh64 valid and would otherwise stop at the
// first checksum. Built by fuzz/CMakeLists.txt (clang, -DKVZIP_FUZZ=ON); run by fuzz/run.sh.
// The seeds include the v1.1, v1.2 (f16 rows), v1.3 (Hadamard-rotated codes) and v1.4 (byte group
// parameters) q4/q8 goldens and their bad files, so the quantized path (parameter and f16 value
// checks, dequantization and its rotation, the raw rows of read_quant_layer, pruning stored rows,
// re-writing them) is fuzzed from valid starting points. Every input also goes through the
// learned-scorer (.kvp) reader.
#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "format/format.h"
#include "format/scorer_file.h"

namespace {

using namespace kvzip::format;

constexpr uint64_t kMaxSection = 16ull << 20;  // bound on any decoded section

void exercise(const CacheReader& r) {
  const CacheHeader& h = r.header();
  uint64_t total = 0;
  for (uint32_t l = 0; l < h.n_layers; ++l) {
    (void)r.head_rows(l);
    (void)r.positions(l);
    (void)r.scores(l);
    (void)r.kv_view(l);
    LayerKv layer = r.load_layer(l);
    total += layer.positions.size();
    if (dtype_quantized(h.kv_dtype)) (void)r.read_quant_layer(l);  // the stored rows, unwidened
  }
  (void)describe(r, {false, "fuzz"});
  (void)describe(r, {true, "fuzz"});
  r.verify();
  if (total > 100000) return;
  CacheContents c = r.load();
  CountingSink count;
  write_cache(c, count);
  if (c.has_scores && h.achieved_ratio > 0) (void)prune(c, h.achieved_ratio / 2);
}

uint64_t get64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// Recomputes section, table and header checksums wherever the fields are in bounds.
void reseal(std::vector<uint8_t>& b) {
  if (b.size() < 64) return;
  uint64_t count = get64(&b[16]), data_offset = get64(&b[24]);
  if (count > 65536 || 64 + 64 * count > b.size()) return;
  for (uint64_t i = 0; i < count; ++i) {
    uint8_t* e = &b[64 + 64 * i];
    uint64_t off = get64(e + 16), stored = get64(e + 24);
    if (data_offset <= b.size() && off <= b.size() - data_offset &&
        stored <= b.size() - data_offset - off) {
      uint64_t h = XXH64(&b[data_offset + off], stored, 0);
      std::memcpy(e + 40, &h, 8);
    }
  }
  uint64_t table = XXH64(&b[64], 64 * count, 0);
  std::memcpy(&b[40], &table, 8);
  uint64_t header = XXH64(b.data(), 56, 0);
  std::memcpy(&b[56], &header, 8);
}

void try_open(const uint8_t* data, size_t size) {
  OpenOptions o;
  o.verify = Verify::Full;
  o.max_section_bytes = kMaxSection;
  try {
    CacheReader r = CacheReader::open_memory({data, size}, o);
    exercise(r);
  } catch (const kvzip::Error&) {
    // expected for damaged input
  }
}

// The learned-scorer reader (.kvp) on the same bytes, as they are and with the trailing xxh64
// recomputed; a file it accepts is described and encoded again.
void try_scorer(const uint8_t* data, size_t size) {
  std::vector<uint8_t> b(data, data + size);
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 1) {
      if (b.size() < 8) return;
      const uint64_t h = XXH64(b.data(), b.size() - 8, 0);
      std::memcpy(b.data() + b.size() - 8, &h, 8);
    }
    try {
      ScorerFile s = decode_scorer_file(b, "fuzz");
      (void)describe_scorer_file(s, "fuzz", false);
      (void)describe_scorer_file(s, "fuzz", true);
      (void)encode_scorer_file(s);
    } catch (const kvzip::Error&) {
      // expected for damaged input
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try_open(data, size);
  std::vector<uint8_t> copy(data, data + size);
  reseal(copy);
  try_open(copy.data(), copy.size());
  try_scorer(data, size);
  return 0;
}
