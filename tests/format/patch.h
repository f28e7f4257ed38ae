// Byte-level editing of a .kvz image for the hostile-input tests: read and write fields of the
// preamble, the section table and the (uncompressed) meta section, and recompute checksums so
// that a damaged file reaches the exact check it targets. Deliberately independent of the
// reader's code: offsets come from the spec's byte tables.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kvzip::format::testing {

class Image {
 public:
  explicit Image(std::vector<uint8_t> b) : bytes(std::move(b)) {}
  std::vector<uint8_t> bytes;

  uint64_t u64(uint64_t at) const;
  void set_u16(uint64_t at, uint16_t v);
  void set_u32(uint64_t at, uint32_t v);
  void set_u64(uint64_t at, uint64_t v);

  uint64_t section_count() const { return u64(16); }
  uint64_t data_offset() const { return u64(24); }
  uint64_t entry(size_t i) const { return 64 + 64 * i; }  // absolute offset of table entry i
  uint64_t section_start(size_t i) const { return data_offset() + u64(entry(i) + 16); }
  uint64_t stored(size_t i) const { return u64(entry(i) + 24); }

  // Absolute offset of the value of `key` in the uncompressed meta section (section 0), and of
  // its Key and Value_Size fields.
  uint64_t meta_value(const std::string& key) const;
  uint64_t meta_key(const std::string& key) const;
  uint64_t meta_value_size_field(const std::string& key) const { return meta_value(key) - 8; }

  void reseal_section(size_t i);  // that section's Checksum := xxh64(stored bytes)
  void reseal();                  // Table_Checksum, then Header_Checksum
  void reseal_header();           // Header_Checksum only
};

}  // namespace kvzip::format::testing
