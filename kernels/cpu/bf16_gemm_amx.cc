// AMX-BF16 GEMM at prefill T (kernels/detail/bf16_gemm.h) for F16, BF16 and the block types:
// x rounded to bf16 (pack_bf16_pairs), BF16 weights as stored, other weights rounded to bf16 once
// per 32-row panel (F16 converted, Q4_0/Q4_1/Q8_0 decoded straight to bf16, other block types
// dequantized to fp32 one row at a time first), and
// the products taken by tdpbf16ps, which sums 16 rows x 16 tokens x 32 elements into fp32 per
// instruction. With no per-group scale left in the panel a tile accumulates over the whole
// reduction dimension in the tile unit and goes to memory once — which the int8 tiles of
// kernels/cpu/qdot_amx.cc cannot do (each 32-element group has its own fp32 step), so for long T
// this kernel outruns them: the fp32 steps, not the tile products, bound theirs.
//
// Layout: C[m][n] += Σ_k A[m][k]·B[k/2][2n + k%2]: A is 16 weight rows x 32 elements from the
// panel (bf16 rows, stride in + 32 elements so a tile load does not fall in one L1 set), B is 16
// tokens' 32 elements in the pack's pair layout (1 KB, contiguous). Tiles: A 0-1 (rows 0-15,
// 16-31 of a 32-row panel), B 2-3 (two 16-token vectors), C 4-7 (the four row/vector products).
// A pass takes two token vectors (one where only one is left); C goes through a 4 KB buffer to
// y (T, out), transposed. Rows past the panel's are zero rows and are not written.
#include <algorithm>
#include <cstring>

#include "common/error.h"
#include "common/half.h"
#include "kernels/detail/bf16_gemm.h"
#include "kernels/detail/gemm_tiles.h"
#include "kernels/detail/qdot_rows.h"
#include "kernels/qgemv.h"
#include "kernels/quant.h"
#include "kernels/thread_pool.h"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__)) && \
    defined(__linux__)
#define KVZIP_BF16_AMX 1
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // see qgemv_x86.cc
#endif
#define KVZIP_AMXBF16 \
  __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c")))
#endif

namespace kvzip::kernels::cpu::detail {

bool bf16_gemm_amx_available() { return bf16_gemm_available() && qisa_amx_bf16(); }

bool bf16_gemm_amx_usable(const MatrixView& w) {
  const quant::TypeTraits* tr = quant::type_traits(uint32_t(w.type));
  return tr && tr->dequantizable && w.type != quant::GgmlType::F32 && w.cols % 32 == 0 &&
         bf16_gemm_amx_available();
}

#if KVZIP_BF16_AMX

namespace {

constexpr uint32_t kBlk = 16;

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Q4_0, Q4_1 and Q8_0 blocks straight to bf16 (the common types of quantized models): d·(q − 8)
// and d·q are exact in fp32 and Q4_1's d·q + m takes dequantize_row's two roundings, so these give
// the bits dequantize_row's values round to, with no fp32 row in
// between (which took a third of the GEMM's time at T = 128 on the 8B shape).
KVZIP_AMXBF16 void q4_0_bf16(const uint8_t* b, uint16_t* dst, uint32_t nb) {
  const __m512i mask = _mm512_set1_epi32(15), eight = _mm512_set1_epi32(8);
  for (uint32_t i = 0; i < nb; ++i, b += 18, dst += 32) {
    const __m512 d = _mm512_set1_ps(f16_to_f32(uint16_t(b[0] | b[1] << 8)));
    const __m512i q =
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2)));
    const __m512 lo =
        _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_and_si512(q, mask), eight)), d);
    const __m512 hi =
        _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_srli_epi32(q, 4), eight)), d);
    _mm512_storeu_si512(dst, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
  }
}
KVZIP_AMXBF16 void q4_1_bf16(const uint8_t* b, uint16_t* dst, uint32_t nb) {
  const __m512i mask = _mm512_set1_epi32(15);
  for (uint32_t i = 0; i < nb;
       ++i, b += 20, dst += 32) {  // d·q + m: a product, then a sum, as dequantize_row
    const __m512 d = _mm512_set1_ps(f16_to_f32(uint16_t(b[0] | b[1] << 8)));
    const __m512 m = _mm512_set1_ps(f16_to_f32(uint16_t(b[2] | b[3] << 8)));
    const __m512i q =
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 4)));
    const __m512 lo =
        _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(q, mask)), d), m);
    const __m512 hi =
        _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(q, 4)), d), m);
    _mm512_storeu_si512(dst, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
  }
}
KVZIP_AMXBF16 void q8_0_bf16(const uint8_t* b, uint16_t* dst, uint32_t nb) {
  for (uint32_t i = 0; i < nb; ++i, b += 34, dst += 32) {
    const __m512 d = _mm512_set1_ps(f16_to_f32(uint16_t(b[0] | b[1] << 8)));
    const __m512 lo = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                                        _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2)))),
                                    d);
    const __m512 hi = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                                        _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 18)))),
                                    d);
    _mm512_storeu_si512(dst, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
  }
}

