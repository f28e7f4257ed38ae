// CPU matmul over stored weight types (see kernels/matmul.h). Regimes by path, type and T: on the
// Fast path the block types qdot reads go through the 8-bit-activation integer kernels up to
// kQdotMaxT tokens (and beyond where the CPU has an int8 GEMM — AVX2, AVX-512 VNNI or AMX —
// unless it has AMX-BF16: then every block type beyond kQdotMaxT goes through the bf16 tile GEMM);
// on the Exact path Q4_0/Q4_1/Q8_0 decode runs the fp32 register-decoding qgemv; otherwise up to
// kTileMaxT tokens, tasks of kGemvRows dequantized rows (a few KiB, in L1/L2) are dotted with every
// token; longer T, slabs of dequantized rows are multiplied by OpenBLAS sgemm (threads as
// set_blas_threads), so the fp32 GEMM runs at its usual speed and one slab of fp32 weights exists
// at a time.
#include "kernels/matmul.h"

#include <cblas.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "kernels/detail/attention_isa.h"
#include "kernels/detail/bf16_gemm.h"
#include "kernels/detail/half_rows.h"
#include "kernels/detail/stored_order.h"
#include "kernels/qdot.h"
#include "kernels/qgemv.h"
#include "kernels/simd.h"
#include "kernels/thread_pool.h"

