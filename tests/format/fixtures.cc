// Fixture implementations (see fixtures.h). The synthetic caches use splitmix64 so every run and
// every machine produce the same bytes; the golden contents are spelled out literally because the
// committed golden files must keep matching them forever.
#include "tests/format/fixtures.h"

#include <catch2/catch.hpp>

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <tuple>

#include "format/detail/dtype.h"

namespace kvzip::format::testing {

void expect_corrupt(const std::function<void()>& f, const std::string& fragment) {
  try {
    f();
    FAIL("no error; expected corrupt with '" << fragment << "'");
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(e.code() == Errc::corrupt);
    CHECK_THAT(e.what(), Catch::Matchers::Contains(fragment));
  }
}

void check_loads(const CacheReader& r, const CacheContents& c) {
  std::string why;
  const bool same = same_contents(r.load(), c, &why);
  INFO(why);
  CHECK(same);
}

void check_read_kv(const CacheReader& r, const CacheContents& c, uint32_t l) {
  std::vector<float> k(c.layers[l].k.size()), v(k.size());
  r.read_kv(l, k, v);
  CHECK(k == c.layers[l].k);
  CHECK(v == c.layers[l].v);
}

void check_writes_and_loads(const CacheContents& c) {
  const std::vector<uint8_t> bytes = to_bytes(c);  // open_memory reads it in place: keep it alive
  check_loads(CacheReader::open_memory(bytes, {Verify::Full}), c);
}

void check_hdf5_round_trip(const CacheContents& c) {
  if (!hdf5_available()) KVZIP_FORMAT_SKIP("built without HDF5");
  TempDir dir;
  export_hdf5(c, dir.path("c.h5"), false);
  const CacheContents back = import_hdf5(dir.path("c.h5"));
  std::string why;
  const bool same = same_contents(back, c, &why);
  INFO(why);
  CHECK(same);
  CHECK(to_bytes(back) == to_bytes(c));
}

size_t for_each_kept_row(const LayerKv& in, const LayerKv& out,
                         const std::function<void(size_t row, size_t j)>& f) {
  size_t row = 0, in_first = 0;
  for (size_t h = 0; h < in.head_rows.size(); ++h) {
    for (uint32_t i = 0; i < out.head_rows[h]; ++i, ++row) {
      size_t j = in_first;
      while (in.positions[j] != out.positions[row]) ++j;
      f(row, j);
    }
    in_first += in.head_rows[h];
  }
  return row;
}
namespace {

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

float uniform(uint64_t& s) {
  return static_cast<float>(splitmix(s) >> 40) / static_cast<float>(1 << 24);
}

float representable(float f, DType t) {
  switch (t) {
    case DType::F16: return f16_to_f32(f32_to_f16(f));
    case DType::BF16: return bf16_to_f32(f32_to_bf16(f));
    default: return f;
  }
}

void base_header(CacheHeader& h) {
  h.tool_version = "kvzip 0.1.0";
  h.created_unix = 1767225600;  // 2026-01-01T00:00:00Z
  h.model.arch = "llama";
  h.model.name = "tiny-golden";
  h.model.tokenizer_hash = 0x1122334455667788ull;
  h.model.weights_hash = 0x99aabbccddeeff00ull;
  h.rope_base = 10000.0f;
  h.method = "kvzip";
  h.params = {{"chunk", "2000"}, {"select", "global"}};
}

}  // namespace

CacheContents with_outliers(uint32_t D, uint64_t seed) {
  CacheContents c = synthetic(SyntheticSpec{.head_dim = D, .document = 60, .seed = seed});
  for (LayerKv& layer : c.layers)
    for (size_t r = 0; r < layer.positions.size(); ++r)
      for (uint32_t j : {3u, 10u}) layer.k[r * D + j] = 12.0f * layer.k[r * D + j] + 2.0f;
  return c;
}

CacheContents synthetic(const SyntheticSpec& sp) {
  uint64_t s = sp.seed;
  CacheContents c;
  CacheHeader& h = c.header;
  base_header(h);
  h.model.name = "synthetic";
  h.n_layers = sp.n_layers;
  h.n_kv_heads = sp.n_kv_heads;
  h.head_dim = sp.head_dim;
  h.kv_dtype = sp.dtype;
  for (uint32_t i = 0; i < sp.prefix; ++i) h.prefix_tokens.push_back(1 + i);
  h.suffix_tokens = {7, 8, 9};
  for (uint32_t i = 0; i < sp.document; ++i) {
    h.document_tokens.push_back(100 + static_cast<uint32_t>(splitmix(s) % 5000));
    h.document_text += 'w';
    h.document_text += std::to_string(i);
    h.document_text += ' ';
  }
  c.has_scores = sp.scores;
  uint64_t kept_doc = 0;
  for (uint32_t l = 0; l < sp.n_layers; ++l) {
    LayerKv& layer = c.layers.emplace_back();
    for (uint32_t hd = 0; hd < sp.n_kv_heads; ++hd) {
      uint32_t rows = 0;
      for (uint32_t p = 0; p < sp.prefix + sp.document; ++p) {
        bool doc = p >= sp.prefix;
        if (doc && uniform(s) >= sp.keep) continue;
        kept_doc += doc;
        ++rows;
        layer.positions.push_back(p);
        if (sp.scores) layer.scores.push_back(doc ? uniform(s) : 1.0f);
        for (uint32_t d = 0; d < sp.head_dim; ++d) {
          layer.k.push_back(representable(uniform(s) * 8.0f - 4.0f, sp.dtype));
          layer.v.push_back(representable(uniform(s) * 2.0f - 1.0f, sp.dtype));
        }
      }
      layer.head_rows.push_back(rows);
    }
  }
  uint64_t total = uint64_t{sp.n_layers} * sp.n_kv_heads * sp.document;
  h.achieved_ratio = total ? static_cast<double>(kept_doc) / total : 1.0;
  h.requested_ratio = sp.keep;
  return c;
}

CacheContents golden_contents(DType dtype) {
  CacheContents c;
  CacheHeader& h = c.header;
  base_header(h);
  h.n_layers = 2;
  h.n_kv_heads = 2;
  h.head_dim = 4;
  h.kv_dtype = dtype;
  h.prefix_tokens = {1, 2, 3};
  h.suffix_tokens = {4, 5};
  h.document_tokens = {100, 101, 102, 103, 104};
  h.document_text = "The quick brown fox jumps";
  h.requested_ratio = 0.5;
  h.achieved_ratio = 0.5;  // 10 of the 2 * 2 * 5 document rows
  c.has_scores = true;
  const std::vector<std::vector<uint32_t>> kept = {
      {0, 1, 2, 3, 5}, {0, 1, 2, 4, 6, 7}, {0, 1, 2, 7}, {0, 1, 2, 3, 4, 5, 6}};
  for (uint32_t l = 0; l < 2; ++l) {
    LayerKv& layer = c.layers.emplace_back();
    uint32_t row = 0;
    for (uint32_t hd = 0; hd < 2; ++hd) {
      const auto& pos = kept[l * 2 + hd];
      layer.head_rows.push_back(static_cast<uint32_t>(pos.size()));
      for (uint32_t p : pos) {
        layer.positions.push_back(p);
        // Scores: prefix rows 1, document rows distinct eighths so prune has no ties.
        layer.scores.push_back(
            p < 3 ? 1.0f : static_cast<float>((p * 3 + l * 5 + hd) % 8) / 8.0f + 0.0625f * l);
        for (uint32_t d = 0; d < 4; ++d) {  // quarters below 32: exact in bf16 and f16
          layer.k.push_back(static_cast<float>(l) + 0.5f * d + 0.25f * static_cast<float>(row % 7) -
                            0.75f);
          layer.v.push_back(-static_cast<float>(hd) - 0.25f * d + 0.5f * static_cast<float>(p));
        }
        ++row;
      }
    }
  }
  return c;
}

bool same_contents(const CacheContents& a, const CacheContents& b, std::string* why) {
  auto differ = [&](const std::string& field) {
    if (why) *why = field;
    return false;
  };
  const CacheHeader &x = a.header, &y = b.header;
  if (x.tool_version != y.tool_version) return differ("tool_version");
  if (x.created_unix != y.created_unix) return differ("created_unix");
  if (x.model.arch != y.model.arch || x.model.name != y.model.name ||
      x.model.tokenizer_hash != y.model.tokenizer_hash ||
      x.model.weights_hash != y.model.weights_hash)
    return differ("model");
  if (x.n_layers != y.n_layers || x.n_kv_heads != y.n_kv_heads || x.head_dim != y.head_dim)
    return differ("shape");
  if (x.rope_layout != y.rope_layout ||
      std::bit_cast<uint32_t>(x.rope_base) != std::bit_cast<uint32_t>(y.rope_base))
    return differ("rope");
  const RopeScaling &rx = x.rope_scaling, &ry = y.rope_scaling;
  if (rx.kind != ry.kind || rx.factor != ry.factor || rx.low_freq_factor != ry.low_freq_factor ||
      rx.high_freq_factor != ry.high_freq_factor || rx.original_context != ry.original_context)
    return differ("rope_scaling");
  if (x.kv_dtype != y.kv_dtype) return differ("kv_dtype");
  if (x.kv_group_size != y.kv_group_size) return differ("kv_group_size");
  if (x.kv_f16_below != y.kv_f16_below) return differ("kv_f16_below");
  if (x.prefix_tokens != y.prefix_tokens) return differ("prefix_tokens");
  if (x.suffix_tokens != y.suffix_tokens) return differ("suffix_tokens");
  if (x.document_tokens != y.document_tokens) return differ("document_tokens");
  if (x.document_text != y.document_text) return differ("document_text");
  if (x.method != y.method) return differ("method");
  if (x.params != y.params) return differ("params");
  if (std::bit_cast<uint64_t>(x.requested_ratio) != std::bit_cast<uint64_t>(y.requested_ratio))
    return differ("requested_ratio");
  if (std::bit_cast<uint64_t>(x.achieved_ratio) != std::bit_cast<uint64_t>(y.achieved_ratio))
    return differ("achieved_ratio");
  if (a.has_scores != b.has_scores) return differ("has_scores");
  if (a.layers.size() != b.layers.size()) return differ("layers");
  auto bits_equal = [](const std::vector<float>& u, const std::vector<float>& v) {
    return u.size() == v.size() &&
           (u.empty() || std::memcmp(u.data(), v.data(), u.size() * 4) == 0);
  };
  for (size_t l = 0; l < a.layers.size(); ++l) {
    const LayerKv &p = a.layers[l], &q = b.layers[l];
    std::string at = "layers[" + std::to_string(l) + "].";
    if (p.head_rows != q.head_rows) return differ(at + "head_rows");
    if (p.positions != q.positions) return differ(at + "positions");
    if (!bits_equal(p.k, q.k)) return differ(at + "k");
    if (!bits_equal(p.v, q.v)) return differ(at + "v");
    if (!bits_equal(p.scores, q.scores)) return differ(at + "scores");
    for (auto [u, w, name] : {std::tuple{&p.qk, &q.qk, "qk"}, std::tuple{&p.qv, &q.qv, "qv"}}) {
      if (!bits_equal(u->channel_scale, w->channel_scale))
        return differ(at + name + ".channel_scale");
      if (u->dense != w->dense) return differ(at + name + ".dense");
      if (u->params != w->params) return differ(at + name + ".params");
      if (u->codes != w->codes) return differ(at + name + ".codes");
    }
  }
  return true;
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(Errc::not_found, "test fixture missing: " + path);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw Error(Errc::io, "test: cannot write " + path);
}

std::vector<uint8_t> to_bytes(const CacheContents& c, const WriteOptions& o) {
  VectorSink sink;
  write_cache(c, sink, o);
  return std::move(sink.bytes);
}

std::vector<uint8_t> to_bytes_zstd(const CacheContents& c, int zstd_level) {
  WriteOptions w;
  w.zstd_level = zstd_level;
  return to_bytes(c, w);
}

TempDir::TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "kvzip-test-XXXXXX").string();
  if (!::mkdtemp(tmpl.data())) throw Error(Errc::io, "test: mkdtemp failed");
  dir_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::vector<std::string> TempDir::list() const { return list_of(dir_); }

std::vector<std::string> TempDir::list_of(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

void check_pruned_as_stored(const CacheContents& c, const CacheContents& p) {
  const size_t D = c.header.head_dim;
  REQUIRE(p.layers.size() == c.layers.size());
  for (size_t l = 0; l < c.layers.size(); ++l) {
    const LayerKv &in = c.layers[l], &out = p.layers[l];
    CHECK(out.qk.channel_scale == in.qk.channel_scale);
    CHECK(out.qv.channel_scale == in.qv.channel_scale);
    CHECK(out.qk.dense == in.qk.dense);  // f16 rows: prefix rows, never evicted
    CHECK(out.qv.dense == in.qv.dense);
    for_each_kept_row(in, out, [&](size_t row, size_t j) {
      CHECK(
          std::equal(out.k.begin() + row * D, out.k.begin() + (row + 1) * D, in.k.begin() + j * D));
      CHECK(
          std::equal(out.v.begin() + row * D, out.v.begin() + (row + 1) * D, in.v.begin() + j * D));
    });
  }
  check_writes_and_loads(p);
}

}  // namespace kvzip::format::testing
