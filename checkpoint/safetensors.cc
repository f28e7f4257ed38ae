// safetensors::File: storage (mmap or owned buffer), header parsing with nlohmann::json and the
// validation listed in safetensors.h. The header is parsed once at open; nothing is read lazily.
#include "checkpoint/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "checkpoint/detail/mapped_file.h"
#include "common/error.h"

namespace kvzip::model::safetensors {
namespace {

struct DtypeInfo {
  Dtype dtype;
  const char* name;
  uint32_t size;
};
constexpr DtypeInfo kDtypes[] = {
    {Dtype::BOOL, "BOOL", 1},       {Dtype::U8, "U8", 1},           {Dtype::I8, "I8", 1},
    {Dtype::F8_E5M2, "F8_E5M2", 1}, {Dtype::F8_E4M3, "F8_E4M3", 1}, {Dtype::F8_E8M0, "F8_E8M0", 1},
    {Dtype::I16, "I16", 2},         {Dtype::U16, "U16", 2},         {Dtype::F16, "F16", 2},
    {Dtype::BF16, "BF16", 2},       {Dtype::I32, "I32", 4},         {Dtype::U32, "U32", 4},
    {Dtype::F32, "F32", 4},         {Dtype::C64, "C64", 8},         {Dtype::F64, "F64", 8},
    {Dtype::I64, "I64", 8},         {Dtype::U64, "U64", 8},
};

const DtypeInfo& info(Dtype d) {
  for (const DtypeInfo& i : kDtypes)
    if (i.dtype == d) return i;
  throw Error(Errc::internal, "safetensors: dtype id " + std::to_string(int(d)) + " has no entry");
}

// The format caps the header at 100 MB; a larger length is a damaged or foreign file.
constexpr uint64_t kMaxHeader = 100ull << 20;

}  // namespace

const char* dtype_name(Dtype d) { return info(d).name; }
uint32_t dtype_size(Dtype d) { return info(d).size; }

std::optional<kernels::quant::GgmlType> ggml_type(Dtype d) {
  switch (d) {
    case Dtype::F32: return kernels::quant::GgmlType::F32;
    case Dtype::F16: return kernels::quant::GgmlType::F16;
    case Dtype::BF16: return kernels::quant::GgmlType::BF16;
    default: return std::nullopt;
  }
}

uint64_t TensorInfo::n_elements() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

std::string TensorInfo::shape_string() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

struct File::Impl : detail::NamedImage {
  using NamedImage::NamedImage;
  uint64_t data_offset = 0;
  std::vector<TensorInfo> tensors;
  std::vector<std::pair<std::string, std::string>> metadata;

