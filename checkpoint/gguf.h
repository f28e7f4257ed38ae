// GGUF v2/v3 reader (little-endian only). File::open mmaps the file; from_bytes wraps a buffer
// (tests). Everything is validated at open, before any use: bounds of every read, counts against
// the bytes left, duplicate/empty keys, duplicate tensor names, n_dims <= 4, dims overflow, known
// tensor types, ne[0] % block size, general.alignment, and every tensor's data aligned and inside
// the file. Failures throw kvzip::Error (truncated/corrupt/bad_magic/version_unsupported/
// unsupported) naming the key or tensor and the byte offset. Pointers handed out (tensor data,
// string views) stay valid while the File lives, also across moves.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/quant.h"

namespace kvzip::model::detail {
class FileImage;
}

namespace kvzip::model::gguf {

// gguf_type: the metadata value types.
enum class ValueType : uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  Bool = 7,
  String = 8,
  Array = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12,
};
// "u32", "string", ... ("type#N" for an unknown id).
const char* value_type_name(ValueType t);

inline constexpr uint32_t kDefaultAlignment = 32;

struct TensorInfo {
  std::string name;
  kernels::quant::GgmlType type = kernels::quant::GgmlType::F32;
  uint32_t n_dims = 0;
  int64_t ne[4] = {1, 1, 1, 1};  // ne[0] contiguous; unused dims are 1
  uint64_t offset = 0;           // relative to the data section (File::data_offset)
  uint64_t nbytes = 0;
  const uint8_t* data = nullptr;  // nbytes bytes inside the file

  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
  std::string shape_string() const;  // "[576, 192]" in GGUF ne order
};

class File {
 public:
  // mmaps path read-only, or with in_memory reads it into private memory (detail/mapped_file.h:
  // faster decode, no pages shared with other processes). Errc::not_found / io when it cannot be
  // opened, mapped or read; out_of_memory when in_memory cannot get the memory.
  static File open(const std::string& path, bool in_memory = false);
  // Parses an in-memory image; `source` names it in error messages.
  static File from_bytes(std::vector<uint8_t> bytes, std::string source = "<memory>");

  const std::string& source() const;  // path, or the from_bytes name
  uint32_t version() const;
  uint32_t alignment() const;    // general.alignment or 32
  uint64_t data_offset() const;  // absolute offset of the tensor data section
  uint64_t size() const;         // file size in bytes
  const uint8_t* bytes() const;  // the whole file image

  // ---- metadata ----
  bool has(std::string_view key) const;
  std::optional<ValueType> type_of(std::string_view key) const;
  // For an array key: element type and count; Errc::corrupt if missing or not an array.
  ValueType array_type(std::string_view key) const;
  uint64_t array_size(std::string_view key) const;
  std::vector<std::string> keys() const;  // in file order

  // Typed getters. All failures are Errc::corrupt: "missing key 'X'" when absent, "key 'X' has
  // type T, expected ..." on a type mismatch, "does not fit" for an out-of-range value.
  std::string get_string(std::string_view key) const;
  std::string_view get_string_view(std::string_view key) const;
  uint64_t get_u64(std::string_view key) const;  // any integer width; negatives rejected
  uint32_t get_u32(std::string_view key) const;  // get_u64, range-checked to 32 bits
  int64_t get_i64(std::string_view key) const;   // any integer width; > INT64_MAX rejected
  float get_f32(std::string_view key) const;     // f32 or f64
  bool get_bool(std::string_view key) const;
  std::vector<std::string> get_string_array(std::string_view key) const;
  std::vector<std::string_view> get_string_array_views(std::string_view key) const;
  std::vector<int32_t> get_i32_array(
      std::string_view key) const;                               // any integer elem type that fits
  std::vector<float> get_f32_array(std::string_view key) const;  // f32 or f64 elements

  // Defaults when the key is absent (a present key of the wrong type still throws).
  std::string get_string_or(std::string_view key, std::string_view dflt) const;
  uint32_t get_u32_or(std::string_view key, uint32_t dflt) const;
  float get_f32_or(std::string_view key, float dflt) const;
  bool get_bool_or(std::string_view key, bool dflt) const;

  // ---- tensors ----
  const std::vector<TensorInfo>& tensors() const;              // in file order
  const TensorInfo* find_tensor(std::string_view name) const;  // nullptr when absent
  const TensorInfo& tensor(std::string_view name) const;       // Errc::corrupt "missing tensor X"

  struct Impl;

 private:
  // Takes the image and parses it (throws on a malformed one).
  File(std::string source, detail::FileImage&& image);
  // A function-pointer deleter keeps File movable, and not copyable, without declaring either.
  std::unique_ptr<Impl, void (*)(Impl*)> impl_;
};

}  // namespace kvzip::model::gguf