// The panel's rows as bf16, `stride` elements apart, zero rows up to 32.
KVZIP_AMXBF16 void panel_bf16(const MatrixView& w, uint32_t p0, uint32_t n, uint32_t stride,
                              std::vector<uint16_t>& out) {
  out.assign(size_t(2) * kBlk * stride, 0);
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t r = p0 + i;
    const uint8_t* src = w.data + size_t(w.row_map ? w.row_map[r] : r) * w.row_bytes;
    uint16_t* dst = out.data() + size_t(i) * stride;
    if (w.type == quant::GgmlType::BF16) {
      std::memcpy(dst, src, size_t(w.cols) * 2);
    } else if (w.type == quant::GgmlType::F16) {
      for (uint32_t k = 0; k < w.cols; k += 16) {  // cols % 32 == 0
        const __m512 f =
            _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 2 * k)));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + k), (__m256i)_mm512_cvtneps_pbh(f));
      }
    } else if (w.type == quant::GgmlType::Q4_0) {
      q4_0_bf16(src, dst, w.cols / 32);
    } else if (w.type == quant::GgmlType::Q4_1) {
      q4_1_bf16(src, dst, w.cols / 32);
    } else if (w.type == quant::GgmlType::Q8_0) {
      q8_0_bf16(src, dst, w.cols / 32);
    } else {  // another block type: its fp32 values (quant::dequantize_row), rounded like F16's
      thread_local std::vector<float> row;
      row.resize(w.cols);
      quant::dequantize_row(w.type, src, row.data(), w.cols);
      for (uint32_t k = 0; k < w.cols; k += 32)
        _mm512_storeu_si512(dst + k,
                            (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(row.data() + k + 16),
                                                         _mm512_loadu_ps(row.data() + k)));
    }
  }
}

KVZIP_AMXBF16 void run_panel(const MatmulArgs& a, const std::vector<uint16_t>& xu, uint32_t nv,
                             uint32_t p0, uint32_t np, const std::vector<uint16_t>& panel,
                             uint32_t stride) {
  const uint32_t in = a.w.cols, in2 = in / 2, steps = in / 32;
  const size_t vstride = size_t(in2) * 32;  // uint16 per 16-token vector of the pack
  const uint16_t* w0 = panel.data();
  const uint16_t* w1 = panel.data() + size_t(kBlk) * stride;
  const size_t lda = size_t(stride) * 2;  // bytes
  alignas(64) float c[4][kBlk][kBlk];     // [2 · row half + vector][row][token]
  const __m512i col =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(kBlk));
  for (uint32_t v = 0; v < nv; v += 2) {
    const bool two = v + 1 < nv;
    const uint16_t* b0 = xu.data() + size_t(v) * vstride;
    const uint16_t* b1 = b0 + vstride;
    _tile_zero(4);
    _tile_zero(5);
    _tile_zero(6);
    _tile_zero(7);
    for (uint32_t k = 0; k < steps; ++k) {
      _tile_loadd(0, w0 + size_t(k) * 32, lda);
      _tile_loadd(1, w1 + size_t(k) * 32, lda);
      _tile_loadd(2, b0 + size_t(k) * 16 * 32, 64);
      _tile_dpbf16ps(4, 0, 2);
      _tile_dpbf16ps(6, 1, 2);
      if (two) {
        _tile_loadd(3, b1 + size_t(k) * 16 * 32, 64);
        _tile_dpbf16ps(5, 0, 3);
        _tile_dpbf16ps(7, 1, 3);
      }
    }
    _tile_stored(4, c[0], 64);
    _tile_stored(5, c[1], 64);
    _tile_stored(6, c[2], 64);
    _tile_stored(7, c[3], 64);
    for (uint32_t h = 0; h < 2; ++h) {
      if (h * kBlk >= np) break;
      const uint32_t live = std::min(kBlk, np - h * kBlk);
      const __mmask16 rows = __mmask16((1u << live) - 1);
      for (uint32_t vv = 0; vv < (two ? 2u : 1u); ++vv)
        for (uint32_t l = 0; l < kBlk; ++l) {
          const uint32_t t = (v + vv) * kBlk + l;
          if (t >= a.T) break;
          _mm512_mask_storeu_ps(a.y + size_t(t) * a.w.rows + p0 + h * kBlk, rows,
                                _mm512_i32gather_ps(col, &c[2 * h + vv][0][l], 4));
        }
    }
  }
}

KVZIP_AMXBF16 void run_task(const MatmulArgs& a, const std::vector<uint16_t>& xu, uint32_t nv,
                            uint32_t p0) {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) cfg.colsb[t] = 64, cfg.rows[t] = kBlk;  // every tile 16 x 64 bytes
  _tile_loadconfig(&cfg);
  thread_local std::vector<uint16_t> panel;
  const uint32_t np = std::min(2 * kBlk, a.w.rows - p0), stride = a.w.cols + 32;
  panel_bf16(a.w, p0, np, stride, panel);
  run_panel(a, xu, nv, p0, np, panel, stride);
  _tile_release();
}

}  // namespace

void bf16_gemm_amx(ThreadPool* pool, const MatmulArgs& a) {
  if (!bf16_gemm_amx_usable(a.w))
    throw Error(Errc::internal,
                "bf16_gemm_amx: F16, BF16 or block-type weights, a width that is a multiple of 32, "
                "an AMX-BF16 CPU");
  std::vector<uint16_t> xu;
  uint32_t nv = 0;
  pack_bf16_pairs(a.x, a.T, a.w.cols, xu, nv);
  run_tasks(pool, (a.w.rows + 2 * kBlk - 1) / (2 * kBlk),
            [&](size_t task) { run_task(a, xu, nv, uint32_t(task) * 2 * kBlk); });
}

#else  // no AMX variant in this build

void bf16_gemm_amx(ThreadPool*, const MatmulArgs&) {
  throw Error(Errc::internal, "bf16_gemm_amx: not built for this CPU");
}

#endif

}  // namespace kvzip::kernels::cpu::detail
