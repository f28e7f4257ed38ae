// CPU group-wise K/V quantization and attention over quantized rows (kernels/kv_quant.h). The
// quantizer is the definition the .kvz q8/q4 writer uses: scalar, no fused expressions, so every
// build writes the same bits. The attention paths never form a dequantized row: per group they
// take a dot product of (channel-scaled) query values with the integer codes and apply the
// group's scale and minimum once.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common/error.h"
#include "common/half.h"
#include "kernels/kv_quant.h"
#include "kernels/quant.h"

namespace kvzip::cpu {
namespace {

inline uint32_t code_at(const uint8_t* row, uint32_t bits, uint32_t j) {
  if (bits == 8) return row[j];
  const uint8_t b = row[j >> 1];
  return (j & 1) ? (b >> 4) : (b & 0x0f);
}

void check_layout(const KvQuantLayout& l) {
  KVZIP_ASSERT((l.bits == 8 || l.bits == 4) && l.D % 2 == 0 && l.group > 0 && l.D % l.group == 0);
}

// Codes of one row unpacked to floats (n = D): the shared inner step of scores and sums.
inline void unpack_codes(const uint8_t* row, uint32_t bits, uint32_t D, float* out) {
  if (bits == 8) {
    for (uint32_t j = 0; j < D; ++j) out[j] = static_cast<float>(row[j]);
    return;
  }
  for (uint32_t i = 0; i < D / 2; ++i) {
    out[2 * i] = static_cast<float>(row[i] & 0x0f);
    out[2 * i + 1] = static_cast<float>(row[i] >> 4);
  }
}

}  // namespace

void kv_quantize_rows(const float* x, const KvQuantRowsOut& o) {
  const KvQuantLayout& l = o.layout;
  check_layout(l);
  const uint32_t D = l.D, Gs = l.group, G = l.groups();
  const float levels = static_cast<float>((1u << l.bits) - 1);
  for (uint32_t j = 0; j < D; ++j) {
    float a = 0.0f;
    for (size_t r = 0; r < o.rows; ++r) a = std::max(a, std::fabs(x[r * D + j]));
    o.channel_scale[j] = a > 0.0f ? a : 1.0f;
  }
  std::vector<float> y(Gs);
  for (size_t r = 0; r < o.rows; ++r) {
    const float* xr = x + r * D;
    uint16_t* pr = o.params + r * 2 * G;
    uint8_t* cr = o.codes + r * l.code_bytes();
    std::fill(cr, cr + l.code_bytes(), uint8_t{0});
    for (uint32_t g = 0; g < G; ++g) {
      float lo = INFINITY, hi = -INFINITY;
      for (uint32_t i = 0; i < Gs; ++i) {
        y[i] = xr[g * Gs + i] / o.channel_scale[g * Gs + i];  // in [-1, 1]
        lo = std::min(lo, y[i]);
        hi = std::max(hi, y[i]);
      }
      // The parameters are rounded to f16 first and the codes computed against the rounded
      // values, so the reconstruction uses exactly what was optimised for.
      const uint16_t m16 = f32_to_f16(lo);
      const float m = f16_to_f32(m16);
      const float span = hi - m;
      const uint16_t s16 = f32_to_f16(span / levels);
      const float s = f16_to_f32(s16);
      pr[2 * g] = s16;
      pr[2 * g + 1] = m16;
      for (uint32_t i = 0; i < Gs; ++i) {
        float q = s > 0.0f ? std::nearbyint((y[i] - m) / s) : 0.0f;
        q = std::clamp(q, 0.0f, levels);
        const uint32_t j = g * Gs + i, code = static_cast<uint32_t>(q);
        if (l.bits == 8)
          cr[j] = static_cast<uint8_t>(code);
        else
          cr[j >> 1] |= static_cast<uint8_t>(code << ((j & 1) * 4));
      }
    }
  }
}

void kv_dequantize_rows(const KvQuantRows& in, float* x) {
  const KvQuantLayout& l = in.layout;
  check_layout(l);
  const uint32_t D = l.D, Gs = l.group, G = l.groups();
  for (size_t r = 0; r < in.rows; ++r) {
    const uint16_t* pr = in.params + r * 2 * G;
    const uint8_t* cr = in.codes + r * l.code_bytes();
    for (uint32_t g = 0; g < G; ++g) {
      const float s = f16_to_f32(pr[2 * g]), m = f16_to_f32(pr[2 * g + 1]);
      for (uint32_t i = 0; i < Gs; ++i) {
        const uint32_t j = g * Gs + i;
        x[r * D + j] = in.channel_scale[j] * std::fma(s, static_cast<float>(code_at(cr, l.bits, j)), m);
      }
    }
  }
}

void kv_quant_scores(const float* q, uint32_t n_q, const KvQuantRows& k, float scale, float* scores) {
  const KvQuantLayout& l = k.layout;
  check_layout(l);
  const uint32_t D = l.D, Gs = l.group, G = l.groups();
  // qc = c ⊙ q per query, and its per-group sums (the minimum's coefficient).
  std::vector<float> qc(size_t(n_q) * D), qsum(size_t(n_q) * G, 0.0f), codes(D);
  for (uint32_t t = 0; t < n_q; ++t)
    for (uint32_t j = 0; j < D; ++j) {
      qc[size_t(t) * D + j] = q[size_t(t) * D + j] * k.channel_scale[j];
      qsum[size_t(t) * G + j / Gs] += qc[size_t(t) * D + j];
    }
  std::vector<float> sm(2 * G);
  for (size_t r = 0; r < k.rows; ++r) {
    unpack_codes(k.codes + r * l.code_bytes(), l.bits, D, codes.data());
    const uint16_t* pr = k.params + r * 2 * G;
    for (uint32_t h = 0; h < 2 * G; ++h) sm[h] = f16_to_f32(pr[h]);  // once per row
    for (uint32_t t = 0; t < n_q; ++t) {
      const float* qt = qc.data() + size_t(t) * D;
      float acc = 0.0f;
      for (uint32_t g = 0; g < G; ++g) {
        const float* qg = qt + g * Gs;
        const float* cg = codes.data() + g * Gs;
        // Eight independent partial sums: the compiler vectorises them (one sum would be a
        // chain of dependent adds); the order differs from a left-to-right sum only by rounding.
        float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        uint32_t i = 0;
        for (; i + 8 <= Gs; i += 8)
          for (uint32_t u = 0; u < 8; ++u) part[u] += qg[i + u] * cg[i + u];
        float dot = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
        for (; i < Gs; ++i) dot += qg[i] * cg[i];
        acc += sm[2 * g] * dot + sm[2 * g + 1] * qsum[size_t(t) * G + g];
      }
      scores[size_t(t) * k.rows + r] = scale * acc;
    }
  }
}

void kv_quant_weighted_sum(const float* w, uint32_t n_q, const KvQuantRows& v, float* out) {
  const KvQuantLayout& l = v.layout;
  check_layout(l);
  const uint32_t D = l.D, Gs = l.group, G = l.groups();
  // Rows outer, queries inner: each row's codes are unpacked and its parameters converted once.
  std::vector<float> acc(size_t(n_q) * D, 0.0f), codes(D), sm(2 * G);
  for (size_t r = 0; r < v.rows; ++r) {
    unpack_codes(v.codes + r * l.code_bytes(), l.bits, D, codes.data());
    const uint16_t* pr = v.params + r * 2 * G;
    for (uint32_t h = 0; h < 2 * G; ++h) sm[h] = f16_to_f32(pr[h]);
    for (uint32_t t = 0; t < n_q; ++t) {
      const float wr = w[size_t(t) * v.rows + r];
      if (wr == 0.0f) continue;
      for (uint32_t g = 0; g < G; ++g) {
        const float ws = wr * sm[2 * g], wm = wr * sm[2 * g + 1];
        float* ag = acc.data() + size_t(t) * D + g * Gs;
        const float* cg = codes.data() + g * Gs;
        for (uint32_t i = 0; i < Gs; ++i) ag[i] += ws * cg[i] + wm;
      }
    }
  }
  for (uint32_t t = 0; t < n_q; ++t)
    for (uint32_t j = 0; j < D; ++j) out[size_t(t) * D + j] = v.channel_scale[j] * acc[size_t(t) * D + j];
}

void kv_quant_attend(const KvQuantAttendArgs& a) {
  KVZIP_ASSERT(a.k.rows == a.v.rows && a.k.layout.D == a.v.layout.D);
  const size_t R = a.k.rows;
  const uint32_t D = a.k.layout.D;
  if (R == 0) {
    std::fill(a.out, a.out + size_t(a.n_q) * D, 0.0f);
    if (a.lse) std::fill(a.lse, a.lse + a.n_q, -std::numeric_limits<float>::infinity());
    return;
  }
  kv_quant_scores(a.q, a.n_q, a.k, a.scale, a.scores);
  for (uint32_t t = 0; t < a.n_q; ++t) {
    float* s = a.scores + size_t(t) * R;
    const float mx = *std::max_element(s, s + R);
    double sum = 0.0;
    for (size_t r = 0; r < R; ++r) {
      s[r] = std::exp(s[r] - mx);
      sum += s[r];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (size_t r = 0; r < R; ++r) s[r] *= inv;
    if (a.lse) a.lse[t] = mx + static_cast<float>(std::log(sum));
  }
  kv_quant_weighted_sum(a.scores, a.n_q, a.v, a.out);
}

}  // namespace kvzip::cpu