namespace kvzip::kernels {
namespace {

using quant::GgmlType;

// Fast path, block types with an 8-bit kernel: up to kQdotMaxT tokens (any T on a CPU with an int8
// GEMM, qdot_has_gemm: every x86 CPU with AVX2) go through kernels/qdot.h (activations quantized to
// int8, integer dot products; W read once per call). Otherwise, up to kTileMaxT tokens every task
// dequantizes kGemvRows rows into a buffer that stays in L1/L2 and dots them with every token, so W
// is read and decoded once per call; beyond that, slabs + sgemm (decoding is then a small fraction
// of the GEMM's work). On an AVX2-only CPU qdot's AVX2 GEMM multiplies the blocks in integers as
// stored (vpmaddubsw + vpmaddwd: 32 products in two instructions, four fp32 FMAs), so it keeps pace
// with fp32 sgemm on already-fp32 weights and outruns the slabs, which also decode the weights.
constexpr uint32_t kQdotMaxT = kMatmulInt8MaxT;
constexpr uint32_t kTileMaxT = 48;
// Exact path, up to kGemvMaxT tokens of Q4_0/Q4_1/Q8_0: the register-decoding fp32 GEMV
// (kernels/qgemv.h), once per token — the same fp32 weight values, decoded in registers rather
// than through the tiles' buffer.
constexpr uint32_t kGemvMaxT = 2;
constexpr uint32_t kGemvRows = 16;

std::optional<QFormat> qgemv_format(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0: return QFormat::Q4_0;
    case GgmlType::Q4_1: return QFormat::Q4_1;
    case GgmlType::Q8_0: return QFormat::Q8_0;
    default: return std::nullopt;
  }
}

// Runs on every call (the decode hot path): the message is built only when a check fails.
void check_job(const MatmulArgs& a, size_t index) {
  auto where = [&] { return "matmul job " + std::to_string(index) + ": "; };
  const quant::TypeTraits* tr = quant::type_traits(uint32_t(a.w.type));
  if (!tr || !tr->dequantizable)
    throw Error(Errc::unsupported, where() + "weight type " + quant::type_name(a.w.type) +
                                       " is not supported (supported: F32 F16 BF16 Q4_0 Q4_1 "
                                       "Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K)");
  if (a.w.cols % tr->block_elems != 0)
    throw Error(Errc::invalid_argument, where() + "in = " + std::to_string(a.w.cols) +
                                            " is not a whole number of " + tr->name +
                                            " blocks of " + std::to_string(tr->block_elems));
  if (a.w.row_bytes != quant::row_bytes(a.w.type, a.w.cols))
    throw Error(Errc::invalid_argument, where() + "row_bytes " + std::to_string(a.w.row_bytes) +
                                            " does not match " + std::to_string(a.w.cols) + " " +
                                            tr->name + " values");
  if (a.T > 0 && a.w.rows > 0 && (!a.x || !a.y || !a.w.data))
    throw Error(Errc::invalid_argument, where() + "null x, y or weight pointer");
}

inline uint32_t stored_row(const MatrixView& w, uint32_t r) { return w.row_map ? w.row_map[r] : r; }

void dequant_serial(const MatrixView& w, uint32_t row0, uint32_t n, float* out) {
  for (uint32_t i = 0; i < n; ++i)
    quant::dequantize_row(w.type, w.data + size_t(stored_row(w, row0 + i)) * w.row_bytes,
                          out + size_t(i) * w.cols, w.cols);
}

float dot(const float* a, const float* b, uint32_t n) {
  using simd::kLanes;
  simd::VecF acc0{}, acc1{};
  uint32_t i = 0;
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    acc0 += simd::load(a + i) * simd::load(b + i);
    acc1 += simd::load(a + i + kLanes) * simd::load(b + i + kLanes);
  }
  for (; i + kLanes <= n; i += kLanes) acc0 += simd::load(a + i) * simd::load(b + i);
  float s = simd::hsum(acc0 + acc1);
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

void add_bias(const MatmulArgs& a) {
  if (!a.bias) return;
  for (uint32_t t = 0; t < a.T; ++t) {
    float* y = a.y + size_t(t) * a.w.rows;
    for (uint32_t r = 0; r < a.w.rows; ++r) y[r] += a.bias[r];
  }
}

// Every token of a job with T <= kTileMaxT: rows dequantized kGemvRows at a time, each row dotted
// with every token's x while it is in cache.
void tile_small_t(ThreadPool* pool, const MatmulArgs& a) {
  const uint32_t in = a.w.cols, out = a.w.rows;
  const size_t n_tasks = (out + kGemvRows - 1) / kGemvRows;
  auto task = [&](size_t k) {
    thread_local std::vector<float> buf;
    buf.resize(size_t(kGemvRows) * in);
    const uint32_t r0 = uint32_t(k) * kGemvRows, n = std::min(kGemvRows, out - r0);
    dequant_serial(a.w, r0, n, buf.data());
    for (uint32_t t = 0; t < a.T; ++t) {
      const float* x = a.x + size_t(t) * in;
      float* y = a.y + size_t(t) * out + r0;
      for (uint32_t i = 0; i < n; ++i) y[i] = dot(buf.data() + size_t(i) * in, x, in);
    }
  };
  if (pool) pool->run(n_tasks, task);
  else
    for (size_t k = 0; k < n_tasks; ++k) task(k);
}

// F16/BF16/F32 jobs up to kTileMaxT tokens (kernels/detail/half_rows.h): the widest kernel this
// CPU has, in long contiguous runs of rows, two a thread (as qdot's decode: each thread's rows
// one stream).
cpu::detail::HalfRowsFn half_rows_for(GgmlType t) {
  if (auto f = cpu::detail::half_rows_avx512(t)) return f;
  if (auto f = cpu::detail::half_rows_avx2(t)) return f;
  return cpu::detail::half_rows_portable(t);
}

void half_rows(ThreadPool* pool, const MatmulArgs& a, cpu::detail::HalfRowsFn fn) {
  const uint32_t threads = pool ? pool->size() : 1, parts = 2 * threads;
  const uint32_t per = std::max(16u, ((a.w.rows + parts - 1) / parts + 3) / 4 * 4);
  const size_t n_tasks = (a.w.rows + per - 1) / per;
  run_tasks(pool, n_tasks, [&](size_t k) {
    const uint32_t r0 = uint32_t(k) * per;
    fn(a, r0, std::min(r0 + per, a.w.rows));
  });
}

// The block-format jobs of one token as one qgemv batch (one pool run); row-mapped jobs over
// their stored rows (kernels/detail/stored_order.h).
void gemv_blocks(ThreadPool* pool, std::span<const MatmulArgs* const> jobs, uint32_t t) {
  std::vector<QGemvArgs> q;
  cpu::detail::StoredOrder stored;
  for (const MatmulArgs* job : jobs) {
    MatmulArgs one = *job;  // token t alone
    one.x += size_t(t) * one.w.cols;
    one.y += size_t(t) * one.w.rows;
    one.T = 1;
    one.bias = nullptr;  // the caller adds it
    const MatmulArgs a = stored.take(one);
    q.push_back(
        QGemvArgs{*qgemv_format(a.w.type), a.w.data, a.x, nullptr, a.y, a.w.cols, a.w.rows});
  }
  cpu::qgemv(pool, q, qisa_best());
  stored.finish();
}

void slab_gemm(ThreadPool* pool, const MatmulArgs& a) {
  const MatrixView& w = a.w;
  const int T = int(a.T), out = int(w.rows), in = int(w.cols);
  if (w.type == GgmlType::F32 && !w.row_map) {  // in place: nothing to decode
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, out, in, 1.0f, a.x, in,
                reinterpret_cast<const float*>(w.data), in, 0.0f, a.y, out);
    return;
  }
  const uint32_t slab = uint32_t(std::clamp<size_t>(kMatmulSlabFloats / w.cols, 16, w.rows));
  thread_local std::vector<float> buf;
  buf.resize(size_t(slab) * w.cols);
  for (uint32_t r0 = 0; r0 < w.rows; r0 += slab) {
    const uint32_t n = std::min(slab, w.rows - r0);
    dequantize_view_rows(pool, w, r0, n, buf.data());
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, int(n), in, 1.0f, a.x, in, buf.data(),
                in, 0.0f, a.y + r0, out);
  }
}

}  // namespace

