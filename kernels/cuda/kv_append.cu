// CUDA ragged append (twin of kernels/cpu/kv_append.cc): one thread per float of the T·Hkv new
// rows; the per-head destination rows travel by value in the kernel parameters.
#include "kernels/cuda/common.cuh"
#include "kernels/kv_append.h"

namespace kvzip::kernels::cuda {
namespace {

struct AppendParams {
  const float* k_new;
  const float* v_new;
  float* k;
  float* v;
  uint64_t dst_row[kMaxKvHeads];
  uint32_t T, Hkv, D;
};

__global__ void kv_append_kernel(AppendParams p) {
  const size_t idx = size_t(blockIdx.x) * blockDim.x + threadIdx.x;  // over (T, Hkv, D)
  if (idx >= size_t(p.T) * p.Hkv * p.D) return;
  const uint32_t d = static_cast<uint32_t>(idx % p.D);
  const size_t th = idx / p.D;
  const uint32_t h = static_cast<uint32_t>(th % p.Hkv), t = static_cast<uint32_t>(th / p.Hkv);
  const size_t dst = (p.dst_row[h] + t) * p.D + d;
  p.k[dst] = p.k_new[idx];
  p.v[dst] = p.v_new[idx];
}

}  // namespace

void kv_append(const KvAppendArgs& a, void* stream) {
  const size_t n = size_t(a.T) * a.Hkv * a.D;
  if (n == 0) return;
  KVZIP_ASSERT(a.Hkv <= kMaxKvHeads && a.k_new && a.v_new && a.k && a.v && a.dst_row);
  AppendParams p{};
  p.k_new = a.k_new;
  p.v_new = a.v_new;
  p.k = a.k;
  p.v = a.v;
  for (uint32_t h = 0; h < a.Hkv; ++h) p.dst_row[h] = a.dst_row[h];
  p.T = a.T;
  p.Hkv = a.Hkv;
  p.D = a.D;
  constexpr unsigned kThreads = 256;
  kv_append_kernel<<<ceil_div(n, kThreads), kThreads, 0, as_stream(stream)>>>(p);
  KVZIP_CUDA_CHECK_LAUNCH();
}

}  // namespace kvzip::kernels::cuda
