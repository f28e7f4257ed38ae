// Test support for the [cuda] tests: whether a device is there (else the test case skips, and the
// run is reported to CTest as skipped: tests/support/skip.h), seeds, and host<->device helpers
// over kernels/gpu.h.
#pragma once
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "kernels/device.h"
#include "kernels/gpu.h"
#include "tests/support/skip.h"

namespace kvzip::test {

// True when a CUDA device is present; otherwise the test case skips (skip_no_gpu) and the caller
// returns: a CPU-only build or a machine without a GPU reports the [cuda] entry as skipped, and
// KVZIP_REQUIRE_GPU=1 (gpu-check.sh on a device) makes that a failure.
inline bool gpu_ready() {
  if (!kernels::kBuiltWithCuda) {
    skip_no_gpu("built without CUDA (-DKVZIP_CUDA=OFF)");
    return false;
  }
  if (kernels::cuda_device_count() == 0) {
    skip_no_gpu("no CUDA device visible");
    return false;
  }
  return true;
}

template <class T>
kernels::gpu::GpuBuffer<T> to_gpu(const std::vector<T>& h) {
  kernels::gpu::GpuBuffer<T> b(h.size());
  b.upload(h);
  return b;
}

// Seeds for the random inputs: `salt` mixed with Catch's --rng-seed (0 by default, so plain runs
// are reproducible; gpu-check passes --rng-seed time for fresh inputs, and Catch prints the seed).
inline uint64_t seed(uint64_t salt) { return uint64_t(Catch::rngSeed()) * 1000003ull + salt; }

// A device buffer of n floats filled with NaN, so an element a kernel forgets to write fails.
inline kernels::gpu::GpuBuffer<float> poisoned(size_t n) {
  return to_gpu(std::vector<float>(n, NAN));
}

}  // namespace kvzip::test
