// One read-only, private mapping of a whole regular file, shared by the GGUF and safetensors
// readers (both map their file once and hand out pointers into it). An empty file maps nothing.
// Failures throw kvzip::Error (not_found for a missing file, io otherwise) whose message starts
// with the caller's prefix, e.g. "GGUF 'model.gguf': ".
#pragma once
#include <cstdint>
#include <string>

namespace kvzip::detail {

struct FileMapping {
  void* addr = nullptr;  // nullptr for an empty file; release with unmap_file
  uint64_t size = 0;
};

FileMapping map_file(const std::string& path, const std::string& error_prefix);
void unmap_file(void* addr, uint64_t size) noexcept;

}  // namespace kvzip::detail
