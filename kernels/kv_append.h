// Append front of the ragged (per-head variable length) cache: T new tokens' K and V, laid out
// (T, Hkv, D) as the forward produces them, are copied to rows [dst_row[h], dst_row[h] + T) of
// head h in one layer's head-major storage. The cache object owns where each head's append room
// starts (cache/ragged_cache.h on the CPU, cache/gpu_cache.h on the device); rolling back only
// resets those per-head lengths and moves no data, so it needs no kernel.
#pragma once
#include <cstdint>

#include "kernels/attention.h"
#include "kernels/device.h"

namespace kvzip::kernels {

struct KvAppendArgs {
  const float* k_new = nullptr;       // (T, Hkv, D)
  const float* v_new = nullptr;       // (T, Hkv, D)
  float* k = nullptr;                 // (rows, D) one layer's keys, head-major
  float* v = nullptr;                 // (rows, D)
  const uint64_t* dst_row = nullptr;  // (Hkv) HOST array: first row written for head h
  uint32_t T = 0, Hkv = 0, D = 0;
};

namespace cpu {
void kv_append(const KvAppendArgs& a);
}
namespace cuda {  // kernels/cuda/kv_append.cu; Hkv <= kMaxKvHeads
void kv_append(const KvAppendArgs& a, void* stream);
}

inline void kv_append(const Exec& ex, const KvAppendArgs& a) {
#if KVZIP_HAVE_CUDA
  if (ex.device == Device::Cuda) return cuda::kv_append(a, ex.stream);
#endif
  require_cpu(ex, "kv_append");
  cpu::kv_append(a);
}

}  // namespace kvzip::kernels
