// Private to kernels/cpu/qgemv*.cc: the per-ISA row kernels of the quantized GEMV. A row kernel
// computes y[r] = dot(W row r, x) (no bias) for rows [r0, r1) of one job. xsum holds the sum of
// each 32-element block of x (in / 32 floats), which Q4_0/Q4_1 use for their offset term:
// dot(d·q + m, x) = d·dot(q, x) + m·sum(x).
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "common/half.h"
#include "kernels/qgemv.h"

namespace kvzip::kernels::cpu::detail {

using QRowsFn = void (*)(const QGemvArgs& a, const float* xsum, uint32_t r0, uint32_t r1);

QRowsFn qrows_scalar(QFormat f);
// nullptr when this build has no such variant (not x86-64, or a compiler without target
// attributes).
QRowsFn qrows_avx2(QFormat f);
QRowsFn qrows_avx512(QFormat f);
// The formats listed once for every ISA's table: pick(std::integral_constant<QFormat, F>)
// returns that ISA's row kernel for F.
template <class Pick>
QRowsFn pick_qformat(QFormat f, Pick pick) {
  switch (f) {
    case QFormat::Q4_0: return pick(std::integral_constant<QFormat, QFormat::Q4_0>{});
    case QFormat::Q4_1: return pick(std::integral_constant<QFormat, QFormat::Q4_1>{});
    case QFormat::Q8_0: return pick(std::integral_constant<QFormat, QFormat::Q8_0>{});
  }
  return nullptr;
}

bool cpu_has_avx2();    // AVX2, FMA and F16C
bool cpu_has_avx512();  // AVX-512 F and BW, plus the AVX2 set

// The block's little-endian fp16 field at p.
inline uint16_t load_u16(const uint8_t* p) { return uint16_t(p[0] | (uint16_t(p[1]) << 8)); }

}  // namespace kvzip::kernels::cpu::detail
