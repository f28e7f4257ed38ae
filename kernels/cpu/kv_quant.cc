// CPU group-wise K/V quantization and attention over quantized rows (kernels/kv_quant.h). The
// quantizer is the definition the .kvz q8/q4 writer uses: scalar, no fused expressions, so every
// build writes the same bits. The attention paths never form a dequantized row: per group they
// take a dot product of (channel-scaled) query values with the codes widened to floats (vector
// loads, simd.h) and apply the group's scale and minimum once (decoded once per row from either
// stored form, common/kv_params.h). Rotated rows (common/hadamard.h):
// the quantizer codes H·x; the scores rotate each query once and the weighted sums rotate each
// output once, so the codes are used as stored.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "common/error.h"
#include "common/hadamard.h"
#include "common/half.h"
#include "common/kv_params.h"
#include "kernels/kv_quant.h"
#include "kernels/quant.h"
#include "kernels/simd.h"

namespace kvzip::kernels::cpu {
namespace {

inline uint32_t code_at(const uint8_t* row, uint32_t bits, uint32_t j) {
  if (bits == 8) return row[j];
  const uint8_t b = row[j >> 1];
  return (j & 1) ? (b >> 4) : (b & 0x0f);
}

void check_layout(const KvQuantLayout& l) {
  KVZIP_ASSERT((l.bits == 8 || l.bits == 4) && l.D % 2 == 0 && l.group > 0 && l.D % l.group == 0);
  KVZIP_ASSERT(!l.rotated || hadamard_size(l.D));
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
  std::vector<float> rotated;  // rotated rows: the channel scales and codes are those of H·x
  if (l.rotated) {
    rotated.assign(x, x + o.rows * D);
    for (size_t r = 0; r < o.rows; ++r) hadamard_rotate(rotated.data() + r * D, D);
    x = rotated.data();
  }
  for (uint32_t j = 0; j < D; ++j) {
    float a = 0.0f;
    for (size_t r = 0; r < o.rows; ++r) a = std::max(a, std::fabs(x[r * D + j]));
    o.channel_scale[j] = a > 0.0f ? a : 1.0f;
  }
  std::vector<float> y(Gs);
  const size_t P = l.param_words();
  for (size_t r = 0; r < o.rows; ++r) {
    const float* xr = x + r * D;
    uint16_t* pr = o.params + r * P;
    uint8_t* cr = o.codes + r * l.code_bytes();
    std::fill(cr, cr + l.code_bytes(), uint8_t{0});
    for (uint32_t g = 0; g < G; ++g) {
      float lo = INFINITY, hi = -INFINITY;
      for (uint32_t i = 0; i < Gs; ++i) {
        y[i] = xr[g * Gs + i] / o.channel_scale[g * Gs + i];  // in [-1, 1]
        lo = std::min(lo, y[i]);
        hi = std::max(hi, y[i]);
      }
      // The parameters are rounded to their stored form first and the codes computed against the
      // rounded values, so the reconstruction uses exactly what was optimised for.
      if (l.byte_params) {
        pr[g] = kv_byte_params_for(y.data(), Gs, l.bits);
      } else {
        const uint16_t m16 = f32_to_f16(lo);
        pr[2 * g] = f32_to_f16((hi - f16_to_f32(m16)) / levels);
        pr[2 * g + 1] = m16;
      }
      const KvGroupParams p = kv_group_params(pr, g, l.byte_params, l.bits);
      for (uint32_t i = 0; i < Gs; ++i) {
        const uint32_t j = g * Gs + i, code = static_cast<uint32_t>(kv_code(y[i], p, levels));
        if (l.bits == 8) cr[j] = static_cast<uint8_t>(code);
        else cr[j >> 1] |= static_cast<uint8_t>(code << ((j & 1) * 4));
      }
    }
  }
}

void kv_dequantize_rows(const KvQuantRows& in, float* x) {
  const KvQuantLayout& l = in.layout;
  check_layout(l);
  const uint32_t D = l.D, Gs = l.group, G = l.groups();
  for (size_t r = 0; r < in.rows; ++r) {
    const uint16_t* pr = in.params + r * l.param_words();
    const uint8_t* cr = in.codes + r * l.code_bytes();
    for (uint32_t g = 0; g < G; ++g) {
      const KvGroupParams p = kv_group_params(pr, g, l.byte_params, l.bits);
      for (uint32_t i = 0; i < Gs; ++i) {
        const uint32_t j = g * Gs + i;
        x[r * D + j] =
            in.channel_scale[j] * std::fma(p.s, static_cast<float>(code_at(cr, l.bits, j)), p.m);
      }
    }
    if (l.rotated) hadamard_rotate(x + r * D, D);
  }
}

// The attention paths work in "code order": q8 rows and q4 rows with an odd group size keep the
// channel order; q4 rows with an even group size take the low nibbles first (channels 0, 2, 4, ...
// in the first D/2 places) and the high nibbles after (channels 1, 3, 5, ...), so that a row's
// bytes widen to floats with plain vector loads and no interleaving. Group g then covers
// [g·Gs/2, (g+1)·Gs/2) of each half instead of [g·Gs, (g+1)·Gs). The queries (scores) and the
// accumulators (weighted sums) are kept in the same order, so only the summation order differs
// from a dot product in channel order.
namespace {

using simd::kLanes;
using simd::VecF;

struct CodeOrder {
  bool split;  // q4 with an even group size
  uint32_t D, Gs;
  // Place of channel j in code order.
  uint32_t place(uint32_t j) const { return split ? (j & 1) * (D / 2) + j / 2 : j; }
  // Ranges [begin, begin + len) of group g in code order: one, or one in each half.
  uint32_t ranges() const { return split ? 2 : 1; }
  uint32_t begin(uint32_t g, uint32_t half) const {
    return split ? half * (D / 2) + g * (Gs / 2) : g * Gs;
  }
  uint32_t len() const { return split ? Gs / 2 : Gs; }
};

CodeOrder code_order(const KvQuantLayout& l) {
  return {l.bits == 4 && l.group % 2 == 0, l.D, l.group};
}

// kLanes bytes at p (their low nibbles, their high nibbles, or as they are) as floats. GCC turns
// __builtin_convertvector from bytes into one insert per lane, so x86 uses the widening moves.
enum class Nibble { None, Low, High };
template <Nibble N>
inline VecF bytes_to_floats(const uint8_t* p) {
#if defined(__AVX2__)
#if defined(__AVX512F__)
  __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));  // kLanes = 16 bytes
#else
  __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));  // kLanes = 8 bytes
