// Internal pieces of the ReST-KV scorer (spec/methods.md §3) that are plain functions of their
// inputs, so tests can check them on hand-built numbers: the temporal EMA over the probe's
// probability rows, the adaptive spatial window from the attention drift, and the smoothing.
#pragma once
#include <cstdint>
#include <span>

namespace kvzip::compress::detail {

// c ← rows[0]; for t = 1..W−1: c ← alpha·rows[t] + (1−alpha)·c; out = c.  rows: (W, n), W >= 1.
void restkv_ema(const float* rows, uint32_t W, uint32_t n, float alpha, float* out);

// The averaging window of step 5 for a drift delta in tokens: the mean position of the top keys
// of the probe's second half minus the first half's, a row's top key being its argmax over the
// candidates (the keys before the window); halves ⌊W/2⌋ and W − ⌊W/2⌋ rows, Δ = 0 when W < 2:
//   k = max(kmin, 2·⌊|Δ|/2000⌋ + 1),  shift = ⌊Δ/2000⌋ + (Δ <= 0 ? 1 : 0)
// exactly as written in methods §3 (so Δ = 0 gives shift +1, Δ in (0, 2000) shift 0).
struct DriftWindow {
  uint32_t k = 1;     // odd when kmin is odd
  int64_t shift = 0;  // the window of position j is centred on j + shift
};
DriftWindow restkv_drift_window(double delta, uint32_t kmin);

// out[j] = (1/k) Σ_{i=-⌊k/2⌋..⌊k/2⌋} s[clamp(j + shift + i, 0, n−1)]  (edges repeat), j < n.
// A +inf in the window makes the average +inf. s and out must not overlap.
void restkv_smooth(std::span<const float> s, DriftWindow w, std::span<float> out);

}  // namespace kvzip::compress::detail