void dequantize_view_rows(ThreadPool* pool, const MatrixView& w, uint32_t row0, uint32_t n,
                          float* out) {
  if (!pool || pool->size() == 1 || size_t(n) * w.cols < 65536) {
    dequant_serial(w, row0, n, out);
    return;
  }
  const size_t grain = std::max<size_t>(1, 16384 / std::max<uint32_t>(w.cols, 1));
  pool->parallel_for(n, grain, [&](size_t b, size_t e) {
    dequant_serial(w, row0 + uint32_t(b), uint32_t(e - b), out + b * w.cols);
  });
}

bool matmul_bf16_products(quant::GgmlType t, uint32_t T) {
  if (T <= kTileMaxT) return false;
  if (t == GgmlType::F16 || t == GgmlType::BF16) return cpu::detail::bf16_gemm_available();
  return qdot_supported(t) && cpu::detail::bf16_gemm_amx_available();  // every block type
}

const char* matmul_path_name(MatmulPath p) { return p == MatmulPath::Exact ? "exact" : "fast"; }

std::string matmul_kernels(MatmulPath p) {
  const QIsa best = qisa_best();
  const std::string isa = qisa_name(best);
  const std::string tail =
      "; fp32 dequantized slabs + OpenBLAS sgemm beyond T=" + std::to_string(kTileMaxT);
  if (p == MatmulPath::Fast) {
    const bool vnni = best == QIsa::Avx512Vnni || best == QIsa::Amx;
    const std::string tiles = best == QIsa::Scalar ? "scalar" : vnni ? "avx512-vnni" : "avx2";
    std::string s = "fast: int8 activations x Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/Q4_K/Q5_K/Q6_K blocks (";
    const auto n = [](uint32_t v) { return std::to_string(v); };
    // Which kernel takes a call of T tokens on a VNNI CPU (qdot.cc: qdot_gemm_for, qdot_amx_for).
    const uint32_t d16_max =
        best == QIsa::Amx ? std::min(kQdotDecode16GemmMinT, kQdotAmxMinT) : kQdotDecode16GemmMinT;
    const std::string d16 = "avx512-vnni 16-row decode kernels below T=" + n(d16_max) +
                            " (Q6_K: T=" + n(kQdotDecode16GemmMinTQ6K) +
                            ", Q8_0: T=" + n(kQdotDecode16GemmMinTQ8_0) +
                            "; at T=1 they or the 8-row ones, whichever is timed faster), ";
    if (best == QIsa::Amx && cpu::detail::bf16_gemm_amx_available())
      s += d16 + "avx512-vnni GEMM below T=" + n(kQdotAmxMinT) + " (Q6_K: up to T=" + n(kQdotMaxT) +
           "), amx-int8 tile GEMM up to T=" + n(kQdotMaxT) +
           ": the same bits at any T up to there); beyond, every block type as bf16 x bf16 "
           "(amx-bf16 tile GEMM)";
    else if (best == QIsa::Amx)
      s += d16 + "avx512-vnni GEMM below T=" + n(kQdotAmxMinT) + " (Q6_K: T=" + n(kQdotAmxMinTQ6K) +
           "), amx-int8 tile GEMM from there: the same bits at any T)";
    else if (qdot_has_gemm(best))
      s += (vnni ? d16
                 : "avx2 decode kernels at T=1, avx2 tiles below T=" + n(kQdotAvx2GemmMinT) +
                       " (Q8_0: T=" + n(kQdotAvx2GemmMinTQ8_0) + "), ") +
           tiles + " GEMM from there: the same bits at any T)";
    else s += tiles + " tiles up to T=" + std::to_string(kQdotMaxT) + ")";
    // Attention is not a weight product, but the Fast path picks its products too.
    s += cpu::bf16_attention_available()
             ? "; attention q·k and p·v on bf16 operands (avx512-bf16) for prompts, fp32 for decode"
             : "; attention in fp32";
    if (cpu::detail::bf16_gemm_available()) {
      return s + "; F16/BF16/F32 rows widened in registers up to T=" + std::to_string(kTileMaxT) +
             (cpu::detail::bf16_gemm_amx_available()
                  ? ", amx-bf16 tile GEMM beyond (widths of 32k; else avx512-bf16)"
                  : ", avx512-bf16 GEMM beyond") +
             "; F32 OpenBLAS sgemm beyond";
    }
    return s + ", F16/BF16/F32 rows widened in registers, other types fp32 tiles" + tail;
  }
  return "exact: fp32 Q4_0/Q4_1/Q8_0 register-decoding GEMV (" + isa +
         ") up to T=" + std::to_string(kGemvMaxT) +
         ", F16/BF16/F32 rows widened in registers and fp32 dequantized tiles up to T=" +
         std::to_string(kTileMaxT) + tail;
}