#endif
  if constexpr (N == Nibble::Low) b = _mm_and_si128(b, _mm_set1_epi8(0x0f));
  if constexpr (N == Nibble::High) b = _mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi8(0x0f));
#if defined(__AVX512F__)
  const __m512 f = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b));
#else
  const __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b));
#endif
  VecF v;
  std::memcpy(&v, &f, sizeof v);
  return v;
#else
  VecF v;
  for (int i = 0; i < kLanes; ++i)
    v[i] = static_cast<float>(N == Nibble::Low    ? p[i] & 0x0f
                              : N == Nibble::High ? p[i] >> 4
                                                  : p[i]);
  return v;
#endif
}

// One row's codes as floats in code order.
void widen_codes(const uint8_t* row, const KvQuantLayout& l, const CodeOrder& o, float* out) {
  const uint32_t D = l.D;
  if (l.bits == 8) {
    uint32_t j = 0;
    for (; j + kLanes <= D; j += kLanes)
      simd::store(out + j, bytes_to_floats<Nibble::None>(row + j));
    for (; j < D; ++j) out[j] = static_cast<float>(row[j]);
    return;
  }
  if (!o.split) {
    unpack_codes(row, 4, D, out);
    return;
  }
  const uint32_t H = D / 2;
  uint32_t i = 0;
  for (; i + kLanes <= H; i += kLanes) {
    simd::store(out + i, bytes_to_floats<Nibble::Low>(row + i));
    simd::store(out + H + i, bytes_to_floats<Nibble::High>(row + i));
  }
  for (; i < H; ++i) {
    out[i] = static_cast<float>(row[i] & 0x0f);
    out[H + i] = static_cast<float>(row[i] >> 4);
  }
}