  [[noreturn]] void fail(Errc code, const std::string& what) const {
    throw Error(code, "safetensors '" + source + "': " + what);
  }
  void parse();
  TensorInfo parse_entry(const std::string& name, const nlohmann::json& e) const;
};

namespace {

std::string dump_short(const nlohmann::json& j) {
  std::string s = j.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

}  // namespace

TensorInfo File::Impl::parse_entry(const std::string& name, const nlohmann::json& e) const {
  const std::string where = "tensor '" + name + "'";
  if (!e.is_object()) fail(Errc::corrupt, where + " is " + dump_short(e) + ", expected an object");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!e.contains(key)) fail(Errc::corrupt, where + " has no \"" + key + "\"");
  TensorInfo t;
  t.name = name;
  const nlohmann::json& dt = e["dtype"];
  if (!dt.is_string())
    fail(Errc::corrupt, where + ": dtype is " + dump_short(dt) + ", expected a string");
  const std::string dts = dt.get<std::string>();
  const DtypeInfo* di = nullptr;
  for (const DtypeInfo& i : kDtypes)
    if (dts == i.name) di = &i;
  if (!di)
    fail(Errc::unsupported, where + " has dtype '" + dts +
                                "', which kvzip does not know (known: BOOL U8 I8 F8_E5M2 F8_E4M3 "
                                "F8_E8M0 I16 U16 F16 BF16 I32 U32 F32 C64 F64 I64 U64)");
  t.dtype = di->dtype;
  const nlohmann::json& sh = e["shape"];
  if (!sh.is_array())
    fail(Errc::corrupt, where + ": shape is " + dump_short(sh) + ", expected an array");
  uint64_t elems = 1;
  for (const nlohmann::json& d : sh) {
    if (!d.is_number_unsigned())
      fail(Errc::corrupt,
           where + ": shape " + dump_short(sh) + " has an entry that is not an unsigned integer");
    const uint64_t v = d.get<uint64_t>();
    if (v != 0 && elems > (UINT64_MAX / di->size) / v)
      fail(Errc::corrupt, where + ": shape " + dump_short(sh) + " overflows 64 bits of bytes");
    elems *= v;
    t.shape.push_back(v);
  }
  const nlohmann::json& off = e["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
      !off[1].is_number_unsigned())
    fail(Errc::corrupt, where + ": data_offsets is " + dump_short(off) + ", expected [begin, end]");
  const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
  if (end < begin)
    fail(Errc::corrupt, where + ": data_offsets [" + std::to_string(begin) + ", " +
                            std::to_string(end) + "] end before begin");
  const uint64_t want = elems * di->size;
  if (end - begin != want)
    fail(Errc::corrupt, where + " (" + dts + " " + t.shape_string() + ") needs " +
                            std::to_string(want) + " bytes but data_offsets [" +
                            std::to_string(begin) + ", " + std::to_string(end) + "] span " +
                            std::to_string(end - begin));
  const uint64_t data_bytes = size - data_offset;
  if (end > data_bytes)
    fail(Errc::truncated, where + " needs bytes [" + std::to_string(begin) + ", " +
                              std::to_string(end) + ") of the data section, which has only " +
                              std::to_string(data_bytes) + " bytes (file size " +
                              std::to_string(size) + "); the file is truncated");
  t.offset = data_offset + begin;
  t.nbytes = want;
  t.data = data + t.offset;
  return t;
}

void File::Impl::parse() {
  if (size < 8)
    fail(Errc::truncated,
         "file has " + std::to_string(size) + " bytes, less than the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | data[i];  // little-endian
  if (n > kMaxHeader)
    fail(Errc::corrupt, "header length " + std::to_string(n) + " exceeds the format's limit of " +
                            std::to_string(kMaxHeader) + " bytes; not a safetensors file?");
  if (n > size - 8)
    fail(Errc::truncated, "header length " + std::to_string(n) +
                              " runs past the end of the file (" + std::to_string(size) +
                              " bytes)");
  data_offset = 8 + n;
  const char* h = reinterpret_cast<const char*>(data + 8);
  if (n == 0 || h[0] != '{')
    fail(Errc::corrupt, "header does not start with '{'; not a safetensors file?");
  // nlohmann keeps the last of duplicate keys; the format forbids them, so catch them here.
  std::set<std::string> seen;
  std::string dup;
  auto cb = [&](int depth, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
    if (depth == 1 && ev == nlohmann::json::parse_event_t::key && dup.empty()) {
      const std::string k = parsed.get<std::string>();
      if (!seen.insert(k).second) dup = k;
    }
    return true;
  };
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(h, h + n, cb);
  } catch (const nlohmann::json::exception& e) {
    fail(Errc::corrupt, std::string("header JSON is malformed: ") + e.what());
  }
  if (!header.is_object()) fail(Errc::corrupt, "header is not a JSON object");
  if (!dup.empty()) fail(Errc::corrupt, "header names '" + dup + "' twice");
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it.value().is_object()) fail(Errc::corrupt, "__metadata__ is not an object");
      for (auto m = it.value().begin(); m != it.value().end(); ++m) {
        if (!m.value().is_string())
          fail(Errc::corrupt, "__metadata__ entry '" + m.key() + "' is not a string");
        metadata.emplace_back(m.key(), m.value().get<std::string>());
      }
      continue;
    }
    tensors.push_back(parse_entry(it.key(), it.value()));
  }
  // nlohmann's object is a std::map, so `tensors` is already in name order. Overlap check:
  std::vector<const TensorInfo*> by_offset;
  for (const TensorInfo& t : tensors)
    if (t.nbytes) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i)
    if (by_offset[i]->offset < by_offset[i - 1]->offset + by_offset[i - 1]->nbytes)
      fail(Errc::corrupt, "tensors '" + by_offset[i - 1]->name + "' and '" + by_offset[i]->name +
                              "' overlap in the data section");
}

File::File(std::string source, detail::FileImage&& image)
    : impl_(new Impl(std::move(source), std::move(image)), [](Impl* p) { delete p; }) {
  impl_->parse();
}

File File::open(const std::string& path) {
  return File(path, detail::FileImage::map(path, "safetensors '" + path + "': "));
}

File File::from_bytes(std::vector<uint8_t> bytes, std::string source) {
  return File(std::move(source), detail::FileImage(std::move(bytes)));
}

const std::string& File::source() const { return impl_->source; }
uint64_t File::size() const { return impl_->size; }
uint64_t File::data_offset() const { return impl_->data_offset; }
const std::vector<TensorInfo>& File::tensors() const { return impl_->tensors; }
const std::vector<std::pair<std::string, std::string>>& File::metadata() const {
  return impl_->metadata;
}

const TensorInfo* File::find(std::string_view name) const {
  auto it = std::lower_bound(impl_->tensors.begin(), impl_->tensors.end(), name,
                             [](const TensorInfo& t, std::string_view n) { return t.name < n; });
  return it != impl_->tensors.end() && it->name == name ? &*it : nullptr;
}

}  // namespace kvzip::model::safetensors
