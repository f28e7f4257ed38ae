// The CUDA runtime as the CPU emulator provides it (tests/cuda_emu/emu.h): the types, constants and
// calls kvzip's kernel sources use, over host memory. Found before the real header only by the
// emulator's targets (tests/CMakeLists.txt).
#pragma once
#include <cstdlib>
#include <cstring>

#include "tests/cuda_emu/emu.h"

enum cudaError {
  cudaSuccess = 0,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9
};
using cudaError_t = cudaError;
struct CUstream_st;
using cudaStream_t = CUstream_st*;
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };

inline const char* cudaGetErrorName(cudaError_t e) {
  return e == cudaSuccess                 ? "cudaSuccess"
         : e == cudaErrorMemoryAllocation ? "cudaErrorMemoryAllocation"
                                          : "cudaErrorInvalidConfiguration";
}
inline const char* cudaGetErrorString(cudaError_t e) { return cudaGetErrorName(e); }
inline cudaError_t cudaGetLastError() {
  const int e = ::emu::last_error;
  ::emu::last_error = 0;
  return static_cast<cudaError_t>(e);
}
// Host memory filled with 0xFF bytes (NaN as floats): a kernel that reads what nobody wrote shows.
inline cudaError_t cudaMallocAsync(void** p, size_t bytes, cudaStream_t) {
  *p = std::malloc(bytes ? bytes : 1);
  if (!*p) return cudaErrorMemoryAllocation;
  std::memset(*p, 0xFF, bytes);
  return cudaSuccess;
}
inline cudaError_t cudaFreeAsync(void* p, cudaStream_t) {
  std::free(p);
  return cudaSuccess;
}
template <class F>
cudaError_t cudaFuncSetAttribute(F*, cudaFuncAttribute, int) {
  return cudaSuccess;
}
