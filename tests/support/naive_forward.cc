// The naive reference forward (see naive_forward.h), written plainly: RMSNorm, q/k/v projections
// (+bias), RoPE on pairs (i, i + D/2), GQA softmax attention with every row materialised, SwiGLU
// FFN, LM head; all sums in double.
#include "tests/support/naive_forward.h"

#include <algorithm>
#include <cmath>

#include "kernels/rope.h"
#include "tests/support/random_weights.h"

namespace kvzip::test {
namespace {

using Mat = std::vector<double>;

Mat linear(const Mat& x, const std::vector<float>& w, const std::vector<float>& b, size_t T,
           size_t in, size_t out) {
  Mat y(T * out);
  for (size_t t = 0; t < T; ++t)
    for (size_t o = 0; o < out; ++o) {
      double s = b.empty() ? 0.0 : b[o];
      for (size_t i = 0; i < in; ++i) s += x[t * in + i] * w[o * in + i];
      y[t * out + o] = s;
    }
  return y;
}

// The same on a stored matrix: its canonical fp32 values (dequantized once).
Mat linear(const Mat& x, const model::Matrix& w, const std::vector<float>& b, size_t T, size_t in,
           size_t out) {
  return linear(x, to_f32(w), b, T, in, out);
}

Mat rms_norm(const Mat& x, const std::vector<float>& w, size_t T, size_t E, double eps) {
  Mat y(T * E);
  for (size_t t = 0; t < T; ++t) {
    double ss = 0;
    for (size_t e = 0; e < E; ++e) ss += x[t * E + e] * x[t * E + e];
    const double inv = 1.0 / std::sqrt(ss / E + eps);
    for (size_t e = 0; e < E; ++e) y[t * E + e] = x[t * E + e] * inv * w[e];
  }
  return y;
}

void rope(Mat& x, size_t T, size_t H, size_t D, const std::vector<float>& inv_freq) {
  for (size_t t = 0; t < T; ++t)
    for (size_t h = 0; h < H; ++h)
      for (size_t i = 0; i < D / 2; ++i) {
        const double a = static_cast<float>(t) * inv_freq[i];
        double* v = &x[(t * H + h) * D];
        const double x0 = v[i], x1 = v[i + D / 2];
        v[i] = x0 * std::cos(a) - x1 * std::sin(a);
        v[i + D / 2] = x1 * std::cos(a) + x0 * std::sin(a);
      }
}

}  // namespace

std::vector<int32_t> random_tokens(size_t n, uint32_t V, uint64_t seed) {
  auto u = random_vector(n, seed, 0.0f, 1.0f);
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i)
    t[i] = std::min<int32_t>(int32_t(V) - 1, static_cast<int32_t>(u[i] * float(V)));
  return t;
}

NaiveForward naive_forward(const model::Weights& w, const std::vector<int32_t>& tokens,
                           const Visibility& visible) {
  const ModelConfig& c = w.config;
  const size_t T = tokens.size(), E = c.d_model, F = c.d_ffn, V = c.vocab_size, D = c.head_dim;
  const size_t Hq = c.n_heads, Hkv = c.n_kv_heads, G = Hq / Hkv;
  const auto inv_freq = kernels::rope_inv_freq(c.head_dim, c.rope_base, c.rope_scaling);
  NaiveForward r;
  Mat x(T * E);
  const std::vector<float> embd = to_f32(w.tok_embd);
  for (size_t t = 0; t < T; ++t)
    for (size_t e = 0; e < E; ++e) x[t * E + e] = embd[tokens[t] * E + e];
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    const model::LayerWeights& lw = w.layers[l];
    Mat xn = rms_norm(x, lw.attn_norm, T, E, c.rms_eps);
    Mat q = linear(xn, lw.wq, lw.bq, T, E, Hq * D);
    Mat k = linear(xn, lw.wk, lw.bk, T, E, Hkv * D);
    Mat v = linear(xn, lw.wv, lw.bv, T, E, Hkv * D);
    rope(q, T, Hq, D, inv_freq);
    rope(k, T, Hkv, D, inv_freq);
    r.q.emplace_back(q.begin(), q.end());
    r.k.emplace_back(k.begin(), k.end());
    r.v.emplace_back(v.begin(), v.end());
    Mat att(T * Hq * D, 0.0);
    for (size_t h = 0; h < Hq; ++h) {
      const size_t kh = h / G;
      for (size_t i = 0; i < T; ++i) {
        std::vector<double> p(i + 1, -INFINITY);
        double mx = -INFINITY, sum = 0;
        for (size_t j = 0; j <= i; ++j) {
          if (visible && !visible(l, uint32_t(kh), uint32_t(i), uint32_t(j))) continue;
          double s = 0;
          for (size_t d = 0; d < D; ++d) s += q[(i * Hq + h) * D + d] * k[(j * Hkv + kh) * D + d];
          p[j] = s / std::sqrt(double(D));
          mx = std::max(mx, p[j]);
        }
        for (auto& e : p) sum += (e = std::exp(e - mx));
        for (size_t j = 0; j <= i; ++j)
          for (size_t d = 0; d < D; ++d)
            att[(i * Hq + h) * D + d] += p[j] / sum * v[(j * Hkv + kh) * D + d];
      }
    }
    Mat o = linear(att, lw.wo, {}, T, Hq * D, E);
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
    xn = rms_norm(x, lw.ffn_norm, T, E, c.rms_eps);
    Mat g = linear(xn, lw.w_gate, {}, T, E, F), u = linear(xn, lw.w_up, {}, T, E, F);
    for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
    Mat down = linear(g, lw.w_down, {}, T, F, E);
    for (size_t i = 0; i < x.size(); ++i) x[i] += down[i];
  }
  Mat logits = linear(rms_norm(x, w.output_norm, T, E, c.rms_eps), w.lm_head(), {}, T, E, V);
  r.logits.assign(logits.begin(), logits.end());
  return r;
}

}  // namespace kvzip::test
