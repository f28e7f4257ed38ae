// CacheReader: mapping a file (or borrowing a memory image), then the accessors over what
// Impl::parse proved valid. K/V sections are checksummed lazily per OpenOptions::verify; the
// per-section flag is atomic so concurrent readers of different layers stay safe.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "format/detail/codec.h"
#include "format/detail/dtype.h"
#include "format/detail/quant.h"
#include "format/detail/reader_impl.h"

namespace kvzip::format {

namespace detail {
std::string hex64(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}
}  // namespace detail

CacheReader::Impl::~Impl() {
  if (map) ::munmap(map, map_len);
  if (fd >= 0) ::close(fd);
}

void CacheReader::Impl::check_checksum(size_t i) const {
  if (checked[i].load(std::memory_order_acquire)) return;
  confirm_checksum(i, detail::xxh64(stored(i), entries[i].stored));
}

void CacheReader::Impl::read_stored(size_t i, uint64_t at, uint64_t n, void* dst) const {
  if (n == 0) return;  // dst may be null for an empty layer
  if (fd < 0) {
    std::memcpy(dst, stored(i) + at, n);
    return;
  }
  auto* out = static_cast<uint8_t*>(dst);
  uint64_t pos = data_offset + entries[i].offset + at;
  while (n > 0) {
    ssize_t got = ::pread(fd, out, n, static_cast<off_t>(pos));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0)
      throw Error(Errc::io,
                  label(i) + ": reading " + std::to_string(n) + " bytes at " + std::to_string(pos) +
                      " failed" +
                      (got < 0 ? std::string(": ") + std::strerror(errno) : " (file shrank)"));
    out += got;
    pos += static_cast<uint64_t>(got);
    n -= static_cast<uint64_t>(got);
  }
}

void CacheReader::Impl::confirm_checksum(size_t i, uint64_t got) const {
  const Entry& s = entries[i];
  if (got != s.checksum)
    throw Error(Errc::checksum_mismatch,
                label(i) + ": checksum mismatch: stored xxh64 " + detail::hex64(s.checksum) +
                    ", data hashes to " + detail::hex64(got) +
                    "; the section is damaged (re-create or re-copy the file)");
  checked[i].store(1, std::memory_order_release);
}

static bool all_zero(const uint8_t* p, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i)
    if (p[i]) return false;
  return true;
}

void CacheReader::Impl::check_padding() const {
  uint64_t table_end = detail::kPreambleSize + entries.size() * detail::kEntrySize;
  if (!all_zero(base + table_end, data_offset - table_end))
    throw Error(Errc::corrupt,
                name + ": non-zero padding between the section table and Data_Offset");
  for (size_t i = 0; i < entries.size(); ++i) {
    uint64_t pad = *detail::checked_align(entries[i].stored) - entries[i].stored;
    if (!all_zero(stored(i) + entries[i].stored, pad))
      throw Error(Errc::corrupt, label(i) + ": non-zero padding after the section's stored bytes");
  }
}

std::vector<uint8_t> CacheReader::Impl::decode_small(size_t i) const {
  check_checksum(i);
  const Entry& s = entries[i];
  if (s.codec == static_cast<uint32_t>(Codec::Zstd))
    return detail::zstd_decode(stored(i), s.stored, s.raw, label(i));
  return std::vector<uint8_t>(stored(i), stored(i) + s.stored);
}

void CacheReader::Impl::read_quant(uint32_t layer, LayerKv& out) const {
  const size_t i = kv[layer];
  const Entry& s = entries[i];
  const uint32_t* rows = head_rows.data() + uint64_t{layer} * header.n_kv_heads;
  out.head_rows.assign(rows, rows + header.n_kv_heads);
  out.positions.assign(positions.begin() + layer_start[layer],
                       positions.begin() + layer_start[layer + 1]);
  const bool hash =
      options.verify != Verify::Metadata && !checked[i].load(std::memory_order_acquire);
  std::vector<uint8_t> raw(s.raw);  // Raw_Size was proved at open to be the layout's size
  if (s.codec == static_cast<uint32_t>(Codec::Zstd)) {
    if (hash) check_checksum(i);
    detail::zstd_decode_into(stored(i), s.stored, raw.data(), s.raw, label(i));
  } else {
    read_stored(i, 0, raw.size(), raw.data());
    if (hash) confirm_checksum(i, detail::xxh64(raw.data(), raw.size()));
  }
  detail::parse_quant_section(header, raw.data(), raw.size(), out, label(i));
}

