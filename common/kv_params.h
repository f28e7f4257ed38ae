// A quantization group's parameters in .kvz q8/q4 rows (spec/kvzip_format.md §12.1): the scale s
// and the minimum m of y = c·fma(s, q, m). The one definition of their stored form, which the
// quantizer (kernels/kv_quant.h), the attention over codes and the format's reconstruction
// (format::dequantize_rows) all decode through, so that every reader gets the same bits:
//   byte: one 16-bit word per group, little-endian: byte 0 the scale code e, byte 1 the zero
//         point z. s = (16 + (e mod 16)) · 2^(⌊e/16⌋ − 22)  (2^-18 … 31·2^-7, 4 significant bits
//         after the leading one: every step is 1/16 to 1/31 of s), m = −s · z · 2^(b − 8)
//         (q4: the zero point in sixteenths of a step; q8: in whole steps).
//   f16:  two binary16 words per group, s then m. The kernels still accept it
//         (KvQuantLayout::byte_params false) to measure what the byte form costs; no file holds it.
// Why bytes: half the parameter bytes of two f16 (2 per group instead of 4), which is 0.25 bit
// per value at a group of 64 channels, and every byte is a valid value (no NaN, no infinity, no
// negative scale to check). s has 5 significant bits and z 8, so m, s·q and s·q + m are all exact
// in binary32: only the multiply by the channel scale rounds. What it costs in error and answers
// is measured in docs/quantized-kv.md.
// The decoding half (scale codes, minima, words per group) is C++17 and __host__ __device__, so
// that the CUDA kernels (kernels/cuda/kv_quant.cu, C++17) decode with the same functions; the f16
// form and the writer need C++20 (common/half.h) and are host-only.
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define KVZIP_KV_HD __host__ __device__
#else
#define KVZIP_KV_HD
#endif

namespace kvzip {

struct KvGroupParams {
  float s, m;
};

// 16-bit parameter words per group: f16 scale and minimum (2), or one byte-parameter word (1).
// The one statement of that rule (kernels::KvQuantLayout, format's section layout and prune).
KVZIP_KV_HD constexpr uint32_t kv_param_words_per_group(bool byte_params) {
  return byte_params ? 1u : 2u;
}

// Exponent bias of the byte scale code: the largest scale 31·2^-7 ≈ 0.24 covers a q4 group whose
// values (divided by the channel scales) span [−1, 1] (needs 2/15 ≈ 0.13) with room to spare.
inline constexpr uint32_t kKvScaleBias = 22;

// s of scale code e, built from its bits: (16 + m)·2^(E − 22) = (1 + m/16)·2^(E + 4 − 22), a
// normal binary32 with biased exponent E + 127 + 4 − 22 and mantissa m in its top 4 bits. Exact.
KVZIP_KV_HD inline float kv_byte_scale(uint32_t e) {
  const uint32_t bits = (((e >> 4) & 15u) + 127u + 4u - kKvScaleBias) << 23 | (e & 15u) << 19;
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
#endif
}

// m of a group with scale s and zero point z (bits 8 or 4); exact (13 significant bits at most),
// so no compiler's contraction or rounding mode can change it.
KVZIP_KV_HD inline float kv_byte_min(float s, uint32_t z, uint32_t bits) {
  return -(s * (static_cast<float>(z & 255u) * (bits == 8 ? 1.0f : 0.0625f)));
}

// The parameters a byte-parameter word holds (byte 0 the scale code, byte 1 the zero point).
KVZIP_KV_HD inline KvGroupParams kv_byte_group_params(uint16_t word, uint32_t bits) {
  const float s = kv_byte_scale(word & 255u);
  return {s, kv_byte_min(s, static_cast<uint32_t>(word >> 8), bits)};
}

}  // namespace kvzip

#if __cplusplus >= 202002L  // host C++20 only: the f16 form (common/half.h) and the writer
#include <algorithm>
#include <array>
#include <cmath>

#include "common/half.h"

