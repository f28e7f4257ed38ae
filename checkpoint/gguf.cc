// gguf::File: storage (mmap or owned buffer) and the typed metadata / tensor accessors. Parsing
// and validation live in detail/gguf_parse.cc; everything here reads already-validated bytes.
#include "checkpoint/gguf.h"

#include <cerrno>
#include <limits>

#include "checkpoint/detail/gguf_impl.h"
#include "checkpoint/detail/mapped_file.h"

namespace kvzip::model::gguf {
namespace {

// An integer metadata value widened to 128 bits; false if t is not an integer type.
bool read_integer(const uint8_t* p, ValueType t, __int128& out) {
  switch (t) {
    case ValueType::U8: out = *p; return true;
    case ValueType::I8: out = int8_t(*p); return true;
#define KVZIP_INT_CASE(VT, CT)    \
  case ValueType::VT: {           \
    CT v;                         \
    std::memcpy(&v, p, sizeof v); \
    out = v;                      \
    return true;                  \
  }
      KVZIP_INT_CASE(U16, uint16_t)
      KVZIP_INT_CASE(I16, int16_t)
      KVZIP_INT_CASE(U32, uint32_t)
      KVZIP_INT_CASE(I32, int32_t)
      KVZIP_INT_CASE(U64, uint64_t)
      KVZIP_INT_CASE(I64, int64_t)
#undef KVZIP_INT_CASE
    default: return false;
  }
}

bool read_float(const uint8_t* p, ValueType t, float& out) {
  if (t == ValueType::F32) {
    std::memcpy(&out, p, 4);
    return true;
  }
  if (t == ValueType::F64) {
    double d;
    std::memcpy(&d, p, 8);
    out = float(d);
    return true;
  }
  return false;
}

std::string to_string_i128(__int128 v) {
  if (v >= 0) return std::to_string(uint64_t(v));
  std::string s(1, '-');
  return s.append(std::to_string(uint64_t(-v)));
}

std::string_view string_at(const uint8_t* base, uint64_t& off) {
  uint64_t len;
  std::memcpy(&len, base + off, 8);
  std::string_view s(reinterpret_cast<const char*>(base + off + 8), size_t(len));
  off += 8 + len;
  return s;
}

}  // namespace

const char* value_type_name(ValueType t) {
  static constexpr const char* kNames[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                           "bool", "string", "array", "u64", "i64", "f64"};
  const auto i = uint32_t(t);
  return i < 13 ? kNames[i] : "unknown";
}

std::string TensorInfo::shape_string() const {
  std::string s = "[";
  for (uint32_t j = 0; j < n_dims; ++j) s += (j ? ", " : "") + std::to_string(ne[j]);
  return s + "]";
}

// ---- Impl ----

const KeyValue* File::Impl::find(std::string_view key) const {
  auto it = kv_index.find(key);
  return it == kv_index.end() ? nullptr : &kvs[it->second];
}

void File::Impl::fail(Errc code, const std::string& what) const {
  throw Error(code, "GGUF '" + source + "': " + what);
}

// ---- construction ----

File::File(std::string source, detail::FileImage&& image)
    : impl_(new Impl(std::move(source), std::move(image)), [](Impl* p) { delete p; }) {
  parse_gguf(*impl_);
}

File File::open(const std::string& path, bool in_memory) {
  const std::string prefix = "GGUF '" + path + "': ";
  return File(path, in_memory ? detail::FileImage::read(path, prefix)
                              : detail::FileImage::map(path, prefix));
}

File File::from_bytes(std::vector<uint8_t> bytes, std::string source) {
  return File(std::move(source), detail::FileImage(std::move(bytes)));
}

const std::string& File::source() const { return impl_->source; }
uint32_t File::version() const { return impl_->version; }
uint32_t File::alignment() const { return impl_->alignment; }
uint64_t File::data_offset() const { return impl_->data_offset; }
uint64_t File::size() const { return impl_->size; }
const uint8_t* File::bytes() const { return impl_->data; }

// ---- metadata ----

namespace {

const KeyValue& need(const File::Impl& impl, std::string_view key) {
  const KeyValue* kv = impl.find(key);
  if (!kv) impl.fail(Errc::corrupt, "missing key '" + std::string(key) + "'");
  return *kv;
}

[[noreturn]] void wrong_type(const File::Impl& impl, const KeyValue& kv, const char* expected) {
  std::string found = value_type_name(kv.type);
  if (kv.type == ValueType::Array) found += std::string(" of ") + value_type_name(kv.elem_type);
  impl.fail(Errc::corrupt, "key '" + kv.key + "' has type " + found + ", expected " + expected);
}

const KeyValue& need_array(const File::Impl& impl, std::string_view key, const char* expected) {
  const KeyValue& kv = need(impl, key);
  if (kv.type != ValueType::Array) wrong_type(impl, kv, expected);
  return kv;
}

}  // namespace

bool File::has(std::string_view key) const { return impl_->find(key) != nullptr; }

std::optional<ValueType> File::type_of(std::string_view key) const {
  const KeyValue* kv = impl_->find(key);
  if (!kv) return std::nullopt;
  return kv->type;
}

ValueType File::array_type(std::string_view key) const {
  return need_array(*impl_, key, "an array").elem_type;
}

uint64_t File::array_size(std::string_view key) const {
  return need_array(*impl_, key, "an array").count;
}

std::vector<std::string> File::keys() const {
  std::vector<std::string> out;
  out.reserve(impl_->kvs.size());
  for (const KeyValue& kv : impl_->kvs) out.push_back(kv.key);
  return out;
}

std::string_view File::get_string_view(std::string_view key) const {
  const KeyValue& kv = need(*impl_, key);
  if (kv.type != ValueType::String) wrong_type(*impl_, kv, "string");
  return {reinterpret_cast<const char*>(impl_->data + kv.value_offset + 8), size_t(kv.count)};
}

std::string File::get_string(std::string_view key) const {
  return std::string(get_string_view(key));
}

int64_t File::get_i64(std::string_view key) const {
  const KeyValue& kv = need(*impl_, key);
  __int128 v;
  if (!read_integer(impl_->data + kv.value_offset, kv.type, v))
    wrong_type(*impl_, kv, "an integer");
  if (v > std::numeric_limits<int64_t>::max())
    impl_->fail(Errc::corrupt,
                "key '" + kv.key + "' = " + to_string_i128(v) + " does not fit in int64");
  return int64_t(v);
}

uint64_t File::get_u64(std::string_view key) const {
  const KeyValue& kv = need(*impl_, key);
  __int128 v;
  if (!read_integer(impl_->data + kv.value_offset, kv.type, v))
    wrong_type(*impl_, kv, "an unsigned integer");
  if (v < 0)
    impl_->fail(Errc::corrupt, "key '" + kv.key + "' = " + to_string_i128(v) +
                                   ", expected a non-negative integer");
  return uint64_t(v);
}

uint32_t File::get_u32(std::string_view key) const {
  const uint64_t v = get_u64(key);
  if (v > std::numeric_limits<uint32_t>::max())
    impl_->fail(Errc::corrupt, "key '" + std::string(key) + "' = " + std::to_string(v) +
                                   " does not fit in 32 bits");
  return uint32_t(v);
}

float File::get_f32(std::string_view key) const {
  const KeyValue& kv = need(*impl_, key);
  float f;
  if (!read_float(impl_->data + kv.value_offset, kv.type, f)) wrong_type(*impl_, kv, "f32 or f64");
  return f;
}

bool File::get_bool(std::string_view key) const {
  const KeyValue& kv = need(*impl_, key);
  if (kv.type != ValueType::Bool) wrong_type(*impl_, kv, "bool");
  return impl_->data[kv.value_offset] != 0;
}

std::vector<std::string_view> File::get_string_array_views(std::string_view key) const {
  const KeyValue& kv = need_array(*impl_, key, "array of string");
  if (kv.elem_type != ValueType::String) wrong_type(*impl_, kv, "array of string");
  std::vector<std::string_view> out;
  out.reserve(size_t(kv.count));
  uint64_t off = kv.value_offset;
  for (uint64_t i = 0; i < kv.count; ++i) out.push_back(string_at(impl_->data, off));
  return out;
}

std::vector<std::string> File::get_string_array(std::string_view key) const {
  const auto views = get_string_array_views(key);
  return std::vector<std::string>(views.begin(), views.end());
}

std::vector<int32_t> File::get_i32_array(std::string_view key) const {
  const KeyValue& kv = need_array(*impl_, key, "array of integers");
  const uint64_t es = scalar_size(kv.elem_type);
  std::vector<int32_t> out;
  out.reserve(size_t(kv.count));
  for (uint64_t i = 0; i < kv.count; ++i) {
    __int128 v;
    if (!read_integer(impl_->data + kv.value_offset + i * es, kv.elem_type, v))
      wrong_type(*impl_, kv, "array of integers");
    if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())
      impl_->fail(Errc::corrupt, "key '" + kv.key + "' element " + std::to_string(i) + " = " +
                                     to_string_i128(v) + " does not fit in int32");
    out.push_back(int32_t(v));
  }
  return out;
}

