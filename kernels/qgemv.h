// Quantized GEMV in fp32: y(out) = W(out, in) · x(in) (+ bias), with W kept in one of ggml's
// 32-element block formats (byte layouts as in ggml's ggml-common.h, fields little-endian) and x, y
// in fp32. Each block is decoded on the fly: the result equals gemv() on the fp32 values those
// blocks dequantize to, up to fp32 summation order, while reading 4-6x fewer bytes. matmul's Exact
// path runs it for decode (its Fast path quantizes x to int8 instead: kernels/qdot.h).
// Several GEMVs (e.g. Q, K and V of one input) run as one batch over the pool's threads, their
// output rows split into tasks. The ISA (scalar, AVX2, AVX-512) is picked at run time; QIsa is
// also the ISA choice of kernels/qdot.h.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>

#include "kernels/device.h"

namespace kvzip::kernels {

enum class QFormat : uint8_t {
  Q4_0 = 0,  // 18 bytes: fp16 d, 16 bytes qs; w[j] = d·((qs[j] & 15) − 8),
             // w[j+16] = d·((qs[j] >> 4) − 8)
  Q4_1 = 1,  // 20 bytes: fp16 d, fp16 m, 16 bytes qs; w[j] = d·(qs[j] & 15) + m,
             // w[j+16] = d·(qs[j] >> 4) + m
  Q8_0 = 2,  // 34 bytes: fp16 d, 32 int8 qs; w[j] = d·qs[j]
};

inline constexpr uint32_t kQBlockElems = 32;

const char* qformat_name(QFormat f);
size_t qblock_bytes(QFormat f);
// Bytes of one row of `in` weights; `in` must be a multiple of kQBlockElems.
inline size_t qrow_bytes(QFormat f, uint32_t in) { return qblock_bytes(f) * (in / kQBlockElems); }

struct QGemvArgs {
  QFormat format = QFormat::Q8_0;
  const uint8_t* w =
      nullptr;               // (out, in / 32) blocks; row r starts at w + r·qrow_bytes(format, in)
  const float* x = nullptr;  // (in)
  const float* bias = nullptr;  // (out) or nullptr
  float* y = nullptr;           // (out); must not overlap x or w
  uint32_t in = 0;              // a multiple of 32
  uint32_t out = 0;
};

// Instruction sets the CPU kernel is built for. Every build has Scalar (portable C++); on x86-64
// with GCC/Clang the AVX2 (+FMA, F16C), AVX-512 (F+BW) and AVX-512 VNNI (F+BW+VL+VNNI) variants
// are compiled with function target attributes and used only when the running CPU reports them.
// Amx is the VNNI set plus the AMX-INT8 tile GEMM for qdot's longer calls (kernels/qdot.h), and,
// where the CPU also has AMX-BF16, matmul's bf16 tile GEMM for calls of more than 48 tokens
// (kernels/matmul.h). qgemv has no VNNI- or AMX-specific kernel (its activations are fp32): it
// runs the AVX-512 one.
enum class QIsa : uint8_t { Scalar = 0, Avx2 = 1, Avx512 = 2, Avx512Vnni = 3, Amx = 4 };

const char* qisa_name(QIsa isa);  // "scalar", "avx2", "avx512", "avx512-vnni", "amx-int8"
bool qisa_available(QIsa isa);    // compiled in and supported by this CPU (and, for AMX, its OS)
// The fastest available one, or, when the environment names one in KVZIP_CPU_ISA, that one: a
// way to compare kernels, or to step around one, without rebuilding. Names: those of qisa_name,
// and "amx" (QIsa::Amx with its AMX-BF16 GEMM, what an AMX CPU picks unset) beside "amx-int8"
// (QIsa::Amx without it: prefill keeps the int8 chain at every T). A name that is unknown or not
// available here is an Errc::unsupported error that lists the available ones.
QIsa qisa_best();
// Whether matmul may use AMX-BF16 tiles: qisa_best() is QIsa::Amx, the CPU and OS grant
// AMX-BF16, and KVZIP_CPU_ISA is not "amx-int8".
bool qisa_amx_bf16();

namespace cpu {
// Runs every GEMV of `jobs` (each checked: in % 32 == 0, non-null pointers, else
// Errc::invalid_argument) with `isa`, which must be available (else Errc::unsupported).
void qgemv(ThreadPool* pool, std::span<const QGemvArgs> jobs, QIsa isa);
}  // namespace cpu

inline void qgemv(const Exec& ex, std::span<const QGemvArgs> jobs) {
  require_cpu(ex, "qgemv");
  cpu::qgemv(ex.pool, jobs, qisa_best());
}
inline void qgemv(const Exec& ex, const QGemvArgs& a) {
  qgemv(ex, std::span<const QGemvArgs>(&a, 1));
}

}  // namespace kvzip::kernels
