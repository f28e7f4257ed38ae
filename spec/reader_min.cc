// reader_min: a second, minimal reader of .kvz v1.x (f32, f16, bf16 and the quantized q8/q4),
// written from spec/kvzip_format.md alone and laid out in the spec's order (Preamble, Section
// table, Meta, Index, Positions, Scores, KV). It shares no code with format/; the tests compile it in (tests/format/reader_min_test.cc) and check that
// both readers agree, and it refuses every damaged file the main reader refuses. It throws
// std::runtime_error with a short message on anything it does not accept; it is not tuned.
// Standalone use:  c++ -std=c++20 -DKVZ_MIN_MAIN spec/reader_min.cc -lzstd -lxxhash -o kvz_min
//                  ./kvz_min FILE.kvz
#include <xxhash.h>
#include <zstd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace kvz_min {

// ---- Conventions: little-endian fields read byte by byte (works on any host) ----
static uint64_t le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
[[noreturn]] static void fail(const std::string& m) { throw std::runtime_error("kvz_min: " + m); }
static uint64_t align4k(uint64_t x) {
  if (x > UINT64_MAX - 4095) fail("size overflows when aligned");
  return (x + 4095) / 4096 * 4096;
}

struct Section {
  uint32_t kind, flags, codec, layer;
  uint64_t offset, stored, raw, checksum;
};
struct Value {
  uint32_t type;
  std::vector<uint8_t> bytes;
};
struct Layer {
  std::vector<uint64_t> rows;  // (Hkv)
  std::vector<uint32_t> pos;   // (R)
  std::vector<float> k, v;     // (R, D)
  std::vector<float> scores;   // (R) or empty
};
struct File {
  uint16_t major = 0, minor = 0;
  std::vector<Section> sections;
  std::map<std::string, Value> meta;
  uint64_t n_layers = 0, n_kv_heads = 0, head_dim = 0, dtype = 0, logical = 0, prefix = 0;
  uint64_t group = 0;      // q8/q4: kv.quant.group_size
  uint64_t f16_below = 0;  // q8/q4: kv.quant.f16_below; rows at positions below are f16 rows
  bool has_scores = false;
  std::vector<Layer> layers;

  uint64_t u64(const std::string& key) const {
    auto it = meta.find(key);
    if (it == meta.end() || it->second.type != 1 || it->second.bytes.size() != 8)
      fail("missing u64 " + key);
    return le(it->second.bytes.data(), 8);
  }
  std::string str(const std::string& key) const {
    auto it = meta.find(key);
    if (it == meta.end() || it->second.type != 4) fail("missing string " + key);
    return std::string(it->second.bytes.begin(), it->second.bytes.end());
  }
  std::vector<uint32_t> u32s(const std::string& key) const {
    auto it = meta.find(key);
    if (it == meta.end() || it->second.type != 5 || it->second.bytes.size() % 4)
      fail("missing array " + key);
    std::vector<uint32_t> out;
    for (size_t i = 0; i < it->second.bytes.size(); i += 4)
      out.push_back(static_cast<uint32_t>(le(&it->second.bytes[i], 4)));
    return out;
  }
};

// ---- Preamble ----
static const uint8_t kMagic[8] = {0x89, 'K', 'V', 'Z', 0x0D, 0x0A, 0x1A, 0x0A};

static void read_preamble(const uint8_t* p, uint64_t n, File& f, uint64_t& count,
                          uint64_t& data_offset, uint64_t& data_size) {
  if (n < 8 || std::memcmp(p, kMagic, 8) != 0) fail("bad magic or file shorter than 8 bytes");
  if (n < 64) fail("truncated preamble");
  f.major = static_cast<uint16_t>(le(p + 8, 2));
  f.minor = static_cast<uint16_t>(le(p + 10, 2));
  if (f.major != 1) fail("unsupported major version " + std::to_string(f.major));
  if (XXH64(p, 56, 0) != le(p + 56, 8)) fail("Header_Checksum mismatch");
  if (le(p + 12, 4) != 0 || le(p + 48, 8) != 0) fail("reserved preamble field not zero");
  count = le(p + 16, 8);
  data_offset = le(p + 24, 8);
  data_size = le(p + 32, 8);
  if (count == 0 || count > 65536) fail("Section_Count out of range");
  if (data_offset != align4k(64 + 64 * count))
    fail("Data_Offset is not the aligned end of the table");
  if (data_size % 4096 || data_offset > UINT64_MAX - data_size) fail("bad Data_Size");
  if (n < 64 + 64 * count) fail("truncated section table");
  if (XXH64(p + 64, 64 * count, 0) != le(p + 40, 8)) fail("Table_Checksum mismatch");
}

