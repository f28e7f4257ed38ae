// The Meta section (spec "Meta section"): a list of typed, namespaced key/value entries that
// carries the CacheHeader. encode_meta writes the keys in the spec's order; decode_meta checks
// every entry (bounds, key charset, duplicates, types, value ranges) and the required keys.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "format/format.h"

namespace kvzip::format::detail {

inline constexpr const char* kParamPrefix = "kvzip.compress.param.";

std::vector<uint8_t> encode_meta(const CacheHeader& header);
// `where` prefixes error messages (file and section). Throws corrupt / unsupported.
CacheHeader decode_meta(const uint8_t* data, uint64_t size, const std::string& where);

// Key charset [A-Za-z0-9_.-], 1..255 bytes: shared by the writer's validation.
bool valid_key(const std::string& key);

}  // namespace kvzip::format::detail
