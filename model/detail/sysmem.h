// How much memory this process can still use: the smaller of the kernel's MemAvailable estimate
// (free plus reclaimable page cache) and, inside a cgroup v2 with a limit, memory.max minus
// memory.current. Used to refuse a model that cannot fit before minutes are spent loading it.
#pragma once
#include <cstdint>
#include <optional>

namespace kvzip::model::detail {

// Bytes available, or nullopt when neither source can be read (then no check is made).
std::optional<uint64_t> available_memory_bytes();

}  // namespace kvzip::model::detail
