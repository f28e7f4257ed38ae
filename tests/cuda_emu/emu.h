// A CPU emulator for the subset of CUDA that kvzip's kernels (kernels/cuda/*.cu) use, so that their
// logic (indexing, masks, split bookkeeping, shared-memory tiles, warp shuffles, barriers) runs and
// is tested on machines without a GPU (tests/cuda_emu/test_cuda_emu.cc). The kernel sources are
// compiled unchanged except for the rewrites tests/cuda_emu/translate.pl makes (launch syntax,
// dynamic shared memory, the namespace).
// Model: a launch runs its blocks one after another, each on one OS thread per CUDA thread (the
// same threads for every block of the launch), so everything a block's threads do between
// barriers really is concurrent. __syncthreads is a std::barrier over the block, a warp shuffle a
// write to the warp's slots, a barrier over the warp and a read (the shuffles of a warp alternate
// between two rows of slots, so one barrier each is enough); a thread that returns drops out of
// both barriers (as an exited CUDA thread no longer counts at __syncthreads). __shared__ arrays
// are function-local statics (one per kernel instantiation, shared by the running block: blocks
// never overlap), and dynamic shared memory is a fresh buffer per block filled with 0xFF bytes
// (NaN as floats), so a read before any write shows up. Device memory is host memory;
// cudaMallocAsync is malloc with the same NaN fill. A launch with more than 1024 threads a block,
// or a grid dimension out of range, is refused through cudaGetLastError as on a device.
// Arithmetic intrinsics are the IEEE binary32 operations they name (the emulator's targets build
// with -ffp-contract=off; rsqrtf is the correctly rounded 1/sqrt, a device's is within 2 ulp).
// What it cannot show: speed, memory limits beyond the launch checks, and races that need a
// device's scheduling (compute-sanitizer on a GPU: scripts/gpu-check.sh).
#pragma once
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
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

struct Warp {
  std::barrier<> bar;
  float slot[2][32] = {};  // alternate shuffles use alternate rows (see shuffle)
  explicit Warp(std::ptrdiff_t lanes) : bar(lanes) {}
};

struct Block {
  std::barrier<> bar;
  std::vector<std::unique_ptr<Warp>> warps;
  std::vector<unsigned char> smem;  // dynamic shared memory
  Block(unsigned threads, size_t smem_bytes) : bar(threads), smem(smem_bytes ? smem_bytes : 1, 0xFF) {
    for (unsigned t = 0; t < threads; t += 32) warps.push_back(std::make_unique<Warp>(std::min(32u, threads - t)));
  }
};

struct ThreadCtx {
  uint3 tid, bid;
  dim3 bdim, gdim;
  Block* block = nullptr;
  unsigned warp = 0, lane = 0;
  unsigned shuffles = 0;  // shuffles this thread has made in its block
};
inline thread_local ThreadCtx ctx;
inline int last_error = 0;  // cudaGetLastError's state (launches come from one host thread)

template <class T>
T* dynamic_shared() {
  return reinterpret_cast<T*>(ctx.block->smem.data());
}

// One barrier per shuffle: shuffle i writes and reads row i mod 2 of the slots. A lane can write
// row i mod 2 again only in shuffle i + 2, after passing shuffle i + 1's barrier, which every lane
// reaches only after reading shuffle i: so no value is overwritten before it is read.
inline float shuffle(float v, unsigned src_lane) {
  Warp& w = *ctx.block->warps[ctx.warp];
  float* row = w.slot[ctx.shuffles++ & 1];
  row[ctx.lane] = v;
  w.bar.arrive_and_wait();
  return row[src_lane & 31];
}

struct LaunchConfig {
  dim3 grid, block;
  size_t smem;
  LaunchConfig(dim3 g, dim3 b, size_t s = 0, const void* = nullptr) : grid(g), block(b), smem(s) {}
};

inline constexpr int kErrorInvalidConfiguration = 9;

// Runs `body` (the kernel call) for every thread of every block of c. One OS thread per CUDA
// thread of a block, created once per launch and reused block after block: `start` releases them
// into a block, `end` says every one of them has left it (two barriers over the workers and this
// thread); the block's own barriers are made fresh for each block, so threads that returned early
// in one block count again in the next.
template <class F>
void launch(const LaunchConfig& c, const F& body) {
  const uint64_t threads = uint64_t(c.block.x) * c.block.y * c.block.z;
  if (threads == 0 || threads > 1024 || c.block.z > 64 || c.grid.x == 0 || c.grid.y == 0 || c.grid.z == 0 ||
      c.grid.y > 65535 || c.grid.z > 65535 || c.smem > 227 * 1024) {
    last_error = kErrorInvalidConfiguration;
    return;
  }
  const unsigned n = static_cast<unsigned>(threads);
  const uint64_t blocks = uint64_t(c.grid.x) * c.grid.y * c.grid.z;
  std::barrier<> start(n + 1), end(n + 1);
  std::unique_ptr<Block> block;
  uint3 bid;
  std::exception_ptr failed;
  std::mutex failed_mu;
  std::vector<std::thread> ts;
  ts.reserve(n);
  for (unsigned t = 0; t < n; ++t)
    ts.emplace_back([&, t] {
      ctx.tid = uint3{t % c.block.x, t / c.block.x % c.block.y, t / (c.block.x * c.block.y)};
      ctx.bdim = c.block;
      ctx.gdim = c.grid;
      ctx.warp = t / 32;
      ctx.lane = t % 32;
      for (uint64_t i = 0; i < blocks; ++i) {
        start.arrive_and_wait();
        ctx.bid = bid;
        ctx.block = block.get();
        ctx.shuffles = 0;
        try {
          body();
        } catch (...) {
          std::lock_guard<std::mutex> lock(failed_mu);
          if (!failed) failed = std::current_exception();
        }
        ctx.block->warps[t / 32]->bar.arrive_and_drop();
        ctx.block->bar.arrive_and_drop();
        end.arrive_and_wait();
      }
    });
  for (unsigned bz = 0; bz < c.grid.z; ++bz)
    for (unsigned by = 0; by < c.grid.y; ++by)
      for (unsigned bx = 0; bx < c.grid.x; ++bx) {
        block = std::make_unique<Block>(n, c.smem);
        bid = uint3{bx, by, bz};
        start.arrive_and_wait();
        end.arrive_and_wait();
      }
  for (std::thread& t : ts) t.join();
  if (failed) std::rethrow_exception(failed);
}

}  // namespace emu

#define threadIdx (::emu::ctx.tid)
#define blockIdx (::emu::ctx.bid)
#define blockDim (::emu::ctx.bdim)
#define gridDim (::emu::ctx.gdim)

inline void __syncthreads() { ::emu::ctx.block->bar.arrive_and_wait(); }
inline float __shfl_sync(unsigned, float v, int src_lane) { return ::emu::shuffle(v, unsigned(src_lane)); }
inline float __shfl_xor_sync(unsigned, float v, int lane_mask) {
  return ::emu::shuffle(v, ::emu::ctx.lane ^ unsigned(lane_mask));
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
