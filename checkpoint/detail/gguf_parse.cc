// GGUF header parser and validator (see gguf.h for the checks). Reads header, KV records and the
// tensor table with a bounds-checked Cursor; never allocates from a count that was not first
// checked against the bytes left. Rules follow the GGUF spec and the reference reader (ggml
// gguf.cpp): v2/v3 only, no nested arrays, u32 power-of-two general.alignment.
#include <bit>
#include <limits>

#include "checkpoint/detail/gguf_impl.h"

namespace kvzip::model::gguf {

static_assert(std::endian::native == std::endian::little, "the GGUF reader assumes a LE host");

namespace {

constexpr uint32_t kMagic = 0x46554747;                  // "GGUF" read as a little-endian u32
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;              // empty key, type, 1-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;  // empty name, n_dims=0, type, offset
constexpr uint64_t kMaxTensorName = 63;                  // GGML_MAX_NAME - 1
// ggml's GGML_TYPE_COUNT when this was written: ids below it are real (possibly newer) ggml
// types this build cannot size (unsupported); ids at or above it are garbage (corrupt).
constexpr uint32_t kGgmlTypeCount = 43;
// A length or count needing more bytes than the whole file and than this is called corrupt;
// anything smaller that runs past the end is called truncated (a cut file keeps sane counts).
constexpr uint64_t kPlausibleBytes = 1ull << 30;

std::string at(uint64_t off) { return " at byte " + std::to_string(off); }

bool known_value_type(uint32_t t) { return t <= uint32_t(ValueType::F64); }

// A count of items of at least `min_bytes` each: throws corrupt when it is implausible (see
// kPlausibleBytes); returns whether the items fit in the bytes left. When they do not, the caller
// reads on without reserving, so the exact item and field where the file ends gets reported.
bool check_count(const File::Impl& impl, const Cursor& c, uint64_t count, uint64_t min_bytes,
                 const std::string& what) {
  if (min_bytes == 0 || count <= c.remaining() / min_bytes) return true;
  if (count > impl.size / min_bytes && count > kPlausibleBytes / min_bytes)
    impl.fail(Errc::corrupt, what + " = " + std::to_string(count) + at(c.pos()) +
                                 " needs at least " + std::to_string(min_bytes) +
                                 " bytes each, more than the whole file holds (" +
                                 std::to_string(impl.size) + " bytes); the file is corrupt");
  return false;
}

// Skips over one value of type t (not an array), validating strings.
void skip_value(const File::Impl& impl, Cursor& c, ValueType t, const std::string& what) {
  if (t == ValueType::String) {
    c.read_string(what);
    return;
  }
  c.skip(scalar_size(t), what);
}

void parse_kv(File::Impl& impl, Cursor& c, uint64_t index) {
  KeyValue kv;
  kv.key_offset = c.pos();
  const std::string idx = "metadata KV #" + std::to_string(index);
  kv.key = std::string(c.read_string(idx + " key"));
  if (kv.key.empty()) impl.fail(Errc::corrupt, idx + " has an empty key" + at(kv.key_offset));
  const std::string what = "key '" + kv.key + "'";
  if (impl.kv_index.count(kv.key))
    impl.fail(Errc::corrupt, "duplicate " + what + at(kv.key_offset));
  const uint64_t type_off = c.pos();
  const uint32_t type = c.read<uint32_t>(what + " value type");
  if (!known_value_type(type))
    impl.fail(Errc::corrupt, what + " has unknown value type " + std::to_string(type) +
                                 at(type_off) + " (expected 0..12)");
  kv.type = ValueType(type);
  if (kv.type == ValueType::Array) {
    const uint64_t et_off = c.pos();
    const uint32_t et = c.read<uint32_t>(what + " array element type");
    if (et == uint32_t(ValueType::Array))
      impl.fail(Errc::unsupported,
                what + " is a nested array" + at(et_off) + "; nested arrays are not supported");
    if (!known_value_type(et))
      impl.fail(Errc::corrupt,
                what + " has unknown array element type " + std::to_string(et) + at(et_off));
    kv.elem_type = ValueType(et);
    kv.count = c.read<uint64_t>(what + " array count");
    const uint64_t min_elem = kv.elem_type == ValueType::String ? 8 : scalar_size(kv.elem_type);
    check_count(impl, c, kv.count, min_elem, what + " array count");
    kv.value_offset = c.pos();
    if (kv.elem_type == ValueType::String) {
      for (uint64_t i = 0; i < kv.count; ++i) {
        if (!c.try_skip_string()) c.read_string(what + " element " + std::to_string(i));
      }
    } else {
      c.skip(kv.count * min_elem, what + " array data");
    }
  } else {
    kv.value_offset = c.pos();
    if (kv.type == ValueType::String) kv.count = c.read_string(what + " value").size();
    else skip_value(impl, c, kv.type, what + " value");
  }
  impl.kv_index.emplace(kv.key, impl.kvs.size());
  impl.kvs.push_back(std::move(kv));
}

void read_alignment(File::Impl& impl) {
  const KeyValue* kv = impl.find("general.alignment");
  if (!kv) return;
  if (kv->type != ValueType::U32)
    impl.fail(Errc::corrupt, std::string("key 'general.alignment' has type ") +
                                 value_type_name(kv->type) + at(kv->key_offset) + ", expected u32");
  uint32_t a;
  std::memcpy(&a, impl.data + kv->value_offset, 4);
  if (a == 0 || (a & (a - 1)) != 0)
    impl.fail(Errc::corrupt, "key 'general.alignment' = " + std::to_string(a) +
                                 at(kv->value_offset) + " is not a power of two");
  impl.alignment = a;
}

// ne product with overflow checks; returns false on overflow.
bool checked_mul(uint64_t a, uint64_t b, uint64_t& out) {
  if (a != 0 && b > std::numeric_limits<uint64_t>::max() / a) return false;
  out = a * b;
  return true;
}

void parse_tensor_info(File::Impl& impl, Cursor& c, uint64_t index) {
  TensorInfo t;
  const uint64_t start = c.pos();
  const std::string idx = "tensor info #" + std::to_string(index);
  t.name = std::string(c.read_string(idx + " name"));
  if (t.name.empty()) impl.fail(Errc::corrupt, idx + " has an empty name" + at(start));
  const std::string what = "tensor '" + t.name + "'";
  if (t.name.size() > kMaxTensorName)
    impl.fail(Errc::corrupt, what + at(start) + ": name is " + std::to_string(t.name.size()) +
                                 " bytes, the limit is " + std::to_string(kMaxTensorName));
  if (impl.tensor_index.count(t.name)) impl.fail(Errc::corrupt, "duplicate " + what + at(start));
  const uint64_t nd_off = c.pos();
  t.n_dims = c.read<uint32_t>(what + " n_dims");
  if (t.n_dims > 4)
    impl.fail(Errc::corrupt, what + " has n_dims = " + std::to_string(t.n_dims) + at(nd_off) +
                                 ", expected at most 4");
  uint64_t n_el = 1;
  for (uint32_t j = 0; j < t.n_dims; ++j) {
    const uint64_t ne_off = c.pos();
    const uint64_t ne = c.read<uint64_t>(what + " ne[" + std::to_string(j) + "]");
    if (ne > uint64_t(std::numeric_limits<int64_t>::max()) || !checked_mul(n_el, ne, n_el) ||
        n_el > uint64_t(std::numeric_limits<int64_t>::max()))
      impl.fail(Errc::corrupt, what + " ne[" + std::to_string(j) + "] = " + std::to_string(ne) +
                                   at(ne_off) + " makes the element count overflow int64");
    t.ne[j] = int64_t(ne);
  }
  const uint64_t type_off = c.pos();
  const uint32_t type = c.read<uint32_t>(what + " type");
  const kernels::quant::TypeTraits* tr = kernels::quant::type_traits(type);
  if (!tr) {
    const bool known_id = type < kGgmlTypeCount;
    impl.fail(known_id ? Errc::unsupported : Errc::corrupt,
              what + " has unknown ggml type " + std::to_string(type) + at(type_off) +
                  (known_id ? " (a ggml type this build cannot read)" : ""));
  }
  t.type = kernels::quant::GgmlType(type);
  if (t.ne[0] % tr->block_elems != 0)
    impl.fail(Errc::corrupt, what + " ne[0] = " + std::to_string(t.ne[0]) + at(nd_off) +
                                 " is not a multiple of the " + tr->name + " block size " +
                                 std::to_string(tr->block_elems));
  uint64_t nbytes = uint64_t(t.ne[0] / tr->block_elems);
  bool ok = checked_mul(nbytes, uint64_t(tr->block_bytes), nbytes);
  for (int j = 1; j < 4 && ok; ++j) ok = checked_mul(nbytes, uint64_t(t.ne[j]), nbytes);
  if (!ok) impl.fail(Errc::corrupt, what + at(start) + ": byte size overflows 64 bits");
  t.nbytes = nbytes;
  t.offset = c.read<uint64_t>(what + " data offset");
  impl.tensor_index.emplace(t.name, impl.tensors.size());
  impl.tensors.push_back(std::move(t));
}

uint64_t align_up(uint64_t o, uint64_t a) { return o + (a - o % a) % a; }

// Places every tensor's data, checking alignment and bounds. The layout the reference writer
// produces (each offset = the padded end of the previous tensor) tells a truncated file from a
// corrupt offset.
void place_tensors(File::Impl& impl, uint64_t table_end) {
  impl.data_offset = align_up(table_end, impl.alignment);
  if (impl.tensors.empty()) return;
  if (impl.data_offset > impl.size)
    impl.fail(Errc::truncated, "tensor data section should start" + at(impl.data_offset) +
                                   " but the file has only " + std::to_string(impl.size) +
                                   " bytes; the file is truncated");
  const uint64_t avail = impl.size - impl.data_offset;
  uint64_t expected = 0;
  for (TensorInfo& t : impl.tensors) {
    const std::string what = "tensor '" + t.name + "'";
    if (t.offset % impl.alignment != 0)
      impl.fail(Errc::corrupt, what + " data offset " + std::to_string(t.offset) + " (file" +
                                   at(impl.data_offset + t.offset) + ")" +
                                   " is not a multiple of the alignment " +
                                   std::to_string(impl.alignment));
    if (t.offset > avail || t.nbytes > avail - t.offset) {
      const std::string msg = what + " data [" + std::to_string(impl.data_offset + t.offset) +
                              ", +" + std::to_string(t.nbytes) + ") ends past the end of the " +
                              "file (" + std::to_string(impl.size) + " bytes)";
      if (t.offset == expected) impl.fail(Errc::truncated, msg + "; the file is truncated");
      impl.fail(Errc::corrupt,
                msg + "; its offset " + std::to_string(t.offset) + " is out of the file");
    }
    t.data = impl.data + impl.data_offset + t.offset;
    expected = align_up(t.offset + t.nbytes, impl.alignment);
  }
}

}  // namespace

uint64_t scalar_size(ValueType t) {
  switch (t) {
    case ValueType::U8:
    case ValueType::I8:
    case ValueType::Bool: return 1;
    case ValueType::U16:
    case ValueType::I16: return 2;
    case ValueType::U32:
    case ValueType::I32:
    case ValueType::F32: return 4;
    case ValueType::U64:
    case ValueType::I64:
    case ValueType::F64: return 8;
    default: return 0;
  }
}

void Cursor::need(uint64_t n, const std::string& what) const {
  if (n <= remaining()) return;
  impl_.fail(Errc::truncated, "truncated reading " + what + at(pos_) + ": needs " +
                                  std::to_string(n) + " bytes, only " +
                                  std::to_string(remaining()) + " left");
}

std::string_view Cursor::read_string(const std::string& what) {
  const uint64_t off = pos_;
  const uint64_t len = read<uint64_t>(what + " length");
  if (len > impl_.size && len > kPlausibleBytes)
    impl_.fail(Errc::corrupt, what + " has string length " + std::to_string(len) + at(off) +
                                  ", more than the whole file (" + std::to_string(impl_.size) +
                                  " bytes); the file is corrupt");
  need(len, what);
  std::string_view s(reinterpret_cast<const char*>(impl_.data + pos_), size_t(len));
  pos_ += len;
  return s;
}

void parse_gguf(File::Impl& impl) {
  Cursor c(impl, 0);
  if (impl.size < 4) {
    if (impl.size > 0 && std::memcmp(impl.data, "GGUF", impl.size) != 0)
      impl.fail(Errc::bad_magic, "not a GGUF file (bad magic at byte 0)");
    c.need(4, "magic");
  }
  const uint32_t magic = c.read<uint32_t>("magic");
  if (magic != kMagic)
    impl.fail(Errc::bad_magic, "not a GGUF file: magic at byte 0 is not \"GGUF\"");
  const uint32_t version = c.read<uint32_t>("version");
  if ((version & 0xFFFF) == 0 && version != 0)
    impl.fail(Errc::unsupported, "version field at byte 4 = " + std::to_string(version) +
                                     " looks byte-swapped; big-endian GGUF files are not "
                                     "supported");
  if (version < 2 || version > 3)
    impl.fail(Errc::version_unsupported,
              "GGUF version " + std::to_string(version) +
                  " at byte 4; this build reads v2 and "
                  "v3" +
                  (version < 2 ? " (re-convert the model with a current llama.cpp)" : ""));
  impl.version = version;
  const uint64_t n_tensors = c.read<uint64_t>("tensor_count");
  const uint64_t n_kv = c.read<uint64_t>("metadata_kv_count");
  if (check_count(impl, c, n_kv, kMinKvBytes, "metadata_kv_count")) impl.kvs.reserve(size_t(n_kv));
  for (uint64_t i = 0; i < n_kv; ++i) parse_kv(impl, c, i);
  read_alignment(impl);
  if (check_count(impl, c, n_tensors, kMinTensorInfoBytes, "tensor_count"))
    impl.tensors.reserve(size_t(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) parse_tensor_info(impl, c, i);
  place_tensors(impl, c.pos());
}

}  // namespace kvzip::model::gguf
