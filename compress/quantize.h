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
// Normans article (docs/quantized-kv.md): with per-head channel scales, a group of D channels
// costs 2 bytes of parameters per row and block, for an error that a group of 32 lowers by only
// 11-13% at q4, at twice the parameter bytes.
inline constexpr uint32_t kDefaultKvGroup = 0;  // 0 = D

// How a cache's K/V rows are to be stored. The file format has one q8/q4 layout, so the group
// size is the only choice beyond the dtype.
struct KvStorage {
  format::DType dtype = format::DType::F32;  // exact; `kvzip compress` defaults to f16 (cli_util.h)
  uint32_t group = kDefaultKvGroup;          // q8/q4: channels per group (0 = D)
};

// Sets header.kv_dtype (and kv_group_size: `group`, 0 = D, must divide D). For q8/q4 the rows
// take the one stored form of spec §12.1: the prefix rows (positions < n_p: the attention sink
// and the template opener, never evicted, a few per head) are stored as f16, since they carry
// most of q4's effect on the answers; every other row is rotated by the Walsh–Hadamard matrix
// (common/hadamard.h), which spreads the keys' outlier channels over the row, and quantized with
// byte group parameters (common/kv_params.h). docs/quantized-kv.md has the measurements behind
// each choice. A cache that is already q8/q4 with the same dtype and group is left as it is (its
// stored rows are never quantized twice); another q8/q4 -> re-quantized from its f32 rows.
// Errc::invalid_argument for a group that does not divide D, or q8/q4 with a head dimension
// that is not a power of two (the rotation needs one).
void set_kv_dtype(format::CacheContents& contents, const KvStorage& storage);

}  // namespace kvzip::compress
