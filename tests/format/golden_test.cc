// The committed v1 golden files in tests/golden/kvz/ — every later kvzip must keep reading them
// with exactly these contents: f32, bf16 with zstd, q4, q8 with zstd, and a file of a later minor
// version with an unknown optional section. `kvzip_tests "[.generate-golden]"` rewrites them (only
// ever needed when a golden is added: existing goldens are frozen, never regenerated).
#include <catch2/catch.hpp>

#include <cmath>
#include <string>

#include "compress/quantize.h"
#include "tests/format/bad_cases.h"
#include "tests/format/fixtures.h"

using namespace kvzip;
using namespace kvzip::format;
using namespace kvzip::format::testing;

namespace {

const std::string kDir = "tests/golden/kvz/";

WriteOptions zstd_all() {
  WriteOptions o;
  o.zstd_level = 19;
  return o;
}

std::string inspect_text(const std::string& name) {
  CacheReader r = CacheReader::open(source_path(kDir + name), {Verify::Full});
  return describe(r, {false, name});
}

// The golden contents stored as q8/q4 with groups of 2 channels (two groups per row of D = 4):
// the prefix rows (positions 0 … 2) as f16, the others rotated and quantized.
CacheContents golden_quant(DType dtype) {
  CacheContents c = golden_contents(DType::F32);
  compress::set_kv_dtype(c, {dtype, 2});
  return c;
}

void write_text(const std::string& name, const std::string& text) {
  write_bytes(source_path(kDir + name), std::vector<uint8_t>(text.begin(), text.end()));
}

}  // namespace

TEST_CASE("generate the golden v1 files", "[.generate-golden]") {
  write_bytes(source_path(kDir + "tiny_v1_f32.kvz"), to_bytes(golden_contents(DType::F32)));
  write_bytes(source_path(kDir + "tiny_v1_bf16_zstd.kvz"),
              to_bytes(golden_contents(DType::BF16), zstd_all()));
  auto f32 = read_bytes(source_path(kDir + "tiny_v1_f32.kvz"));
  write_bytes(source_path(kDir + "future_minor_unknown_optional.kvz"), future_minor_file(f32));
  write_text("tiny_v1_f32.inspect.txt", inspect_text("tiny_v1_f32.kvz"));
  write_bytes(source_path(kDir + "tiny_v1_q4.kvz"), to_bytes(golden_quant(DType::Q4)));
  write_bytes(source_path(kDir + "tiny_v1_q8_zstd.kvz"),
              to_bytes(golden_quant(DType::Q8), zstd_all()));
  write_text("tiny_v1_q4.inspect.txt", inspect_text("tiny_v1_q4.kvz"));
}

TEST_CASE("the golden q4 and q8 files read back their stored rows and values", "[format]") {
  for (auto [name, dtype] :
       {std::pair{"tiny_v1_q4.kvz", DType::Q4}, std::pair{"tiny_v1_q8_zstd.kvz", DType::Q8}}) {
    INFO(name);
    CacheReader r = CacheReader::open(source_path(kDir + name), {Verify::Full});
    CHECK(r.version_minor() == 0);
    CHECK(r.header().kv_dtype == dtype);
    CHECK(r.header().kv_group_size == 2);
    CHECK(r.header().kv_f16_below == 3);
    const CacheContents got = r.load();
    std::string why;
    CHECK(same_contents(got, golden_quant(dtype), &why));  // stored bytes and reconstructed values
    INFO(why);
    for (const LayerKv& l : got.layers)  // one 16-bit word (two bytes) a group, two groups a row
      CHECK(l.qk.params.size() ==
            (l.positions.size() - f16_row_count(r.header(), l.positions)) * 2);
    // The prefix rows are the f32 golden's exactly (quarters: exact in f16); the others within a
    // step of the rotated rows (H is orthonormal: a row's error keeps its length, spread over its
    // channels; the channel maxima here are below 4.5, the byte scale at most 1/16 coarser).
    const CacheContents f32 = golden_contents(DType::F32);
    const float tol = dtype == DType::Q4 ? 0.66f : 0.043f;
    for (size_t l = 0; l < got.layers.size(); ++l)
      for (size_t i = 0; i < got.layers[l].k.size(); ++i) {
        const bool f16 = got.layers[l].positions[i / 4] < 3;
        REQUIRE(std::fabs(got.layers[l].k[i] - f32.layers[l].k[i]) <= (f16 ? 0.0f : tol));
        REQUIRE(std::fabs(got.layers[l].v[i] - f32.layers[l].v[i]) <= (f16 ? 0.0f : tol));
      }
  }
}

