// Image field access and re-sealing (see patch.h).
#include "tests/format/patch.h"

#include <xxhash.h>

#include <cstring>
#include <stdexcept>

namespace kvzip::format::testing {

uint64_t Image::u64(uint64_t at) const {
  uint64_t v;
  std::memcpy(&v, bytes.data() + at, 8);
  return v;
}
void Image::set_u16(uint64_t at, uint16_t v) { std::memcpy(bytes.data() + at, &v, 2); }
void Image::set_u32(uint64_t at, uint32_t v) { std::memcpy(bytes.data() + at, &v, 4); }
void Image::set_u64(uint64_t at, uint64_t v) { std::memcpy(bytes.data() + at, &v, 8); }

uint64_t Image::meta_key(const std::string& key) const {
  uint64_t base = section_start(0), at = base + 8, count = u64(base);
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t klen = u64(at);
    std::string k(reinterpret_cast<const char*>(bytes.data() + at + 8), klen);
    if (k == key) return at + 8;
    at += 8 + klen + 8;
    at += 8 + u64(at);
  }
  throw std::runtime_error("test image: meta key not found: " + key);
}

uint64_t Image::meta_value(const std::string& key) const {
  return meta_key(key) + key.size() + 16;  // Key, Value_Type + Value_Flags, Value_Size
}

void Image::reseal_section(size_t i) {
  set_u64(entry(i) + 40, XXH64(bytes.data() + section_start(i), stored(i), 0));
}

void Image::reseal() {
  set_u64(40, XXH64(bytes.data() + 64, 64 * section_count(), 0));
  reseal_header();
}

void Image::reseal_header() { set_u64(56, XXH64(bytes.data(), 56, 0)); }

}  // namespace kvzip::format::testing
