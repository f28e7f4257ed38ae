// Where a kernel runs and with what threads: the one device-dispatch point of every op front
// (kernels/<op>.h). Exec is passed by const reference to each op; the CPU backend in kernels/cpu/
// is the reference implementation, kernels/cuda/ its twin (built only with -DKVZIP_CUDA=ON, which
// defines KVZIP_HAVE_CUDA). On Device::Cuda every tensor pointer an op receives is device memory
// and the op is enqueued on Exec::stream (asynchronous to the host). In a CPU-only build the CUDA
// case of every front throws Errc::unsupported. No CUDA header is included from here.
#pragma once
#include <cstdint>

namespace kvzip::kernels {

class ThreadPool;

enum class Device : uint8_t { Cpu = 0, Cuda = 1 };

const char* device_name(Device d);

// Execution context of one op call. pool == nullptr runs single-threaded on the caller.
struct Exec {
  Device device = Device::Cpu;
  ThreadPool* pool = nullptr;
  void* stream = nullptr;  // cudaStream_t on Device::Cuda; nullptr = the default stream
};

// Throws Errc::unsupported naming the op and the device; used by every op front.
[[noreturn]] void throw_unsupported_device(Device d, const char* op);

// The common front check: returns normally only for a device this build can run `op` on.
inline void require_cpu(const Exec& ex, const char* op) {
  if (ex.device != Device::Cpu) throw_unsupported_device(ex.device, op);
}

// True when this build has the CUDA backend (compiled with -DKVZIP_CUDA=ON).
inline constexpr bool kBuiltWithCuda =
#if KVZIP_HAVE_CUDA
    true;
#else
    false;
#endif

// CUDA devices visible to this process: 0 in a CPU-only build, without a driver or without a GPU.
// Never throws.
int cuda_device_count() noexcept;

// Parses "cpu" / "cuda" (the --device flag) and checks that this build and machine can run it:
// Errc::invalid_argument for another name, Errc::unsupported (with what to do) for cuda in a
// CPU-only build or on a machine without a CUDA device.
Device parse_device(const char* name);

}  // namespace kvzip::kernels
