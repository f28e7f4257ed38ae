// Creating a file so that its name only ever refers to a complete file: write a temporary
// `path.tmp.XXXXXX` in the same directory, fsync, rename onto `path`, fsync the directory.
// create_atomically hands the body the open descriptor and the temporary name (HDF5 writes by
// name); write_file_atomically (format.h) wraps it with a Sink.
#pragma once
#include <functional>
#include <string>

namespace kvzip::format::detail {

void create_atomically(const std::string& path, bool force,
                       const std::function<void(int fd, const std::string& tmp_path)>& body);

}  // namespace kvzip::format::detail
