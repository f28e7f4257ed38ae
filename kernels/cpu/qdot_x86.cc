// AVX2 row kernels of the 8-bit-activation product (kernels/qdot.h): the register tiles of
// kernels/detail/qdot_tiles_x86.inc compiled for AVX2, FMA and F16C (function target attributes,
// like qgemv_x86.cc) and called only when the CPU reports them.
#include <algorithm>

#include "kernels/detail/qdot_x86.h"

namespace kvzip::kernels::cpu::detail {

#if KVZIP_QDOT_X86

using quant::GgmlType;
using x86::group_ints;
using x86::half_f16c;

namespace avx2_tiles {
#define KVZIP_QT_TARGET KVZIP_AVX2
#define KVZIP_QT_VNNI 0
#include "kernels/detail/qdot_tiles_x86.inc"
#undef KVZIP_QT_VNNI
#undef KVZIP_QT_TARGET
}  // namespace avx2_tiles

QDotFn qdot_rows_avx2(GgmlType t) {
  return pick_block_type<QDotFn>(t, [](auto T) -> QDotFn { return avx2_tiles::rows_tiles<decltype(T)::value>; });
}

#else  // no x86 variant in this build

QDotFn qdot_rows_avx2(quant::GgmlType) { return nullptr; }

#endif

}  // namespace kvzip::kernels::cpu::detail
