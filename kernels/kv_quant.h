// Group-wise 8-bit and 4-bit K/V rows: the .kvz q8/q4 storage (spec/kvzip_format.md §12.1) and
// attention computed directly over it. One KV head's rows share a per-channel scale vector c (D);
// each row is cut into D/Gs groups of Gs consecutive channels, and a group stores a scale s, a
// minimum m (with KvQuantLayout::byte_params as a byte scale code and a byte zero point, else as
// two f16 words: common/kv_params.h) and one unsigned code q per channel (8 bits, or 4 bits packed
// two per byte, channel 2i in the low nibble). The value is
//     x[j] = c[j] * fma(s, q[j], m)          (binary32; fma rounds once)
// Everything that belongs to a row lives in that row (its params and codes), so dropping rows
// (re-pruning) never touches the others; the channel scales stay valid for any subset of rows.
// Rotated rows (KvQuantLayout::rotated): the codes are those of H·x, H the orthonormal
// Walsh–Hadamard matrix of size D (common/hadamard.h), and the row is H applied to the formula's
// values. H spreads the outlier channels of a key over the whole row, so that the error no
// longer sits in a few channels (q4's first-token KL 2.8x lower: docs/quantized-kv.md).
// Attention never un-rotates a stored row: since H is orthonormal and symmetric,
// q·x = (H·q)·(H·x) and Σ p·x = H·Σ p·(H·x), so the query is rotated once and the weighted sum
// once.
// A .kvz file holds one layout: rotated rows with byte parameters (spec §12.1). The kernels also
// take unrotated rows and f16 parameters, which no file holds, so that tests and measurements can
// compare the layouts.
//
// Attention over quantized rows (kv_quant_attend) returns, with the normalised output, each query's
// log-sum-exp, so that a caller can merge it with attention over other rows (an f32 tail of
// question/answer tokens) by the usual softmax merge: that is how a quantized base segment is
// attended to without expanding it. The CPU attention kernel does exactly that for a span whose
// rows include a KvQuantSegment (kernels/attention.h: the q8/q4 base of a query session or a
// served request, cache/quant_base.h). The CUDA twins (dequantization, logits over codes) read
// every layout the CPU does, and the CUDA attention attends to a q8/q4 base kept as stored in
// device memory (kernels/cuda/attention.cu, cache/gpu_quant_base.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/error.h"
#include "common/kv_params.h"
#include "kernels/device.h"

