// One variant of the CPU attention kernel for attention_ab: kernels/cpu/attention.cc from the
// file AB_SRC, compiled into namespace kvzip::kernels::cpu::AB_NS — for the build's vectors, or,
// with AB_WIDE, for 16-lane AVX-512 as kernels/cpu/attention_avx512.cc compiles it (headers first
// for the build's target, so only the kernel's functions take the AVX-512 one).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <span>
#include <type_traits>
#include <vector>

#include "common/error.h"
#include "kernels/attention.h"
#include "kernels/detail/attention_cpu.h"
#include "kernels/detail/attention_isa.h"
#include "kernels/detail/bf16_gemm.h"
#include "kernels/thread_pool.h"

#define KVZIP_ATTENTION_ISA AB_NS
#if AB_WIDE
#include <immintrin.h>
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx2,fma,f16c")
#define KVZIP_SIMD_AVX512 1
#include AB_SRC
#pragma GCC pop_options
#else
#include AB_SRC
#endif
