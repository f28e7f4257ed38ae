// DecodePick: the choice, by measured time, between two decode kernels that give the same bits —
// on AVX-512 VNNI CPUs the 512-bit ones (kernels/cpu/qdot_decode_avx512.cc: sixteen-row tiles, or
// for one token eight-row tiles two blocks (or halves) a step) and the 256-bit eight-row ones
// (kernels/detail/qdot_decode_avx2.inc). Which one streams the weights faster depends on a
// thread's share of the memory bandwidth, not on the CPU model: on a machine whose two threads
// read 50 or 80 GB/s from minute to minute, the eight-row kernels lead at 50 (fewer concurrent
// row streams, enough compute for a small share) and the 512-bit ones at 80. So qdot times
// each decode call and keeps, per kind of call (its bytes of weights: a model's Q/K/V, O, gate/up,
// down and output calls each have their own), a running mean per kernel; it runs the kernel with
// the lower mean, and every kExplore-th call of a kind the other, to notice when the machine
// changes. Only speed depends on the choice.
#pragma once
#include <cstdint>
#include <vector>

namespace kvzip::kernels::cpu::detail {

class DecodePick {
 public:
  static constexpr uint32_t kExplore = 16;  // one call of a kind in this many runs the other kernel
  static constexpr double kWeight = 0.25;   // of the newest call in a kernel's running mean
  static constexpr size_t kMaxKinds = 64;   // past this many kinds the oldest is forgotten

  // The kernel (0 or 1) for the next call of this kind: each once first, then the faster one, the
  // other one call in kExplore.
  int next(uint64_t kind) {
    Entry& e = entry(kind);
    if (e.n[0] == 0) return 0;
    if (e.n[1] == 0) return 1;
    const int best = e.mean[1] < e.mean[0] ? 1 : 0;
    return ++e.calls % kExplore == 0 ? 1 - best : best;
  }
  // A call of this kind on kernel v took `seconds`.
  void record(uint64_t kind, int v, double seconds) {
    Entry& e = entry(kind);
    e.mean[v] = e.n[v] == 0 ? seconds : e.mean[v] + kWeight * (seconds - e.mean[v]);
    ++e.n[v];
  }
  double mean(uint64_t kind, int v) { return entry(kind).mean[v]; }

 private:
  struct Entry {
    uint64_t kind = 0;
    double mean[2] = {0.0, 0.0};  // seconds a call
    uint32_t n[2] = {0, 0};
    uint32_t calls = 0;
  };
  Entry& entry(uint64_t kind) {
    for (Entry& e : entries_)
      if (e.kind == kind) return e;
    if (entries_.size() == kMaxKinds) entries_.erase(entries_.begin());
    entries_.push_back(Entry{kind});
    return entries_.back();
  }
  std::vector<Entry> entries_;
};

}  // namespace kvzip::kernels::cpu::detail
