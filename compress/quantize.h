// The storage dtype of a cache's K/V (compress, prune, import and eval all go through here):
// set_kv_dtype records the dtype in the header and, for the group-wise quantized q8/q4, quantizes
// every KV head's rows with kernels/kv_quant.h into LayerKv::qk/qv and replaces the f32 rows by
// their dequantization, so the contents in memory are exactly what a reader of the file will see.
// f32/f16/bf16 need nothing here: the writer rounds f16/bf16 itself.
#pragma once
#include <cstdint>

#include "format/format.h"

namespace kvzip::compress {

// Channels per quantization group when none is asked for: the whole head (D). Measured on the
// Normans article (BENCHMARKS.md at dfd379e, "Quantized K/V"): with per-head channel scales, a
// group of D channels costs 4 bytes of parameters per row and block (f16 scale + minimum; 2 as byte
// parameters) for an error a group of 32 lowers by only 11-13% at q4, at twice the parameter bytes.
inline constexpr uint32_t kDefaultKvGroup = 0;  // 0 = D

// How a cache's K/V rows are to be stored: the dtype and, for q8/q4, their layout.
struct KvStorage {
  format::DType dtype = format::DType::F32;
  uint32_t group = kDefaultKvGroup;  // q8/q4: channels per group (0 = D)
  bool f16_prefix = true;            // q8/q4: prefix rows as f16 (v1.2)
  bool rotate = true;                // q8/q4 with f16 rows: Hadamard-rotated codes (v1.3)
  bool byte_params = true;           // rotated q8/q4: byte group parameters (v1.4)
};

// Sets header.kv_dtype (and kv_group_size: `group`, 0 = D, must divide D). For q8/q4 the rows are
// quantized, except, with f16_prefix (the default; a v1.2 file), the prefix rows (positions <
// n_p: the attention sink and the template opener, never evicted), which are stored as f16:
// measured on the Normans article (BENCHMARKS.md at dfd379e, "Quantized K/V"), these 24 of 5,656
// rows per head carry most of q4's effect on the answers. f16_prefix false writes the v1.1 layout.
// A cache that is already q8/q4 with the same dtype, group and f16 rows is left as it is (its
// stored rows are never quantized twice); another q8/q4 -> re-quantized from its f32 rows.
// rotate (the default; a v1.3 file): with f16 rows and a power-of-two D, each quantized row is
// rotated by the Walsh–Hadamard matrix before it is quantized (format::CacheHeader::kv_rotated),
// which spreads the keys' outlier channels over the row: measured on the Normans article
// (commit 229552b) q4's first-token KL against f32 falls 2.8x at ratio 0.3. Otherwise, or with
// rotate false, the rows are quantized as they are (the v1.2 / v1.1 layouts).
// byte_params (the default; a v1.4 file): the rotated rows' group parameters are a byte scale
// code and a byte zero point (common/kv_params.h) instead of two f16 words: 2 bytes less per row
// and group, measured on the Normans article (BENCHMARKS.md, "File sizes and storage types"). Only
// with rotation; unrotated rows keep f16 parameters.
// Errc::invalid_argument for a group that does not divide D.
void set_kv_dtype(format::CacheContents& contents, const KvStorage& storage);

}  // namespace kvzip::compress
