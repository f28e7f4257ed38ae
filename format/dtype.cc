// Storage dtype registry and bulk f32 <-> f16/bf16 conversion of K/V rows. The scalar functions of
// common/half.h are the definition; with F16C/AVX2 blocks of 8 values take a vector path that
// gives the same bits (blocks holding a NaN or an infinity take the scalar path, which keeps the
// vector code free of special cases).
#include <bit>
#include <cstring>

#if defined(__F16C__) && defined(__AVX2__)
#include <immintrin.h>
#define KVZIP_DTYPE_AVX2 1
#endif

#include "format/detail/dtype.h"

namespace kvzip::format {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::Q8: return "q8";
    case DType::Q4: return "q4";
  }
  return "unknown";
}

uint32_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::Q8:
    case DType::Q4:
      throw Error(Errc::internal, std::string("dtype ") + dtype_name(t) +
                                      " has no per-element size (group-wise quantized)");
  }
  throw Error(Errc::unsupported,
              "dtype id " + std::to_string(static_cast<uint32_t>(t)) +
                  " is not in this build's registry (f32=1, f16=2, bf16=3, q8=10, q4=11)");
}

bool dtype_quantized(DType t) { return t == DType::Q8 || t == DType::Q4; }

uint32_t dtype_bits(DType t) {
  if (t == DType::Q8) return 8;
  if (t == DType::Q4) return 4;
  return 8 * dtype_size(t);
}

uint16_t min_minor(const CacheHeader& h) { return h.local_layers.empty() ? 0 : 1; }

std::optional<DType> parse_dtype(std::string_view name) {
  if (name == "f32") return DType::F32;
  if (name == "f16") return DType::F16;
  if (name == "bf16") return DType::BF16;
  if (name == "q8") return DType::Q8;
  if (name == "q4") return DType::Q4;
  return std::nullopt;
}

const char* codec_name(Codec c) {
  switch (c) {
    case Codec::None: return "none";
    case Codec::Zstd: return "zstd";
  }
  return "unknown";
}

namespace detail {

bool dtype_known(uint32_t id) {
  return (id >= static_cast<uint32_t>(DType::F32) && id <= static_cast<uint32_t>(DType::BF16)) ||
         id == static_cast<uint32_t>(DType::Q8) || id == static_cast<uint32_t>(DType::Q4);
}

namespace {

// Element by element through the scalar conversion: the tails the vector loops leave, and the
// blocks they hand back (NaN, inf) because the vector conversion would change those bits.
template <uint16_t (*Convert)(float)>
void encode_scalar(const float* src, size_t from, size_t to, uint8_t* dst) {
  for (size_t j = from; j < to; ++j) {
    const uint16_t h = Convert(src[j]);
    std::memcpy(dst + 2 * j, &h, 2);
  }
}

template <float (*Convert)(uint16_t)>
void decode_scalar(const uint8_t* src, size_t from, size_t to, float* dst) {
  for (size_t j = from; j < to; ++j) {
    uint16_t h;
    std::memcpy(&h, src + 2 * j, 2);
    dst[j] = Convert(h);
  }
}

void encode_f16(const float* src, size_t n, uint8_t* dst) {
  size_t i = 0;
#ifdef KVZIP_DTYPE_AVX2
  for (; i + 8 <= n; i += 8) {
    __m256 x = _mm256_loadu_ps(src + i);
    if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q))) {  // a NaN: this block scalar
      encode_scalar<f32_to_f16>(src, i, i + 8, dst);
      continue;
    }
    __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * i), h);
  }
#endif
  encode_scalar<f32_to_f16>(src, i, n, dst);
}

void decode_f16(const uint8_t* src, size_t n, float* dst) {
  size_t i = 0;
#ifdef KVZIP_DTYPE_AVX2
  const __m128i exp_mask = _mm_set1_epi16(0x7c00);
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i));
    if (_mm_movemask_epi8(_mm_cmpeq_epi16(_mm_and_si128(h, exp_mask), exp_mask))) {  // inf/NaN
      decode_scalar<f16_to_f32>(src, i, i + 8, dst);
      continue;
    }
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
#endif
  decode_scalar<f16_to_f32>(src, i, n, dst);
}

void encode_bf16(const float* src, size_t n, uint8_t* dst) {
  size_t i = 0;
#ifdef KVZIP_DTYPE_AVX2
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
  const __m256i bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1);
  for (; i + 8 <= n; i += 8) {
    __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    if (_mm256_movemask_epi8(_mm256_cmpgt_epi32(_mm256_and_si256(x, abs_mask), inf))) {  // a NaN
      encode_scalar<f32_to_bf16>(src, i, i + 8, dst);
      continue;
    }
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(x, 16), one);
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, bias), odd), 16);
    __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), _MM_SHUFFLE(3, 1, 2, 0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * i), _mm256_castsi256_si128(packed));
  }
#endif
  encode_scalar<f32_to_bf16>(src, i, n, dst);
}

void decode_bf16(const uint8_t* src, size_t n, float* dst) {
  size_t i = 0;
#ifdef KVZIP_DTYPE_AVX2
  for (; i + 8 <= n; i += 8) {  // exact for every pattern: a widening shift
    __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i));
    __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), w);
  }
#endif
  decode_scalar<bf16_to_f32>(src, i, n, dst);
}

}  // namespace

void encode_values(DType t, const float* src, size_t n, uint8_t* dst) {
  if (n == 0) return;  // pointers of empty vectors may be null
  switch (t) {
    case DType::F32: std::memcpy(dst, src, n * 4); return;
    case DType::F16: encode_f16(src, n, dst); return;
    case DType::BF16: encode_bf16(src, n, dst); return;
    case DType::Q8:
    case DType::Q4: break;  // group-wise: format/detail/quant.h, never element by element
  }
  dtype_size(t);  // throws (internal for q8/q4, unsupported for an unknown id)
}

void decode_values(DType t, const uint8_t* src, size_t n, float* dst) {
  if (n == 0) return;
  switch (t) {
    case DType::F32: std::memcpy(dst, src, n * 4); return;
    case DType::F16: decode_f16(src, n, dst); return;
    case DType::BF16: decode_bf16(src, n, dst); return;
    case DType::Q8:
    case DType::Q4: break;
  }
  dtype_size(t);
}

}  // namespace detail
}  // namespace kvzip::format
