// Quantized GEMV (kernels/qgemv.h): argument checks, the ISA choice, the portable scalar row
// kernels, and the batch driver that splits every job's output rows into tasks of kRowsPerTask
// and runs all jobs' tasks in one pool run (one wake-up for Q, K and V together).
#include "kernels/qgemv.h"

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "common/enum_names.h"
#include "common/error.h"
#include "kernels/detail/qdot_rows.h"
#include "kernels/detail/qgemv_rows.h"
#include "kernels/thread_pool.h"

namespace kvzip::kernels {

namespace {
constexpr EnumName<QFormat> kFormatNames[] = {
    {QFormat::Q4_0, "Q4_0"}, {QFormat::Q4_1, "Q4_1"}, {QFormat::Q8_0, "Q8_0"}};
}  // namespace

const char* qformat_name(QFormat f) { return enum_name(kFormatNames, f, "Q?"); }

size_t qblock_bytes(QFormat f) {
  switch (f) {
    case QFormat::Q4_0: return 18;
    case QFormat::Q4_1: return 20;
    case QFormat::Q8_0: return 34;
  }
  throw Error(Errc::invalid_argument, "unknown QFormat " + std::to_string(static_cast<int>(f)) +
                                          " (expected " + enum_names(kFormatNames) + ")");
}

namespace {
constexpr EnumName<QIsa> kIsaNames[] = {
    {QIsa::Scalar, "scalar"}, {QIsa::Avx2, "avx2"},
    {QIsa::Avx512, "avx512"}, {QIsa::Avx512Vnni, "avx512-vnni"},
    {QIsa::Amx, "amx-int8"},  {QIsa::Amx, "amx"}};  // second: qisa_name gives the first
}  // namespace

const char* qisa_name(QIsa isa) { return enum_name(kIsaNames, isa, "isa?"); }

bool qisa_available(QIsa isa) {
  using namespace cpu::detail;
  switch (isa) {
    case QIsa::Scalar: return true;
    case QIsa::Avx2: return qrows_avx2(QFormat::Q8_0) != nullptr && cpu_has_avx2();
    case QIsa::Avx512: return qrows_avx512(QFormat::Q8_0) != nullptr && cpu_has_avx512();
    case QIsa::Avx512Vnni:
      return qisa_available(QIsa::Avx512) && qdot_gemm_vnni(quant::GgmlType::Q4_0) != nullptr &&
             cpu_has_avx512_vnni();
    case QIsa::Amx:
      return qisa_available(QIsa::Avx512Vnni) && qdot_gemm_amx(quant::GgmlType::Q4_0) != nullptr &&
             cpu_has_amx_int8();
  }
  return false;
}

QIsa qisa_best() {
  static const QIsa best = [] {
    std::string have;
    for (const EnumName<QIsa>& e : kIsaNames)
      if (qisa_available(e.value)) have += (have.empty() ? "" : ", ") + std::string(e.name);
    if (const char* env = std::getenv("KVZIP_CPU_ISA"); env && *env) {
      const std::optional<QIsa> want = enum_value(kIsaNames, env);
      if (!want || !qisa_available(*want))
        throw Error(
            Errc::unsupported,
            std::string("KVZIP_CPU_ISA=") + env +
                (want ? " is not available on this CPU/build" : " is not an instruction set name") +
                "; available here: " + have + " (or unset it for the fastest)");
      return *want;
    }
    for (QIsa isa : {QIsa::Amx, QIsa::Avx512Vnni, QIsa::Avx512, QIsa::Avx2})
      if (qisa_available(isa)) return isa;
    return QIsa::Scalar;
  }();
  return best;
}

bool qisa_amx_bf16() {
  static const bool on = [] {
    using cpu::detail::AmxUnit;
    if (qisa_best() != QIsa::Amx || !cpu::detail::cpu_has_amx(AmxUnit::Bf16)) return false;
    const char* env = std::getenv("KVZIP_CPU_ISA");
    return !(env && std::string(env) == "amx-int8");
  }();
  return on;
}

namespace cpu {
namespace detail {
namespace {

// Eight independent lanes per row (lane l takes elements l, l+8, ...), so the compiler can keep
// them in one vector register without reassociating any sum (no -ffast-math needed). The Q4
// offset term is applied once per block through xsum.
template <QFormat F>
void rows_scalar(const QGemvArgs& a, const float* xsum, uint32_t r0, uint32_t r1) {
  constexpr int kL = 8;
  const uint32_t nb = a.in / kQBlockElems;
  const size_t bb = qblock_bytes(F);
  for (uint32_t r = r0; r < r1; ++r) {
    const uint8_t* blk = a.w + size_t(r) * nb * bb;
    float acc[kL] = {};
    float offset = 0.0f;
    for (uint32_t b = 0; b < nb; ++b, blk += bb) {
      const float* x = a.x + size_t(b) * kQBlockElems;
      const float d = f16_to_f32(load_u16(blk));
      float s[kL] = {};
      if constexpr (F == QFormat::Q8_0) {
        const int8_t* q = reinterpret_cast<const int8_t*>(blk + 2);
        for (int j = 0; j < 32; j += kL)
          for (int l = 0; l < kL; ++l) s[l] += float(q[j + l]) * x[j + l];
      } else {
        const uint8_t* q = blk + (F == QFormat::Q4_1 ? 4 : 2);
        for (int j = 0; j < 16; j += kL)
          for (int l = 0; l < kL; ++l)
            s[l] += float(q[j + l] & 15) * x[j + l] + float(q[j + l] >> 4) * x[j + l + 16];
        offset += (F == QFormat::Q4_1 ? f16_to_f32(load_u16(blk + 2)) : -8.0f * d) * xsum[b];
      }
      for (int l = 0; l < kL; ++l) acc[l] += d * s[l];
    }
    float y = offset;
    for (int l = 0; l < kL; ++l) y += acc[l];
    a.y[r] = y;
  }
}

}  // namespace

QRowsFn qrows_scalar(QFormat f) {
  return pick_qformat(f, [](auto F) -> QRowsFn { return rows_scalar<decltype(F)::value>; });
}

}  // namespace detail

namespace {

constexpr uint32_t kRowsPerTask = 64;

void check_job(const QGemvArgs& a, size_t index) {
  const std::string where = "qgemv job " + std::to_string(index) + ": ";
  qblock_bytes(a.format);  // throws on an unknown format
  if (a.in % kQBlockElems != 0)
    throw Error(Errc::invalid_argument,
                where + "in = " + std::to_string(a.in) + " is not a multiple of the block size 32");
  if (a.out > 0 && (a.y == nullptr || (a.in > 0 && (a.w == nullptr || a.x == nullptr))))
    throw Error(Errc::invalid_argument, where + "null w, x or y pointer for a " +
                                            std::to_string(a.out) + "x" + std::to_string(a.in) +
                                            " product");
}

detail::QRowsFn pick(QIsa isa, QFormat f) {
  switch (isa) {
    case QIsa::Scalar: return detail::qrows_scalar(f);
    case QIsa::Avx2: return detail::qrows_avx2(f);
    case QIsa::Avx512:
    case QIsa::Avx512Vnni:
    case QIsa::Amx: return detail::qrows_avx512(f);
  }
  return nullptr;
}

// Per-block sums of x for every job (Q8_0 jobs get none): job j's sums start at offset[j].
void block_sums(std::span<const QGemvArgs> jobs, std::vector<float>& sums,
                std::vector<size_t>& offset) {
  offset.resize(jobs.size());
  size_t total = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    offset[j] = total;
    if (jobs[j].format != QFormat::Q8_0) total += jobs[j].in / kQBlockElems;
  }
  sums.resize(total);
  for (size_t j = 0; j < jobs.size(); ++j) {
    if (jobs[j].format == QFormat::Q8_0) continue;
    for (uint32_t b = 0; b < jobs[j].in / kQBlockElems; ++b) {
      const float* x = jobs[j].x + size_t(b) * kQBlockElems;
      float s = 0.0f;
      for (uint32_t i = 0; i < kQBlockElems; ++i) s += x[i];
      sums[offset[j] + b] = s;
    }
  }
}

}  // namespace

void qgemv(ThreadPool* pool, std::span<const QGemvArgs> jobs, QIsa isa) {
  if (!qisa_available(isa))
    throw Error(Errc::unsupported, std::string("qgemv: instruction set ") + qisa_name(isa) +
                                       " is not available on this CPU/build; use qisa_best()");
  for (size_t j = 0; j < jobs.size(); ++j) check_job(jobs[j], j);
  std::vector<float> sums;
  std::vector<size_t> sum_offset;
  block_sums(jobs, sums, sum_offset);
  std::vector<size_t> first_task(jobs.size() + 1,
                                 0);  // job j owns tasks [first_task[j], first_task[j+1])
  for (size_t j = 0; j < jobs.size(); ++j)
    first_task[j + 1] = first_task[j] + (jobs[j].out + kRowsPerTask - 1) / kRowsPerTask;
  run_tasks(pool, first_task.back(), [&](size_t t) {
    size_t j = 0;
    while (t >= first_task[j + 1]) ++j;
    const QGemvArgs& a = jobs[j];
    const uint32_t r0 = static_cast<uint32_t>(t - first_task[j]) * kRowsPerTask;
    const uint32_t r1 = r0 + kRowsPerTask < a.out ? r0 + kRowsPerTask : a.out;
    pick(isa, a.format)(a, sums.data() + sum_offset[j], r0, r1);
    if (a.bias)
      for (uint32_t r = r0; r < r1; ++r) a.y[r] += a.bias[r];
  });
}

}  // namespace cpu
}  // namespace kvzip::kernels
