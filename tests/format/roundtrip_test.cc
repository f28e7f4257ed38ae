// Round trips of the .kvz writer and reader: every dtype, raw and zstd, with and without scores,
// through memory and through a file; zero-copy views; lazy and full verification; the counting
// sink's size; and the conversions f32 <-> f16/bf16 the dtypes rely on.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstring>

#include "format/detail/dtype.h"
#include "tests/format/fixtures.h"

using namespace kvzip;
using namespace kvzip::format;
using namespace kvzip::format::testing;

TEST_CASE("every dtype round-trips exactly with and without zstd and scores", "[format]") {
  auto dtype = GENERATE(DType::F32, DType::F16, DType::BF16);
  int level = GENERATE(0, 3);
  bool scores = GENERATE(true, false);
  SyntheticSpec spec;
  spec.dtype = dtype;
  spec.scores = scores;
  spec.seed = 7 + static_cast<uint64_t>(dtype);
  CacheContents in = synthetic(spec);
  WriteOptions o;
  o.zstd_level = level;
  std::vector<uint8_t> bytes = to_bytes(in, o);
  CacheReader r = CacheReader::open_memory(bytes, {Verify::Full});
  CacheContents out = r.load();
  std::string why;
  INFO(dtype_name(dtype) << " zstd " << level << " scores " << scores);
  CHECK(same_contents(in, out, &why));
  INFO(why);
  CHECK(r.has_scores() == scores);
  for (const SectionInfo& s : r.sections()) {
    CHECK(s.codec == (level ? Codec::Zstd : Codec::None));
    CHECK(s.status == ChecksumStatus::Ok);
  }
  CHECK(to_bytes(out, o) == bytes);  // re-encoding what was read gives the same file
}

TEST_CASE("a file written to disk reads back the same and the counting sink predicts its size",
          "[format]") {
  TempDir dir;
  CacheContents in = synthetic({});
  WriteOptions o;
  o.zstd_level = 1;
  o.compress_kv = false;
  write_cache_file(in, dir.path("a.kvz"), o);
  CountingSink counter;
  write_cache(in, counter, o);
  CacheReader r = CacheReader::open(dir.path("a.kvz"));
  CHECK(r.file_size() == counter.size());
  CHECK(r.file_size() % 4096 == 0);
  std::string why;
  CHECK(same_contents(in, r.load(), &why));
  INFO(why);
  for (const SectionInfo& s : r.sections())
    CHECK(s.codec == (s.name == "kv" ? Codec::None : Codec::Zstd));
  CHECK(dir.list() == std::vector<std::string>{"a.kvz"});
}

TEST_CASE("raw f32 layers are served zero-copy from the mapping and checked on first access",
          "[format]") {
  TempDir dir;
  CacheContents in = synthetic({});
  write_cache_file(in, dir.path("z.kvz"));
  CacheReader r = CacheReader::open(dir.path("z.kvz"));
  auto before = r.sections();
  CHECK(before.back().status == ChecksumStatus::Unchecked);  // K/V not hashed at open
  for (uint32_t l = 0; l < in.header.n_layers; ++l) {
    auto view = r.kv_view(l);
    REQUIRE(view);
    CHECK(std::memcmp(view->k.data(), in.layers[l].k.data(), in.layers[l].k.size() * 4) == 0);
    CHECK(std::memcmp(view->v.data(), in.layers[l].v.data(), in.layers[l].v.size() * 4) == 0);
    CHECK(reinterpret_cast<uintptr_t>(view->k.data()) % 4096 == 0);
  }
  for (const SectionInfo& s : r.sections()) CHECK(s.status == ChecksumStatus::Ok);
}

TEST_CASE("no zero-copy view is offered for f16 or compressed layers", "[format]") {
  SyntheticSpec spec;
  spec.dtype = DType::F16;
  auto bytes = to_bytes(synthetic(spec));
  CHECK_FALSE(CacheReader::open_memory(bytes).kv_view(0));
  WriteOptions o;
  o.zstd_level = 1;
  auto zbytes = to_bytes(synthetic({}), o);
  CHECK_FALSE(CacheReader::open_memory(zbytes).kv_view(0));
}

