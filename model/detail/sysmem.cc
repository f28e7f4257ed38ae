// available_memory_bytes (see sysmem.h): /proc/meminfo and the process's cgroup v2 limits.
#include "model/detail/sysmem.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

namespace kvzip::model::detail {
namespace {

std::optional<uint64_t> meminfo_available() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  std::string unit;
  while (in >> key >> kb) {
    std::getline(in, unit);
    if (key == "MemAvailable:") return kb * 1024;
  }
  return std::nullopt;
}

std::optional<uint64_t> read_u64(const std::string& path) {
  std::ifstream in(path);
  std::string v;
  if (!(in >> v) || v == "max") return std::nullopt;
  try {
    return std::stoull(v);
  } catch (...) {
    return std::nullopt;
  }
}

// cgroup v2: /proc/self/cgroup has one line "0::/path".
std::optional<uint64_t> cgroup_available() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) != 0) continue;
    const std::string dir = "/sys/fs/cgroup" + line.substr(3);
    const auto max = read_u64(dir + "/memory.max"), cur = read_u64(dir + "/memory.current");
    if (max && cur) return *max > *cur ? *max - *cur : 0;
  }
  return std::nullopt;
}

}  // namespace

std::optional<uint64_t> available_memory_bytes() {
  const auto a = meminfo_available(), b = cgroup_available();
  if (a && b) return std::min(*a, *b);
  return a ? a : b;
}

}  // namespace kvzip::model::detail
