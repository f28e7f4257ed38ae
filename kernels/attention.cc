// The part of the attention front (kernels/attention.h) that holds on every build: what the CUDA
// kernels refuse is refused before dispatch, so a CPU-only build and a CUDA build give the same
// error for the same arguments (and the refusal is testable without a device).
#include "kernels/attention.h"

#include <utility>

#include "common/error.h"

namespace kvzip::kernels {

void check_cuda_attention(const AttentionArgs& a) {
  if (a.window)
    throw Error(Errc::unsupported,
                "attention on cuda: a sliding window (AttentionArgs::window) has no CUDA "
                "kernel; run this model on the CPU device");
  if (a.local)
    throw Error(Errc::unsupported,
                "attention on cuda: local statistics (AttentionArgs::local, LocalMaxProb) have no "
                "CUDA kernel; the GPU scorer uses attention_score_max (kernels/attention_score.h), "
                "or run this op on the CPU device");
  for (uint32_t h = 0; a.kv && h < a.Hkv; ++h)
    if (a.kv[h].two_segments())
      throw Error(
          Errc::unsupported,
          "attention on cuda: a KV span in two segments (KvSpan::k_tail, a shared base plus "
          "a private tail) has no CUDA kernel; run this op on the CPU device");
  bool composed = a.n_parts > 0 || !a.causal;
  for (uint32_t h = 0; a.kv && h < a.Hkv; ++h)
    composed = composed || a.kv[h].limit || a.kv[h].skip || a.kv[h].quant_limit ||
               a.kv[h].quant_skip || a.kv[h].from;
  if (composed)
    throw Error(Errc::unsupported,
                "attention on cuda: composed caches (blocks at shifted positions, row limits and "
                "skips) have no CUDA kernel; answer over several caches on the CPU device");
  KVZIP_ASSERT(a.out != nullptr);  // without statistics, attention with no output does nothing
}

namespace {

bool any_from(const KvSpan* spans, size_t n) {
  for (size_t i = 0; spans && i < n; ++i)
    if (spans[i].from) return true;
  return false;
}

}  // namespace

void check_window(const AttentionArgs& a) {
  for (const auto& [spans, n] :
       {std::pair{a.kv, size_t(a.Hkv)}, std::pair{a.parts, size_t(a.n_parts) * a.Hkv}})
    for (size_t i = 0; spans && i < n; ++i)
      if (spans[i].from && spans[i].quantized())
        throw Error(Errc::unsupported,
                    "attention: a window by position (KvSpan::from) over quantized (q8/q4) rows is "
                    "not supported; keep that layer's rows in f32");
  if (a.local && (any_from(a.kv, a.Hkv) || any_from(a.parts, size_t(a.n_parts) * a.Hkv)))
    throw Error(Errc::unsupported,
                "attention: local statistics over a sliding-window layer are not supported");
  if (!a.window) return;
  if (a.local)
    throw Error(Errc::unsupported,
                "attention: local statistics over a sliding-window layer are not supported");
  for (uint32_t h = 0; a.kv && h < a.Hkv; ++h)
    if (a.kv[h].quantized())
      throw Error(Errc::unsupported,
                  "attention: a sliding-window layer over quantized (q8/q4) rows is not "
                  "supported; keep that layer's rows in f32");
}

}  // namespace kvzip::kernels