namespace kvzip {

// The parameters of group g of a row whose parameter words start at p.
inline KvGroupParams kv_group_params(const uint16_t* p, uint32_t g, bool byte_params,
                                     uint32_t bits) {
  if (!byte_params) return {f16_to_f32(p[2 * g]), f16_to_f32(p[2 * g + 1])};
  return kv_byte_group_params(p[g], bits);
}

// The code of value y (in the group's normalised units) under parameters p: the nearest grid
// value, clamped to the 2^b levels (a zero step, possible only for f16 parameters, gives 0). The
// one rounding rule of the quantizer (kernels/cpu/kv_quant.cc) and of the writer below.
inline float kv_code(float y, KvGroupParams p, float levels) {
  return p.s > 0.0f ? std::clamp(std::nearbyint((y - p.m) / p.s), 0.0f, levels) : 0.0f;
}

// How many scale codes above the smallest one whose 2^b − 1 steps cover the group's range
// kv_byte_params_for tries (each code 3–6% larger than the one before).
inline constexpr uint32_t kKvScaleAbove = 3;

// The byte parameters of a group of n values y (finite, normalised by the channel scales): of a
// small set of candidates, the one whose codes reconstruct y with the least squared error (the
// first in the order below on a tie). A scale of 5 significant bits cannot put both ends of a
// range on the grid, and where the values land matters for the answers more than the RMS error
// alone suggests (measured on the Normans article, q4 first-token KL against f32;
// docs/quantized-kv.md): least squares over these candidates gave a lower KL at every ratio than
// the rules that anchor one extreme of the range on the grid's end, and than also trying two
// smaller scales that clip the extremes. Candidates: for each scale code e0 … e0 + kKvScaleAbove
// (e0 the smallest covering [min(lo, 0), max(hi, 0)]; the grid always reaches 0, since z ≥ 0 puts
// m ≤ 0), the zero points that put the grid's bottom on min(lo, 0), its top on max(hi, 0), and
// its middle on the range's middle, each rounded and then ±1 (a ±1 can leave an extreme up to
// 1.5 zero-point units past the grid's end, where it clips, when that lowers the total). The
// anchored choices are among them, so the error is never larger than theirs. A range beyond the
// largest scale gets that scale.
inline uint16_t kv_byte_params_for(const float* y, uint32_t n, uint32_t bits) {
  static const std::array<float, 256> scales = [] {
    std::array<float, 256> t{};
    for (uint32_t e = 0; e < 256; ++e) t[e] = kv_byte_scale(e);
    return t;
  }();
  float lo = 0.0f, hi = 0.0f;  // min(lo, 0), max(hi, 0)
  for (uint32_t i = 0; i < n; ++i) lo = std::min(lo, y[i]), hi = std::max(hi, y[i]);
  const float levels = static_cast<float>((1u << bits) - 1);
  const float steps = bits == 8 ? 1.0f : 16.0f;  // zero-point units a step
  const auto it =
      std::lower_bound(scales.begin(), scales.end(), (hi - lo) / levels);  // increasing in e
  const uint32_t e0 = it == scales.end() ? 255u : static_cast<uint32_t>(it - scales.begin());
  uint16_t best = 0;
  double best_err = INFINITY;
  for (uint32_t e = e0; e <= std::min(e0 + kKvScaleAbove, 255u); ++e) {
    const float s = scales[e];
    const float z_bottom = -lo / s * steps, z_top = (levels * s - hi) / s * steps;
    std::array<uint32_t, 9> tried{};  // a scale's zero points: the anchors' ±1 often coincide
    size_t n_tried = 0;
    for (const float zc : {z_bottom, z_top, 0.5f * (z_bottom + z_top)})
      for (const float dz : {0.0f, -1.0f, 1.0f}) {
        const uint32_t z = static_cast<uint32_t>(std::clamp(std::nearbyint(zc) + dz, 0.0f, 255.0f));
        // A repeated word has the error it had, and only a strictly smaller one replaces the best,
        // as does stopping a sum once it reaches the best: neither changes which word wins.
        if (std::find(tried.begin(), tried.begin() + n_tried, z) != tried.begin() + n_tried)
          continue;
        tried[n_tried++] = z;
        const uint16_t w = static_cast<uint16_t>(e | z << 8);
        const KvGroupParams p = kv_byte_group_params(w, bits);
        double err = 0.0;
        for (uint32_t i = 0; i < n && err < best_err; ++i) {
          const double d = double(std::fma(p.s, kv_code(y[i], p, levels), p.m)) - double(y[i]);
          err += d * d;
        }
        if (err < best_err) best_err = err, best = w;
      }
  }
  return best;
}

}  // namespace kvzip
#endif  // __cplusplus >= 202002L
