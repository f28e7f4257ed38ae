// HDF5 export/import of a cache (spec "HDF5 layout"): every Meta entry becomes a root attribute
// (scalars, strings) or a root dataset (u32 arrays) under its own key; each layer is a group
// /layers/NNNN with head_rows, positions, k, v [, scores]. K/V are stored as f32, which holds
// every f16/bf16 value exactly, so export then import reproduces the .kvz bit for bit. Import
// rebuilds the Meta section and runs it through the same decoder as the .kvz reader. A q8/q4
// cache also carries its stored form per layer (channel scales, f16 rows as u16 bits, byte group
// parameters, codes); import takes the rows from those and recomputes k and v, so
// nothing is re-quantized.
// Export builds the file in memory (HDF5's core driver, no backing store) and hands the image to
// the atomic writer, so HDF5 itself never writes to disk: a full disk is the writer's clean io
// error, no HDF5 handle can be left half-closed by a failed flush (which can crash HDF5's
// cleanup at exit), and no partial file remains. The cost is one in-memory copy of the export.
#include "format/format.h"

#ifdef KVZIP_HDF5
#include <hdf5.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "common/atomic_file.h"
#include "format/detail/meta.h"
#include "format/detail/quant.h"
#endif

namespace kvzip::format {

#ifndef KVZIP_HDF5

bool hdf5_available() { return false; }
void export_hdf5(const CacheContents&, const std::string&, bool) {
  throw Error(Errc::unsupported,
              "this kvzip was built without HDF5 (install libhdf5-dev and rebuild)");
}
CacheContents import_hdf5(const std::string&) {
  throw Error(Errc::unsupported,
              "this kvzip was built without HDF5 (install libhdf5-dev and rebuild)");
}

#else

namespace {

using detail::MetaEntry;
using detail::MetaType;

constexpr const char* kLayoutAttr = "hdf5.layout";      // u64, 1 for this layout
constexpr const char* kScoresAttr = "hdf5.has_scores";  // u64, 0 or 1

// Owns one HDF5 identifier; closes it with the matching H5*close.
class Id {
 public:
  Id() = default;
  Id(hid_t id, herr_t (*close)(hid_t), const std::string& what) : id_(id), close_(close) {
    if (id < 0) throw Error(Errc::io, "HDF5: " + what + " failed");
  }
  Id(Id&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = -1; }
  Id& operator=(Id&& o) noexcept {
    std::swap(id_, o.id_);
    std::swap(close_, o.close_);
    return *this;
  }
  ~Id() {
    if (id_ >= 0 && close_) close_(id_);
  }
  operator hid_t() const { return id_; }

