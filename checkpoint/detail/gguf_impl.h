// Private state of gguf::File and the bounds-checked byte cursor the parser reads with.
// Invariant: once parse_gguf returns, every KeyValue and TensorInfo refers to bytes that were
// validated to lie inside [data, data + size); accessors may read them without further checks.
#pragma once
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/detail/mapped_file.h"
#include "checkpoint/gguf.h"
#include "common/error.h"

namespace kvzip::model::gguf {

struct KeyValue {
  std::string key;
  ValueType type = ValueType::U8;
  ValueType elem_type = ValueType::U8;  // arrays only
  uint64_t count = 0;                   // arrays: element count; strings: byte length
  uint64_t key_offset = 0;              // where the KV record starts
  uint64_t value_offset = 0;            // first byte of the value (after type / array header)
};

struct File::Impl : detail::NamedImage {
  using NamedImage::NamedImage;

  uint32_t version = 0;
  uint32_t alignment = kDefaultAlignment;
  uint64_t data_offset = 0;
  std::vector<KeyValue> kvs;
  std::map<std::string, size_t, std::less<>> kv_index;
  std::vector<TensorInfo> tensors;
  std::map<std::string, size_t, std::less<>> tensor_index;

  const KeyValue* find(std::string_view key) const;
  [[noreturn]] void fail(Errc code, const std::string& what) const;  // "GGUF '<source>': what"
};

// Parses and validates impl.data/size into the rest of impl. Throws kvzip::Error.
void parse_gguf(File::Impl& impl);

// Size in bytes of a fixed-size scalar value type, 0 for string/array/unknown.
uint64_t scalar_size(ValueType t);

// Reads fields in order with a bounds check each; errors name `what` and the offset.
class Cursor {
 public:
  Cursor(const File::Impl& impl, uint64_t pos) : impl_(impl), pos_(pos) {}
  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return impl_.size - pos_; }

  // Throws truncated when fewer than n bytes are left.
  void need(uint64_t n, const std::string& what) const;
  template <class T>
  T read(const std::string& what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, impl_.data + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  // u64 length + bytes. Throws corrupt when the length exceeds the whole file, truncated when it
  // exceeds what is left.
  std::string_view read_string(const std::string& what);
  // Skips a well-formed string and returns true; returns false without moving when it would not
  // fit (the caller then calls read_string to report it). Keeps the hot loop free of messages.
  bool try_skip_string() {
    uint64_t len;
    if (remaining() < 8) return false;
    std::memcpy(&len, impl_.data + pos_, 8);
    if (len > remaining() - 8) return false;
    pos_ += 8 + len;
    return true;
  }
  void skip(uint64_t n, const std::string& what) {
    need(n, what);
    pos_ += n;
  }

 private:
  const File::Impl& impl_;
  uint64_t pos_;
};

}  // namespace kvzip::model::gguf
