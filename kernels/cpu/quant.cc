// ggml type table and fp32 dequantization (see quant.h). The block decoders follow the layouts in
// ggml's ggml-common.h / ggml-quants.c, written from the documented formulas; each reads its
// block byte-wise (little-endian), so no struct packing or alignment of src is assumed.
#include "kernels/quant.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "common/error.h"
#include "common/half.h"
#include "kernels/detail/dequant_x86.h"

namespace kvzip::kernels::quant {
namespace {

// Indexed by ggml id; entries with a null name are ids ggml never had or removed.
constexpr int kTypeCount = 40;
constexpr TypeTraits kTraits[kTypeCount] = {
    {"F32", 1, 4, true},         {"F16", 1, 2, true},         {"Q4_0", 32, 18, true},
    {"Q4_1", 32, 20, true},      {nullptr, 0, 0, false},      {nullptr, 0, 0, false},
    {"Q5_0", 32, 22, true},      {"Q5_1", 32, 24, true},      {"Q8_0", 32, 34, true},
    {"Q8_1", 32, 36, false},     {"Q2_K", 256, 84, false},    {"Q3_K", 256, 110, false},
    {"Q4_K", 256, 144, true},    {"Q5_K", 256, 176, true},    {"Q6_K", 256, 210, true},
    {"Q8_K", 256, 292, false},   {"IQ2_XXS", 256, 66, false}, {"IQ2_XS", 256, 74, false},
    {"IQ3_XXS", 256, 98, false}, {"IQ1_S", 256, 50, false},   {"IQ4_NL", 32, 18, false},
    {"IQ3_S", 256, 110, false},  {"IQ2_S", 256, 82, false},   {"IQ4_XS", 256, 136, false},
    {"I8", 1, 1, false},         {"I16", 1, 2, false},        {"I32", 1, 4, false},
    {"I64", 1, 8, false},        {"F64", 1, 8, false},        {"IQ1_M", 256, 56, false},
    {"BF16", 1, 2, true},        {nullptr, 0, 0, false},      {nullptr, 0, 0, false},
    {nullptr, 0, 0, false},      {"TQ1_0", 256, 54, false},   {"TQ2_0", 256, 66, false},
    {nullptr, 0, 0, false},      {nullptr, 0, 0, false},      {nullptr, 0, 0, false},
    {"MXFP4", 32, 17, false},
};

inline uint16_t rd16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }
inline uint32_t rd32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
inline float rdh(const uint8_t* p) { return f16_to_f32(rd16(p)); }

inline float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t float_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

void deq_f16(const uint8_t* s, float* y, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 2 * i));
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < n; ++i) y[i] = f16_to_f32(rd16(s + 2 * i));
}

// Q4_0 block (18 B): half d; u8 qs[16]. Low nibbles are elements 0..15, high nibbles 16..31.
void deq_q4_0(const uint8_t* b, float* y) {
  const float d = rdh(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = float(int(qs[j] & 0xF) - 8) * d;
    y[j + 16] = float(int(qs[j] >> 4) - 8) * d;
  }
}

// Q4_1 block (20 B): half d; half m; u8 qs[16]. y = q*d + m.
void deq_q4_1(const uint8_t* b, float* y) {
  const float d = rdh(b), m = rdh(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = float(qs[j] & 0xF) * d + m;
    y[j + 16] = float(qs[j] >> 4) * d + m;
  }
}