// Sum of the lanes by halving (a shuffle tree: a few instructions where a lane-by-lane sum is a
// chain of dependent adds; this runs once per row and query).
inline float lane_sum(VecF v) {
#if defined(__AVX512F__)
  typedef float V8 __attribute__((vector_size(32)));
  const V8 h = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
               __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
  typedef float V4 __attribute__((vector_size(16)));
  V4 q = __builtin_shufflevector(h, h, 0, 1, 2, 3) + __builtin_shufflevector(h, h, 4, 5, 6, 7);
#elif defined(__AVX__)
  typedef float V4 __attribute__((vector_size(16)));
  V4 q = __builtin_shufflevector(v, v, 0, 1, 2, 3) + __builtin_shufflevector(v, v, 4, 5, 6, 7);
#else
  typedef float V4 __attribute__((vector_size(16)));
  V4 q = v;
#endif
  q += __builtin_shufflevector(q, q, 2, 3, 0, 1);
  q += __builtin_shufflevector(q, q, 1, 0, 3, 2);
  return q[0];
}

// acc + Σ a[i]·b[i] over [0, n), lanes kept apart; *tail gets the products past the last vector.
inline VecF dot_acc(VecF acc, const float* a, const float* b, uint32_t n, float* tail) {
  uint32_t i = 0;
  for (; i + kLanes <= n; i += kLanes) acc += simd::load(a + i) * simd::load(b + i);
  for (; i < n; ++i) *tail += a[i] * b[i];
  return acc;
}

// A row's group parameters decoded into sm (2·groups): s then m of each group.
inline void row_params(const KvQuantLayout& l, const uint16_t* p, float* sm) {
  for (uint32_t g = 0; g < l.groups(); ++g) {
    const KvGroupParams gp = kv_group_params(p, g, l.byte_params, l.bits);
    sm[2 * g] = gp.s;
    sm[2 * g + 1] = gp.m;
  }
}

// acc[i] += x·c[i] + y over [0, n).
inline void axpb(float* acc, const float* c, float x, float y, uint32_t n) {
  const VecF xv = simd::splat(x), yv = simd::splat(y);
  uint32_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    simd::store(acc + i, simd::load(acc + i) + (xv * simd::load(c + i) + yv));
  for (; i < n; ++i) acc[i] += x * c[i] + y;
}

// kv_quant_scores for rows of one group (G = 1) and NV whole vectors: the general loop's steps
// (the group's vectors in code order into one vector, its lane sum, s and m applied in the same
// expression) with the loop bounds known, which the general loop spends more on than on its
// products (perf, q8 files of SmolLM2's 64-channel heads).
template <uint32_t NV>
void scores_one_group(const float* qc, const float* qsum, uint32_t n_q, const KvQuantRows& k,
                      float scale, const CodeOrder& o, float* codes, float* scores) {
  const KvQuantLayout& l = k.layout;
  constexpr uint32_t D = NV * kLanes;
  float sm[2];
  for (size_t r = 0; r < k.rows; ++r) {
    widen_codes(k.codes + r * l.code_bytes(), l, o, codes);
    row_params(l, k.params + r * l.param_words(), sm);
    for (uint32_t t = 0; t < n_q; ++t) {
      const float* qt = qc + size_t(t) * D;
      VecF dv{};
      for (uint32_t n = 0; n < NV; ++n)
        dv += simd::load(qt + n * kLanes) * simd::load(codes + n * kLanes);
      const float tail = 0.0f;  // the general loop's expression, term for term: the same bits
      float acc = 0.0f;
      acc += sm[0] * (lane_sum(dv) + tail) + sm[1] * qsum[t];
      scores[size_t(t) * k.rows + r] = scale * acc;
    }
  }
}

}  // namespace

