// AVX-512 BF16 GEMM for F16 and BF16 weights at prefill T (matmul's Fast path, kernels/matmul.h):
// Y(T, out) = X(T, in) · W(out, in)^T with both operands rounded to bf16 (round to nearest even;
// BF16 weights are used as stored, F16 weights are rounded once per 32-row panel) and products
// summed in fp32 by vdpbf16ps, 32 multiply-adds per instruction against 16 for an fp32 FMA.
// Compiled with function target attributes; used only when the CPU reports AVX-512 F, BW, VL and
// BF16 (bf16_gemm_available).
//
// Layout, as the VNNI GEMM's (kernels/cpu/qdot_avx512.cc): SIMD lanes are 16 tokens; X is packed
// once per call as (nv, in / 2, 16, 2) bf16 (two consecutive elements of 16 tokens per 64 bytes,
// lanes past T zero); a weight row is read in stored order, one broadcast dword (two elements) per
// instruction. Blocking: kernels/detail/gemm_tiles.h.
#include <cstring>

#include "common/error.h"
#include "common/half.h"
#include "kernels/detail/bf16_gemm.h"
#include "kernels/detail/gemm_tiles.h"
#include "kernels/detail/qgemv_rows.h"
#include "kernels/thread_pool.h"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define KVZIP_BF16_X86 1
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // see qgemv_x86.cc
#endif
#define KVZIP_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c")))
#endif

namespace kvzip::kernels::cpu::detail {

#if KVZIP_BF16_X86

bool bf16_gemm_available() {
  static const bool ok = cpu_has_avx512() && __builtin_cpu_supports("avx512vl") &&
                         __builtin_cpu_supports("avx512bf16");
  return ok;
}

void pack_bf16_pairs(const float* x, uint32_t T, uint32_t in, std::vector<uint16_t>& u,
                     uint32_t& nv) {
  const uint32_t in2 = in / 2;
  nv = (T + 15) / 16;
  u.assign(size_t(nv) * in2 * 32, 0);
  for (uint32_t t = 0; t < T; ++t) {
    uint16_t* dst = u.data() + size_t(t / 16) * in2 * 32 + (t % 16) * 2;
    const float* src = x + size_t(t) * in;
    for (uint32_t k = 0; k < in2; ++k) {
      dst[size_t(k) * 32] = f32_to_bf16(src[2 * k]);
      dst[size_t(k) * 32 + 1] = f32_to_bf16(src[2 * k + 1]);
    }
  }
}

namespace {

using quant::GgmlType;

constexpr uint32_t kTileVecs = 4;      // 16-token vectors per tile: 16 fp32 accumulators
constexpr uint32_t kChunkPairs = 128;  // element pairs per chunk: 4 x 64 B x 128 = 32 KiB of X

// The panel's rows as bf16: BF16 rows point into the weights; F16 rows are rounded into `own`.
KVZIP_BF16 void panel_rows(const MatrixView& w, uint32_t p0, uint32_t n, std::vector<uint16_t>& own,
                           const uint16_t** rows) {
  if (w.type == GgmlType::F16) own.resize(size_t(n) * w.cols);
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t r = p0 + i;
    const uint8_t* src = w.data + size_t(w.row_map ? w.row_map[r] : r) * w.row_bytes;
    if (w.type == GgmlType::BF16) {
      rows[i] = reinterpret_cast<const uint16_t*>(src);
      continue;
    }
    uint16_t* dst = own.data() + size_t(i) * w.cols;
    uint32_t k = 0;
    for (; k + 16 <= w.cols; k += 16) {
      const __m512 f =
          _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 2 * k)));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + k), (__m256i)_mm512_cvtneps_pbh(f));
    }
    for (; k < w.cols; ++k) dst[k] = f32_to_bf16(f16_to_f32(load_u16(src + 2 * k)));
    rows[i] = dst;
  }
}

inline int32_t load_i32(const uint16_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// acc (R, C, 16) += rows[i0, i0 + R) x vectors [v0, v0 + C) over pairs [k0, k1).
template <int R, int C>
KVZIP_BF16 void micro(const uint16_t* const* rows, const uint16_t* xu, uint32_t in2, uint32_t v0,
                      uint32_t i0, uint32_t k0, uint32_t k1, float* acc_io) {
  __m512 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_loadu_ps(acc_io + (r * C + c) * 16);
  const uint16_t* xc[C];
  for (int c = 0; c < C; ++c) xc[c] = xu + size_t(v0 + c) * in2 * 32;
#pragma GCC unroll 4
  for (uint32_t k = k0; k < k1; ++k) {
    __m512bh a[C];
    for (int c = 0; c < C; ++c) a[c] = (__m512bh)_mm512_loadu_si512(xc[c] + size_t(k) * 32);
    for (int r = 0; r < R; ++r) {
      const __m512bh wb = (__m512bh)_mm512_set1_epi32(load_i32(rows[i0 + r] + 2 * size_t(k)));
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], a[c], wb);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(acc_io + (r * C + c) * 16, acc[r][c]);
}

}  // namespace

void bf16_gemm(ThreadPool* pool, const MatmulArgs& a) {
  const MatrixView& w = a.w;
  if (bf16_gemm_amx_usable(w)) return bf16_gemm_amx(pool, a);  // F16, BF16 and the block types
  if ((w.type != GgmlType::F16 && w.type != GgmlType::BF16) || w.cols % 2 != 0 ||
      !bf16_gemm_available())
    throw Error(Errc::internal,
                "bf16_gemm: F16/BF16 weights with an even width on an AVX-512 BF16 CPU, "
                "or what the AMX-BF16 GEMM takes");
  std::vector<uint16_t> xu;
  uint32_t nv = 0;
  pack_bf16_pairs(a.x, a.T, w.cols, xu, nv);
  const uint32_t in2 = w.cols / 2;
  run_tasks(pool, (w.rows + kPanelRows - 1) / kPanelRows, [&](size_t task) {
    thread_local std::vector<uint16_t> own;
    thread_local std::vector<float> buf;
    const uint32_t p0 = uint32_t(task) * kPanelRows, np = std::min(kPanelRows, w.rows - p0);
    const uint16_t* rows[kPanelRows];
    panel_rows(w, p0, np, own, rows);
    const TileSpan span{np, nv, a.T, in2, kChunkPairs, kTileVecs, a.y, w.rows, p0};
    run_tiles(span, buf,
              [&](uint32_t v0, uint32_t C, uint32_t i0, uint32_t R, uint32_t k0, uint32_t k1,
                  float* acc) {
                with_rc<kTileVecs>(R, C, [&]<int Rv, int Cv>() {
                  micro<Rv, Cv>(rows, xu.data(), in2, v0, i0, k0, k1, acc);
                });
              });
  });
}

#else  // no x86 variant in this build

bool bf16_gemm_available() { return false; }
void pack_bf16_pairs(const float*, uint32_t, uint32_t, std::vector<uint16_t>&, uint32_t&) {
  throw Error(Errc::internal, "pack_bf16_pairs: not built for this CPU");
}
void bf16_gemm(ThreadPool*, const MatmulArgs&) {
  throw Error(Errc::internal, "bf16_gemm: not built for this CPU");
}

#endif

}  // namespace kvzip::kernels::cpu::detail