void CacheReader::Impl::decode_kv(uint32_t layer, float* k, float* v, size_t n) const {
  const size_t i = kv[layer];
  const Entry& s = entries[i];
  const DType t = header.kv_dtype;
  if (dtype_quantized(t)) {
    LayerKv q;
    read_quant(layer, q);
    dequantize_rows(header, q.head_rows, q.positions, q.qk, {k, n});
    dequantize_rows(header, q.head_rows, q.positions, q.qv, {v, n});
    if (options.verify != Verify::Metadata) check_finite(layer, k, v, n);
    return;
  }
  const size_t half = n * dtype_size(t);
  const bool hash =
      options.verify != Verify::Metadata && !checked[i].load(std::memory_order_acquire);
  detail::HashSink h;
  if (s.codec == static_cast<uint32_t>(Codec::Zstd)) {
    if (hash) check_checksum(i);
    std::vector<uint8_t> raw(s.raw);  // Raw_Size was proved to be 2 * half at open
    detail::zstd_decode_into(stored(i), s.stored, raw.data(), s.raw, label(i));
    detail::decode_values(t, raw.data(), n, k);
    detail::decode_values(t, raw.data() + half, n, v);
  } else if (t == DType::F32) {  // straight into the caller's buffers, hashed there
    read_stored(i, 0, half, k);
    read_stored(i, half, half, v);
    if (hash) {
      h.write(k, half);
      h.write(v, half);
      confirm_checksum(i, h.digest());
    }
  } else {
    std::vector<uint8_t> raw(2 * half);
    read_stored(i, 0, raw.size(), raw.data());
    if (hash) {
      h.write(raw.data(), raw.size());
      confirm_checksum(i, h.digest());
    }
    detail::decode_values(t, raw.data(), n, k);
    detail::decode_values(t, raw.data() + half, n, v);
  }
  if (options.verify != Verify::Metadata) check_finite(layer, k, v, n);
}

// Non-finite test on the bits (exponent all ones), OR-reduced per block so the scan vectorises;
// only a block that holds one is searched value by value.
static size_t first_non_finite(const float* x, size_t n) {
  constexpr size_t kBlock = 1024;
  for (size_t b = 0; b < n; b += kBlock) {
    const size_t e = std::min(n, b + kBlock);
    uint32_t bad = 0;
    for (size_t i = b; i < e; ++i) {
      uint32_t bits;
      std::memcpy(&bits, x + i, 4);
      bad |= (bits & 0x7f800000u) == 0x7f800000u;
    }
    if (!bad) continue;
    for (size_t i = b; i < e; ++i)
      if (!std::isfinite(x[i])) return i;
  }
  return n;
}

void CacheReader::Impl::check_finite(uint32_t layer, const float* k, const float* v,
                                     size_t n) const {
  if (finite[layer].load(std::memory_order_acquire)) return;
  for (int which = 0; which < 2; ++which) {
    const float* x = which == 0 ? k : v;
    const size_t at = first_non_finite(x, n);
    if (at == n) continue;
    const uint64_t row = at / header.head_dim;  // row within the layer, head-major
    uint32_t head = 0;
    uint64_t first = 0;
    const uint32_t* rows = head_rows.data() + uint64_t{layer} * header.n_kv_heads;
    while (head + 1 < header.n_kv_heads && row >= first + rows[head]) first += rows[head++];
    const uint32_t pos = positions[layer_start[layer] + row];
    throw Error(Errc::corrupt,
                label(kv[layer]) + ": layer " + std::to_string(layer) + " head " +
                    std::to_string(head) + " row " + std::to_string(row - first) + " (position " +
                    std::to_string(pos) + ") holds a " + (std::isnan(x[at]) ? "NaN" : "infinite") +
                    " " + (which == 0 ? "key" : "value") +
                    "; the cache is damaged or was written from a broken model (re-create it)");
  }
  finite[layer].store(1, std::memory_order_release);
}

void CacheReader::Impl::verify_all() const {
  for (size_t i = 0; i < entries.size(); ++i) check_checksum(i);
  check_padding();
  std::vector<float> k, v;
  for (uint32_t l = 0; l < header.n_layers; ++l) {
    const size_t n = static_cast<size_t>((layer_start[l + 1] - layer_start[l]) * header.head_dim);
    k.resize(n);
    v.resize(n);
    decode_kv(l, k.data(), v.data(), n);
    check_finite(l, k.data(), v.data(), n);  // also under Verify::Metadata, when verify() is asked
  }
}