TEST_CASE("layers with no kept rows and an empty document round-trip", "[format]") {
  SyntheticSpec spec;
  spec.keep = 0.0;
  spec.prefix = 0;
  CacheContents in = synthetic(spec);  // every head keeps zero rows
  for (int level : {0, 5}) {
    WriteOptions o;
    o.zstd_level = level;
    auto bytes = to_bytes(in, o);
    CHECK(same_contents(in, CacheReader::open_memory(bytes, {Verify::Full}).load()));
  }
  spec.document = 0;
  spec.prefix = 3;
  CacheContents no_doc = synthetic(spec);
  auto bytes = to_bytes(no_doc);
  CHECK(same_contents(no_doc, CacheReader::open_memory(bytes).load()));
}

TEST_CASE("read_kv refuses buffers of the wrong size and layers out of range", "[format]") {
  auto bytes = to_bytes(synthetic({}));
  CacheReader r = CacheReader::open_memory(bytes);
  std::vector<float> k(3), v(3);
  CHECK_THROWS_MATCHES(r.read_kv(0, k, v), Error,
                       Catch::Matchers::Predicate<Error>(
                           [](const Error& e) { return e.code() == Errc::invalid_argument; }));
  CHECK_THROWS_AS(r.positions(99), Error);
}

TEST_CASE("the writer rejects contents the format cannot represent, naming the field", "[format]") {
  auto expect = [](CacheContents c, const std::string& fragment) {
    try {
      to_bytes(c);
      FAIL("no error for " << fragment);
    } catch (const Error& e) {
      CHECK(e.code() == Errc::invalid_argument);
      CHECK_THAT(e.what(), Catch::Matchers::Contains(fragment));
    }
  };
  CacheContents c = synthetic({});
  auto bad = c;
  std::swap(bad.layers[1].positions[0], bad.layers[1].positions[1]);
  expect(bad, "not strictly increasing");
  bad = c;
  bad.layers[0].k.pop_back();
  expect(bad, "layers[0].k/.v");
  bad = c;
  bad.header.document_text += '\0';
  expect(bad, "document_text contains a NUL");
  bad = c;
  bad.header.params.push_back({"chunk", "1"});
  expect(bad, "parameter 'chunk' appears twice");
  bad = c;
  bad.header.head_dim = 7;
  expect(bad, "head_dim");
  bad = c;
  bad.layers.pop_back();
  expect(bad, "layers has 2 entries");
  bad = c;
  bad.header.kv_dtype = static_cast<DType>(9);
  expect(bad, "kv_dtype id 9");
}

TEST_CASE("bulk dtype conversion gives the same bits as the scalar definition", "[format]") {
  using namespace kvzip::format::detail;
  // Random bit patterns (every class: normals, subnormals, infinities, NaNs) plus a NaN-free run
  // long enough for any vector path.
  uint64_t s = 99;
  std::vector<float> values;
  for (int i = 0; i < 4096; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    uint32_t bits = static_cast<uint32_t>(s >> 32);
    values.push_back(i < 2048 ? std::bit_cast<float>(bits)
                              : static_cast<float>(static_cast<int32_t>(bits)) * 1e-9f);
  }
  for (DType t : {DType::F16, DType::BF16}) {
    std::vector<uint8_t> bulk(values.size() * 2);
    encode_values(t, values.data(), values.size(), bulk.data());
    for (size_t i = 0; i < values.size(); ++i) {
      uint16_t want = t == DType::F16 ? f32_to_f16(values[i]) : f32_to_bf16(values[i]);
      uint16_t got;
      std::memcpy(&got, &bulk[2 * i], 2);
      REQUIRE(got == want);
    }
    std::vector<float> back(values.size());
    decode_values(t, bulk.data(), values.size(), back.data());
    for (size_t i = 0; i < values.size(); ++i) {
      uint16_t h;
      std::memcpy(&h, &bulk[2 * i], 2);
      float want = t == DType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
      REQUIRE(std::bit_cast<uint32_t>(back[i]) == std::bit_cast<uint32_t>(want));
    }
  }
}
