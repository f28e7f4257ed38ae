// The bf16 type and conversions the kernels use, for the CPU emulator (tests/cuda_emu/emu.h):
// common/half.h's round-to-nearest-even conversion, as __float2bfloat16_rn rounds on a device.
#pragma once
#include <cstdint>

#include "common/half.h"

struct __nv_bfloat16 {
  uint16_t bits;
};
inline __nv_bfloat16 __float2bfloat16_rn(float x) { return __nv_bfloat16{kvzip::f32_to_bf16(x)}; }
inline float __bfloat162float(__nv_bfloat16 x) { return kvzip::bf16_to_f32(x.bits); }