// ---- Section table ----
static void read_table(const uint8_t* p, uint64_t count, uint64_t data_size, File& f) {
  uint64_t expect = 0;
  for (uint64_t i = 0; i < count; ++i) {
    const uint8_t* e = p + 64 + 64 * i;
    Section s{static_cast<uint32_t>(le(e, 4)),
              static_cast<uint32_t>(le(e + 4, 4)),
              static_cast<uint32_t>(le(e + 8, 4)),
              static_cast<uint32_t>(le(e + 12, 4)),
              le(e + 16, 8),
              le(e + 24, 8),
              le(e + 32, 8),
              le(e + 40, 8)};
    if (s.kind == 0 || (s.flags & ~1u) || le(e + 48, 8) || le(e + 56, 8))
      fail("bad section entry " + std::to_string(i));
    uint64_t padded = align4k(s.stored);
    if (s.offset != expect)
      fail("sections do not tile the data area at entry " + std::to_string(i));
    if (padded > data_size - s.offset) fail("section out of range");
    expect = s.offset + padded;
    if (s.kind <= 5 && s.codec > 1) fail("unknown codec");
    if (s.kind <= 5 && s.codec == 0 && s.raw != s.stored)
      fail("Raw_Size != Stored_Size with codec none");
    if (s.kind > 5 && !(s.flags & 1)) fail("unknown required section kind");
    f.sections.push_back(s);
  }
  if (expect != data_size) fail("hole at the end of the data area");
}

// Stored bytes -> raw bytes, after the checksum (any section).
static std::vector<uint8_t> payload(const uint8_t* data, const Section& s) {
  const uint8_t* b = data + s.offset;
  if (XXH64(b, s.stored, 0) != s.checksum) fail("section checksum mismatch");
  if (s.codec == 0) return std::vector<uint8_t>(b, b + s.stored);
  if (s.raw > (1ull << 32)) fail("section larger than reader_min's 4 GiB limit");
  if (ZSTD_getFrameContentSize(b, s.stored) != s.raw ||
      ZSTD_findFrameCompressedSize(b, s.stored) != s.stored)
    fail("zstd frame does not match the section sizes");
  std::vector<uint8_t> out(s.raw);
  size_t got = ZSTD_decompress(out.data(), out.size(), b, s.stored);
  if (ZSTD_isError(got) || got != s.raw) fail("zstd data damaged");
  return out;
}

static const Section& only(const File& f, uint32_t kind, bool required) {
  const Section* found = nullptr;
  for (const Section& s : f.sections)
    if (s.kind == kind) {
      if (found) fail("duplicate section kind " + std::to_string(kind));
      found = &s;
    }
  static const Section none{};
  if (!found && required) fail("missing section kind " + std::to_string(kind));
  return found ? *found : none;
}