 private:
  hid_t id_ = -1;
  herr_t (*close_)(hid_t) = nullptr;
};

void check(herr_t rc, const std::string& what) {
  if (rc < 0) throw Error(Errc::io, "HDF5: " + what + " failed");
}

// HDF5 prints its error stack to stderr by default; every failure here becomes a kvzip::Error
// instead, so the printing is turned off (process-wide, as HDF5 offers no narrower switch).
void quiet() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

Id vl_string_type() {
  // A variable-length string type (what copying HDF5's C string type and resizing it gives).
  Id t(H5Tcreate(H5T_STRING, H5T_VARIABLE), H5Tclose, "string type");
  check(H5Tset_cset(t, H5T_CSET_UTF8), "string charset");
  return t;
}

Id scalar_space() { return Id(H5Screate(H5S_SCALAR), H5Sclose, "scalar dataspace"); }

Id simple_space(std::initializer_list<hsize_t> dims) {
  std::vector<hsize_t> d(dims);
  return Id(H5Screate_simple(static_cast<int>(d.size()), d.data(), nullptr), H5Sclose, "dataspace");
}

// ---- export ----

void write_attribute(hid_t loc, const MetaEntry& e) {
  Id space = scalar_space();
  if (e.type == MetaType::Str) {
    Id t = vl_string_type();
    Id a(H5Acreate2(loc, e.key.c_str(), t, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose,
         "attribute " + e.key);
    std::string s(e.value.begin(), e.value.end());
    const char* p = s.c_str();
    check(H5Awrite(a, t, &p), "writing attribute " + e.key);
    return;
  }
  hid_t file_type = e.type == MetaType::U64   ? H5T_STD_U64LE
                    : e.type == MetaType::I64 ? H5T_STD_I64LE
                                              : H5T_IEEE_F64LE;
  hid_t mem_type = e.type == MetaType::U64   ? H5T_NATIVE_UINT64
                   : e.type == MetaType::I64 ? H5T_NATIVE_INT64
                                             : H5T_NATIVE_DOUBLE;
  Id a(H5Acreate2(loc, e.key.c_str(), file_type, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose,
       "attribute " + e.key);
  check(H5Awrite(a, mem_type, e.value.data()), "writing attribute " + e.key);
}

void write_u64_attr(hid_t loc, const char* name, uint64_t v) {
  std::vector<uint8_t> bytes(8);
  std::memcpy(bytes.data(), &v, 8);
  write_attribute(loc, MetaEntry{name, MetaType::U64, bytes});
}

// 1-D or 2-D dataset; data may be null when a dimension is 0.
void write_dataset(hid_t loc, const std::string& name, hid_t file_type, hid_t mem_type,
                   const void* data, std::initializer_list<hsize_t> dims) {
  Id space = simple_space(dims);
  Id d(H5Dcreate2(loc, name.c_str(), file_type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
       H5Dclose, "dataset " + name);
  hsize_t n = 1;
  for (hsize_t x : dims) n *= x;
  if (n)
    check(H5Dwrite(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), "writing dataset " + name);
}

// Byte group parameters as the bytes the .kvz section holds: scale code, zero point.
std::vector<uint8_t> byte_params(const std::vector<uint16_t>& words) {
  std::vector<uint8_t> b(2 * words.size());
  for (size_t i = 0; i < words.size(); ++i) {
    b[2 * i] = static_cast<uint8_t>(words[i] & 0xff);
    b[2 * i + 1] = static_cast<uint8_t>(words[i] >> 8);
  }
  return b;
}

void write_quant(hid_t g, const char* prefix, const QuantRows& q, const CacheHeader& h,
                 hsize_t rows, hsize_t f16) {
  const hsize_t D = h.head_dim, groups = D / h.kv_group_size,
                bytes = D * dtype_bits(h.kv_dtype) / 8;
  const std::string p(prefix);
  rows -= f16;  // the quantized rows
  write_dataset(g, p + "_channel_scale", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, q.channel_scale.data(),
                {h.n_kv_heads, D});
  write_dataset(g, p + "_f16_rows", H5T_STD_U16LE, H5T_NATIVE_UINT16, q.dense.data(), {f16, D});
  // per group the scale code and the zero point, the file's bytes
  write_dataset(g, p + "_params", H5T_STD_U8LE, H5T_NATIVE_UINT8, byte_params(q.params).data(),
                {rows, groups, 2});
  write_dataset(g, p + "_codes", H5T_STD_U8LE, H5T_NATIVE_UINT8, q.codes.data(), {rows, bytes});
}

void write_layer(hid_t layers, uint32_t l, const LayerKv& layer, const CacheHeader& h,
                 bool scores) {
  const uint32_t head_dim = h.head_dim;
  char name[16];
  std::snprintf(name, sizeof name, "%04u", l);
  Id g(H5Gcreate2(layers, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose,
       "group layers/" + std::string(name));
  hsize_t rows = layer.positions.size();
  write_dataset(g, "head_rows", H5T_STD_U32LE, H5T_NATIVE_UINT32, layer.head_rows.data(),
                {layer.head_rows.size()});
  write_dataset(g, "positions", H5T_STD_U32LE, H5T_NATIVE_UINT32, layer.positions.data(), {rows});
  write_dataset(g, "k", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, layer.k.data(), {rows, head_dim});
  write_dataset(g, "v", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, layer.v.data(), {rows, head_dim});
  if (scores)
    write_dataset(g, "scores", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, layer.scores.data(), {rows});
  if (dtype_quantized(h.kv_dtype)) {
    const hsize_t f16 = f16_row_count(h, layer.positions);
    write_quant(g, "k", layer.qk, h, rows, f16);
    write_quant(g, "v", layer.qv, h, rows, f16);
  }
}

// The whole HDF5 file as bytes. Every identifier is an Id, so each is closed on every path.
std::vector<uint8_t> export_image(const CacheContents& c, const std::string& file) {
  uint64_t estimate = 1 << 20;  // grow the in-memory file in steps near its final size
  for (const LayerKv& l : c.layers)
    estimate += 4 * (l.k.size() + l.v.size() + 2 * l.positions.size());
  Id fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "file access properties");
  check(H5Pset_fapl_core(fapl, static_cast<size_t>(std::min<uint64_t>(estimate, 1ull << 30)),
                         /*backing_store=*/0),
        "in-memory file driver");
  Id fcpl(H5Pcreate(H5P_FILE_CREATE), H5Pclose, "file creation properties");
  // Attribute creation order keeps the parameters in their order across a round trip.
  check(H5Pset_attr_creation_order(fcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED),
        "creation order");
  Id f(H5Fcreate(file.c_str(), H5F_ACC_TRUNC, fcpl, fapl), H5Fclose,
       "creating " + file + " in memory");
  Id root(H5Gopen2(f, "/", H5P_DEFAULT), H5Gclose, "root group");
  write_u64_attr(root, kLayoutAttr, 1);
  write_u64_attr(root, kScoresAttr, c.has_scores ? 1 : 0);
  std::vector<uint8_t> meta = detail::encode_meta(c.header);
  for (const MetaEntry& e : detail::meta_entries(meta.data(), meta.size(), file)) {
    if (e.type == MetaType::U32Array)
      write_dataset(root, e.key, H5T_STD_U32LE, H5T_NATIVE_UINT32, e.value.data(),
                    {e.value.size() / 4});
    else write_attribute(root, e);
  }
  Id layers(H5Gcreate2(f, "layers", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose,
            "group layers");
  for (uint32_t l = 0; l < c.header.n_layers; ++l)
    write_layer(layers, l, c.layers[l], c.header, c.has_scores);
  check(H5Fflush(f, H5F_SCOPE_GLOBAL), "flushing " + file);
  const ssize_t size = H5Fget_file_image(f, nullptr, 0);
  if (size <= 0) throw Error(Errc::io, "HDF5: sizing the image of " + file + " failed");
  std::vector<uint8_t> image(static_cast<size_t>(size));
  if (H5Fget_file_image(f, image.data(), image.size()) != size)
    throw Error(Errc::io, "HDF5: copying the image of " + file + " failed");
  return image;
}

// ---- import ----

struct Importer {
  std::string file;
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(Errc::corrupt, "HDF5 file " + file + ": " + what);
  }
};

// Reads one root attribute as a Meta entry; integer keys take the type the Meta section needs.
MetaEntry read_attribute(hid_t root, const std::string& key, const Importer& im) {
  Id a(H5Aopen(root, key.c_str(), H5P_DEFAULT), H5Aclose, "opening attribute " + key);
  Id t(H5Aget_type(a), H5Tclose, "attribute type");
  Id space(H5Aget_space(a), H5Sclose, "attribute space");
  if (H5Sget_simple_extent_npoints(space) != 1) im.fail("attribute " + key + " is not a scalar");
  MetaEntry e{key, MetaType::U64, std::vector<uint8_t>(8)};
  switch (H5Tget_class(t)) {
    case H5T_INTEGER: {
      bool is_signed = H5Tget_sign(t) == H5T_SGN_2;
      int64_t sv = 0;
      uint64_t uv = 0;
      check(H5Aread(a, is_signed ? H5T_NATIVE_INT64 : H5T_NATIVE_UINT64,
                    is_signed ? static_cast<void*>(&sv) : &uv),
            "reading attribute " + key);
      if (key == "kvzip.created_unix") {
        e.type = MetaType::I64;
        if (!is_signed) sv = static_cast<int64_t>(uv);
        std::memcpy(e.value.data(), &sv, 8);
      } else {
        if (is_signed && sv < 0) im.fail("attribute " + key + " is negative");
        if (is_signed) uv = static_cast<uint64_t>(sv);
        std::memcpy(e.value.data(), &uv, 8);
      }
      return e;
    }
    case H5T_FLOAT: {
      double d;
      check(H5Aread(a, H5T_NATIVE_DOUBLE, &d), "reading attribute " + key);
      e.type = MetaType::F64;
      std::memcpy(e.value.data(), &d, 8);
      return e;
    }
    case H5T_STRING: {
      e.type = MetaType::Str;
      if (H5Tis_variable_str(t) > 0) {
        Id mt = vl_string_type();
        char* p = nullptr;
        check(H5Aread(a, mt, &p), "reading attribute " + key);
        std::string s = p ? p : "";
        H5free_memory(p);
        e.value.assign(s.begin(), s.end());
      } else {
        size_t n = H5Tget_size(t);
        std::vector<char> buf(n + 1, 0);
        Id mt(H5Tcopy(t), H5Tclose, "string type");
        check(H5Aread(a, mt, buf.data()), "reading attribute " + key);
        e.value.assign(buf.begin(), buf.begin() + static_cast<long>(std::strlen(buf.data())));
      }
      return e;
    }
    default: im.fail("attribute " + key + " is neither an integer, a float nor a string");
  }
}

herr_t collect_name(hid_t, const char* name, const H5A_info_t*, void* out) {
  static_cast<std::vector<std::string>*>(out)->push_back(name);
  return 0;
}

herr_t collect_link(hid_t, const char* name, const H5L_info_t*, void* out) {
  static_cast<std::vector<std::string>*>(out)->push_back(name);
  return 0;
}

// Reads a dataset that must have exactly the shape `dims`, converting to mem_type.
template <class T>
std::vector<T> read_dataset(hid_t loc, const std::string& name, hid_t mem_type,
                            std::vector<hsize_t> dims, const Importer& im) {
  if (H5Lexists(loc, name.c_str(), H5P_DEFAULT) <= 0) im.fail("dataset " + name + " is missing");
  Id d(H5Dopen2(loc, name.c_str(), H5P_DEFAULT), H5Dclose, "opening dataset " + name);
  Id space(H5Dget_space(d), H5Sclose, "dataset space");
  auto shape = [](const std::vector<hsize_t>& v) {
    std::string s = "(";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return s + ")";
  };
  int nd = H5Sget_simple_extent_ndims(space);
  std::vector<hsize_t> got(nd > 0 ? static_cast<size_t>(nd) : 0);
  if (nd < 0 || H5Sget_simple_extent_dims(space, got.data(), nullptr) < 0 || got != dims)
    im.fail("dataset " + name + " has shape " + shape(got) + ", expected " + shape(dims));
  uint64_t count = 1;
  for (hsize_t x : dims) count *= x;
  std::vector<T> out(count);
  if (count)
    check(H5Dread(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()),
          "reading dataset " + name);
  return out;
}

uint64_t dataset_length(hid_t loc, const std::string& name, const Importer& im) {
  Id d(H5Dopen2(loc, name.c_str(), H5P_DEFAULT), H5Dclose, "opening dataset " + name);
  Id space(H5Dget_space(d), H5Sclose, "dataset space");
  if (H5Sget_simple_extent_ndims(space) != 1)
    im.fail("dataset " + name + " is not one-dimensional");
  return static_cast<uint64_t>(H5Sget_simple_extent_npoints(space));
}

std::vector<MetaEntry> import_meta(hid_t root, const Importer& im) {
  std::vector<std::string> names;
  hsize_t idx = 0;
  if (H5Aiterate2(root, H5_INDEX_CRT_ORDER, H5_ITER_INC, &idx, collect_name, &names) < 0) {
    names.clear();  // no creation order tracked (a file made elsewhere): name order
    idx = 0;
    check(H5Aiterate2(root, H5_INDEX_NAME, H5_ITER_INC, &idx, collect_name, &names),
          "listing attributes");
  }
  std::vector<MetaEntry> entries;
  for (const std::string& key : names)
    if (key.rfind("hdf5.", 0) != 0) entries.push_back(read_attribute(root, key, im));
  std::vector<std::string> links;
  idx = 0;
  check(H5Literate(root, H5_INDEX_NAME, H5_ITER_INC, &idx, collect_link, &links),
        "listing datasets");
  for (const std::string& key : links) {
    if (key == "layers") continue;
    auto v =
        read_dataset<uint32_t>(root, key, H5T_NATIVE_UINT32, {dataset_length(root, key, im)}, im);
    MetaEntry e{key, MetaType::U32Array, std::vector<uint8_t>(v.size() * 4)};
    if (!v.empty()) std::memcpy(e.value.data(), v.data(), e.value.size());
    entries.push_back(std::move(e));
  }
  return entries;
}

uint64_t root_u64(hid_t root, const char* name, const Importer& im) {
  if (H5Aexists(root, name) <= 0)
    im.fail("root attribute " + std::string(name) + " is missing (not a kvzip export)");
  MetaEntry e = read_attribute(root, name, im);
  uint64_t v;
  std::memcpy(&v, e.value.data(), 8);
  return v;
}

CacheContents import_from(const std::string& file) {
  Importer im{file};
  struct stat st;
  if (::stat(file.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    throw Error(Errc::invalid_argument,
                file + " is a directory, not an HDF5 file; give a .h5 file");
  htri_t is = H5Fis_hdf5(file.c_str());
  if (is < 0) throw Error(Errc::not_found, "cannot open " + file);
  if (is == 0) throw Error(Errc::bad_magic, file + " is not an HDF5 file");
  Id f(H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose, "opening " + file);
  Id root(H5Gopen2(f, "/", H5P_DEFAULT), H5Gclose, "root group");
  uint64_t layout = root_u64(root, kLayoutAttr, im);
  if (layout != 1)
    throw Error(Errc::version_unsupported, "HDF5 file " + file + ": hdf5.layout " +
                                               std::to_string(layout) +
                                               "; this build reads layout 1");
  CacheContents c;
  c.has_scores = root_u64(root, kScoresAttr, im) == 1;
  std::vector<uint8_t> meta = detail::encode_meta_entries(import_meta(root, im));
  c.header =
      detail::decode_meta(meta.data(), meta.size(), "HDF5 file " + file + " (root attributes)");
  const CacheHeader& h = c.header;
  if (H5Lexists(root, "layers", H5P_DEFAULT) <= 0) im.fail("group /layers is missing");
  Id layers(H5Gopen2(root, "layers", H5P_DEFAULT), H5Gclose, "group layers");
  for (uint32_t l = 0; l < h.n_layers; ++l) {
    char name[16];
    std::snprintf(name, sizeof name, "%04u", l);
    if (H5Lexists(layers, name, H5P_DEFAULT) <= 0)
      im.fail("group /layers/" + std::string(name) + " is missing");
    Id g(H5Gopen2(layers, name, H5P_DEFAULT), H5Gclose, "group layers/" + std::string(name));
    LayerKv& layer = c.layers.emplace_back();
    layer.head_rows = read_dataset<uint32_t>(g, "head_rows", H5T_NATIVE_UINT32, {h.n_kv_heads}, im);
    uint64_t rows = 0;
    for (uint32_t r : layer.head_rows) {
      if (r > h.logical_length())
        im.fail("layer " + std::to_string(l) + ": head_rows exceeds the logical length");
      rows += r;
    }
    layer.positions = read_dataset<uint32_t>(g, "positions", H5T_NATIVE_UINT32, {rows}, im);
    layer.k = read_dataset<float>(g, "k", H5T_NATIVE_FLOAT, {rows, h.head_dim}, im);
    layer.v = read_dataset<float>(g, "v", H5T_NATIVE_FLOAT, {rows, h.head_dim}, im);
    if (c.has_scores) layer.scores = read_dataset<float>(g, "scores", H5T_NATIVE_FLOAT, {rows}, im);
    if (dtype_quantized(h.kv_dtype)) {  // the stored form is the truth; k and v follow from it
      const hsize_t D = h.head_dim, groups = D / h.kv_group_size,
                    bytes = D * dtype_bits(h.kv_dtype) / 8;
      const uint64_t f16 = f16_row_count(h, layer.positions), quant = rows - f16;
      for (auto [p, q] : {std::pair{"k", &layer.qk}, std::pair{"v", &layer.qv}}) {
        const std::string s(p);
        q->channel_scale =
            read_dataset<float>(g, s + "_channel_scale", H5T_NATIVE_FLOAT, {h.n_kv_heads, D}, im);
        q->dense = read_dataset<uint16_t>(g, s + "_f16_rows", H5T_NATIVE_UINT16, {f16, D}, im);
        // (quant, groups, 2) bytes: scale code, zero point
        const auto b =
            read_dataset<uint8_t>(g, s + "_params", H5T_NATIVE_UINT8, {quant, groups, 2}, im);
        q->params.resize(b.size() / 2);
        for (size_t i = 0; i < q->params.size(); ++i)
          q->params[i] = static_cast<uint16_t>(b[2 * i] | b[2 * i + 1] << 8);
        q->codes = read_dataset<uint8_t>(g, s + "_codes", H5T_NATIVE_UINT8, {quant, bytes}, im);
      }
      try {
        detail::validate_quant(h, layer, "layer " + std::to_string(l));
      } catch (const Error& e) {
        im.fail(e.what());
      }
      dequantize_rows(h, layer.head_rows, layer.positions, layer.qk, layer.k);
      dequantize_rows(h, layer.head_rows, layer.positions, layer.qv, layer.v);
    }
  }
  try {
    validate(c);
  } catch (const Error& e) {
    im.fail(e.what());
  }
  return c;
}

}  // namespace

bool hdf5_available() { return true; }

void export_hdf5(const CacheContents& contents, const std::string& path, bool force) {
  validate(contents);
  kvzip::check_writable(path, force);  // before the image, which may be large, is built
  quiet();
  const std::vector<uint8_t> image = export_image(contents, path);
  kvzip::write_file_atomically(
      path, force, std::string_view(reinterpret_cast<const char*>(image.data()), image.size()));
}

CacheContents import_hdf5(const std::string& path) {
  quiet();
  return import_from(path);
}

#endif

}  // namespace kvzip::format
