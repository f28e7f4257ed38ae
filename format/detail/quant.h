// The KV section of the quantized dtypes q8/q4 (spec "Quantized K/V"): its size, the bytes a
// layer's QuantRows serialise to, the parse back (with the value checks a reader owes: finite,
// positive channel scales; finite f16 values) and the one format-side reconstruction
// x = H·(c * fma(s, q, m)). Layout of one layer's section, R = R_l rows of which F are f16 rows
// (positions < kv_f16_below) and Q = R - F:
//   K channel scales (Hkv, D) f32 | V channel scales (Hkv, D) f32 |
//   K f16 rows (F, D) f16         | V f16 rows (F, D) f16         |
//   K params (Q, D/Gs, 2) u8      | V params (Q, D/Gs, 2) u8      |
//   K codes (Q, D·b/8) u8         | V codes (Q, D·b/8) u8
// The f32 and f16 arrays start 4-byte aligned within the section, the rest 2-byte aligned.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/kv_params.h"
#include "format/format.h"

namespace kvzip::format::detail {

// 16-bit group-parameter words per quantized row of a q8/q4 header (one a group: scale code |
// zero point << 8, common/kv_params.h). The count the section layout, parse and prune use.
inline uint64_t quant_param_words(const CacheHeader& h) {
  return uint64_t{h.head_dim / h.kv_group_size};
}

// Raw_Size of a q8/q4 KV section of `rows` rows, `f16_rows` of them f16 rows; nullopt when it
// overflows 64 bits.
std::optional<uint64_t> quant_section_bytes(const CacheHeader& h, uint64_t rows, uint64_t f16_rows);

// Appends the section's raw bytes (layout above) for one layer.
void emit_quant_section(const CacheHeader& h, const LayerKv& layer, Sink& sink);

// Parses a raw section into qk / qv of `layer` (head_rows and positions set) and checks every
// channel scale and f16 value; errors are Errc::corrupt naming `where`, the block (K or V), head
// and row.
void parse_quant_section(const CacheHeader& h, const uint8_t* raw, uint64_t size, LayerKv& layer,
                         const std::string& where);

// True when every value of the layer's quantized rows is provably finite: per row and group,
// max c · (s · (2^b − 1) + |m|) below FLT_MAX with room for the roundings (f16 rows are checked
// by parse_quant_section). False says nothing yet: the caller dequantizes and checks exactly.
bool quant_values_bounded(const CacheHeader& h, const LayerKv& layer);

// Checks shapes and parameter values of in-memory QuantRows (writer side, Errc::invalid_argument).
void validate_quant(const CacheHeader& h, const LayerKv& layer, const std::string& at);

}  // namespace kvzip::format::detail
