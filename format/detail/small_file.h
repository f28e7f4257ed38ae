// Reading a whole small file into memory with the checks every small kvzip file shares (the
// head-scores .kvh and the scorer .kvp): missing (with how to make one), a directory, not a
// regular file, larger than the kind allows, a short read. Each is a kvzip::Error naming the path.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kvzip::format::detail {

struct SmallFileKind {
  const char* name;       // "head-scores file": the messages' word for it
  const char* extension;  // ".kvh"
  std::string make_hint;  // how to make a missing one, e.g. "`kvzip calibrate DOC -o PATH`"
  uint64_t max_bytes;     // larger files are refused as corrupt
};

std::vector<uint8_t> read_small_file(const std::string& path, const SmallFileKind& kind);

}  // namespace kvzip::format::detail
