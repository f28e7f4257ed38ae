// Private to kernels/cpu/attention*.cc: the f32 attention kernel (attention.cc) built once per
// vector width, and the choice between them. cpu::base is the build's own width (AVX2 in the
// default x86-64-v3 build); cpu::avx512 the same source under an AVX-512 target
// (attention_avx512.cc), where the compiler and CPU allow it. attention_isa.cc runs avx512 when
// qisa_best() is an AVX-512 level (so KVZIP_CPU_ISA=avx2 also steps attention down): 16 lanes
// take half the instructions for every q·k and P·V step, what decode at long context and prefill
// are made of. The two differ in summation order (lanes), so a process keeps one for its
// lifetime: its results are the same bits whatever batch or call shape they are computed in.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/attention.h"

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__) && !defined(__clang__)
#define KVZIP_ATTENTION_AVX512 1
#else
#define KVZIP_ATTENTION_AVX512 0
#endif

namespace kvzip::kernels::cpu {

// Whether calls asking for bf16 products (AttentionArgs::bf16) get them: the 16-lane kernel runs,
// the CPU has AVX-512 BF16, and KVZIP_ATTENTION_BF16 is not 0 (set it to 0 for fp32 products on
// the Fast path too).
bool bf16_attention_available();

namespace base {
void transpose_key_tiles(const float* k, uint32_t n, uint32_t D, float* out);
void attention_f32(ThreadPool* pool, const AttentionArgs& a, float* lse);
void attention_f32_many(ThreadPool* pool, const AttentionArgs* calls, float* const* lse, size_t n);
void attention_many(ThreadPool* pool, const AttentionArgs* calls, size_t n);
}  // namespace base

namespace avx512 {
void transpose_key_tiles(const float* k, uint32_t n, uint32_t D, float* out);
void attention_f32(ThreadPool* pool, const AttentionArgs& a, float* lse);
void attention_f32_many(ThreadPool* pool, const AttentionArgs* calls, float* const* lse, size_t n);
void attention_many(ThreadPool* pool, const AttentionArgs* calls, size_t n);
}  // namespace avx512

}  // namespace kvzip::kernels::cpu