namespace cpu {

void matmul(ThreadPool* pool, std::span<const MatmulArgs> jobs, MatmulPath path) {
  for (size_t i = 0; i < jobs.size(); ++i) check_job(jobs[i], i);
  static const bool gemm8 = qdot_has_gemm(qisa_best());  // 8-bit prefill GEMM on this CPU
  std::vector<MatmulArgs> q8;  // Fast-path jobs for the 8-bit kernels, one batch
  std::vector<const MatmulArgs*>
      f32;  // Exact-path decode jobs for the fp32 qgemv, batched per token
  for (const MatmulArgs& a : jobs) {
    if (a.T == 0 || a.w.rows == 0) continue;
    // Beyond kTileMaxT: F16/BF16 on AVX-512 BF16, and on an AMX-BF16 CPU the block types too (bf16
    // tiles summing over the whole width, free of the int8 tiles' per-group fp32 steps,
    // kernels/cpu/bf16_gemm_amx.cc).
    if (path == MatmulPath::Fast && matmul_bf16_products(a.w.type, a.T) && a.w.cols % 2 == 0) {
      detail::bf16_gemm(pool, a);
      add_bias(a);
      continue;
    }
    if (path == MatmulPath::Fast && qdot_supported(a.w.type) && (a.T <= kQdotMaxT || gemm8)) {
      q8.push_back(a);  // bias added by qdot
      continue;
    }
    if (path == MatmulPath::Exact && a.T <= kGemvMaxT && qgemv_format(a.w.type)) {
      f32.push_back(&a);
      continue;
    }
    if (a.T <= kTileMaxT) {
      if (auto fn = half_rows_for(a.w.type)) {
        cpu::detail::StoredOrder stored;  // so the rows' next-group prefetches run (half_rows.cc)
        half_rows(pool, stored.take(a), fn);
        stored.finish();
        if (stored.took(a)) continue;  // finish() added the bias
      } else {
        tile_small_t(pool, a);
      }
    } else {
      slab_gemm(pool, a);
    }
    add_bias(a);
  }
  if (!q8.empty()) qdot(pool, q8, qisa_best());
  if (f32.empty()) return;
  uint32_t max_t = 0;
  for (const MatmulArgs* a : f32) max_t = std::max(max_t, a->T);
  for (uint32_t t = 0; t < max_t; ++t) {
    std::vector<const MatmulArgs*> now;
    for (const MatmulArgs* a : f32)
      if (t < a->T) now.push_back(a);
    gemv_blocks(pool, now, t);
  }
  for (const MatmulArgs* a : f32) add_bias(*a);
}

}  // namespace cpu
}  // namespace kvzip::kernels