// Q5_0 block (22 B): half d; u32 qh; u8 qs[16]. Bit j of qh is the 5th bit of element j.
void deq_q5_0(const uint8_t* b, float* y) {
  const float d = rdh(b);
  const uint32_t qh = rd32(b + 2);
  const uint8_t* qs = b + 6;
  for (int j = 0; j < 16; ++j) {
    const int lo = int((qs[j] & 0xF) | ((qh >> j) & 1) << 4);
    const int hi = int((qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4);
    y[j] = float(lo - 16) * d;
    y[j + 16] = float(hi - 16) * d;
  }
}

// Q5_1 block (24 B): half d; half m; u32 qh; u8 qs[16]. y = q*d + m, q unsigned 5-bit.
void deq_q5_1(const uint8_t* b, float* y) {
  const float d = rdh(b), m = rdh(b + 2);
  const uint32_t qh = rd32(b + 4);
  const uint8_t* qs = b + 8;
  for (int j = 0; j < 16; ++j) {
    const uint32_t lo = (qs[j] & 0xF) | ((qh >> j) & 1) << 4;
    const uint32_t hi = (qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4;
    y[j] = float(lo) * d + m;
    y[j + 16] = float(hi) * d + m;
  }
}

// Q8_0 block (34 B): half d; i8 qs[32].
void deq_q8_0(const uint8_t* b, float* y) {
  const float d = rdh(b);
  const int8_t* qs = reinterpret_cast<const int8_t*>(b + 2);
  for (int j = 0; j < 32; ++j) y[j] = float(qs[j]) * d;
}

// Q4_K block (144 B): half d; half dmin; u8 scales[12]; u8 qs[128]. y = d*sc*q - dmin*m.
// Q5_K block (176 B): the same with u8 qh[32] before qs: bit 2c of qh[l] is the fifth bit of
// element l of 64-group c's low half, bit 2c+1 of its high half.
template <bool kQ5>
void deq_k45(const uint8_t* b, float* y) {
  const float d = rdh(b), dmin = rdh(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + (kQ5 ? 48 : 16);
  for (int c = 0; c < 4; ++c) {
    int sc1, m1, sc2, m2;
    detail::scale_min_k4(2 * c, scales, sc1, m1);
    detail::scale_min_k4(2 * c + 1, scales, sc2, m2);
    const float d1 = d * float(sc1), mm1 = dmin * float(m1);
    const float d2 = d * float(sc2), mm2 = dmin * float(m2);
    const uint8_t* q = qs + 32 * c;
    const uint8_t lo_bit = uint8_t(1u << (2 * c)), hi_bit = uint8_t(2u << (2 * c));
    float* out = y + 64 * c;
    for (int l = 0; l < 32; ++l) {
      const int lo = (q[l] & 0xF) + (kQ5 && (qh[l] & lo_bit) ? 16 : 0);
      const int hi = (q[l] >> 4) + (kQ5 && (qh[l] & hi_bit) ? 16 : 0);
      out[l] = d1 * float(lo) - mm1;
      out[32 + l] = d2 * float(hi) - mm2;
    }
  }
}

// Q6_K block (210 B): u8 ql[128]; u8 qh[64]; i8 scales[16]; half d (last).
void deq_q6_k(const uint8_t* b, float* y) {
  const float d = rdh(b + 208);
  for (int n = 0; n < 2; ++n) {
    const uint8_t* ql = b + 64 * n;
    const uint8_t* qh = b + 128 + 32 * n;
    const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192) + 8 * n;
    float* out = y + 128 * n;
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = int((ql[l] & 0xF) | ((qh[l] >> 0) & 3) << 4) - 32;
      const int q2 = int((ql[l + 32] & 0xF) | ((qh[l] >> 2) & 3) << 4) - 32;
      const int q3 = int((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
      const int q4 = int((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
      out[l] = d * float(sc[is + 0]) * float(q1);
      out[l + 32] = d * float(sc[is + 2]) * float(q2);
      out[l + 64] = d * float(sc[is + 4]) * float(q3);
      out[l + 96] = d * float(sc[is + 6]) * float(q4);
    }
  }
}

using BlockFn = void (*)(const uint8_t*, float*);

BlockFn block_fn(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0: return deq_q4_0;
    case GgmlType::Q4_1: return deq_q4_1;
    case GgmlType::Q5_0: return deq_q5_0;
    case GgmlType::Q5_1: return deq_q5_1;
    case GgmlType::Q8_0: return deq_q8_0;
    case GgmlType::Q4_K: return deq_k45<false>;
    case GgmlType::Q5_K: return deq_k45<true>;
    case GgmlType::Q6_K: return deq_q6_k;
    default: return nullptr;
  }
}

}  // namespace

const TypeTraits* type_traits(uint32_t id) {
  if (id >= uint32_t(kTypeCount) || kTraits[id].name == nullptr) return nullptr;
  return &kTraits[id];
}

const TypeTraits& traits(GgmlType t) {
  const TypeTraits* tr = type_traits(uint32_t(t));
  if (!tr)
    throw Error(Errc::unsupported, "unknown ggml tensor type id " + std::to_string(uint32_t(t)));
  return *tr;
}

const char* type_name(GgmlType t) {
  static thread_local std::string buf;
  if (const TypeTraits* tr = type_traits(uint32_t(t))) return tr->name;
  buf = "type#" + std::to_string(uint32_t(t));
  return buf.c_str();
}

uint64_t row_bytes(GgmlType t, int64_t n) {
  const TypeTraits& tr = traits(t);
  if (n < 0 || n % tr.block_elems != 0)
    throw Error(Errc::invalid_argument, std::string("row of ") + std::to_string(n) +
                                            " elements is not a whole number of " + tr.name +
                                            " blocks of " + std::to_string(tr.block_elems));
  return uint64_t(n / tr.block_elems) * uint64_t(tr.block_bytes);
}

namespace {
const TypeTraits& dequantizable_traits(GgmlType t) {
  const TypeTraits& tr = traits(t);
  if (!tr.dequantizable)
    throw Error(Errc::unsupported, std::string("cannot dequantize ggml type ") + tr.name +
                                       "; supported: F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 "
                                       "Q4_K Q5_K Q6_K (re-quantize the model to one of these)");
  return tr;
}
}  // namespace

void detail::dequantize_row_scalar(GgmlType t, const void* src, float* dst, int64_t n) {
  const TypeTraits& tr = dequantizable_traits(t);
  row_bytes(t, n);  // validates n
  const uint8_t* s = static_cast<const uint8_t*>(src);
  switch (t) {
    case GgmlType::F32: std::memcpy(dst, s, size_t(n) * 4); return;
    case GgmlType::F16: deq_f16(s, dst, n); return;
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(rd16(s + 2 * i));
      return;
    default: break;
  }
  const BlockFn fn = block_fn(t);
  KVZIP_ASSERT(fn != nullptr);
  const int64_t nb = n / tr.block_elems;
  for (int64_t i = 0; i < nb; ++i) fn(s + i * tr.block_bytes, dst + i * tr.block_elems);
}

void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n) {
  if (detail::dequant_avx2_usable()) {
    if (const detail::DequantFn fn = detail::dequant_avx2(t)) {
      const TypeTraits& tr = dequantizable_traits(t);
      row_bytes(t, n);  // validates n
      fn(static_cast<const uint8_t*>(src), dst, n / tr.block_elems);
      return;
    }
  }
  detail::dequantize_row_scalar(t, src, dst, n);
}

void dequantize_rows(GgmlType t, const void* src, float* dst, int64_t n_per_row, int64_t rows,
                     int threads) {
  dequantizable_traits(t);  // throw here, never inside a worker thread
  const uint64_t rb = row_bytes(t, n_per_row);
  if (rows <= 0) return;
  const uint8_t* s = static_cast<const uint8_t*>(src);
  // Below ~256K elements a thread costs more than it saves.
  const int64_t max_useful = std::max<int64_t>(1, (n_per_row * rows) / (1 << 18));
  const int64_t n_threads = std::clamp<int64_t>(std::min<int64_t>(threads, max_useful), 1, rows);
  auto work = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) dequantize_row(t, s + r * rb, dst + r * n_per_row, n_per_row);
  };
  if (n_threads <= 1) {
    work(0, rows);
    return;
  }
  std::vector<std::thread> pool;
  const int64_t per = (rows + n_threads - 1) / n_threads;
  for (int64_t k = 1; k < n_threads; ++k) {
    const int64_t r0 = k * per, r1 = std::min(rows, r0 + per);
    if (r0 < r1) pool.emplace_back(work, r0, r1);
  }
  work(0, std::min(rows, per));
  for (auto& th : pool) th.join();
}

}  // namespace kvzip::kernels::quant
