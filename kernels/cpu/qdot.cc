// 8-bit-activation products (kernels/qdot.h): the activation quantizer, the portable scalar row
// kernel (the reference every ISA's kernel equals bit for bit: the chain of kernels/qdot.h in
// plain C++), the ISA choice and the driver, which quantizes each distinct x once and
// runs every job's row tasks in one pool run.
#include "kernels/qdot.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/error.h"
#include "kernels/detail/decode_pick.h"
#include "kernels/detail/qdot_rows.h"
#include "kernels/detail/qgemv_rows.h"
#include "kernels/detail/stored_order.h"
#include "kernels/thread_pool.h"

namespace kvzip::kernels {

using quant::GgmlType;

bool qdot_supported(GgmlType t) { return cpu::detail::qdot_rows_scalar(t) != nullptr; }

namespace cpu {
namespace detail {
namespace {

float half_portable(const uint8_t* p) { return f16_to_f32(load_u16(p)); }

template <GgmlType Ty>
void rows_scalar(const QDotRowsArgs& a) {
  using F = QFmt<Ty>;
  const MatrixView& w = *a.w;
  const uint32_t nblk = w.cols / (32 * F::kGroups), ng = w.cols / 32;
  BlockScales s;
  int q[32];
  for (uint32_t r = a.r0; r < a.r1; ++r) {
    const uint8_t* row = w.data + size_t(w.row_map ? w.row_map[r] : r) * w.row_bytes;
    for (uint32_t t = 0; t < a.T; ++t) {
      const Q8Act* x = a.x + size_t(t) * ng;
      float acc = 0.0f;  // the chain of kernels/qdot.h, one fused multiply-add per step
      for (uint32_t b = 0; b < nblk; ++b) {
        const uint8_t* blk = row + size_t(b) * F::kBytes;
        F::scales(blk, half_portable, s);
        for (int g = 0; g < F::kGroups; ++g) {
          const Q8Act& xa = x[b * F::kGroups + g];
          F::ints(blk, g, q);
          int32_t lo = 0, hi = 0;
          for (int e = 0; e < 16; ++e) lo += q[e] * xa.q[e], hi += q[e + 16] * xa.q[e + 16];
          if constexpr (Ty == GgmlType::Q6_K) {  // two sub-blocks, each with its own scale
            acc = std::fma(float(lo), xa.d * (s.fw[g] * float(s.sub[g][0])), acc);
            acc = std::fma(float(hi), xa.d * (s.fw[g] * float(s.sub[g][1])), acc);
          } else if constexpr (F::kMin) {
            acc = acc + std::fma(float(lo + hi), xa.d * s.fw[g], xa.s * s.mw[g]);
          } else {
            acc = std::fma(float(lo + hi), xa.d * s.fw[g], acc);
          }
        }
      }
      a.y[size_t(t) * w.rows + r] = acc;
    }
  }
}

}  // namespace

QDotFn qdot_rows_scalar(GgmlType t) {
  return pick_block_type<QDotFn>(t,
                                 [](auto T) -> QDotFn { return rows_scalar<decltype(T)::value>; });
}

void pack_acts_portable(const Q8Act* x, uint32_t T, uint32_t in, QActPack& out, PackOpts o) {
  const uint32_t ng = in / 32, in4 = in / 4, nv = (T + 15) / 16;
  const uint8_t flip = o.offset128 ? 0x80 : 0;
  out.nv = nv, out.in = in;
  out.u.assign(size_t(nv) * in * 16, flip);  // padding lanes: q = 0 (+ 128)
  out.d.assign(size_t(nv) * ng * 16, 0.0f);
  out.s.assign(size_t(nv) * ng * 16, 0.0f);
  for (uint32_t t = 0; t < T; ++t) {
    const uint32_t v = t / 16, l = t % 16;
    uint8_t* u = out.u.data() + size_t(v) * in4 * 64 + l * 4;
    for (uint32_t g = 0; g < ng; ++g) {
      const Q8Act& a = x[size_t(t) * ng + g];
      out.d[(size_t(v) * ng + g) * 16 + l] = a.d;
      out.s[(size_t(v) * ng + g) * 16 + l] = a.s;
      for (int st = 0; st < 8; ++st) {  // 4 elements (one dword) per 64-byte step line
        uint32_t w;
        std::memcpy(&w, a.q + 4 * st, 4);
        w ^= flip * 0x01010101u;
        std::memcpy(u + (size_t(g) * 8 + st) * 64, &w, 4);
      }
    }
  }
}

void pack_acts(const Q8Act* x, uint32_t T, uint32_t in, QActPack& out, PackOpts o) {
  if (cpu_has_avx512_vnni()) pack_acts_vnni(x, T, in, out, o);
  else pack_acts_portable(x, T, in, out, o);
}

}  // namespace detail

void quantize_acts(const float* x, uint32_t T, uint32_t in, Q8Act* out) {
  const uint32_t ng = in / 32;
  if (detail::cpu_has_avx512_vnni()) return detail::quantize_acts_vnni(x, size_t(T) * ng, out);
  if (detail::cpu_has_avx2() && detail::qdot_rows_avx2(GgmlType::Q4_0))
    return detail::quantize_acts_avx2(x, size_t(T) * ng, out);
  quantize_acts_portable(x, T, in, out);
}

void quantize_acts_portable(const float* x, uint32_t T, uint32_t in, Q8Act* out) {
  const uint32_t ng = in / 32;
  for (size_t k = 0; k < size_t(T) * ng; ++k) {
    const float* v = x + k * 32;
    float amax = 0.0f;
    for (int e = 0; e < 32; ++e) amax = std::max(amax, std::fabs(v[e]));
    const float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
    Q8Act& o = out[k];
    int32_t sum = 0;
    for (int e = 0; e < 32; ++e) {
      // |v·id| <= 127 up to rounding; the clamp keeps a 127.00001 from wrapping.
      const int q = int(std::clamp(std::nearbyint(v[e] * id), -127.0f, 127.0f));
      o.q[e] = int8_t(q);
      sum += q;
    }
    o.d = d;
    o.s = d * float(sum);
  }
}

namespace {

int decode_rows_from_env() {
  const char* e = std::getenv("KVZIP_DECODE_ROWS");
  const std::string v = e ? e : "";
  if (v.empty() || v == "auto") return 0;
  if (v == "16") return 16;
  if (v == "8") return 8;
  throw Error(Errc::invalid_argument, "KVZIP_DECODE_ROWS='" + v + "': expected auto, 16 or 8");
}

std::atomic<int>& decode_rows_setting() {
  static std::atomic<int> rows{decode_rows_from_env()};
  return rows;
}

}  // namespace

namespace detail {

void set_decode_rows(int rows) {
  if (rows != 0 && rows != 8 && rows != 16)
    throw Error(Errc::invalid_argument, "set_decode_rows: expected 0 (timed choice), 8 or 16");
  decode_rows_setting() = rows;
}

int decode_rows() { return decode_rows_setting(); }

}  // namespace detail

namespace {

// Rows per task: small enough that a 576-row projection still spreads over the threads, large
// enough that the task hand-out is noise.
constexpr uint32_t kRowsPerTask = 32;

// A job on the row kernels (decode steps: T below the GEMM's) is split into kDecodeTasksPerThread
// contiguous runs a thread (whole sixteen-row tiles). Those kernels prefetch the next tile of
// their run; with 32-row tasks handed out in turn the threads' runs interleave, each thread's
// prefetches fetch the other's rows into the wrong L2 and every task starts cold: two threads
// stream 19 GB/s that way, as one thread alone, against 30-40 with long runs
// (bench/bench_decode.cc). Two runs a thread rather than one leave some balance to the dynamic
// hand-out on a shared machine (the same speed measured).
constexpr uint32_t kDecodeTasksPerThread = 2;

uint32_t rows_per_task(uint32_t rows, uint32_t threads, bool gemm) {
  if (gemm) return kRowsPerTask;
  const uint32_t parts = threads * kDecodeTasksPerThread;
  const uint32_t r = ((rows + parts - 1) / parts + 15) / 16 * 16;
  return std::max(r, kRowsPerTask);
}

detail::QDotFn pick(QIsa isa, GgmlType t) {
  switch (isa) {
    case QIsa::Scalar: return detail::qdot_rows_scalar(t);
    // AVX-512 CPUs without VNNI run the AVX2 tiles; with VNNI the same tiles sum by vpdpbusd
    // (and the sixteen-row decode kernels) below the GEMM's tokens (qdot_gemm_for).
    case QIsa::Avx2:
    case QIsa::Avx512: return detail::qdot_rows_avx2(t);
    case QIsa::Avx512Vnni:
    case QIsa::Amx: return detail::qdot_rows_vnni(t);
  }
  return nullptr;
}

detail::QGemmFn qdot_gemm_for(QIsa isa, GgmlType t, uint32_t T) {
  switch (isa) {
    case QIsa::Scalar: return nullptr;
    case QIsa::Avx2:
    case QIsa::Avx512:
      return T >= (t == GgmlType::Q8_0 ? kQdotAvx2GemmMinTQ8_0 : kQdotAvx2GemmMinT)
                 ? detail::qdot_gemm_avx2(t)
                 : nullptr;
    case QIsa::Avx512Vnni:
    case QIsa::Amx: {
      const uint32_t from = !detail::qdot_decode16_vnni(t) ? kQdotGemmMinT
                            : t == GgmlType::Q6_K          ? kQdotDecode16GemmMinTQ6K
                            : t == GgmlType::Q8_0          ? kQdotDecode16GemmMinTQ8_0
                                                           : kQdotDecode16GemmMinT;
      return T >= from ? detail::qdot_gemm_vnni(t) : nullptr;
    }
  }
  return nullptr;
}

// The pack each GEMM reads: unsigned (q + 128) for the VNNI GEMM, signed for AVX2 and AMX.
bool signed_pack(QIsa isa, bool amx) { return amx || isa == QIsa::Avx2 || isa == QIsa::Avx512; }

// The AMX tile GEMM from kQdotAmxMinT tokens (its pack is signed: detail::kAmxPack).
detail::QGemmFn qdot_amx_for(QIsa isa, GgmlType t, uint32_t T) {
  const uint32_t from = t == GgmlType::Q6_K ? kQdotAmxMinTQ6K : kQdotAmxMinT;
  return isa == QIsa::Amx && T >= from ? detail::qdot_gemm_amx(t) : nullptr;
}

}  // namespace

// One function over 80 lines on purpose: its planning steps (kernel per job, one activation
// quantization per input, the GEMM packs, the decode row choice, the task split) fill per-job
// vectors that the task loop then reads; split apart, each step would pass most of them along.
void qdot(ThreadPool* pool, std::span<const MatmulArgs> jobs, QIsa isa) {
  if (!qisa_available(isa))
    throw Error(Errc::unsupported, std::string("qdot: instruction set ") + qisa_name(isa) +
                                       " is not available on this CPU/build");
  std::vector<detail::QDotFn> fns(jobs.size());
  for (size_t j = 0; j < jobs.size(); ++j) {
    fns[j] = pick(isa, jobs[j].w.type);
    if (!fns[j])
      throw Error(Errc::unsupported, std::string("qdot: weight type ") +
                                         quant::type_name(jobs[j].w.type) + " has no " +
                                         qisa_name(isa) + " kernel");
  }
  // One quantization per distinct (x, T, in): Q, K and V of one input share theirs.
  std::vector<size_t> act_of(jobs.size()), act_start;
  std::vector<Q8Act> acts;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const MatmulArgs& a = jobs[j];
    size_t k = 0;
    for (; k < j; ++k)
      if (jobs[k].x == a.x && jobs[k].T == a.T && jobs[k].w.cols == a.w.cols) break;
    if (k < j) {
      act_of[j] = act_of[k];
      continue;
    }
    act_of[j] = act_start.size();
    act_start.push_back(acts.size());
    acts.resize(acts.size() + size_t(a.T) * (a.w.cols / 32));
  }
  // Jobs on a GEMM read their activations packed in 16-token vectors: one pack per x and GEMM
  // (the VNNI one's holds q + 128, the AVX2 and AMX ones' q; Q, K and V of one x can take both
  // the VNNI and the AMX GEMM, as Q6_K moves to AMX later than the other types).
  std::vector<detail::QGemmFn> gemm(jobs.size());
  std::vector<bool> signed_x(jobs.size(), false);             // the job reads the signed pack
  std::vector<detail::QActPack> packs(2 * act_start.size());  // [2 · x + signed]
  std::vector<bool> done(act_start.size(), false), packed(2 * act_start.size(), false);
  for (size_t j = 0; j < jobs.size(); ++j) {
    const MatmulArgs& a = jobs[j];
    const detail::QGemmFn amx = qdot_amx_for(isa, a.w.type, a.T);
    gemm[j] = amx ? amx : qdot_gemm_for(isa, a.w.type, a.T);
    if (!done[act_of[j]]) {
      done[act_of[j]] = true;
      quantize_acts(a.x, a.T, a.w.cols, acts.data() + act_start[act_of[j]]);
    }
    signed_x[j] = signed_pack(isa, amx != nullptr);
    const size_t pk = 2 * act_of[j] + signed_x[j];
    if (gemm[j] && !packed[pk]) {
      packed[pk] = true;
      detail::pack_acts(acts.data() + act_start[act_of[j]], a.T, a.w.cols, packs[pk],
                        signed_x[j] ? detail::kSignedPack : detail::PackOpts{});
    }
  }
  // One-token jobs of the types with sixteen-row decode kernels, on a VNNI CPU: those kernels or
  // the eight-row ones, whichever streams faster here (kernels/detail/decode_pick.h).
  thread_local detail::DecodePick decode_pick;
  int kernel = -1;    // 0: sixteen rows, 1: eight rows, -1: no such job
  uint64_t kind = 0;  // the call's bytes of weights
  if (isa == QIsa::Avx512Vnni || isa == QIsa::Amx) {
    for (const MatmulArgs& a : jobs) kind += uint64_t(a.w.rows) * a.w.row_bytes;
    for (size_t j = 0; j < jobs.size(); ++j) {
      const MatmulArgs& a = jobs[j];
      if (gemm[j] || a.T != 1 || !detail::qdot_decode16_vnni(a.w.type)) continue;
      if (kernel < 0) {
        const int rows = detail::decode_rows();
        kernel = rows == 16 ? 0 : rows == 8 ? 1 : decode_pick.next(kind);
      }
      if (kernel == 1) fns[j] = detail::qdot_rows_vnni8(a.w.type);
    }
  }
  // Row-mapped jobs on the row kernels run over the stored rows (kernels/detail/stored_order.h);
  // the GEMMs read a map as they pack the rows.
  detail::StoredOrder stored;
  std::vector<MatmulArgs> run_jobs(jobs.begin(), jobs.end());
  for (size_t j = 0; j < jobs.size(); ++j)
    if (!gemm[j]) run_jobs[j] = stored.take(jobs[j]);
  std::vector<size_t> first_task(jobs.size() + 1, 0);
  std::vector<uint32_t> per_task(jobs.size());
  for (size_t j = 0; j < jobs.size(); ++j) {
    per_task[j] = rows_per_task(jobs[j].w.rows, pool ? pool->size() : 1, gemm[j] != nullptr);
    first_task[j + 1] = first_task[j] + (jobs[j].w.rows + per_task[j] - 1) / per_task[j];
  }
  const auto started = std::chrono::steady_clock::now();
  run_tasks(pool, first_task.back(), [&](size_t task) {
    size_t j = 0;
    while (task >= first_task[j + 1]) ++j;
    const MatmulArgs& a = run_jobs[j];
    const uint32_t r0 = uint32_t(task - first_task[j]) * per_task[j];
    const uint32_t r1 = std::min(r0 + per_task[j], a.w.rows);
    const detail::QDotRowsArgs rows{&a.w, acts.data() + act_start[act_of[j]], a.T, a.y, r0, r1};
    if (gemm[j]) gemm[j](rows, packs[2 * act_of[j] + signed_x[j]]);
    else fns[j](rows);
    if (a.bias)
      for (uint32_t t = 0; t < a.T; ++t)
        for (uint32_t r = r0; r < r1; ++r) a.y[size_t(t) * a.w.rows + r] += a.bias[r];
  });
  if (kernel >= 0 && detail::decode_rows() == 0)
    decode_pick.record(
        kind, kernel,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  stored.finish();
}

}  // namespace cpu

// The same choice qdot makes for a long call (one place says which ISA has which GEMM).
bool qdot_has_gemm(QIsa isa) {
  return qisa_available(isa) && cpu::qdot_gemm_for(isa, GgmlType::Q4_0, UINT32_MAX) != nullptr;
}

}  // namespace kvzip::kernels
