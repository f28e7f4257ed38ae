// Reader of one .safetensors file (Hugging Face): an 8-byte little-endian header length N, N bytes
// of JSON ({"<name>": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {..}}),
// then the data section the offsets are relative to. File::open maps the file read-only; every
// entry is validated at open (JSON well formed, no duplicate names, dtype known, shape entries
// unsigned and their product not overflowing, [begin, end) inside the data section and exactly
// elements x dtype size long, no two tensors overlapping), so tensor bytes can be used in place.
// Failures throw kvzip::Error (truncated / corrupt / unsupported / not_found / io) naming the file
// and, where there is one, the tensor. Tensor data pointers stay valid while the File lives.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kernels/quant.h"

namespace kvzip::model::detail {
class FileImage;
}

namespace kvzip::model::safetensors {

// The dtypes of the format with a whole number of bytes per element.
enum class Dtype : uint8_t {
  BOOL,
  U8,
  I8,
  F8_E5M2,
  F8_E4M3,
  F8_E8M0,
  I16,
  U16,
  F16,
  BF16,
  I32,
  U32,
  F32,
  C64,
  F64,
  I64,
  U64,
};
const char* dtype_name(Dtype d);  // "BF16", as spelled in the header
uint32_t dtype_size(Dtype d);     // bytes per element
// The ggml type whose rows hold the same bytes (F32, F16, BF16), or nullopt for the others.
std::optional<kernels::quant::GgmlType> ggml_type(Dtype d);

struct TensorInfo {
  std::string name;
  Dtype dtype = Dtype::F32;
  std::vector<uint64_t> shape;  // outermost first (row-major), as in the header
  uint64_t offset = 0;          // absolute byte offset in the file
  uint64_t nbytes = 0;
  const uint8_t* data = nullptr;  // nbytes bytes inside the file

  uint64_t n_elements() const;
  std::string shape_string() const;  // "[300, 64]"
};

class File {
 public:
  // Maps `path` read-only. Errc::not_found / io when it cannot be opened or mapped.
  static File open(const std::string& path);
  // Parses an in-memory image (tests); `source` names it in messages.
  static File from_bytes(std::vector<uint8_t> bytes, std::string source = "<memory>");

  const std::string& source() const;
  uint64_t size() const;
  uint64_t data_offset() const;                         // 8 + N
  const std::vector<TensorInfo>& tensors() const;       // sorted by name
  const TensorInfo* find(std::string_view name) const;  // nullptr when absent
  // The "__metadata__" string map, in name order (empty when absent).
  const std::vector<std::pair<std::string, std::string>>& metadata() const;

  struct Impl;

 private:
  // Takes the image and parses it (throws on a malformed one).
  File(std::string source, detail::FileImage&& image);
  // A function-pointer deleter keeps File movable, and not copyable, without declaring either.
  std::unique_ptr<Impl, void (*)(Impl*)> impl_;
};

}  // namespace kvzip::model::safetensors
