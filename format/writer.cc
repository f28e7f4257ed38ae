// The one .kvz writer path (spec "Overview"): plan every section (serialise the small ones,
// compress what the options ask for, checksum the stored bytes), lay them out 4 KiB-aligned so
// they tile the data area, then stream preamble, section table, and sections into a Sink.
// Raw K/V sections are streamed twice (checksum, then write) instead of buffered: a cache can be
// large, and xxh64 runs far faster than storage.
#include <algorithm>
#include <cstring>

#include "common/atomic_file.h"
#include "format/detail/codec.h"
#include "format/detail/dtype.h"
#include "format/detail/layout.h"
#include "format/detail/meta.h"
#include "format/detail/quant.h"

namespace kvzip::format {
namespace {

using namespace detail;

struct Planned {
  Kind kind = Kind::Meta;
  uint32_t layer = 0;
  bool optional = false;
  Codec codec = Codec::None;
  uint64_t raw_size = 0, stored_size = 0, checksum = 0, offset = 0;
  std::vector<uint8_t> raw;     // serialised small section (empty for K/V)
  std::vector<uint8_t> stored;  // the zstd frame when codec is zstd
  const LayerKv* kv = nullptr;  // K/V source for Kind::Kv
};

const uint8_t kZeros[kAlign] = {};

std::vector<uint8_t> encode_index(const CacheContents& c) {
  std::vector<uint8_t> out(static_cast<size_t>(c.header.n_layers) * c.header.n_kv_heads * 16);
  uint8_t* p = out.data();
  for (const LayerKv& layer : c.layers) {
    uint64_t start = 0;
    for (uint32_t rows : layer.head_rows) {
      store_u64(p, rows);
      store_u64(p + 8, start);
      start += rows;
      p += 16;
    }
  }
  return out;
}

template <class T>
std::vector<uint8_t> concat_layers(const CacheContents& c, std::vector<T> LayerKv::*field) {
  std::vector<uint8_t> out;
  for (const LayerKv& layer : c.layers) {
    const std::vector<T>& v = layer.*field;
    auto* b = reinterpret_cast<const uint8_t*>(v.data());
    out.insert(out.end(), b, b + v.size() * sizeof(T));
  }
  return out;
}

// K rows then V rows of one layer, converted to the storage dtype in bounded chunks.
void emit_kv(const LayerKv& layer, DType dtype, Sink& sink) {
  for (const std::vector<float>* rows : {&layer.k, &layer.v}) {
    if (dtype == DType::F32) {
      if (!rows->empty()) sink.write(rows->data(), rows->size() * 4);
      continue;
    }
    constexpr size_t kChunk = 16384;
    uint8_t buf[kChunk * 4];
    for (size_t at = 0; at < rows->size(); at += kChunk) {
      size_t n = std::min(kChunk, rows->size() - at);
      encode_values(dtype, rows->data() + at, n, buf);
      sink.write(buf, n * dtype_size(dtype));
    }
  }
}

void emit_raw(const Planned& s, const CacheHeader& h, Sink& sink) {
  if (s.kind == Kind::Kv && dtype_quantized(h.kv_dtype)) emit_quant_section(h, *s.kv, sink);
  else if (s.kind == Kind::Kv) emit_kv(*s.kv, h.kv_dtype, sink);
  else if (!s.raw.empty()) sink.write(s.raw.data(), s.raw.size());
}

void encode_section(Planned& s, const CacheHeader& h, const WriteOptions& o) {
  if (s.codec == Codec::Zstd) {
    ZstdSink z(o.zstd_level, s.raw_size);
    emit_raw(s, h, z);
    s.stored = z.finish();
    s.stored_size = s.stored.size();
    s.checksum = xxh64(s.stored.data(), s.stored.size());
    return;
  }
  HashSink hs;
  emit_raw(s, h, hs);
  KVZIP_ASSERT(hs.size() == s.raw_size);
  s.stored_size = s.raw_size;
  s.checksum = hs.digest();
}

std::vector<Planned> plan(const CacheContents& c, const WriteOptions& o) {
  bool zstd = o.zstd_level > 0;
  std::vector<Planned> out;
  auto small = [&](Kind kind, std::vector<uint8_t> bytes, bool optional) {
    Planned s;
    s.kind = kind;
    s.optional = optional;
    s.codec = zstd ? Codec::Zstd : Codec::None;
    s.raw_size = bytes.size();
    s.raw = std::move(bytes);
    out.push_back(std::move(s));
  };
  small(Kind::Meta, encode_meta(c.header), false);
  small(Kind::Index, encode_index(c), false);
  small(Kind::Positions, concat_layers(c, &LayerKv::positions), false);
  if (c.has_scores) small(Kind::Scores, concat_layers(c, &LayerKv::scores), true);
  const bool quant = dtype_quantized(c.header.kv_dtype);
  const uint32_t esize = quant ? 0 : dtype_size(c.header.kv_dtype);
  for (uint32_t l = 0; l < c.header.n_layers; ++l) {
    Planned s;
    s.kind = Kind::Kv;
    s.layer = l;
    s.codec = zstd && o.compress_kv ? Codec::Zstd : Codec::None;
    s.raw_size = quant ? *quant_section_bytes(c.header, c.layers[l].positions.size(),
                                              f16_row_count(c.header, c.layers[l].positions))
                       : 2ull * c.layers[l].k.size() * esize;
    s.kv = &c.layers[l];
    out.push_back(std::move(s));
  }
  uint64_t offset = 0;
  for (Planned& s : out) {
    encode_section(s, c.header, o);
    s.offset = offset;
    offset += *checked_align(s.stored_size);
  }
  return out;
}

void write_padding(Sink& sink, uint64_t n) {
  while (n > 0) {
    uint64_t k = std::min<uint64_t>(n, kAlign);
    sink.write(kZeros, k);
    n -= k;
  }
}

}  // namespace

void VectorSink::write(const void* data, size_t size) {
  auto* b = static_cast<const uint8_t*>(data);
  bytes.insert(bytes.end(), b, b + size);
}

void check_write_options(const WriteOptions& options) {
  if (options.zstd_level < 0 || options.zstd_level > 19)
    throw Error(Errc::invalid_argument,
                "zstd level " + std::to_string(options.zstd_level) + " is outside 0 (off) .. 19");
}

void write_cache(const CacheContents& contents, Sink& sink, const WriteOptions& options) {
  validate(contents);
  check_write_options(options);
  std::vector<Planned> sections = plan(contents, options);

  std::vector<uint8_t> table(sections.size() * kEntrySize, 0);
  for (size_t i = 0; i < sections.size(); ++i) {
    const Planned& s = sections[i];
    uint8_t* e = table.data() + i * kEntrySize;
    store_u32(e + kEntKind, static_cast<uint32_t>(s.kind));
    store_u32(e + kEntFlags, s.optional ? kFlagOptional : 0);
    store_u32(e + kEntCodec, static_cast<uint32_t>(s.codec));
    store_u32(e + kEntLayer, s.layer);
    store_u64(e + kEntOffset, s.offset);
    store_u64(e + kEntStored, s.stored_size);
    store_u64(e + kEntRaw, s.raw_size);
    store_u64(e + kEntChecksum, s.checksum);
  }
  const Planned& last = sections.back();
  uint64_t data_offset = *checked_align(kPreambleSize + table.size());
  uint64_t data_size = last.offset + *checked_align(last.stored_size);

  uint8_t pre[kPreambleSize] = {};
  std::memcpy(pre, kMagic, 8);
  store_u16(pre + kOffMajor, kVersionMajor);
  store_u16(pre + kOffMinor, min_minor(contents.header));
  store_u64(pre + kOffSectionCount, sections.size());
  store_u64(pre + kOffDataOffset, data_offset);
  store_u64(pre + kOffDataSize, data_size);
  store_u64(pre + kOffTableChecksum, xxh64(table.data(), table.size()));
  store_u64(pre + kOffHeaderChecksum, xxh64(pre, kOffHeaderChecksum));

  sink.write(pre, kPreambleSize);
  sink.write(table.data(), table.size());
  write_padding(sink, data_offset - kPreambleSize - table.size());
  for (const Planned& s : sections) {
    if (s.codec == Codec::Zstd) sink.write(s.stored.data(), s.stored.size());
    else emit_raw(s, contents.header, sink);
    write_padding(sink, *checked_align(s.stored_size) - s.stored_size);
  }
}

void write_file_atomically(const std::string& path, bool force,
                           const std::function<void(Sink&)>& body) {
  AtomicFile file(path, force);
  struct FileSink final : Sink {
    AtomicFile& f;
    explicit FileSink(AtomicFile& file) : f(file) {}
    void write(const void* data, size_t size) override { f.write(data, size); }
  } sink(file);
  body(sink);
  file.commit();
}

void write_cache_file(const CacheContents& contents, const std::string& path,
                      const WriteOptions& options) {
  validate(contents);  // fail before touching the file system
  write_file_atomically(path, options.force,
                        [&](Sink& sink) { write_cache(contents, sink, options); });
}

}  // namespace kvzip::format
