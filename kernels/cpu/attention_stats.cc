// attention_stats (kernels/attention_stats.h). Work unit: one KV head and a group of consecutive
// query tiles; each unit reduces into its own partial row (no sharing between threads), and the
// partials are combined into the output afterwards. A tile's G·tile_t query rows are gathered
// head-major into a contiguous buffer so each key range costs one sgemm; the softmax then runs over
// the row's valid prefix (the causal range is last, so a row's visible keys are always a prefix).
#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/error.h"
#include "kernels/attention_stats.h"
#include "kernels/gemm.h"
#include "kernels/simd.h"
#include "kernels/thread_pool.h"

namespace kvzip::kernels::cpu {
namespace {

using simd::kLanes;
using simd::VecF;

constexpr uint32_t kTileRows = 96;               // query rows (G · tokens) per sgemm tile
constexpr size_t kTileFloats = size_t(4) << 20;  // logits per tile at most (16 MiB per thread)

// acc[c] = max(acc[c], e[c] * inv) or acc[c] += e[c] * inv, for c in [0, n).
void reduce_into(float* acc, const float* e, uint32_t n, float inv, Reduce op) {
  const VecF iv = simd::splat(inv);
  uint32_t c = 0;
  if (op == Reduce::Max) {
    for (; c + kLanes <= n; c += kLanes)
      simd::store(acc + c, simd::vmax(simd::load(acc + c), simd::load(e + c) * iv));
    for (; c < n; ++c) acc[c] = std::max(acc[c], e[c] * inv);
  } else {
    for (; c + kLanes <= n; c += kLanes)
      simd::store(acc + c, simd::load(acc + c) + simd::load(e + c) * iv);
    for (; c < n; ++c) acc[c] += e[c] * inv;
  }
}

uint32_t fixed_cols(const ScoreKeyAxis& ax) {
  uint32_t n = 0;
  for (uint32_t r = 0; r + 1 < ax.n_ranges; ++r) n += ax.ranges[r].n;
  return n;
}

// Query tokens [i_a, i_b) of KV head h, reduced into acc (col1 - col0 floats).
void tile(const AttentionStatsArgs& a, uint32_t h, uint32_t i_a, uint32_t i_b, float* acc) {
  thread_local std::vector<float> qbuf, logits;
  const uint32_t G = a.Hq / a.Hkv, D = a.D, nt = i_b - i_a, rows = G * nt;
  const ScoreKeyAxis& ax = a.axes[h];
  const uint32_t fixed = fixed_cols(ax);
  const uint32_t cols = fixed + ax.causal_base + i_b;  // what the tile's last token sees
  qbuf.resize(size_t(rows) * D);
  logits.resize(size_t(rows) * cols);
  for (uint32_t g = 0; g < G; ++g)
    for (uint32_t t = 0; t < nt; ++t)
      std::memcpy(qbuf.data() + (size_t(g) * nt + t) * D,
                  a.q + (size_t(i_a + t) * a.Hq + size_t(h) * G + g) * D, D * sizeof(float));
  uint32_t off = 0;
  for (uint32_t r = 0; r < ax.n_ranges; ++r) {
    const bool causal = r + 1 == ax.n_ranges;
    const uint32_t n = causal ? ax.causal_base + i_b : ax.ranges[r].n;
    if (n > 0)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(rows), int(n), int(D), a.scale,
                  qbuf.data(), int(D), ax.ranges[r].k, int(D), 0.0f, logits.data() + off,
                  int(cols));
    off += n;
  }
  for (uint32_t g = 0; g < G; ++g)
    for (uint32_t t = 0; t < nt; ++t) {
      float* row = logits.data() + (size_t(g) * nt + t) * cols;
      const uint32_t valid = fixed + ax.causal_base + i_a + t + 1;
      const float inv = 1.0f / simd::exp_sum(row, valid, simd::row_max(row, valid));
      const uint32_t c1 = std::min(a.col1, valid);
      if (c1 > a.col0) reduce_into(acc, row + a.col0, c1 - a.col0, inv, a.reduce);
    }
}

}  // namespace

void attention_stats(ThreadPool* pool, const AttentionStatsArgs& a) {
  if (a.t1 <= a.t0 || a.col1 <= a.col0) return;
  KVZIP_ASSERT(a.Hkv > 0 && a.Hq % a.Hkv == 0 && a.t1 <= a.T && a.q && a.axes && a.out);
  for (uint32_t h = 0; h < a.Hkv; ++h) {
    const ScoreKeyAxis& ax = a.axes[h];
    KVZIP_ASSERT(ax.n_ranges >= 1 && ax.n_ranges <= 3);
    KVZIP_ASSERT(a.col1 <= fixed_cols(ax) + ax.causal_base + a.t1);
  }
  const uint32_t G = a.Hq / a.Hkv;
  size_t widest = 0;  // key-axis columns the last query token sees, over the heads
  for (uint32_t h = 0; h < a.Hkv; ++h)
    widest = std::max<size_t>(widest, fixed_cols(a.axes[h]) + a.axes[h].causal_base + a.t1);
  // Long key axes get fewer query rows per tile, so a tile's logits stay within kTileFloats.
  const uint32_t tile_t = static_cast<uint32_t>(
      std::max<size_t>(1, std::min<size_t>(kTileRows / G, kTileFloats / (size_t(G) * widest))));
  const uint32_t n_tiles = (a.t1 - a.t0 + tile_t - 1) / tile_t;
  // Enough units per head to keep every thread busy, few enough that partials stay small.
  const uint32_t threads = pool ? pool->size() : 1;
  const uint32_t per_head =
      std::min(n_tiles, std::max<uint32_t>(1, (2 * threads + a.Hkv - 1) / a.Hkv));
  const size_t width = a.col1 - a.col0, n_units = size_t(a.Hkv) * per_head;
  std::vector<float> partial(n_units * width, 0.0f);  // probabilities >= 0: 0 is neutral for both

  auto unit = [&](size_t u) {
    const uint32_t h = static_cast<uint32_t>(u / per_head),
                   part = static_cast<uint32_t>(u % per_head);
    const uint32_t tile0 = n_tiles * part / per_head, tile1 = n_tiles * (part + 1) / per_head;
    for (uint32_t ti = tile0; ti < tile1; ++ti) {
      const uint32_t i_a = a.t0 + ti * tile_t, i_b = std::min(a.t1, i_a + tile_t);
      tile(a, h, i_a, i_b, partial.data() + u * width);
    }
  };
  if (pool && n_units > 1) {
    set_blas_threads(1);  // one sgemm per thread: no nested BLAS threads
    try {
      pool->run(n_units, unit);
    } catch (...) {
      set_blas_threads(pool->size());
      throw;
    }
    set_blas_threads(pool->size());
  } else {
    for (size_t u = 0; u < n_units; ++u) unit(u);
  }
  for (uint32_t h = 0; h < a.Hkv; ++h) {
    float* out = a.out + h * a.out_stride;
    for (uint32_t part = 0; part < per_head; ++part)
      reduce_into(out, partial.data() + (size_t(h) * per_head + part) * width,
                  static_cast<uint32_t>(width), 1.0f, a.reduce);
  }
}

}  // namespace kvzip::kernels::cpu
