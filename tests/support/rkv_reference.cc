// The plain R-KV reference (rkv_reference.h): the formulas of spec/methods.md §4 line by line.
#include "tests/support/rkv_reference.h"

#include <algorithm>
#include <cmath>

namespace kvzip::test {

std::vector<double> softmax(std::vector<double> x) {
  const double mx = *std::max_element(x.begin(), x.end());
  double sum = 0.0;
  for (double& e : x) sum += (e = std::exp(e - mx));
  for (double& e : x) e /= sum;
  return x;
}

std::vector<double> rkv_importance(const float* q, uint32_t tokens, uint64_t q_stride, uint32_t G,
                                   uint32_t D, double scale, const float* k, uint32_t n,
                                   uint32_t kernel) {
  std::vector<double> mean(n, 0.0);
  for (uint32_t t = 0; t < tokens; ++t) {
    std::vector<double> z(n, -INFINITY);
    for (uint32_t g = 0; g < G; ++g) {
      const float* qg = q + t * q_stride + size_t(g) * D;
      for (uint32_t j = 0; j < n; ++j) {
        double dot = 0.0;
        for (uint32_t d = 0; d < D; ++d) dot += double(qg[d]) * k[size_t(j) * D + d];
        z[j] = std::max(z[j], dot * scale);
      }
    }
    const std::vector<double> p = softmax(z);
    for (uint32_t j = 0; j < n; ++j) mean[j] += p[j] / tokens;
  }
  std::vector<double> pooled(n);
  const int half = int(kernel / 2);
  for (int j = 0; j < int(n); ++j) {
    pooled[size_t(j)] = 0.0;
    for (int x = j - half; x <= j + half; ++x)
      if (x >= 0 && x < int(n)) pooled[size_t(j)] = std::max(pooled[size_t(j)], mean[size_t(x)]);
  }
  return pooled;
}

std::vector<double> rkv_redundancy(const float* k, uint32_t n, uint32_t D, double threshold) {
  std::vector<std::vector<double>> kh(n, std::vector<double>(D));
  for (uint32_t i = 0; i < n; ++i) {
    double ss = 0.0;
    for (uint32_t d = 0; d < D; ++d) ss += double(k[size_t(i) * D + d]) * k[size_t(i) * D + d];
    for (uint32_t d = 0; d < D; ++d)
      kh[i][d] = ss > 0.0 ? k[size_t(i) * D + d] / std::sqrt(ss) : 0.0;
  }
  std::vector<std::vector<double>> S(n, std::vector<double>(n, 0.0));
  for (uint32_t i = 0; i < n; ++i)
    for (uint32_t j = 0; j < n; ++j)
      if (i != j)
        for (uint32_t d = 0; d < D; ++d) S[i][j] += kh[i][d] * kh[j][d];
  for (uint32_t i = 0; i < n; ++i)
    for (uint32_t j = n; j-- > 0;)
      if (j != i && S[i][j] > threshold) {
        S[i][j] = 0.0;
        break;
      }
  std::vector<double> r(n, 0.0);
  for (uint32_t j = 0; j < n; ++j) {
    for (uint32_t i = 0; i < n; ++i) r[j] += S[i][j];
    r[j] /= n;
  }
  return softmax(r);
}

}  // namespace kvzip::test
