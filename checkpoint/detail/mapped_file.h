// The bytes of a model file image, shared by the GGUF and safetensors readers (both parse the
// image once and hand out pointers into it): a read-only, private mapping of a whole regular
// file; or the file read into anonymous memory the image owns, in 2 MiB pages where the kernel
// grants them (read: decode streams every weight byte once a token, and with 4 KiB file pages
// each page costs a TLB miss — measured ~10% of a 1B model's decode); or a buffer the
// image owns (from_bytes, for tests). An empty file maps nothing.
// Mapping failures throw kvzip::Error (not_found for a missing file, io otherwise) whose message
// starts with the caller's prefix, e.g. "GGUF 'model.gguf': ". data() stays valid while the
// image lives, also across moves.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kvzip::model::detail {

class FileImage {
 public:
  static FileImage map(const std::string& path, const std::string& error_prefix);
  // The whole file read into private memory (read-only once filled). Errc::out_of_memory when
  // the memory cannot be had, not_found / io as map().
  static FileImage read(const std::string& path, const std::string& error_prefix);
  explicit FileImage(std::vector<uint8_t> bytes);

  FileImage(FileImage&& o) noexcept;
  FileImage& operator=(FileImage&& o) noexcept;
  FileImage(const FileImage&) = delete;
  FileImage& operator=(const FileImage&) = delete;
  ~FileImage();

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  FileImage() = default;
  void* map_ = nullptr;  // map() or read() storage, unmapped by the destructor
  uint64_t map_size_ = 0;
  std::vector<uint8_t> owned_;  // the other constructor's storage
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

// What both readers' File::Impl start from: the name their messages use and the image, with its
// bytes at hand for the parser.
struct NamedImage {
  std::string source;
  FileImage image;
  const uint8_t* data;  // image.data(), image.size()
  uint64_t size;

  NamedImage(std::string src, FileImage&& img)
      : source(std::move(src)), image(std::move(img)), data(image.data()), size(image.size()) {}
};

}  // namespace kvzip::model::detail
