// spec/reader_min.cc as a second implementation: it must read every golden and synthetic file to
// the same values as format::CacheReader and refuse every damaged file in tests/golden/bad/.
// reader_min is compiled into this test unit (it is a standalone .cc with no header of its own).
#include <catch2/catch.hpp>

#include "compress/quantize.h"
#include "spec/reader_min.cc"
#include "tests/format/bad_cases.h"
#include "tests/format/fixtures.h"

using namespace kvzip;
using namespace kvzip::format;
using namespace kvzip::format::testing;

namespace {

void check_agree(const std::vector<uint8_t>& bytes) {
  CacheContents a = CacheReader::open_memory(bytes, {Verify::Full}).load();
  kvz_min::File b = kvz_min::read(bytes.data(), bytes.size());
  const CacheHeader& h = a.header;
  CHECK(b.n_layers == h.n_layers);
  CHECK(b.n_kv_heads == h.n_kv_heads);
  CHECK(b.head_dim == h.head_dim);
  CHECK(b.dtype == static_cast<uint64_t>(h.kv_dtype));  // the registry id
  CHECK(b.f16_below == h.kv_f16_below);
  CHECK(b.logical == h.logical_length());
  CHECK(b.prefix == h.prefix_length());
  CHECK(b.str("model.arch") == h.model.arch);
  CHECK(b.u64("model.weights_hash") == h.model.weights_hash);
  CHECK(b.str("text.document") == h.document_text);
  CHECK(b.u32s("text.document_tokens") == h.document_tokens);
  CHECK(b.has_scores == a.has_scores);
  REQUIRE(b.layers.size() == a.layers.size());
  for (size_t l = 0; l < a.layers.size(); ++l) {
    const LayerKv& x = a.layers[l];
    const kvz_min::Layer& y = b.layers[l];
    CHECK(std::vector<uint64_t>(x.head_rows.begin(), x.head_rows.end()) == y.rows);
    CHECK(x.positions == y.pos);
    CHECK(x.k == y.k);
    CHECK(x.v == y.v);
    CHECK(x.scores == y.scores);
  }
}

}  // namespace

TEST_CASE("reader_min agrees with the main reader on the golden files", "[format]") {
  for (const char* name :
       {"tiny_v1_f32.kvz", "tiny_v1_bf16_zstd.kvz", "future_minor_unknown_optional.kvz",
        "tiny_v1_q4.kvz", "tiny_v1_q8_zstd.kvz"}) {
    INFO(name);
    check_agree(read_bytes(source_path(std::string("tests/golden/kvz/") + name)));
  }
}

TEST_CASE("reader_min agrees with the main reader on synthetic caches of every dtype", "[format]") {
  auto dtype = GENERATE(DType::F32, DType::F16, DType::BF16);
  int level = GENERATE(0, 1);
  SyntheticSpec spec;
  spec.dtype = dtype;
  spec.n_kv_heads = 3;
  spec.head_dim = 6;
  WriteOptions o;
  o.zstd_level = level;
  check_agree(to_bytes(synthetic(spec), o));
}

TEST_CASE("reader_min reconstructs q8/q4 rows to the main reader's exact values", "[format]") {
  auto dtype = GENERATE(DType::Q8, DType::Q4);
  uint32_t group = GENERATE(0u, 2u, 8u);
  SyntheticSpec spec;
  spec.n_kv_heads = 3;
  spec.head_dim = 16;
  CacheContents c = synthetic(spec);
  compress::set_kv_dtype(c, {dtype, group});
  REQUIRE(c.header.kv_f16_below > 0);  // f16 rows and quantized rows both
  WriteOptions o;
  o.zstd_level = group == 2 ? 1 : 0;
  check_agree(to_bytes(c, o));
}

TEST_CASE("reader_min refuses every damaged file the main reader refuses", "[format]") {
  const std::vector<BadCase> all = all_bad_cases();
  for (const BadCase& c : all) {
    if (c.mode != BadMode::Open) continue;
    INFO(c.name);
    CHECK_THROWS_AS(kvz_min::read(c.bytes.data(), c.bytes.size()), std::runtime_error);
  }
}
