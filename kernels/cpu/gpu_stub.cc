// The device-memory functions of kernels/gpu.h in a CPU-only build: each throws Errc::unsupported
// (callers reach them only after choosing Device::Cuda, which parse_device() already refuses).
#include "kernels/gpu.h"

#if !KVZIP_HAVE_CUDA
#include "common/error.h"

namespace kvzip::kernels::gpu {
namespace {
[[noreturn]] void no_cuda(const char* what) {
  throw Error(Errc::unsupported, std::string(what) +
                                     ": this kvzip was built without CUDA; rebuild with "
                                     "-DKVZIP_CUDA=ON or use option device cpu");
}
}  // namespace

void* malloc_device(size_t) { no_cuda("gpu::malloc_device"); }
void free_device(void*) noexcept {}
void* malloc_pinned(size_t) { no_cuda("gpu::malloc_pinned"); }
void free_pinned(void*) noexcept {}
void copy_to_device(void*, const void*, size_t, void*) { no_cuda("gpu::copy_to_device"); }
void copy_to_host(void*, const void*, size_t, void*) { no_cuda("gpu::copy_to_host"); }
void copy_device(void*, const void*, size_t, void*) { no_cuda("gpu::copy_device"); }
void fill_zero(void*, size_t, void*) { no_cuda("gpu::fill_zero"); }
void synchronize(void*) { no_cuda("gpu::synchronize"); }
void* create_stream() { no_cuda("gpu::create_stream"); }
void destroy_stream(void*) noexcept {}
void* create_event() { no_cuda("gpu::create_event"); }
void destroy_event(void*) noexcept {}
void record_event(void*, void*) { no_cuda("gpu::record_event"); }
void wait_event(void*) { no_cuda("gpu::wait_event"); }
DeviceInfo device_info() { return {}; }

}  // namespace kvzip::kernels::gpu
#endif
