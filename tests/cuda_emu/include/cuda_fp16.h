// The f16 conversions the kernels use, for the CPU emulator (tests/cuda_emu/emu.h): bits to
// binary32 through common/half.h (exact, as on a device).
#pragma once
#include <cstdint>

#include "common/half.h"

struct __half {
  uint16_t bits;
};
inline __half __ushort_as_half(unsigned short h) { return __half{h}; }
inline float __half2float(__half h) { return kvzip::f16_to_f32(h.bits); }
