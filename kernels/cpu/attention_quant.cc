// CPU attention over spans with quantized rows (KvSpan::quant, kernels/attention.h). Three steps:
//  1. the f32 rows of every span (the f16 rows of a q8/q4 base widened, the question/answer tail)
//     through the f32 kernel, which also returns each query row's log-sum-exp;
//  2. the quantized rows of each KV head in chunks of kChunk rows through kv_quant_attend (scores
//     from the codes, softmax, weighted sum of the value codes: no dequantized row is formed),
//     each chunk giving a normalised output and its log-sum-exp for the G·T query rows of the head;
//  3. per query row the softmax merge of the parts, with M the largest log-sum-exp:
//        out = Σ_i e^(lse_i − M) · out_i / Σ_i e^(lse_i − M).
// Hadamard-rotated rows (KvQuantLayout::rotated) need nothing here: kv_quant_attend rotates the
// queries of a chunk and its normalised output (H is linear, so the merge of step 3 is unchanged);
// per chunk of 256 rows that is D·log2 D additions per query row, about 1% of the chunk's work.
// Every quantized row precedes the new tokens, so every query row sees all of them (no mask).
// The chunks are cut by rows, not by threads, and each query row's result depends only on its own
// scores, so the output does not depend on the pool size or on which other tokens are in the call.
#include <algorithm>
#include <cmath>
#include <vector>

#include "common/error.h"
#include "kernels/detail/attention_cpu.h"
#include "kernels/thread_pool.h"

