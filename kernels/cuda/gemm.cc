// cuBLAS GEMM for the GPU forward (kernels/gemm.h GemmBf16Args): row-major Y(T, out) =
// X(T, in) · W(out, in)^T is, in cuBLAS's column-major terms, Y^T(out, T) = W^T · X^T, i.e.
// op(A) = T on the weight (lda = in) and op(B) = N on the activations (ldb = in). bf16 inputs,
// fp32 compute and output. One cuBLAS handle per process (created on first use, guarded by a
// mutex; the stream is set per call).
#include <cublas_v2.h>

#include <mutex>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"

namespace kvzip::kernels::cuda {
namespace {

void check_cublas(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw Error(s == CUBLAS_STATUS_ALLOC_FAILED ? Errc::out_of_memory : Errc::cuda,
                std::string("cuBLAS ") + what + " failed: " + cublasGetStatusName(s) + " (" +
                    cublasGetStatusString(s) + ")");
}

std::mutex g_mutex;
cublasHandle_t g_handle = nullptr;

}  // namespace

void gemm_bf16(const GemmBf16Args& a, void* stream) {
  if (a.T == 0 || a.out == 0) return;
  KVZIP_ASSERT(a.x && a.w && a.y && a.in > 0);
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_handle) check_cublas(cublasCreate(&g_handle), "cublasCreate");
  check_cublas(cublasSetStream(g_handle, as_stream(stream)), "cublasSetStream");
  const float alpha = 1.0f, beta = 0.0f;
  check_cublas(cublasGemmEx(g_handle, CUBLAS_OP_T, CUBLAS_OP_N, int(a.out), int(a.T), int(a.in),
                            &alpha, a.w, CUDA_R_16BF, int(a.in), a.x, CUDA_R_16BF, int(a.in), &beta,
                            a.y, CUDA_R_32F, int(a.out), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx (bf16 x bf16 -> fp32)");
  if (a.bias) add_bias(a.y, a.bias, a.T, a.out, stream);
}

}  // namespace kvzip::kernels::cuda