void kv_quant_scores(const float* q, uint32_t n_q, const KvQuantRows& k, float scale,
                     float* scores) {
  const KvQuantLayout& l = k.layout;
  check_layout(l);
  const uint32_t D = l.D, G = l.groups();
  const CodeOrder o = code_order(l);
  // qc = c ⊙ q per query in code order, and its per-group sums (the minimum's coefficient).
  std::vector<float> qc(size_t(n_q) * D), qsum(size_t(n_q) * G, 0.0f), codes(D), qr;
  if (l.rotated) {  // q·(H·y) = (H·q)·y: the codes are used as stored
    qr.assign(q, q + size_t(n_q) * D);
    for (uint32_t t = 0; t < n_q; ++t) hadamard_rotate(qr.data() + size_t(t) * D, D);
    q = qr.data();
  }
  for (uint32_t t = 0; t < n_q; ++t)
    for (uint32_t j = 0; j < D; ++j) {
      const float x = q[size_t(t) * D + j] * k.channel_scale[j];
      qc[size_t(t) * D + o.place(j)] = x;
      qsum[size_t(t) * G + j / l.group] += x;
    }
  std::vector<float> sm(2 * G);
  if (G == 1 && D % kLanes == 0) {  // one group a row (the files' default): its ranges are all of D
    switch (D / kLanes) {
      case 4:
        return scores_one_group<4>(qc.data(), qsum.data(), n_q, k, scale, o, codes.data(), scores);
      case 8:
        return scores_one_group<8>(qc.data(), qsum.data(), n_q, k, scale, o, codes.data(), scores);
      case 16:
        return scores_one_group<16>(qc.data(), qsum.data(), n_q, k, scale, o, codes.data(), scores);
      default: break;
    }
  }
  for (size_t r = 0; r < k.rows; ++r) {
    widen_codes(k.codes + r * l.code_bytes(), l, o, codes.data());
    row_params(l, k.params + r * l.param_words(), sm.data());  // once per row
    for (uint32_t t = 0; t < n_q; ++t) {
      const float* qt = qc.data() + size_t(t) * D;
      float acc = 0.0f;
      for (uint32_t g = 0; g < G; ++g) {
        VecF dv{};
        float tail = 0.0f;
        for (uint32_t half = 0; half < o.ranges(); ++half)
          dv = dot_acc(dv, qt + o.begin(g, half), codes.data() + o.begin(g, half), o.len(), &tail);
        acc += sm[2 * g] * (lane_sum(dv) + tail) + sm[2 * g + 1] * qsum[size_t(t) * G + g];
      }
      scores[size_t(t) * k.rows + r] = scale * acc;
    }
  }
}

namespace {

constexpr uint32_t kSumRows = 16;  // V rows widened per block of the weighted sum
constexpr uint32_t kSumVecs = 8;   // accumulator vectors held in registers over a block

// at[0, NV vectors) += Σ_i (x_i · codes_i + y_i) over the block's nb rows, in row order: x_i =
// w_i · s and y_i = w_i · m of the group each vector lies in (gv[n]; sm: the block's rows'
// parameters, 2·G a row), codes_i the widened row i (D floats apart) — axpb's steps, held in
// registers across the block where a row at a time loads and stores every accumulator once per
// row and query. (Summing the minimums apart, Σ w·m once per group, cancels against Σ w·s·code:
// 3.6x the error of dequantize-then-attend in the tests.)
template <uint32_t NV>
void sum_block(float* at, const float* wt, const float* codes, const float* sm, const uint32_t* gv,
               uint32_t nb, uint32_t D, uint32_t G) {
  VecF a[NV];
  for (uint32_t n = 0; n < NV; ++n) a[n] = simd::load(at + n * kLanes);
  for (uint32_t i = 0; i < nb; ++i) {
    const float wr = wt[i];
    if (wr == 0.0f) continue;
    const float* si = sm + size_t(i) * 2 * G;
    const float* ci = codes + size_t(i) * D;
    if (G == 1) {  // one x and y for the row (the files' default), made once
      const VecF x = simd::splat(wr * si[0]), y = simd::splat(wr * si[1]);
      for (uint32_t n = 0; n < NV; ++n) a[n] += x * simd::load(ci + n * kLanes) + y;
      continue;
    }
    for (uint32_t n = 0; n < NV; ++n)
      a[n] += simd::splat(wr * si[2 * gv[n]]) * simd::load(ci + n * kLanes) +
              simd::splat(wr * si[2 * gv[n] + 1]);
  }
  for (uint32_t n = 0; n < NV; ++n) simd::store(at + n * kLanes, a[n]);
}

}  // namespace

