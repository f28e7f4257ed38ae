// Recovery of llama3 RoPE parameters from llama.cpp's rope_freqs divisors (see rope_freqs.h).
// With smooth s = (1/d - 1/factor) / (1 - 1/factor) for a pair inside the band, the llama3 rule
// says s = old/(w·(high-low)) - low/(high-low), linear in 1/w (w: the pair's wavelength 2π/f), so
// two band pairs give slope A = old/(high-low) and intercept B = -low/(high-low).
#include "checkpoint/detail/rope_freqs.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "kernels/rope.h"

namespace kvzip::model::detail {
namespace {

bool reproduces(std::span<const float> divisors, float base, uint32_t D, const RopeScaling& s) {
  std::vector<float> want = kernels::rope_inv_freq(D, base, RopeScaling{}),
                     got = kernels::rope_inv_freq(D, base, s);
  for (size_t i = 0; i < divisors.size(); ++i) {
    const double f = double(want[i]) / divisors[i];
    if (std::abs(got[i] - f) > 1e-5 * f) return false;
  }
  return true;
}

}  // namespace

std::optional<RopeScaling> scaling_from_rope_freqs(std::span<const float> divisors, float base,
                                                   uint32_t D) {
  if (D == 0 || D % 2 != 0 || divisors.size() != D / 2 || !(base > 1.0f)) return std::nullopt;
  double factor = 0;
  for (float d : divisors) {
    if (!(d > 0) || !std::isfinite(d)) return std::nullopt;
    factor = std::max(factor, double(d));
  }
  const double tol = 1e-6;
  auto near = [&](double a, double b) { return std::abs(a - b) <= tol * std::max(1.0, b); };
  RopeScaling s;
  bool all_one = true, all_factor = true;
  for (float d : divisors) all_one &= near(d, 1.0), all_factor &= near(d, factor);
  if (all_one) return reproduces(divisors, base, D, s) ? std::optional(s) : std::nullopt;
  if (all_factor) {
    s.kind = RopeScalingKind::Linear;
    s.factor = float(factor);
    return reproduces(divisors, base, D, s) ? std::optional(s) : std::nullopt;
  }
  // Pairs strictly inside the band, as (1/wavelength, smooth).
  std::vector<std::pair<double, double>> band;
  for (uint32_t i = 0; i < D / 2; ++i) {
    const double d = divisors[i];
    if (near(d, 1.0) || near(d, factor)) continue;
    const double inv_w = std::pow(double(base), -2.0 * i / D) / (2.0 * std::numbers::pi);
    band.emplace_back(inv_w, (1.0 / d - 1.0 / factor) / (1.0 - 1.0 / factor));
  }
  if (band.size() < 2) return std::nullopt;
  const auto& [x0, s0] = band.front();
  const auto& [x1, s1] = band.back();
  const double A = (s1 - s0) / (x1 - x0), B = s0 - A * x0;
  if (!(A > 0) || !(B < 0)) return std::nullopt;
  const double span = -1.0 / B;  // high - low with low = 1
  s.kind = RopeScalingKind::Llama3;
  s.factor = float(factor);
  s.low_freq_factor = 1.0f;
  s.high_freq_factor = float(1.0 + span);
  const double old = A * span;
  if (!(old >= 1.0) || old > 1e9) return std::nullopt;
  s.original_context = uint32_t(std::llround(old));
  // The fit carries float32 rounding (8 comes back as 7.9999995); released models use round
  // values, and the exact value makes the frequencies bit-identical to the checkpoint's.
  RopeScaling snapped = s;
  snapped.high_freq_factor = float(std::round(double(s.high_freq_factor) * 1e4) / 1e4);
  if (reproduces(divisors, base, D, snapped)) return snapped;
  return reproduces(divisors, base, D, s) ? std::optional(s) : std::nullopt;
}

}  // namespace kvzip::model::detail