std::vector<float> File::get_f32_array(std::string_view key) const {
  const KeyValue& kv = need_array(*impl_, key, "array of f32");
  if (kv.elem_type != ValueType::F32 && kv.elem_type != ValueType::F64)
    wrong_type(*impl_, kv, "array of f32 or f64");
  const uint64_t es = scalar_size(kv.elem_type);
  std::vector<float> out(size_t(kv.count));
  for (uint64_t i = 0; i < kv.count; ++i)
    read_float(impl_->data + kv.value_offset + i * es, kv.elem_type, out[size_t(i)]);
  return out;
}

std::string File::get_string_or(std::string_view key, std::string_view dflt) const {
  return has(key) ? get_string(key) : std::string(dflt);
}
uint32_t File::get_u32_or(std::string_view key, uint32_t dflt) const {
  return has(key) ? get_u32(key) : dflt;
}
float File::get_f32_or(std::string_view key, float dflt) const {
  return has(key) ? get_f32(key) : dflt;
}
bool File::get_bool_or(std::string_view key, bool dflt) const {
  return has(key) ? get_bool(key) : dflt;
}

// ---- tensors ----

const std::vector<TensorInfo>& File::tensors() const { return impl_->tensors; }

const TensorInfo* File::find_tensor(std::string_view name) const {
  auto it = impl_->tensor_index.find(name);
  return it == impl_->tensor_index.end() ? nullptr : &impl_->tensors[it->second];
}

const TensorInfo& File::tensor(std::string_view name) const {
  const TensorInfo* t = find_tensor(name);
  if (!t) impl_->fail(Errc::corrupt, "missing tensor '" + std::string(name) + "'");
  return *t;
}

}  // namespace kvzip::model::gguf
