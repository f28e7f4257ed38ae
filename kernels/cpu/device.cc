// Device names, the --device parser and the unsupported-device error shared by every op front
// (kernels/device.h). cuda_device_count() lives in kernels/cuda/gpu.cc in a CUDA build.
#include "kernels/device.h"

#include <cstring>
#include <string>

#include "common/error.h"

namespace kvzip::kernels {

const char* device_name(Device d) {
  switch (d) {
    case Device::Cpu: return "cpu";
    case Device::Cuda: return "cuda";
  }
  return "unknown";
}

void throw_unsupported_device(Device d, const char* op) {
  throw Error(Errc::unsupported, std::string("kernel '") + op + "' has no " + device_name(d) +
                                     " implementation in this build; run on the CPU device " +
                                     "or rebuild with -DKVZIP_CUDA=ON");
}

#if !KVZIP_HAVE_CUDA
int cuda_device_count() noexcept { return 0; }
#endif

Device parse_device(const char* name) {
  if (std::strcmp(name, "cpu") == 0) return Device::Cpu;
  if (std::strcmp(name, "cuda") != 0)
    throw Error(Errc::invalid_argument,
                std::string("option device is '") + name + "', expected 'cpu' or 'cuda'");
  if (!kBuiltWithCuda)
    throw Error(Errc::unsupported,
                "option device cuda: this kvzip was built without CUDA; rebuild with "
                "-DKVZIP_CUDA=ON (needs nvcc) or use option device cpu");
  if (cuda_device_count() == 0)
    throw Error(Errc::unsupported,
                "option device cuda: no CUDA device is visible (no GPU, no driver, or "
                "CUDA_VISIBLE_DEVICES hides it); use option device cpu");
  return Device::Cuda;
}

}  // namespace kvzip::kernels
