// The CPU attention entry points (kernels/attention.h, kernels/detail/attention_cpu.h): each runs
// the kernel of the widest vectors this CPU allows (kernels/detail/attention_isa.h), chosen once.
#include <algorithm>
#include <cstdlib>
#include <string>

#include "kernels/detail/attention_cpu.h"
#include "kernels/detail/attention_isa.h"
#include "kernels/detail/bf16_gemm.h"
#include "kernels/qgemv.h"

namespace kvzip::kernels {

size_t key_tile_floats(uint32_t n, uint32_t D) {
  return size_t((n + kKeyTileRows - 1) / kKeyTileRows) * D * kKeyTileRows + kKeyTilePad;
}

namespace cpu {
bool bf16_attention_available();
}

bool attention_bf16_available() { return cpu::bf16_attention_available(); }

namespace cpu {
namespace {

bool wide() {
#if KVZIP_ATTENTION_AVX512
  static const bool ok = [] {
    const QIsa isa = qisa_best();
    return isa == QIsa::Avx512 || isa == QIsa::Avx512Vnni || isa == QIsa::Amx;
  }();
  return ok;
#else
  return false;
#endif
}

}  // namespace

bool bf16_attention_available() {
  static const bool ok = [] {
    const char* env = std::getenv("KVZIP_ATTENTION_BF16");
    if (env && std::string(env) == "0") return false;
    return wide() && detail::bf16_gemm_available();
  }();
  return ok;
}

#if KVZIP_ATTENTION_AVX512
#define KVZIP_ATTENTION_CALL(fn, ...) (wide() ? avx512::fn(__VA_ARGS__) : base::fn(__VA_ARGS__))
#else
#define KVZIP_ATTENTION_CALL(fn, ...) base::fn(__VA_ARGS__)
#endif

void transpose_key_tiles(const float* k, uint32_t n, uint32_t D, float* out) {
  KVZIP_ATTENTION_CALL(transpose_key_tiles, k, n, D, out);
}

void attention(ThreadPool* pool, const AttentionArgs& a) {
  check_window(a);
  if (a.n_parts > 0) return detail::attention_parts(pool, a);
  detail::attention_lse(pool, a, nullptr);
}

void detail::attention_lse(ThreadPool* pool, const AttentionArgs& a, float* lse) {
  for (uint32_t h = 0; a.kv && h < a.Hkv; ++h)
    if (a.kv[h].quantized()) return detail::attention_quantized(pool, a, lse);
  detail::attention_f32(pool, a, lse);
}

void detail::attention_f32(ThreadPool* pool, const AttentionArgs& a, float* lse) {
  KVZIP_ATTENTION_CALL(attention_f32, pool, a, lse);
}

void detail::attention_f32_many(ThreadPool* pool, const AttentionArgs* calls, float* const* lse,
                                size_t n) {
  KVZIP_ATTENTION_CALL(attention_f32_many, pool, calls, lse, n);
}

void attention_many(ThreadPool* pool, const AttentionArgs* calls, size_t n) {
  KVZIP_ATTENTION_CALL(attention_many, pool, calls, n);
}

}  // namespace cpu
}  // namespace kvzip::kernels
