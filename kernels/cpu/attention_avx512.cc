// The CPU attention kernel (attention.cc) compiled for 16-lane AVX-512 vectors, as
// cpu::avx512 (kernels/detail/attention_isa.h). Every header attention.cc uses is included first,
// for the build's own target, so only the kernel's own functions (and simd.h's, which sit in an
// inline namespace of their width) take the AVX-512 target: nothing shared with the rest of the
// program is compiled for a CPU it may not run on.
#include "kernels/detail/attention_isa.h"

#if KVZIP_ATTENTION_AVX512
#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <span>
#include <type_traits>
#include <vector>

#include <immintrin.h>

#include "common/error.h"
#include "kernels/attention.h"
#include "kernels/detail/attention_cpu.h"
#include "kernels/detail/bf16_gemm.h"
#include "kernels/thread_pool.h"

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // see qgemv_x86.cc
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx2,fma,f16c")
#define KVZIP_ATTENTION_ISA avx512
#define KVZIP_SIMD_AVX512 1
#include "kernels/cpu/attention.cc"
#pragma GCC pop_options
#endif
