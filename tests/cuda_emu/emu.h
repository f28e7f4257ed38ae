// A CPU emulator for the subset of CUDA that kvzip's kernels (kernels/cuda/*.cu) use, so that their
// logic (indexing, masks, split bookkeeping, shared-memory tiles, warp shuffles, barriers) runs and
// is tested on machines without a GPU (tests/cuda_emu/test_cuda_emu.cc). The kernel sources are
// compiled unchanged except for the rewrites tests/cuda_emu/translate.pl makes (launch syntax,
// dynamic shared memory, the namespace).
// Model: a launch runs its blocks one after another; the threads of a block are fibers (a stack
// each; tests/cuda_emu/emu.cc) on the calling OS thread, each run until it reaches a barrier or
// returns. __syncthreads is a barrier over the block, a warp shuffle a write to the warp's slots,
// a barrier over the warp and a read (the shuffles of a warp alternate between two rows of slots,
// so one barrier each is enough); a thread that returns drops out of both barriers (as an exited
// CUDA thread no longer counts at __syncthreads). The scheduler sweeps the runnable threads in
// ascending order, then in descending order, alternately, so between two barriers each thread runs
// both before and after the others in turn: a read that lacks its barrier sees the missing write in
// one of the two orders, deterministically. A barrier that some live thread never reaches (a
// deadlock on a device) is an error, not a hang. Fibers rather than an OS thread per CUDA thread:
// a barrier costs a context switch instead of waking up to 1,024 threads, which on a 2-core
// machine made the suite many times slower. __shared__ arrays are function-local statics (one per
// kernel instantiation, shared by the running block: blocks never overlap), and dynamic shared
// memory is a fresh buffer per block filled with 0xFF bytes (NaN as floats), so a read before any
// write shows up. Device memory is host memory; cudaMallocAsync is malloc with the same NaN fill.
// A launch with more than 1024 threads a block, or a grid dimension out of range, is refused
// through cudaGetLastError as on a device.
// Arithmetic intrinsics are the IEEE binary32 operations they name (the emulator's targets build
// with -ffp-contract=off; rsqrtf is the correctly rounded 1/sqrt, a device's is within 2 ulp).
// What it cannot show: speed, memory limits beyond the launch checks, and races that need a
// device's scheduling (compute-sanitizer on a GPU: scripts/gpu-check.sh).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/half.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static

struct uint3 {
  unsigned x = 0, y = 0, z = 0;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(8) float2 {
  float x, y;
};
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
inline float2 make_float2(float a, float b) { return {a, b}; }

namespace emu {

// A barrier over the fibers of the running block: a phase completes when `arrived` reaches
// `expected` (std::barrier's arrive_and_wait / arrive_and_drop, for fibers).
struct Barrier {
  unsigned expected, arrived = 0;
  uint64_t phase = 0;
  explicit Barrier(unsigned n) : expected(n) {}
};

struct Warp {
  Barrier bar;
  float slot[2][32] = {};  // alternate shuffles use alternate rows (see shuffle)
  explicit Warp(unsigned lanes) : bar(lanes) {}
};

struct Block {
  Barrier bar;
  std::vector<Warp> warps;
  std::vector<unsigned char> smem;  // dynamic shared memory
  Block(unsigned threads, size_t smem_bytes)
      : bar(threads), smem(smem_bytes ? smem_bytes : 1, 0xFF) {
    warps.reserve((threads + 31) / 32);
    for (unsigned t = 0; t < threads; t += 32) warps.emplace_back(std::min(32u, threads - t));
  }
};

struct ThreadCtx {
  uint3 tid, bid;
  dim3 bdim, gdim;
  Block* block = nullptr;
  unsigned warp = 0, lane = 0;
  unsigned shuffles = 0;  // shuffles this thread has made in its block
};

inline int last_error = 0;  // cudaGetLastError's state (launches come from one host thread)
inline constexpr int kErrorInvalidConfiguration = 9;
inline ThreadCtx* running = nullptr;  // the CUDA thread (fiber) now running (tests/cuda_emu/emu.cc)
inline ThreadCtx& ctx() { return *running; }

void arrive_and_wait(Barrier& b);  // the running thread at b (tests/cuda_emu/emu.cc)

template <class T>
T* dynamic_shared() {
  return reinterpret_cast<T*>(ctx().block->smem.data());
}

// One barrier per shuffle: shuffle i writes and reads row i mod 2 of the slots. A lane can write
// row i mod 2 again only in shuffle i + 2, after passing shuffle i + 1's barrier, which every lane
// reaches only after reading shuffle i: so no value is overwritten before it is read.
inline float shuffle(float v, unsigned src_lane) {
  ThreadCtx& c = ctx();
  Warp& w = c.block->warps[c.warp];
  float* row = w.slot[c.shuffles++ & 1];
  row[c.lane] = v;
  arrive_and_wait(w.bar);
  return row[src_lane & 31];
}

struct LaunchConfig {
  dim3 grid, block;
  size_t smem;
  LaunchConfig(dim3 g, dim3 b, size_t s = 0, const void* = nullptr) : grid(g), block(b), smem(s) {}
};

// Calls call(body) in every thread of every block of c, block after block; rethrows the first
// exception a thread threw (tests/cuda_emu/emu.cc).
void run_launch(const LaunchConfig& c, const void* body, void (*call)(const void*));

template <class F>
void launch(const LaunchConfig& c, const F& body) {
  run_launch(c, &body, [](const void* b) { (*static_cast<const F*>(b))(); });
}

}  // namespace emu

#define threadIdx (::emu::ctx().tid)
#define blockIdx (::emu::ctx().bid)
#define blockDim (::emu::ctx().bdim)
#define gridDim (::emu::ctx().gdim)

inline void __syncthreads() { ::emu::arrive_and_wait(::emu::ctx().block->bar); }
inline float __shfl_sync(unsigned, float v, int src_lane) {
  return ::emu::shuffle(v, unsigned(src_lane));
}
inline float __shfl_xor_sync(unsigned, float v, int lane_mask) {
  return ::emu::shuffle(v, ::emu::ctx().lane ^ unsigned(lane_mask));
}
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
// A device's rsqrtf is within 2 ulp of 1/sqrt; the emulator gives the correctly rounded quotient.
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
template <class T>
T __ldg(const T* p) {
  return *p;
}
// CUDA's integer min/max overloads, as device code calls them unqualified.
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a < b ? b : a; }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a < b ? b : a; }
