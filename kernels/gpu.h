// Device memory and streams for code that must not include CUDA headers (op fronts, tests, the
// model's GPU forward): plain functions over void* and an owning GpuBuffer<T>. Implemented in
// kernels/cuda/gpu.cc; in a CPU-only build every function except cuda_device_count() throws
// Errc::unsupported. Errors from the CUDA runtime become Errc::cuda (Errc::out_of_memory for a
// failed allocation) with file:line and the runtime's message.
#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/device.h"

namespace kvzip::kernels::gpu {

void* malloc_device(size_t bytes);   // never nullptr; 0 bytes allocates 1
void free_device(void* p) noexcept;  // nullptr is fine
void* malloc_pinned(size_t bytes);   // page-locked host memory (staging for async copies)
void free_pinned(void* p) noexcept;
// Asynchronous on `stream` when the host side is pinned; synchronous otherwise.
void copy_to_device(void* dst, const void* src, size_t bytes, void* stream = nullptr);
void copy_to_host(void* dst, const void* src, size_t bytes, void* stream = nullptr);
void copy_device(void* dst, const void* src, size_t bytes, void* stream = nullptr);
void fill_zero(void* dst, size_t bytes, void* stream = nullptr);
void synchronize(void* stream = nullptr);  // waits for the stream; rethrows a kernel's error
void* create_stream();
void destroy_stream(void* stream) noexcept;
// Events order host work against one stream's progress (e.g. reusing a staging buffer only once
// the copy that read it has finished), without waiting for the whole stream.
void* create_event();
void destroy_event(void* event) noexcept;
void record_event(void* event, void* stream = nullptr);
void wait_event(void* event);  // host waits until the work recorded before it has finished

// Name and memory of device 0, for benchmark reports ("" when unavailable).
struct DeviceInfo {
  char name[256] = {};
  size_t total_bytes = 0;
  int sm_count = 0;
  int cc_major = 0, cc_minor = 0;
};
DeviceInfo device_info();

// x (n) fp32 -> bf16 (common/half.h's f32_to_bf16), on the host: weights are converted once at
// load. Stored as uint16_t so no CUDA type appears here.
std::vector<uint16_t> to_bf16(const float* x, size_t n);

// An owning device array of n T's (contents undefined until written).
template <class T>
class GpuBuffer {
 public:
  GpuBuffer() = default;
  explicit GpuBuffer(size_t n) : p_(static_cast<T*>(malloc_device(n * sizeof(T)))), n_(n) {}
  ~GpuBuffer() { free_device(p_); }
  GpuBuffer(GpuBuffer&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  GpuBuffer& operator=(GpuBuffer&& o) noexcept {
    if (this != &o) {
      free_device(p_);
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  GpuBuffer(const GpuBuffer&) = delete;
  GpuBuffer& operator=(const GpuBuffer&) = delete;

  T* data() { return p_; }
  const T* data() const { return p_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }

  // Synchronous helpers for tests and setup code: the data is on the device when they return,
  // whatever stream later work runs on (a pageable copy alone only guarantees the host side).
  void upload(const std::vector<T>& h) { upload(h.data(), h.size()); }
  void upload(const T* h, size_t n) {
    check_size(n);
    copy_to_device(p_, h, n * sizeof(T));
    synchronize(nullptr);
  }
  std::vector<T> download() const {
    std::vector<T> h(n_);
    copy_to_host(h.data(), p_, n_ * sizeof(T));
    return h;
  }

 private:
  void check_size(size_t n) const;
  T* p_ = nullptr;
  size_t n_ = 0;
};

[[noreturn]] void throw_buffer_overflow(size_t n, size_t capacity);

template <class T>
void GpuBuffer<T>::check_size(size_t n) const {
  if (n > n_) throw_buffer_overflow(n, n_);
}

}  // namespace kvzip::kernels::gpu
