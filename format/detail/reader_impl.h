// CacheReader's state: the mapped bytes, the parsed section table, the decoded small sections
// and one checksum flag per section. parse() (reader_open.cc) fills it in spec order and is the
// only place that trusts nothing; the accessors in reader.cc rely on what it proved.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "format/detail/layout.h"
#include "format/format.h"

namespace kvzip::format {

struct Entry {
  uint32_t kind = 0, flags = 0, codec = 0, layer = 0;
  uint64_t offset = 0, stored = 0, raw = 0, checksum = 0;
};

struct CacheReader::Impl {
  ~Impl();

  std::string name;               // file path or "<memory>", prefixes every message
  const uint8_t* base = nullptr;  // file image
  uint64_t size = 0;
  void* map = nullptr;  // mmap of the file, when opened from a path
  size_t map_len = 0;
  int fd = -1;  // the file, kept open so K/V copies can use pread
  OpenOptions options;

  uint16_t major = 0, minor = 0;
  uint64_t data_offset = 0, data_size = 0;
  std::vector<Entry> entries;
  std::unique_ptr<std::atomic<uint8_t>[]> checked;  // (entries) 1 once the checksum matched
  std::unique_ptr<std::atomic<uint8_t>[]> finite;   // (L) 1 once the layer's K/V were all finite

  static constexpr size_t kNone = ~size_t{0};
  size_t meta = kNone, index = kNone, positions_entry = kNone, scores_entry = kNone;
  std::vector<size_t> kv;  // (L) entry of each layer's K/V section

  CacheHeader header;
  std::vector<uint32_t> head_rows;    // (L, Hkv)
  std::vector<uint64_t> layer_start;  // (L + 1) first global row of each layer
  std::vector<uint32_t> positions;    // (sum of rows) all layers, in file order
  std::vector<float> scores;          // (sum of rows) or empty

  void parse();  // reader_open.cc: validates everything, throws kvzip::Error

  const uint8_t* stored(size_t i) const { return base + data_offset + entries[i].offset; }
  std::string label(size_t i) const {
    return name + ": " + detail::section_label(i, entries[i].kind, entries[i].layer);
  }
  void check_checksum(size_t i) const;                     // throws checksum_mismatch
  void confirm_checksum(size_t i, uint64_t digest) const;  // digest computed by the caller
  // Copies n stored bytes of section i from byte `at` of the section: pread from the file when
  // there is one (no page faults on the mapping), else from memory.
  void read_stored(size_t i, uint64_t at, uint64_t n, void* dst) const;
  void check_padding() const;  // every padding byte is 0, else corrupt
  // Decodes K and V of a layer (any dtype, codec) into n = R_l * D floats each; checksum and
  // value checks per options.verify (check_finite unless Verify::Metadata).
  void decode_kv(uint32_t layer, float* k, float* v, size_t n) const;
  // q8/q4: the layer's raw section parsed into out.qk / out.qv (out.head_rows and out.positions
  // set), checksum per options.verify, parameter and f16 values checked (Errc::corrupt).
  void read_quant(uint32_t layer, LayerKv& out) const;
  // Errc::corrupt naming layer, head, row and position of the first NaN or infinity in K, then V.
  void check_finite(uint32_t layer, const float* k, const float* v, size_t n) const;
  // Verify::Full: every checksum, all padding, and every K/V section decoded (zstd frames to
  // their Raw_Size) and checked, so whatever passes here can be loaded by every command.
  void verify_all() const;
  std::vector<uint8_t> decode_small(size_t i) const;  // checksum, then raw bytes
};

}  // namespace kvzip::format
