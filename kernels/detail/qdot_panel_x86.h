// Private to kernels/cpu/qdot_x86.cc, qdot_avx512.cc and qdot_amx.cc: a task's weight rows decoded
// once into an int8 panel for the 8-bit-activation GEMMs (kernels/qdot.h) — the integer weights in
// element order, per scale group the fp32 scale and 128·Σw (the VNNI GEMM's unsigned-activation
// offset; the AVX2 and AMX GEMMs take signed activations and do not read it), per 32-group the min
// (types with one). Every GEMM reads the same panel, so they sum the same integers and scale them
// by the same floats.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/detail/qdot_x86.h"

#if KVZIP_QDOT_X86
// GCC 12 flags the intrinsics' own `__m512 __Y = __Y;` (an intentionally undefined value) as
// maybe-uninitialized once they are inlined into target-attribute functions.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#define KVZIP_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

namespace kvzip::kernels::cpu::detail::x86 {

template <GgmlType Ty>
constexpr int kSubElems = Ty == GgmlType::Q6_K ? 16 : 32;

// A task's rows decoded once: the integer weights in element order and, per scale group, the
// fp32 scale and 128·Σw; per 32-group the min (types with one). Rows are `stride` = in + 64
// bytes apart: a power-of-two stride would put a 16-row tile load (AMX) in one L1 set.
struct Panel {
  std::vector<int8_t> w;  // (rows, stride)
  uint32_t stride = 0;
  std::vector<float> ws;      // (rows, in / sub)
  std::vector<int32_t> corr;  // (rows, in / sub)
  std::vector<float> mw;      // (rows, in / 32)
};

// AVX2 code only, so the AVX2 GEMM calls it too (the AVX-512 callers inline it: a superset target).
// kCorr = false leaves corr empty (GEMMs on a signed pack have no offset to take back).
template <GgmlType Ty, bool kCorr = true>
KVZIP_AVX2 inline void decode_panel(const MatrixView& w, uint32_t r0, uint32_t n, Panel& p) {
  using F = QFmt<Ty>;
  constexpr int kSub = kSubElems<Ty>;
  const uint32_t in = w.cols, ng = in / 32, nsub = in / kSub, nblk = ng / F::kGroups;
  p.stride = in + 64;
  p.w.resize(size_t(n) * p.stride), p.ws.resize(size_t(n) * nsub),
      p.corr.resize(kCorr ? size_t(n) * nsub : 0);
  p.mw.resize(F::kMin ? size_t(n) * ng : 0);
  BlockScales s;
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t r = r0 + i;
    const uint8_t* row = w.data + size_t(w.row_map ? w.row_map[r] : r) * w.row_bytes;
    // The next row, fetched while this one decodes: a row is a few cache lines, too short for
    // the hardware prefetcher to get ahead of it.
    const uint8_t* next =
        i + 1 < n ? w.data + size_t(w.row_map ? w.row_map[r + 1] : r + 1) * w.row_bytes : nullptr;
    int8_t* out = p.w.data() + size_t(i) * p.stride;
    for (uint32_t b = 0; b < nblk; ++b) {
      const uint8_t* blk = row + size_t(b) * F::kBytes;
      if (next)
        _mm_prefetch(reinterpret_cast<const char*>(next + size_t(b) * F::kBytes), _MM_HINT_T0);
      F::scales(blk, half_f16c, s);
      for (int g = 0; g < F::kGroups; ++g) {
        const uint32_t gi = b * F::kGroups + g;
        const __m256i v = group_ints<Ty>(blk, g);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + size_t(gi) * 32), v);
        if constexpr (kSub == 32) {
          p.ws[size_t(i) * nsub + gi] = s.fw[g];
        } else {
          p.ws[size_t(i) * nsub + 2 * gi] = s.fw[g] * float(s.sub[g][0]);
          p.ws[size_t(i) * nsub + 2 * gi + 1] = s.fw[g] * float(s.sub[g][1]);
        }
        if constexpr (kCorr) {
          // Σ(w + 128) per 8 bytes (w ^ 0x80 is w + 128 read unsigned), then Σw = that − 128·count.
          const __m256i s8 = _mm256_sad_epu8(_mm256_xor_si256(v, _mm256_set1_epi8(char(0x80))),
                                             _mm256_setzero_si256());
          alignas(32) int64_t q[4];
          _mm256_store_si256(reinterpret_cast<__m256i*>(q), s8);
          if constexpr (kSub == 32) {
            p.corr[size_t(i) * nsub + gi] = 128 * int32_t(q[0] + q[1] + q[2] + q[3] - 128 * 32);
          } else {
            p.corr[size_t(i) * nsub + 2 * gi] = 128 * int32_t(q[0] + q[1] - 128 * 16);
            p.corr[size_t(i) * nsub + 2 * gi + 1] = 128 * int32_t(q[2] + q[3] - 128 * 16);
          }
        }
        if constexpr (F::kMin) p.mw[size_t(i) * ng + gi] = s.mw[g];
      }
    }
  }
}

}  // namespace kvzip::kernels::cpu::detail::x86
#endif
