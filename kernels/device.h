// Where a kernel runs and with what threads: the one device-dispatch point of every op front
// (kernels/<op>.h). Exec is passed by const reference to each op; the CPU backend in kernels/cpu/
// is the reference implementation. A CUDA device is named here so the layout is ready for it, but
// this build has no CUDA ops yet: dispatching to it throws Errc::unsupported.
#pragma once
#include <cstdint>

namespace kvzip {

class ThreadPool;

enum class Device : uint8_t { Cpu = 0, Cuda = 1 };

const char* device_name(Device d);

// Execution context of one op call. pool == nullptr runs single-threaded on the caller.
struct Exec {
  Device device = Device::Cpu;
  ThreadPool* pool = nullptr;
};

// Throws Errc::unsupported naming the op and the device; used by every op front.
[[noreturn]] void throw_unsupported_device(Device d, const char* op);

// The common front check: returns normally only for a device this build can run `op` on.
inline void require_cpu(const Exec& ex, const char* op) {
  if (ex.device != Device::Cpu) throw_unsupported_device(ex.device, op);
}

}  // namespace kvzip