// ---- Meta ----
static void read_meta(const std::vector<uint8_t>& m, File& f) {
  if (m.size() < 8) fail("meta too short");
  uint64_t count = le(m.data(), 8), at = 8;
  for (uint64_t i = 0; i < count; ++i) {
    if (m.size() - at < 8) fail("meta entry truncated");
    uint64_t klen = le(&m[at], 8);
    at += 8;
    if (klen == 0 || klen > 255 || m.size() - at < klen + 16) fail("meta key truncated");
    std::string key(m.begin() + static_cast<long>(at), m.begin() + static_cast<long>(at + klen));
    at += klen;
    uint32_t type = static_cast<uint32_t>(le(&m[at], 4));
    uint64_t vsize = le(&m[at + 8], 8);
    if (le(&m[at + 4], 4) != 0) fail("Value_Flags not zero");
    at += 16;
    if (m.size() - at < vsize) fail("meta value truncated");
    if (!f.meta
             .emplace(key, Value{type,
                                 {m.begin() + static_cast<long>(at),
                                  m.begin() + static_cast<long>(at + vsize)}})
             .second)
      fail("duplicate meta key " + key);
    at += vsize;
  }
  if (at != m.size()) fail("bytes after the last meta entry");
  f.n_layers = f.u64("model.n_layers");
  f.n_kv_heads = f.u64("model.n_kv_heads");
  f.head_dim = f.u64("model.head_dim");
  f.dtype = f.u64("kv.dtype");
  f.logical = f.u64("kv.logical_length");
  f.prefix = f.u64("kv.prefix_length");
  if (f.n_layers < 1 || f.n_layers > 1024 || f.n_kv_heads < 1 || f.n_kv_heads > 1024 ||
      f.head_dim < 2 || f.head_dim > 4096 || f.head_dim % 2)
    fail("model shape out of range");
  if (f.dtype != 1 && f.dtype != 2 && f.dtype != 3 && f.dtype != 10 && f.dtype != 11)
    fail("unknown or reserved dtype " + std::to_string(f.dtype));
  if (f.dtype >= 10) {  // q8, q4
    if (f.head_dim & (f.head_dim - 1)) fail("q8/q4 need a power-of-two head_dim");
    f.group = f.u64("kv.quant.group_size");
    if (f.group < 1 || f.group > f.head_dim || f.head_dim % f.group)
      fail("bad kv.quant.group_size");
    f.f16_below = f.u64("kv.quant.f16_below");
    if (f.f16_below > f.logical) fail("bad kv.quant.f16_below");
  }
  if (f.u64("model.rope_layout") != 1) fail("unknown rope layout");
  if (f.prefix != f.u32s("text.prefix_tokens").size() ||
      f.logical != f.prefix + f.u32s("text.document_tokens").size())
    fail("token counts disagree with kv lengths");
}

// ---- Index ----
static void read_index(const std::vector<uint8_t>& x, File& f) {
  if (x.size() != f.n_layers * f.n_kv_heads * 16) fail("index size");
  f.layers.resize(f.n_layers);
  for (uint64_t l = 0; l < f.n_layers; ++l) {
    uint64_t start = 0;
    for (uint64_t h = 0; h < f.n_kv_heads; ++h) {
      const uint8_t* e = &x[(l * f.n_kv_heads + h) * 16];
      uint64_t rows = le(e, 8);
      if (rows > f.logical || le(e + 8, 8) != start) fail("bad index entry");
      f.layers[l].rows.push_back(rows);
      start += rows;
    }
  }
}

// ---- Positions and scores: (sum of all rows) u32 / f32, layer by layer ----
static void read_rows(const std::vector<uint8_t>& b, File& f, bool scores) {
  uint64_t at = 0;
  for (Layer& layer : f.layers) {
    for (uint64_t h = 0, row = 0; h < layer.rows.size(); ++h)
      for (uint64_t i = 0; i < layer.rows[h]; ++i, ++row) {
        if (b.size() - at < 4) fail("rows section too short");
        uint32_t v = static_cast<uint32_t>(le(&b[at], 4));
        at += 4;
        if (scores) {
          float s;
          std::memcpy(&s, &v, 4);
          if (std::isnan(s)) fail("NaN score");
          layer.scores.push_back(s);
        } else {
          if (v >= f.logical || (i > 0 && v <= layer.pos[row - 1])) fail("bad position");
          layer.pos.push_back(v);
        }
      }
  }
  if (at != b.size()) fail("rows section has extra bytes");
}

