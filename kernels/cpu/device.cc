// Device names and the unsupported-device error shared by every op front (kernels/device.h).
#include "kernels/device.h"

#include <string>

#include "common/error.h"

namespace kvzip {

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

}  // namespace kvzip
