// CPU attention of a call with parts (AttentionArgs::parts, kernels/attention.h): the blocks of a
// composed cache that sit at other positions than the ones their keys were rotated for.
//  1. the spans (the composition's own rows: separators, recomputed rows, the question and answer,
//     with the causal rule) through attention_lse, which also gives each query row's log-sum-exp;
//  2. per part, the queries rotated by the part's rotation (RoPE: q·R(p_k − p_q + Δ)·k needs only
//     the query turned back by the block's shift Δ, so the stored keys are read as they are,
//     quantized ones included), attended non-causally to the part's rows, again with the
//     log-sum-exp;
// The calls of f32 rows (the spans' and the parts') run in one pass of the pool; parts with q8/q4
// rows run their own steps (attention_quant.cc).
//  3. per query row the softmax merge of the results, one part at a time:
//        out = Σ_i e^(lse_i − M) · out_i / Σ_i e^(lse_i − M),  lse = M + log Σ_i e^(lse_i − M).
// Each result depends only on the query row's own scores, so a part's contribution is the same
// whatever else is in the call.
#include <algorithm>
#include <cmath>
#include <vector>

#include "common/error.h"
#include "kernels/detail/attention_cpu.h"
#include "kernels/rope.h"
#include "kernels/thread_pool.h"

namespace kvzip::kernels::cpu::detail {
namespace {

// (out, lse) += (part_out, part_lse) by the softmax merge, per query row of (T, Hq).
void merge_into(float* out, float* lse, const float* part_out, const float* part_lse, size_t rows,
                uint32_t D) {
  for (size_t r = 0; r < rows; ++r) {
    const float a = lse[r], b = part_lse[r];
    if (b == -INFINITY) continue;
    float* o = out + r * D;
    const float* p = part_out + r * D;
    if (a == -INFINITY) {
      std::copy_n(p, D, o);
      lse[r] = b;
      continue;
    }
    const float M = std::max(a, b), wa = std::exp(a - M), wb = std::exp(b - M),
                inv = 1.0f / (wa + wb);
    for (uint32_t d = 0; d < D; ++d) o[d] = (wa * o[d] + wb * p[d]) * inv;
    lse[r] = M + std::log(wa + wb);
  }
}

bool any_quantized(const KvSpan* spans, uint32_t n) {
  for (uint32_t h = 0; h < n; ++h)
    if (spans[h].quantized()) return true;
  return false;
}

}  // namespace

void attention_parts(ThreadPool* pool, const AttentionArgs& a) {
  if (a.T == 0) return;
  if (a.local)
    throw Error(Errc::unsupported,
                "attention: local statistics (AttentionArgs::local) over a composed cache are not "
                "implemented; the scorers run on one document's cache");
  KVZIP_ASSERT(a.parts && a.out && a.D % 2 == 0);
  const uint32_t P = a.n_parts, half = a.D / 2;
  const size_t rows = size_t(a.T) * a.Hq, n = rows * a.D;
  // Per part its rotated queries, output and log-sum-exp; the spans' call writes a.out directly.
  thread_local std::vector<float> q, outs, lses, cos, sin;
  q.resize(a.part_rot ? P * n : 0);
  outs.resize(P * n);
  lses.resize((P + 1) * rows);
  cos.resize(size_t(a.T) * half);
  sin.resize(size_t(a.T) * half);

  AttentionArgs own = a;
  own.parts = nullptr;
  own.part_rot = nullptr;
  own.n_parts = 0;
  std::vector<AttentionArgs> calls;  // every call of f32 rows, run in one pass of the pool
  std::vector<float*> call_lse;
  if (any_quantized(own.kv, a.Hkv)) {
    attention_lse(pool, own, lses.data());
  } else {
    calls.push_back(own);
    call_lse.push_back(lses.data());
  }
  for (uint32_t p = 0; p < P; ++p) {
    AttentionArgs pa = own;
    pa.kv = a.parts + size_t(p) * a.Hkv;
    pa.out = outs.data() + p * n;
    pa.causal = false;
    pa.window = 0;     // a window by rows means nothing in a part: its spans carry KvSpan::from
    if (a.part_rot) {  // the same rotation for every token; on this thread (a few flops per query)
      const float* c = a.part_rot + size_t(p) * 2 * half;
      for (uint32_t t = 0; t < a.T; ++t) {
        std::copy_n(c, half, cos.data() + size_t(t) * half);
        std::copy_n(c + half, half, sin.data() + size_t(t) * half);
      }
      float* qp = q.data() + p * n;
      std::copy_n(a.q, n, qp);
      rope(nullptr, RopeArgs{qp, cos.data(), sin.data(), a.T, a.Hq, a.D});
      pa.q = qp;
    }
    float* lse = lses.data() + (p + 1) * rows;
    if (any_quantized(pa.kv, a.Hkv)) {
      attention_quantized(pool, pa, lse);
    } else {
      calls.push_back(pa);
      call_lse.push_back(lse);
    }
  }
  attention_f32_many(pool, calls.data(), call_lse.data(), calls.size());
  for (uint32_t p = 0; p < P; ++p)
    merge_into(a.out, lses.data(), outs.data() + p * n, lses.data() + (p + 1) * rows, rows, a.D);
}

}  // namespace kvzip::kernels::cpu::detail
