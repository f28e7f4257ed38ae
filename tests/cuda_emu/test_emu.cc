// [cuda_emu] the emulator itself (tests/cuda_emu/emu.h): between two barriers its threads run in
// ascending order, then in descending order, so a read that lacks its barrier sees the missing
// write; a barrier that some thread never reaches fails the launch instead of hanging it; a
// thread's exception reaches the caller; a launch a device refuses is refused.
#include <catch2/catch.hpp>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/cuda_emu/emu.h"

namespace {

constexpr unsigned kThreads = 64;

// Each thread writes its slot of a row of shared memory and reads its neighbours' slots with no
// barrier in between; row 1 after a barrier. Returns, per row, how many reads of the upper and
// of the lower neighbour missed the write (read the NaN fill).
struct Missed {
  unsigned upper[2] = {}, lower[2] = {};
};

Missed unsynchronized_reads() {
  Missed m;
  emu::launch(emu::LaunchConfig(dim3(1), dim3(kThreads), 2 * kThreads * sizeof(float)), [&] {
    float* s = emu::dynamic_shared<float>();
    const unsigned t = threadIdx.x;
    for (unsigned row = 0; row < 2; ++row) {
      if (row) __syncthreads();
      float* r = s + row * kThreads;
      r[t] = float(t);
      if (t + 1 < kThreads && std::isnan(r[t + 1])) ++m.upper[row];
      if (t > 0 && std::isnan(r[t - 1])) ++m.lower[row];
    }
  });
  return m;
}

}  // namespace

TEST_CASE("emulated cuda threads run both ways between barriers, so a missing barrier shows",
          "[cuda_emu]") {
  const Missed m = unsynchronized_reads();
  // Row 0 ascending: every thread but the last reads its upper neighbour before that one writes.
  CHECK(m.upper[0] == kThreads - 1);
  CHECK(m.lower[0] == 0);
  // Row 1 descending (the last thread to reach the barrier goes on first, then the rest downward).
  CHECK(m.lower[1] == kThreads - 1);
  CHECK(m.upper[1] == 0);
}

TEST_CASE("emulated cuda warp shuffles exchange lanes; a barrier never reached fails the launch",
          "[cuda_emu]") {
  std::vector<float> got(kThreads, NAN);
  emu::launch(emu::LaunchConfig(dim3(1), dim3(kThreads)), [&] {
    const unsigned t = threadIdx.x;
    got[t] = __shfl_xor_sync(0xffffffffu, float(t), 1);
  });
  for (unsigned t = 0; t < kThreads; ++t) CHECK(got[t] == float(t ^ 1));

  // Half a warp at __syncthreads, the other half at a shuffle: each waits for the other.
  auto deadlock = [] {
    emu::launch(emu::LaunchConfig(dim3(2), dim3(32)), [&] {
      if (threadIdx.x < 16) __syncthreads();
      else (void)__shfl_sync(0xffffffffu, 1.0f, 0);
    });
  };
  CHECK_THROWS_WITH(deadlock(), Catch::Contains("deadlock"));
  // The emulator still runs launches after the failed one.
  unsigned ran = 0;
  emu::launch(emu::LaunchConfig(dim3(3), dim3(kThreads)), [&] {
    __syncthreads();
    ++ran;
  });
  CHECK(ran == 3 * kThreads);
}

TEST_CASE("emulated cuda launches: a thread's exception reaches the caller; bad shapes are refused",
          "[cuda_emu]") {
  auto throwing = [] {
    emu::launch(emu::LaunchConfig(dim3(1), dim3(kThreads)), [&] {
      __syncthreads();
      if (threadIdx.x == 7) throw std::runtime_error("thread 7");
      __syncthreads();  // the others pass it: the thrown thread dropped out
    });
  };
  CHECK_THROWS_WITH(throwing(), "thread 7");
  emu::last_error = 0;
  unsigned ran = 0;
  emu::launch(emu::LaunchConfig(dim3(1), dim3(1025)), [&] { ++ran; });
  CHECK(ran == 0);
  CHECK(emu::last_error == emu::kErrorInvalidConfiguration);
  emu::last_error = 0;
}