namespace kvzip::kernels::cpu::detail {
namespace {

constexpr uint32_t kChunk = 256;  // quantized rows per task: enough tasks for decode on a few heads

// Rows [r0, r0 + n) of `rows`: the parameters and codes are per row, the channel scales shared.
KvQuantRows slice(const KvQuantRows& rows, size_t r0, size_t n) {
  KvQuantRows s = rows;
  s.rows = n;
  s.params = rows.params + r0 * rows.layout.param_words();
  s.codes = rows.codes + r0 * rows.layout.code_bytes();
  return s;
}

void check_quant_args(const AttentionArgs& a) {
  if (a.local)
    throw Error(Errc::unsupported,
                "attention: local statistics (AttentionArgs::local) over quantized rows "
                "(KvSpan::quant) are not implemented; the scorers run on f32 caches");
  KVZIP_ASSERT(a.q && a.kv && a.out && a.Hkv > 0 && a.Hq % a.Hkv == 0 && a.D > 0);
  KVZIP_ASSERT(kChunk % 64 == 0);  // a chunk's quant_skip words start at a word boundary
  for (uint32_t h = 0; h < a.Hkv; ++h) {
    const KvQuantSegment* q = a.kv[h].quant;
    if (!q) continue;
    KVZIP_ASSERT(q->k.rows == q->v.rows && q->k.layout.D == a.D && q->v.layout.D == a.D);
    KVZIP_ASSERT(q->k.rows == 0 || (q->k.channel_scale && q->k.params && q->k.codes &&
                                    q->v.channel_scale && q->v.params && q->v.codes));
  }
}

// Step 3: per query row, the softmax merge of the f32 result (in a.out, lse in f_lse) with each
// quantized part of its KV head (a part that saw no row has lse -inf and weight 0; a row that saw
// no row at all keeps out = 0, lse = -inf). On the calling thread: a few multiply-adds per part and
// channel, less than a pool round trip.
void merge_parts(const AttentionArgs& a, const std::vector<uint32_t>& first,
                 const std::vector<float>& p_out, const std::vector<float>& p_lse, float* f_lse) {
  const uint32_t G = a.Hq / a.Hkv, D = a.D, R = a.T * G;
  std::vector<float> acc(D);
  for (uint32_t h = 0; h < a.Hkv; ++h) {
    if (first[h] == first[h + 1]) continue;
    for (uint32_t r = 0; r < R; ++r) {
      const uint32_t t = r / G, hq = h * G + r % G;
      float* out = a.out + (size_t(t) * a.Hq + hq) * D;
      const float lf = f_lse[size_t(t) * a.Hq + hq];
      float M = lf;
      for (uint32_t p = first[h]; p < first[h + 1]; ++p) M = std::max(M, p_lse[size_t(p) * R + r]);
      if (M == -INFINITY) continue;
      const float wf = std::exp(lf - M);
      float sum = wf;
      for (uint32_t d = 0; d < D; ++d) acc[d] = wf * out[d];
      for (uint32_t p = first[h]; p < first[h + 1]; ++p) {
        const float w = std::exp(p_lse[size_t(p) * R + r] - M);
        const float* po = p_out.data() + (size_t(p) * R + r) * D;
        sum += w;
        for (uint32_t d = 0; d < D; ++d) acc[d] += w * po[d];
      }
      const float inv = 1.0f / sum;
      for (uint32_t d = 0; d < D; ++d) out[d] = acc[d] * inv;
      f_lse[size_t(t) * a.Hq + hq] = M + std::log(sum);
    }
  }
}

}  // namespace

void attention_quantized(ThreadPool* pool, const AttentionArgs& a, float* lse) {
  if (a.T == 0) return;
  check_quant_args(a);
  const uint32_t G = a.Hq / a.Hkv, D = a.D, T = a.T, R = T * G;  // R: query rows per KV head

  // 1. The f32 rows, straight into out, with their log-sum-exp.
  std::vector<KvSpan> f32(a.kv, a.kv + a.Hkv);
  for (KvSpan& s : f32) s.quant = nullptr;
  AttentionArgs fa = a;
  fa.kv = f32.data();
  std::vector<float> own_lse(lse ? 0 : size_t(T) * a.Hq);
  float* f_lse = lse ? lse : own_lse.data();  // (T, Hq); the merged values replace them below
  attention_f32(pool, fa, f_lse);

  // 2. The quantized rows: tasks (KV head, chunk); part p of head h is chunk p - first[h].
  std::vector<uint32_t> first(a.Hkv + 1, 0);  // (Hkv + 1) prefix sums of the chunk counts
  for (uint32_t h = 0; h < a.Hkv; ++h) {
    const uint32_t rows = a.kv[h].quant ? a.kv[h].quant->rows() : 0;
    first[h + 1] = first[h] + (rows + kChunk - 1) / kChunk;
  }
  const uint32_t n_parts = first[a.Hkv];
  if (n_parts == 0) return;  // no quantized row anywhere: the f32 result is the result
  // The queries of each KV head's group, contiguous: row t·G + g is query head h·G + g of token t.
  std::vector<float> qg(size_t(a.Hkv) * R * D);  // (Hkv, R, D)
  for (uint32_t h = 0; h < a.Hkv; ++h)
    for (uint32_t t = 0; t < T; ++t)
      std::copy_n(a.q + (size_t(t) * a.Hq + size_t(h) * G) * D, size_t(G) * D,
                  qg.data() + (size_t(h) * R + size_t(t) * G) * D);
  std::vector<float> p_out(size_t(n_parts) * R * D),
      p_lse(size_t(n_parts) * R);  // (parts, R, D), (parts, R)
  run_tasks(pool, n_parts, [&](size_t p) {
    const uint32_t h =
        static_cast<uint32_t>(std::upper_bound(first.begin(), first.end(), p) - first.begin()) - 1;
    const KvQuantSegment& seg = *a.kv[h].quant;
    const size_t r0 = size_t(p - first[h]) * kChunk, n = std::min<size_t>(kChunk, seg.k.rows - r0);
    thread_local std::vector<float> scores;    // (R, n) workspace
    thread_local std::vector<uint32_t> limit;  // (R) the chunk's rows each query row sees
    scores.resize(size_t(R) * n);
    KvQuantAttendArgs qa{qg.data() + size_t(h) * R * D,
                         R,
                         slice(seg.k, r0, n),
                         slice(seg.v, r0, n),
                         a.scale,
                         scores.data(),
                         p_out.data() + size_t(p) * R * D,
                         p_lse.data() + size_t(p) * R};
    if (const uint32_t* ql = a.kv[h].quant_limit) {
      limit.resize(R);
      for (uint32_t r = 0; r < R; ++r)
        limit[r] = ql[r / G] > r0 ? static_cast<uint32_t>(std::min<size_t>(ql[r / G] - r0, n)) : 0;
      qa.limit = limit.data();
    }
    if (a.kv[h].quant_skip) qa.skip = a.kv[h].quant_skip + r0 / 64;  // kChunk is a multiple of 64
    cpu::kv_quant_attend(qa);
  });

  merge_parts(a, first, p_out, p_lse, f_lse);
}

}  // namespace kvzip::kernels::cpu::detail