TEST_CASE("this writer reproduces the golden q4 file and its inspect dump", "[format]") {
  CHECK(to_bytes(golden_quant(DType::Q4)) == read_bytes(source_path(kDir + "tiny_v1_q4.kvz")));
  auto want = read_bytes(source_path(kDir + "tiny_v1_q4.inspect.txt"));
  CHECK(inspect_text("tiny_v1_q4.kvz") == std::string(want.begin(), want.end()));
}

TEST_CASE("the golden f32 v1 file reads back its exact contents", "[format]") {
  CacheReader r = CacheReader::open(source_path(kDir + "tiny_v1_f32.kvz"), {Verify::Full});
  CHECK(r.version_major() == 1);
  CHECK(r.version_minor() == 0);
  CHECK(r.file_size() == 28672);
  std::string why;
  CHECK(same_contents(r.load(), golden_contents(DType::F32), &why));
  INFO(why);
  CHECK(r.head_rows(1)[1] == 7);
  CHECK(r.positions(0)[4] == 5);
}

TEST_CASE("the golden bf16 zstd v1 file reads back its exact contents", "[format]") {
  CacheReader r = CacheReader::open(source_path(kDir + "tiny_v1_bf16_zstd.kvz"), {Verify::Full});
  std::string why;
  CHECK(same_contents(r.load(), golden_contents(DType::BF16), &why));
  INFO(why);
  for (const SectionInfo& s : r.sections()) CHECK(s.codec == Codec::Zstd);
}

TEST_CASE("this writer reproduces the golden f32 file byte for byte", "[format]") {
  // Frozen while this build writes v1.0; a writer of a later minor version may legitimately
  // differ (then keep the reading tests above and drop this one in the same change).
  CHECK(to_bytes(golden_contents(DType::F32)) == read_bytes(source_path(kDir + "tiny_v1_f32.kvz")));
}

TEST_CASE("a later minor version's file with an unknown optional section is read with it skipped",
          "[format]") {
  CacheReader r =
      CacheReader::open(source_path(kDir + "future_minor_unknown_optional.kvz"), {Verify::Full});
  CHECK(r.version_minor() == 1);
  CHECK_FALSE(r.has_scores());
  CHECK(r.sections()[3].name == "unknown");
  CacheContents expect = golden_contents(DType::F32);
  expect.has_scores = false;
  for (auto& layer : expect.layers) layer.scores.clear();
  std::string why;
  CHECK(same_contents(r.load(), expect, &why));
  INFO(why);
}

TEST_CASE("inspect of the golden file matches the committed dump", "[format]") {
  auto want = read_bytes(source_path(kDir + "tiny_v1_f32.inspect.txt"));
  CHECK(inspect_text("tiny_v1_f32.kvz") == std::string(want.begin(), want.end()));
}

TEST_CASE("inspect --json of the golden file carries the same facts", "[format]") {
  CacheReader r = CacheReader::open(source_path(kDir + "tiny_v1_f32.kvz"));
  std::string json = describe(r, {true, "tiny_v1_f32.kvz"});
  using Catch::Matchers::Contains;
  CHECK_THAT(json, Contains("\"format_version\": \"1.0\""));
  CHECK_THAT(json, Contains("\"weights_hash\": \"0x99aabbccddeeff00\""));
  CHECK_THAT(json, Contains("\"document_rows\": {\"kept\": 10, \"total\": 20}"));
  CHECK_THAT(json, Contains("\"params\": {\"chunk\": \"2000\", \"select\": \"global\"}"));
  CHECK_THAT(json, Contains("\"checksums\": \"metadata_only\""));
  CHECK(json.front() == '{');
  CHECK(json.substr(json.size() - 2) == "}\n");
}

TEST_CASE("inspect escapes control bytes and invalid UTF-8 in the document", "[format]") {
  CacheContents c = golden_contents(DType::F32);
  c.header.document_text = "caf\xc3\xa9 \x1b[31mred \xff end";
  auto bytes = to_bytes(c);
  CacheReader r = CacheReader::open_memory(bytes);
  std::string text = describe(r, {false, "x"});
  CHECK_THAT(text, Catch::Matchers::Contains("\"caf\xc3\xa9 \\x1B[31mred \\xFF end\""));
  std::string json = describe(r, {true, "x"});
  CHECK_THAT(json, Catch::Matchers::Contains("caf\xc3\xa9 \\u001b[31mred \\ufffd end"));
}