CacheReader::CacheReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CacheReader::CacheReader(CacheReader&&) noexcept = default;
CacheReader& CacheReader::operator=(CacheReader&&) noexcept = default;
CacheReader::~CacheReader() = default;

CacheReader CacheReader::open(const std::string& path, const OpenOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->name = path;
  impl->options = options;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) throw Error(Errc::not_found, "cache file " + path + " does not exist");
    throw Error(Errc::io, "cannot open cache file " + path + ": " + std::strerror(err));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    if (S_ISDIR(st.st_mode))
      throw Error(Errc::invalid_argument,
                  path + " is a directory, not a cache file; give a .kvz file");
    throw Error(Errc::io, "cache file " + path + " is not a regular file");
  }
  impl->fd = fd;  // closed by ~Impl from here on
  impl->size = static_cast<uint64_t>(st.st_size);
  if (impl->size > 0) {
    void* m = ::mmap(nullptr, impl->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED)
      throw Error(Errc::io, "cannot map cache file " + path + ": " + std::strerror(errno));
    impl->map = m;
    impl->map_len = impl->size;
    impl->base = static_cast<const uint8_t*>(m);
  }
  impl->parse();
  return CacheReader(std::move(impl));
}

CacheReader CacheReader::open_memory(std::span<const uint8_t> bytes, const OpenOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->name = "<memory>";
  impl->options = options;
  impl->base = bytes.data();
  impl->size = bytes.size();
  impl->parse();
  return CacheReader(std::move(impl));
}

uint16_t CacheReader::version_major() const { return impl_->major; }
uint16_t CacheReader::version_minor() const { return impl_->minor; }
uint64_t CacheReader::file_size() const { return impl_->size; }
const CacheHeader& CacheReader::header() const { return impl_->header; }
bool CacheReader::has_scores() const { return impl_->scores_entry != Impl::kNone; }

static void check_layer(const CacheReader::Impl& r, uint32_t layer) {
  if (layer >= r.header.n_layers)
    throw Error(Errc::invalid_argument, "layer " + std::to_string(layer) +
                                            " out of range: the cache has " +
                                            std::to_string(r.header.n_layers) + " layers");
}

std::span<const uint32_t> CacheReader::head_rows(uint32_t layer) const {
  check_layer(*impl_, layer);
  return {impl_->head_rows.data() + uint64_t{layer} * impl_->header.n_kv_heads,
          impl_->header.n_kv_heads};
}

uint64_t CacheReader::layer_rows(uint32_t layer) const {
  check_layer(*impl_, layer);
  return impl_->layer_start[layer + 1] - impl_->layer_start[layer];
}

std::span<const uint32_t> CacheReader::positions(uint32_t layer) const {
  uint64_t n = layer_rows(layer);  // checks the layer first
  return {impl_->positions.data() + impl_->layer_start[layer], n};
}

std::span<const float> CacheReader::scores(uint32_t layer) const {
  uint64_t n = layer_rows(layer);
  if (!has_scores()) return {};
  return {impl_->scores.data() + impl_->layer_start[layer], n};
}

std::optional<KvView> CacheReader::kv_view(uint32_t layer) const {
  check_layer(*impl_, layer);
  size_t i = impl_->kv[layer];
  const Entry& s = impl_->entries[i];
  const uint8_t* p = impl_->stored(i);
  if (impl_->header.kv_dtype != DType::F32 || s.codec != static_cast<uint32_t>(Codec::None) ||
      reinterpret_cast<uintptr_t>(p) % alignof(float) != 0)
    return std::nullopt;
#ifdef MADV_POPULATE_READ
  if (impl_->map && s.stored > 0)  // map the pages in one call instead of one fault per page
    ::madvise(const_cast<uint8_t*>(p), s.stored, MADV_POPULATE_READ);  // best effort
#endif
  size_t n = static_cast<size_t>(layer_rows(layer) * impl_->header.head_dim);
  const float* f = reinterpret_cast<const float*>(p);
  if (impl_->options.verify != Verify::Metadata) {
    impl_->check_checksum(i);
    impl_->check_finite(layer, f, f + n, n);
  }
  return KvView{{f, n}, {f + n, n}};
}

