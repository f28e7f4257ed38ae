// The R-KV scorer of one KV head (model/rkv.h): importance from the remembered queries,
// redundancy from key cosine similarity, their mix and the keep selection. Dot products go through
// the GEMM front (OpenBLAS for several rows); the N×N similarity matrix is never materialised:
// its column sums come from k̂_j·Σ_i k̂_i, and the "most recent similar token" of each row from
// blocks of kBlock rows, so memory stays O(kBlock·N + N·D).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "common/error.h"
#include "kernels/gemm.h"
#include "model/rkv.h"

namespace kvzip {
namespace {

constexpr uint32_t kBlock = 64;  // similarity rows computed per GEMM

// y (rows, n) = x (rows, D) · w (n, D)^T, single-threaded on the caller.
void dot_rows(const float* x, uint32_t rows, const float* w, uint32_t n, uint32_t D, float* y) {
  GemmArgs a;
  a.x = x;
  a.w = w;
  a.y = y;
  a.T = rows;
  a.in = D;
  a.out = n;
  gemm(Exec{}, a);
}

// In place: x = softmax(x), fp32 with the max subtracted.
void softmax_inplace(std::span<float> x) {
  if (x.empty()) return;
  const float mx = *std::max_element(x.begin(), x.end());
  float sum = 0.0f;
  for (float& v : x) sum += (v = std::exp(v - mx));
  for (float& v : x) v /= sum;
}

void check_input(const RkvHeadInput& in, const RkvParams& p) {
  KVZIP_ASSERT(in.keys && in.queries && in.D > 0 && in.G > 0 && in.A > 0);
  KVZIP_ASSERT(in.N > p.window);
}

}  // namespace

std::vector<float> rkv_importance(const RkvHeadInput& in, const RkvParams& p) {
  check_input(in, p);
  const uint32_t M = in.N - p.window, AG = in.A * in.G;
  std::vector<float> logits(size_t(AG) * M);  // (A, G, M) raw q·k
  dot_rows(in.queries, AG, in.keys, M, in.D, logits.data());
  std::vector<float> mean(M, 0.0f), z(M);
  for (uint32_t t = 0; t < in.A; ++t) {
    // z_j = max over the group of the scaled logits (max on logits, before the softmax).
    for (uint32_t j = 0; j < M; ++j) {
      float m = logits[size_t(t) * in.G * M + j];
      for (uint32_t g = 1; g < in.G; ++g) m = std::max(m, logits[(size_t(t) * in.G + g) * M + j]);
      z[j] = m * in.scale;
    }
    softmax_inplace(z);
    for (uint32_t j = 0; j < M; ++j) mean[j] += z[j];
  }
  for (float& v : mean) v /= float(in.A);
  const int32_t half = int32_t(p.kernel / 2);
  std::vector<float> pooled(M);
  for (int32_t j = 0; j < int32_t(M); ++j) {
    const int32_t lo = std::max(0, j - half), hi = std::min(int32_t(M) - 1, j + half);
    pooled[j] = *std::max_element(mean.begin() + lo, mean.begin() + hi + 1);
  }
  return pooled;
}

std::vector<float> rkv_redundancy(const float* keys, uint32_t N, uint32_t D, float threshold) {
  KVZIP_ASSERT(keys && N > 0 && D > 0);
  std::vector<float> kh(size_t(N) * D);  // (N, D) unit keys (a zero key stays zero)
  std::vector<double> sum(D, 0.0);        // Σ_i k̂_i
  for (uint32_t i = 0; i < N; ++i) {
    const float* k = keys + size_t(i) * D;
    double n2 = 0.0;
    for (uint32_t d = 0; d < D; ++d) n2 += double(k[d]) * k[d];
    const double inv = n2 > 0.0 ? 1.0 / std::sqrt(n2) : 0.0;
    for (uint32_t d = 0; d < D; ++d) {
      kh[size_t(i) * D + d] = float(k[d] * inv);
      sum[d] += kh[size_t(i) * D + d];
    }
  }
  // Column sums of S with the diagonal zeroed: k̂_j·Σ_i k̂_i − k̂_j·k̂_j.
  std::vector<double> col(N);
  for (uint32_t j = 0; j < N; ++j) {
    const float* x = kh.data() + size_t(j) * D;
    double s = 0.0, self = 0.0;
    for (uint32_t d = 0; d < D; ++d) s += x[d] * sum[d], self += double(x[d]) * x[d];
    col[j] = s - self;
  }
  // Per row i, the most recent other row j with S_ij > T loses its entry (the latest copy of a
  // repeated thought then looks less redundant than the earlier copies).
  std::vector<float> block(size_t(kBlock) * N);
  for (uint32_t i0 = 0; i0 < N; i0 += kBlock) {
    const uint32_t rows = std::min(kBlock, N - i0);
    dot_rows(kh.data() + size_t(i0) * D, rows, kh.data(), N, D, block.data());
    for (uint32_t r = 0; r < rows; ++r) {
      const float* s = block.data() + size_t(r) * N;
      for (uint32_t j = N; j-- > 0;)
        if (j != i0 + r && s[j] > threshold) {
          col[j] -= s[j];
          break;
        }
    }
  }
  std::vector<float> red(N);
  for (uint32_t j = 0; j < N; ++j) red[j] = float(col[j] / double(N));
  softmax_inplace(red);
  return red;
}

std::vector<float> rkv_scores(const RkvHeadInput& in, const RkvParams& p) {
  std::vector<float> z = rkv_importance(in, p);
  const std::vector<float> red = rkv_redundancy(in.keys, in.N, in.D, p.threshold);
  for (size_t j = 0; j < z.size(); ++j) z[j] = p.lambda * z[j] - (1.0f - p.lambda) * red[j];
  return z;
}

std::vector<uint32_t> rkv_keep(std::span<const float> scores, uint32_t N, const RkvParams& p) {
  KVZIP_ASSERT(N > p.budget && p.budget > p.window && scores.size() == N - p.window);
  std::vector<uint32_t> idx(scores.size());
  std::iota(idx.begin(), idx.end(), 0u);
  const size_t top = p.budget - p.window;
  auto better = [&](uint32_t a, uint32_t b) {
    return scores[a] != scores[b] ? scores[a] > scores[b] : a > b;
  };
  std::nth_element(idx.begin(), idx.begin() + (top - 1), idx.end(), better);
  idx.resize(top);
  std::sort(idx.begin(), idx.end());
  for (uint32_t j = N - p.window; j < N; ++j) idx.push_back(j);
  return idx;
}

}  // namespace kvzip
