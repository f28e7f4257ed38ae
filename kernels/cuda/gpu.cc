// kernels/gpu.h over the CUDA runtime: allocation, copies, streams, device queries. Compiled only
// with -DKVZIP_CUDA=ON. cuda_device_count() swallows every runtime error (no driver, no device)
// and answers 0, so callers can decide to skip or refuse with their own message.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include "kernels/cuda/common.cuh"
#include "kernels/gpu.h"

namespace kvzip::kernels {

int cuda_device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

namespace gpu {
using cuda::as_stream;

void* malloc_device(size_t bytes) {
  void* p = nullptr;
  KVZIP_CUDA_CHECK(cudaMalloc(&p, bytes ? bytes : 1));
  return p;
}

void free_device(void* p) noexcept {
  if (p) (void)cudaFree(p);
}

void* malloc_pinned(size_t bytes) {
  void* p = nullptr;
  KVZIP_CUDA_CHECK(cudaMallocHost(&p, bytes ? bytes : 1));
  return p;
}

void free_pinned(void* p) noexcept {
  if (p) (void)cudaFreeHost(p);
}

void copy_to_device(void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes)
    KVZIP_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, as_stream(stream)));
}

void copy_to_host(void* dst, const void* src, size_t bytes, void* stream) {
  if (!bytes) return;
  KVZIP_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, as_stream(stream)));
  KVZIP_CUDA_CHECK(cudaStreamSynchronize(as_stream(stream)));  // pageable targets: data is there
}

void copy_device(void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes)
    KVZIP_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, as_stream(stream)));
}

void fill_zero(void* dst, size_t bytes, void* stream) {
  if (bytes) KVZIP_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, as_stream(stream)));
}

void synchronize(void* stream) { KVZIP_CUDA_CHECK(cudaStreamSynchronize(as_stream(stream))); }

void* create_stream() {
  cudaStream_t s = nullptr;
  KVZIP_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}

void destroy_stream(void* stream) noexcept {
  if (stream) (void)cudaStreamDestroy(as_stream(stream));
}

void* create_event() {
  cudaEvent_t e = nullptr;
  KVZIP_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

void destroy_event(void* event) noexcept {
  if (event) (void)cudaEventDestroy(static_cast<cudaEvent_t>(event));
}

void record_event(void* event, void* stream) {
  KVZIP_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event), as_stream(stream)));
}

void wait_event(void* event) {
  KVZIP_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
}

DeviceInfo device_info() {
  DeviceInfo info;
  if (cuda_device_count() == 0) return info;
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) return info;
  std::memcpy(info.name, p.name, std::min(sizeof(info.name), sizeof(p.name)) - 1);
  info.total_bytes = p.totalGlobalMem;
  info.sm_count = p.multiProcessorCount;
  info.cc_major = p.major;
  info.cc_minor = p.minor;
  return info;
}

}  // namespace gpu
}  // namespace kvzip::kernels