void CacheReader::read_kv(uint32_t layer, std::span<float> k, std::span<float> v) const {
  check_layer(*impl_, layer);
  size_t n = static_cast<size_t>(layer_rows(layer) * impl_->header.head_dim);
  if (k.size() != n || v.size() != n)
    throw Error(Errc::invalid_argument, "read_kv layer " + std::to_string(layer) +
                                            ": buffers hold " + std::to_string(k.size()) + " / " +
                                            std::to_string(v.size()) +
                                            " floats, need rows * head_dim = " + std::to_string(n));
  impl_->decode_kv(layer, k.data(), v.data(), n);
}

LayerKv CacheReader::read_quant_layer(uint32_t layer) const {
  check_layer(*impl_, layer);
  const CacheHeader& h = impl_->header;
  if (!dtype_quantized(h.kv_dtype))
    throw Error(Errc::invalid_argument, impl_->name + ": read_quant_layer: the cache stores " +
                                            dtype_name(h.kv_dtype) + " rows, not q8/q4");
  LayerKv out;
  impl_->read_quant(layer, out);
  if (impl_->options.verify != Verify::Metadata &&
      !impl_->finite[layer].load(std::memory_order_acquire)) {
    if (detail::quant_values_bounded(h, out)) {
      impl_->finite[layer].store(1, std::memory_order_release);
    } else {  // rare: large scales; the exact check needs the values
      const size_t n = out.positions.size() * size_t{h.head_dim};
      std::vector<float> k(n), v(n);
      dequantize_rows(h, out.head_rows, out.positions, out.qk, k);
      dequantize_rows(h, out.head_rows, out.positions, out.qv, v);
      impl_->check_finite(layer, k.data(), v.data(), n);
    }
  }
  return out;
}

LayerKv CacheReader::load_layer(uint32_t layer) const {
  LayerKv out;
  auto rows = head_rows(layer);
  out.head_rows.assign(rows.begin(), rows.end());
  auto pos = positions(layer);
  out.positions.assign(pos.begin(), pos.end());
  auto sc = scores(layer);
  out.scores.assign(sc.begin(), sc.end());
  size_t n = static_cast<size_t>(layer_rows(layer) * impl_->header.head_dim);
  out.k.resize(n);
  out.v.resize(n);
  if (dtype_quantized(impl_->header.kv_dtype)) {  // one read: the stored rows and their values
    impl_->read_quant(layer, out);
    dequantize_rows(impl_->header, out.head_rows, out.positions, out.qk, out.k);
    dequantize_rows(impl_->header, out.head_rows, out.positions, out.qv, out.v);
    if (impl_->options.verify != Verify::Metadata)
      impl_->check_finite(layer, out.k.data(), out.v.data(), n);
    return out;
  }
  read_kv(layer, out.k, out.v);
  return out;
}

CacheContents CacheReader::load() const {
  CacheContents c;
  c.header = impl_->header;
  c.has_scores = has_scores();
  for (uint32_t l = 0; l < impl_->header.n_layers; ++l) c.layers.push_back(load_layer(l));
  return c;
}

void CacheReader::verify() const { impl_->verify_all(); }

std::vector<SectionInfo> CacheReader::sections() const {
  std::vector<SectionInfo> out;
  for (size_t i = 0; i < impl_->entries.size(); ++i) {
    const Entry& s = impl_->entries[i];
    SectionInfo info;
    info.kind = s.kind;
    info.name = detail::kind_name(s.kind);
    info.layer = s.layer;
    info.optional = s.flags & detail::kFlagOptional;
    info.codec = static_cast<Codec>(s.codec);
    info.offset = s.offset;
    info.stored_size = s.stored;
    info.raw_size = s.raw;
    info.checksum = s.checksum;
    info.status = impl_->checked[i].load() ? ChecksumStatus::Ok : ChecksumStatus::Unchecked;
    out.push_back(std::move(info));
  }
  return out;
}

static std::string describe_fp(const ModelFingerprint& f) {
  return "arch=" + f.arch + " name='" + f.name + "' tokenizer=" + detail::hex64(f.tokenizer_hash) +
         " weights=" + detail::hex64(f.weights_hash);
}

bool CacheReader::check_model(const ModelFingerprint& loaded, bool force) const {
  const ModelFingerprint& mine = impl_->header.model;
  if (mine.same_model(loaded)) return true;
  if (force) return false;
  throw Error(Errc::model_mismatch, impl_->name + ": cache was written by model " +
                                        describe_fp(mine) + " but the loaded model is " +
                                        describe_fp(loaded) +
                                        "; use the same model, or load it anyway (option force)");
}

}  // namespace kvzip::format