// ---- KV: K rows then V rows, in the dtype ----
static float decode(uint64_t dtype, const uint8_t* p) {
  if (dtype == 1) {
    uint32_t v = static_cast<uint32_t>(le(p, 4));
    float f;
    std::memcpy(&f, &v, 4);
    return f;
  }
  uint32_t h = static_cast<uint32_t>(le(p, 2));
  if (dtype == 3) {
    uint32_t v = h << 16;
    float f;
    std::memcpy(&f, &v, 4);
    return f;
  }
  int e = (h >> 10) & 31;
  int m = h & 1023;
  float sign = (h & 0x8000) ? -1.0f : 1.0f;
  if (e == 0) return sign * std::ldexp(static_cast<float>(m), -24);
  if (e == 31) return m ? NAN : sign * INFINITY;
  return sign * std::ldexp(static_cast<float>(m + 1024), e - 25);
}

// q8/q4 (§12.1): K scales, V scales (Hkv, D) f32 | K f16 rows, V f16 rows (F, D) f16 |
// K params, V params (R - F, D/G, 2) bytes | K codes, V codes (R - F, D·bits/8).
// An f16 row (position < f16_below) is its f16 values. A quantized row is H·y, with
// y[j] = c[head][j] * fma(scale, code, minimum), scale = (16 + e % 16) * 2^(e / 16 - 22) and
// minimum = -(scale * z * 2^(bits - 8)) from the group's scale code e and zero point z, and H the
// Walsh–Hadamard matrix applied by the butterflies of §12.1 and the factor 1/sqrt(D) rounded from
// binary64 to binary32.
static void walsh_hadamard(float* x, uint64_t n) {
  for (uint64_t h = 1; h < n; h *= 2)
    for (uint64_t i = 0; i < n; i += 2 * h)
      for (uint64_t j = i; j < i + h; ++j) {
        const float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
  const float s = static_cast<float>(1.0 / std::sqrt(static_cast<double>(n)));
  for (uint64_t j = 0; j < n; ++j) x[j] *= s;
}

static void read_quant(const std::vector<uint8_t>& b, const File& f, Layer& layer) {
  const uint64_t D = f.head_dim, G = f.group, groups = D / G, bits = f.dtype == 10 ? 8 : 4;
  uint64_t rows = 0, f16 = 0;
  for (uint64_t r : layer.rows) rows += r;
  for (uint32_t p : layer.pos) f16 += p < f.f16_below;
  const uint64_t scales = f.n_kv_heads * D * 4, dense = f16 * D * 2,
                 params = (rows - f16) * groups * 2, codes = (rows - f16) * D * bits / 8;
  if (b.size() != 2 * (scales + dense + params + codes)) fail("kv section size");
  for (int block = 0; block < 2; ++block) {
    const uint8_t* c = &b[block * scales];
    const uint8_t* d = b.data() + 2 * scales + block * dense;
    const uint8_t* p = b.data() + 2 * (scales + dense) + block * params;
    const uint8_t* q = b.data() + 2 * (scales + dense + params) + block * codes;
    for (uint64_t i = 0; i < f.n_kv_heads * D; ++i) {
      float ci = decode(1, c + 4 * i);
      if (!(ci > 0) || std::isinf(ci)) fail("bad channel scale");
    }
    std::vector<float>& out = block ? layer.v : layer.k;
    uint64_t fi = 0, qi = 0;  // next f16 row, next quantized row
    for (uint64_t h = 0, row = 0; h < layer.rows.size(); ++h)
      for (uint64_t i = 0; i < layer.rows[h]; ++i, ++row) {
        if (layer.pos[row] < f.f16_below) {
          for (uint64_t j = 0; j < D; ++j) {
            float x = decode(2, d + (fi * D + j) * 2);
            if (std::isnan(x) || std::isinf(x)) fail("bad f16 row value");
            out.push_back(x);
          }
          ++fi;
          continue;
        }
        for (uint64_t j = 0; j < D; ++j) {
          const uint8_t* gp = p + (qi * groups + j / G) * 2;  // every byte is valid
          const float scale = std::ldexp(static_cast<float>(16 + gp[0] % 16), gp[0] / 16 - 22);
          const float minimum =
              -(scale * std::ldexp(static_cast<float>(gp[1]), static_cast<int>(bits) - 8));
          const uint8_t byte = q[qi * D * bits / 8 + (bits == 8 ? j : j / 2)];
          const uint32_t code = bits == 8 ? byte : (j % 2 ? byte >> 4 : byte & 15);
          out.push_back(decode(1, c + 4 * (h * D + j)) *
                        std::fma(scale, static_cast<float>(code), minimum));
        }
        walsh_hadamard(out.data() + out.size() - D, D);
        ++qi;
      }
  }
}

static void read_kv(const std::vector<uint8_t>& b, uint64_t dtype, uint64_t head_dim,
                    Layer& layer) {
  uint64_t rows = 0;
  for (uint64_t r : layer.rows) rows += r;
  uint64_t esize = dtype == 1 ? 4 : 2, n = rows * head_dim;
  if (b.size() != 2 * n * esize) fail("kv section size");
  for (uint64_t i = 0; i < n; ++i) layer.k.push_back(decode(dtype, &b[i * esize]));
  for (uint64_t i = 0; i < n; ++i) layer.v.push_back(decode(dtype, &b[(n + i) * esize]));
}

// ---- The whole file, in spec order ----
inline File read(const uint8_t* p, uint64_t n) {
  File f;
  uint64_t count, data_offset, data_size;
  read_preamble(p, n, f, count, data_offset, data_size);
  read_table(p, count, data_size, f);
  if (n != data_offset + data_size)
    fail("file size differs from Data_Offset + Data_Size (truncated or trailing bytes)");
  const uint8_t* data = p + data_offset;
  for (uint64_t i = 64 + 64 * count; i < data_offset; ++i)
    if (p[i]) fail("non-zero padding before the data area");
  for (const Section& s : f.sections) {  // every section's checksum and padding, known or not
    if (XXH64(data + s.offset, s.stored, 0) != s.checksum) fail("section checksum mismatch");
    for (uint64_t i = s.stored; i < align4k(s.stored); ++i)
      if (data[s.offset + i]) fail("non-zero padding after a section");
  }
  read_meta(payload(data, only(f, 1, true)), f);
  read_index(payload(data, only(f, 2, true)), f);
  read_rows(payload(data, only(f, 3, true)), f, false);
  const Section& scores = only(f, 5, false);
  f.has_scores = scores.kind == 5;
  if (f.has_scores) read_rows(payload(data, scores), f, true);
  std::vector<int> seen(f.n_layers, 0);
  for (const Section& s : f.sections) {
    if (s.kind != 4) continue;
    if (s.layer >= f.n_layers || seen[s.layer]++) fail("bad kv section layer");
    if (f.dtype >= 10) read_quant(payload(data, s), f, f.layers[s.layer]);
    else read_kv(payload(data, s), f.dtype, f.head_dim, f.layers[s.layer]);
  }
  for (int s : seen)
    if (!s) fail("missing kv section");
  return f;
}

}  // namespace kvz_min

#ifdef KVZ_MIN_MAIN
#include <cstdio>
#include <fstream>
#include <iterator>
int main(int argc, char** argv) {
  if (argc != 2) return std::fprintf(stderr, "usage: kvz_min FILE.kvz\n"), 2;
  std::ifstream in(argv[1], std::ios::binary);
  std::vector<uint8_t> bytes(std::istreambuf_iterator<char>(in), {});
  try {
    kvz_min::File f = kvz_min::read(bytes.data(), bytes.size());
    std::printf("v%u.%u  L=%llu Hkv=%llu D=%llu dtype=%llu logical=%llu prefix=%llu scores=%d\n",
                f.major, f.minor, (unsigned long long)f.n_layers, (unsigned long long)f.n_kv_heads,
                (unsigned long long)f.head_dim, (unsigned long long)f.dtype,
                (unsigned long long)f.logical, (unsigned long long)f.prefix, f.has_scores);
    for (size_t l = 0; l < f.layers.size(); ++l) {
      std::printf("layer %zu rows", l);
      for (uint64_t r : f.layers[l].rows) std::printf(" %llu", (unsigned long long)r);
      std::printf("\n");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
#endif