namespace kvzip::kernels {

// Shape of quantized rows. bits is 8 or 4; group divides D (D even).
struct KvQuantLayout {
  uint32_t bits = 4;
  uint32_t D = 0;
  uint32_t group = 0;    // Gs: channels per group
  bool rotated = false;  // codes of H·x (D a power of two); see the top of this file
  bool byte_params =
      false;  // a group's scale and minimum as two bytes (the .kvz form; common/kv_params.h)
  uint32_t groups() const { return D / group; }               // per row
  size_t code_bytes() const { return size_t(D) * bits / 8; }  // per row
  // per row: 16-bit words of group parameters (f16: scale, min; byte: scale code | zero point << 8)
  size_t param_words() const { return size_t{kv_param_words_per_group(byte_params)} * groups(); }
};

// Read-only view of one KV head's quantized rows (the file's bytes can be used in place).
struct KvQuantRows {
  KvQuantLayout layout;
  size_t rows = 0;
  const float* channel_scale = nullptr;  // (D)
  const uint16_t* params = nullptr;      // (rows, param_words) common/kv_params.h
  const uint8_t* codes = nullptr;        // (rows, D·bits/8)
};

// One KV head's quantized K and V rows as attention reads them (KvSpan::quant): same rows, same
// layout; k.rows == v.rows.
struct KvQuantSegment {
  KvQuantRows k, v;
  uint32_t rows() const { return static_cast<uint32_t>(k.rows); }
};

// Where kv_quantize_rows writes one KV head's rows.
struct KvQuantRowsOut {
  KvQuantLayout layout;
  size_t rows = 0;
  float* channel_scale = nullptr;  // (D) written: per-channel max |x| over the rows (1 if 0)
  uint16_t* params = nullptr;      // (rows, param_words)
  uint8_t* codes = nullptr;        // (rows, D·bits/8)
};

// Attention of n_q query rows (the GQA group of one KV head) over quantized K and V rows.
struct KvQuantAttendArgs {
  const float* q = nullptr;  // (n_q, D) post-RoPE queries
  uint32_t n_q = 0;
  KvQuantRows k, v;         // same rows and layout
  float scale = 0.0f;       // multiplies q·k, normally 1/sqrt(D)
  float* scores = nullptr;  // (n_q, rows) workspace: the probabilities on return
  float* out = nullptr;     // (n_q, D) softmax-weighted sum of the value rows
  float* lse = nullptr;     // optional (n_q): log Σ exp(scale·q·k), for merging segments
  // Optional visibility (composed caches, kernels/attention.h KvSpan::quant_limit/quant_skip):
  // query i sees rows [0, limit[i]) only, and no query sees a row whose bit is set in skip. A query
  // that sees no row gets out = 0 and lse = -inf.
  const uint32_t* limit = nullptr;  // (n_q)
  const uint64_t* skip = nullptr;   // bitmap over the rows
};

namespace cpu {
// x (rows, D) -> channel scales, params and codes. x must be finite. Deterministic: every build
// gives the same bits (scalar arithmetic, no contraction-sensitive expressions).
void kv_quantize_rows(const float* x, const KvQuantRowsOut& out);
// With layout.rotated each row is rotated (H·x) before the channel scales and codes are computed.
// (rows, D) values of the rows, by the formula at the top of this file (then H, when rotated).
void kv_dequantize_rows(const KvQuantRows& in, float* x);
// scores (n_q, rows) = scale · q · dequant(k)ᵀ, without forming dequant(k): per group,
// s·Σ (c·q)[j]·code[j] + m·Σ (c·q)[j] (q rotated first, when the rows are).
void kv_quant_scores(const float* q, uint32_t n_q, const KvQuantRows& k, float scale,
                     float* scores);
// out (n_q, D) = w (n_q, rows) · dequant(v), accumulating s·w and m·w per group before the
// channel scale is applied once per output (and H once per output row, when rotated).
void kv_quant_weighted_sum(const float* w, uint32_t n_q, const KvQuantRows& v, float* out);
// scores, a stable softmax per query row, weighted sum (and lse). rows == 0 (or no visible row)
// gives out = 0 and lse = -inf.
void kv_quant_attend(const KvQuantAttendArgs& a);
}  // namespace cpu

namespace cuda {  // kernels/cuda/kv_quant.cu: device pointers, asynchronous on `stream`; every
                  // layout the CPU reads (f16 or byte parameters, rotated or not), the same
                  // values
void kv_dequantize_rows(const KvQuantRows& in, float* x, void* stream);
void kv_quant_scores(const float* q, uint32_t n_q, const KvQuantRows& k, float scale, float* scores,
                     void* stream);
}  // namespace cuda

inline void kv_dequantize_rows(const Exec& ex, const KvQuantRows& in, float* x) {
#if KVZIP_HAVE_CUDA
  if (ex.device == Device::Cuda) return cuda::kv_dequantize_rows(in, x, ex.stream);
#endif
  require_cpu(ex, "kv_dequantize_rows");
  cpu::kv_dequantize_rows(in, x);
}

inline void kv_quant_scores(const Exec& ex, const float* q, uint32_t n_q, const KvQuantRows& k,
                            float scale, float* scores) {
#if KVZIP_HAVE_CUDA
  if (ex.device == Device::Cuda) return cuda::kv_quant_scores(q, n_q, k, scale, scores, ex.stream);
#endif
  require_cpu(ex, "kv_quant_scores");
  cpu::kv_quant_scores(q, n_q, k, scale, scores);
}

}  // namespace kvzip::kernels
