// The Meta section (spec "Meta section"): a list of typed, namespaced key/value entries that
// carries the CacheHeader. encode_meta writes the keys in the spec's order; decode_meta checks
// every entry (bounds, key charset, duplicates, types, value ranges) and the required keys.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "format/detail/layout.h"
#include "format/format.h"

namespace kvzip::format::detail {

inline constexpr const char* kParamPrefix = "kvzip.compress.param.";

std::vector<uint8_t> encode_meta(const CacheHeader& header);
// `where` prefixes error messages (file and section). Throws corrupt / unsupported.
CacheHeader decode_meta(const uint8_t* data, uint64_t size, const std::string& where);

// One entry, generically (used by HDF5 export/import, which map entries to attributes).
struct MetaEntry {
  std::string key;
  MetaType type;
  std::vector<uint8_t> value;  // little-endian value bytes, Value_Size of them
};
std::vector<MetaEntry> meta_entries(const uint8_t* data, uint64_t size, const std::string& where);
std::vector<uint8_t> encode_meta_entries(const std::vector<MetaEntry>& entries);

// Key charset [A-Za-z0-9_.-], 1..255 bytes: shared by the writer's validation.
bool valid_key(const std::string& key);

}  // namespace kvzip::format::detail