void kv_quant_weighted_sum(const float* w, uint32_t n_q, const KvQuantRows& v, float* out) {
  const KvQuantLayout& l = v.layout;
  check_layout(l);
  const uint32_t D = l.D, G = l.groups();
  const CodeOrder o = code_order(l);
  // acc (code order) += w·(s·code + m) row by row; the channel scale is applied once per output at
  // the end. Blocks of kSumRows rows are widened once and their parameters converted once, then
  // each query row's accumulators stay in registers over the block (sum_block) where every group
  // range is whole vectors; otherwise axpb a row at a time. The same steps either way.
  std::vector<float> acc(size_t(n_q) * D, 0.0f);
  std::vector<float> codes(size_t(kSumRows) * D), sm(size_t(kSumRows) * 2 * G);
  const bool whole = D % kLanes == 0 && o.len() % kLanes == 0;
  std::vector<uint32_t> gv(D / kLanes + 1);  // group of each accumulator vector, in code order
  for (uint32_t n = 0; whole && n < D / kLanes; ++n) {
    const uint32_t p = n * kLanes;
    gv[n] = o.split ? (p % (D / 2)) / o.len() : p / o.len();
  }
  for (size_t r0 = 0; r0 < v.rows; r0 += kSumRows) {
    const uint32_t nb = uint32_t(std::min<size_t>(kSumRows, v.rows - r0));
    for (uint32_t i = 0; i < nb; ++i) {
      widen_codes(v.codes + (r0 + i) * l.code_bytes(), l, o, codes.data() + size_t(i) * D);
      row_params(l, v.params + (r0 + i) * l.param_words(), sm.data() + size_t(i) * 2 * G);
    }
    for (uint32_t t = 0; t < n_q; ++t) {
      const float* wt = w + size_t(t) * v.rows + r0;
      float* at = acc.data() + size_t(t) * D;
      if (!whole) {
        for (uint32_t i = 0; i < nb; ++i) {
          if (wt[i] == 0.0f) continue;
          for (uint32_t g = 0; g < G; ++g)
            for (uint32_t half = 0; half < o.ranges(); ++half) {
              const uint32_t b = o.begin(g, half);
              axpb(at + b, codes.data() + size_t(i) * D + b, wt[i] * sm[size_t(i) * 2 * G + 2 * g],
                   wt[i] * sm[size_t(i) * 2 * G + 2 * g + 1], o.len());
            }
        }
        continue;
      }
      for (uint32_t c = 0; c < D; c += kSumVecs * kLanes) {
        const float* cb = codes.data() + c;
        const uint32_t* g = gv.data() + c / kLanes;
        switch (std::min(kSumVecs, (D - c) / kLanes)) {
          case 1: sum_block<1>(at + c, wt, cb, sm.data(), g, nb, D, G); break;
          case 2: sum_block<2>(at + c, wt, cb, sm.data(), g, nb, D, G); break;
          case 3: sum_block<3>(at + c, wt, cb, sm.data(), g, nb, D, G); break;
          case 4: sum_block<4>(at + c, wt, cb, sm.data(), g, nb, D, G); break;
          case 5: sum_block<5>(at + c, wt, cb, sm.data(), g, nb, D, G); break;
          case 6: sum_block<6>(at + c, wt, cb, sm.data(), g, nb, D, G); break;
          case 7: sum_block<7>(at + c, wt, cb, sm.data(), g, nb, D, G); break;
          default: sum_block<kSumVecs>(at + c, wt, cb, sm.data(), g, nb, D, G); break;
        }
      }
    }
  }
  for (uint32_t t = 0; t < n_q; ++t) {
    for (uint32_t j = 0; j < D; ++j)
      out[size_t(t) * D + j] = v.channel_scale[j] * acc[size_t(t) * D + o.place(j)];
    if (l.rotated) hadamard_rotate(out + size_t(t) * D, D);  // Σ w·(H·y) = H·Σ w·y
  }
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
  KVZIP_ASSERT(R <= UINT32_MAX);
  kv_quant_scores(a.q, a.n_q, a.k, a.scale, a.scores);
  for (uint32_t t = 0; t < a.n_q; ++t) {  // the f32 kernel's softmax (simd exp, fp32 sums)
    float* s = a.scores + size_t(t) * R;
    const size_t seen = a.limit ? std::min<size_t>(a.limit[t], R) : R;
    std::fill(s + seen, s + R, -std::numeric_limits<float>::infinity());
    if (a.skip)
      for (size_t r = 0; r < seen; ++r)
        if ((a.skip[r >> 6] >> (r & 63)) & 1u) s[r] = -std::numeric_limits<float>::infinity();
    const float mx = simd::row_max(s, static_cast<uint32_t>(R));
    if (mx == -std::numeric_limits<float>::infinity()) {  // sees no row
      std::fill(s, s + R, 0.0f);
      if (a.lse) a.lse[t] = mx;
      continue;
    }
    const float sum = simd::exp_sum(s, static_cast<uint32_t>(R), mx);
    const float inv = 1.0f / sum;
    for (size_t r = 0; r < R; ++r) s[r] *= inv;
    if (a.lse) a.lse[t] = mx + std::log(sum);
  }
  kv_quant_weighted_sum(a.scores, a.n_q, a.v, a.out);
}

}  // namespace kvzip::kernels::cpu
