// The head-scores file (format/head_scores.h): round trips through memory and disk, the atomic
// writer's refusal to replace a file, every kind of bad file (empty, wrong magic, truncated at
// each structure, future major version, checksum mismatch, trailing bytes, impossible fields),
// forward compatibility with a larger header, and the model checks (fingerprint with --force,
// L/Hkv without).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include "common/error.h"
#include "format/detail/codec.h"
#include "format/detail/layout.h"
#include "format/head_scores.h"
#include "tests/format/fixtures.h"
#include "tests/support/thrown.h"

using namespace kvzip;
using namespace kvzip::format;
using testing::TempDir;

namespace {

HeadScores sample() {
  HeadScores h;
  h.model.arch = "llama";
  h.model.name = "Tiny Test";
  h.model.tokenizer_hash = 0x1122334455667788ull;
  h.model.weights_hash = 0x99aabbccddeeff00ull;
  h.n_layers = 3;
  h.n_kv_heads = 2;
  h.calibration_tokens = 4321;
  h.chunk = 2000;
  h.source = "calib.txt";
  h.values = {0.5f, 0.25f, 1.0f, 0.0f, 0.125f, 0.75f};
  return h;
}

// Recomputes the trailing checksum after a test edits the image.
void reseal(std::vector<uint8_t>& b) {
  detail::store_u64(b.data() + b.size() - 8, detail::xxh64(b.data(), b.size() - 8));
}

Errc code_of(const std::vector<uint8_t>& bytes) {
  try {
    decode_head_scores(bytes, "test.kvh");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).rfind("test.kvh: ", 0) == 0);  // messages name the file
    return e.code();
  }
  FAIL("decoding did not throw");
  return Errc::internal;
}

void check_same(const HeadScores& a, const HeadScores& b) {
  CHECK(a.model.arch == b.model.arch);
  CHECK(a.model.name == b.model.name);
  CHECK(a.model.tokenizer_hash == b.model.tokenizer_hash);
  CHECK(a.model.weights_hash == b.model.weights_hash);
  CHECK(a.n_layers == b.n_layers);
  CHECK(a.n_kv_heads == b.n_kv_heads);
  CHECK(a.calibration_tokens == b.calibration_tokens);
  CHECK(a.chunk == b.chunk);
  CHECK(a.source == b.source);
  CHECK(a.values == b.values);
  CHECK(a.checksum == b.checksum);
}

ModelConfig config_for(const HeadScores& h) {
  ModelConfig c;
  c.arch = h.model.arch;
  c.n_layers = h.n_layers;
  c.n_kv_heads = h.n_kv_heads;
  return c;
}

}  // namespace

TEST_CASE("head scores survive encoding and decoding field for field", "[format]") {
  HeadScores h = sample();
  const std::vector<uint8_t> bytes = encode_head_scores(h);
  // 64-byte header, the three strings, 6 floats, the checksum.
  CHECK(bytes.size() == 64 + 5 + 9 + 9 + 6 * 4 + 8);
  CHECK(h.checksum == detail::load_u64(bytes.data() + bytes.size() - 8));
  const HeadScores back = decode_head_scores(bytes, "mem");
  check_same(back, h);
  CHECK(back.at(1, 0) == 1.0f);
  CHECK(back.at(2, 1) == 0.75f);
  CHECK(head_scores_checksum_text(back).size() == 18);
  // An empty model name and source are allowed.
  h.model.name.clear();
  h.source.clear();
  check_same(decode_head_scores(encode_head_scores(h), "mem"), h);
}

TEST_CASE("a head-scores file is written atomically and read back", "[format]") {
  TempDir dir;
  const std::string path = dir.path("m.kvh");
  HeadScores h = sample();
  write_head_scores_file(h, path, false);
  check_same(read_head_scores_file(path), h);
  CHECK(dir.list() == std::vector<std::string>{"m.kvh"});  // no temporary left behind
  // An existing file is kept unless force.
  HeadScores other = sample();
  other.values[0] = 0.875f;
  CHECK_THROWS_MATCHES(
      write_head_scores_file(other, path, false), Error,
      Catch::Predicate<Error>([](const Error& e) { return e.code() == Errc::invalid_argument; }));
  CHECK(read_head_scores_file(path).values[0] == 0.5f);
  write_head_scores_file(other, path, true);
  CHECK(read_head_scores_file(path).values[0] == 0.875f);
  // A missing file says so.
  try {
    read_head_scores_file(dir.path("none.kvh"));
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::not_found);
    CHECK_THAT(e.what(), Catch::Contains("the head calibration"));
  }
}

TEST_CASE("the writer refuses head scores the file cannot represent", "[format]") {
  auto refused = [](HeadScores h) {
    return test::throws_code([&] { encode_head_scores(h); }, Errc::invalid_argument);
  };
  HeadScores h = sample();
  h.values.pop_back();
  CHECK(refused(h));
  h = sample();
  h.values[3] = std::numeric_limits<float>::quiet_NaN();
  CHECK(refused(h));
  h = sample();
  h.values[3] = std::numeric_limits<float>::infinity();
  CHECK(refused(h));
  h = sample();
  h.model.arch.clear();
  CHECK(refused(h));
  h = sample();
  h.source = std::string("a\0b", 3);
  CHECK(refused(h));
  h = sample();
  h.n_layers = 0;
  h.values.clear();
  CHECK(refused(h));
}

TEST_CASE("every kind of bad head-scores file is refused with its own code", "[format]") {
  HeadScores h = sample();
  const std::vector<uint8_t> good = encode_head_scores(h);

  SECTION("empty and short files are truncated, a foreign file has the wrong magic") {
    CHECK(code_of({}) == Errc::truncated);
    CHECK(code_of({good.begin(), good.begin() + 5}) == Errc::truncated);
    std::vector<uint8_t> kvz = good;
    kvz[3] = 'Z';  // the .kvz magic
    CHECK(code_of(kvz) == Errc::bad_magic);
    CHECK(code_of({'h', 'e', 'l', 'l', 'o'}) == Errc::bad_magic);
  }
  SECTION("a file cut anywhere is truncated") {
    for (size_t n : {size_t{8}, size_t{15}, size_t{16}, size_t{40}, size_t{63}, size_t{64},
                     size_t{70}, good.size() - 9, good.size() - 1}) {
      INFO("cut at " << n);
      CHECK(code_of({good.begin(), good.begin() + n}) == Errc::truncated);
    }
  }
  SECTION("a future major version is unsupported, a future minor is read") {
    std::vector<uint8_t> b = good;
    detail::store_u16(b.data() + 8, 2);
    reseal(b);
    CHECK(code_of(b) == Errc::version_unsupported);
    b = good;
    detail::store_u16(b.data() + 10, 7);
    reseal(b);
    CHECK(decode_head_scores(b, "mem").values == h.values);
  }
  SECTION("a newer minor's larger header is skipped") {
    std::vector<uint8_t> b = good;
    b.insert(b.begin() + 64, 8, uint8_t{0xAB});
    detail::store_u32(b.data() + 12, 72);
    detail::store_u16(b.data() + 10, 1);
    reseal(b);
    const HeadScores back = decode_head_scores(b, "mem");
    CHECK(back.values == h.values);
    CHECK(back.source == h.source);
  }
  SECTION("a changed byte anywhere after the header is a checksum mismatch") {
    for (size_t at : {size_t{64}, size_t{70}, good.size() - 12, good.size() - 3}) {
      INFO("byte " << at);
      std::vector<uint8_t> b = good;
      b[at] ^= 0x01;
      CHECK(code_of(b) == Errc::checksum_mismatch);
    }
    std::vector<uint8_t> b = good;
    b[35] ^= 0x40;  // the tokenizer hash: a header field with no range to check
    CHECK(code_of(b) == Errc::checksum_mismatch);
  }
  SECTION("impossible fields and trailing bytes are corrupt") {
    auto patched = [&](size_t at, uint32_t v) {
      std::vector<uint8_t> b = good;
      detail::store_u32(b.data() + at, v);
      reseal(b);
      return b;
    };
    CHECK(code_of(patched(12, 32)) == Errc::corrupt);  // Header_Size below 64
    CHECK(code_of(patched(12, 1u << 20)) == Errc::corrupt);
    CHECK(code_of(patched(16, 0)) == Errc::corrupt);     // L = 0
    CHECK(code_of(patched(20, 5000)) == Errc::corrupt);  // Hkv too large
    CHECK(code_of(patched(52, 0)) == Errc::corrupt);     // no arch
    CHECK(code_of(patched(60, 1u << 30)) == Errc::corrupt);
    std::vector<uint8_t> b = good;
    b.push_back(0);
    CHECK(code_of(b) == Errc::corrupt);
    b = good;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::memcpy(b.data() + good.size() - 8 - 4, &nan, 4);
    reseal(b);
    CHECK(code_of(b) == Errc::corrupt);
    b = good;
    b[64 + 1] = 0;  // a NUL inside the arch string
    reseal(b);
    CHECK(code_of(b) == Errc::corrupt);
  }
  SECTION("a shape that promises more values than the file holds is truncated") {
    std::vector<uint8_t> b = good;
    detail::store_u32(b.data() + 16, 4);  // L = 4: 8 values, the file has 6
    CHECK(code_of(b) == Errc::truncated);
  }
}

TEST_CASE("head scores are checked against the model: fingerprint with force, shape always",
          "[format]") {
  const HeadScores h = sample();
  ModelConfig cfg = config_for(h);
  CHECK(check_head_scores_model(h, cfg, h.model, false));
  ModelFingerprint other = h.model;
  other.name = "renamed";  // the name is informational
  CHECK(check_head_scores_model(h, cfg, other, false));
  other.weights_hash ^= 1;
  try {
    check_head_scores_model(h, cfg, other, false);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::model_mismatch);
    CHECK_THAT(e.what(), Catch::Contains("(option force_model)"));
  }
  CHECK_FALSE(check_head_scores_model(h, cfg, other, true));
  for (int which = 0; which < 2; ++which) {
    ModelConfig c = cfg;
    (which ? c.n_kv_heads : c.n_layers) += 1;
    INFO("which " << which);
    CHECK_THROWS_MATCHES(
        check_head_scores_model(h, c, h.model, true), Error,
        Catch::Predicate<Error>([](const Error& e) { return e.code() == Errc::model_mismatch; }));
  }
}

TEST_CASE("inspect recognises a head-scores file and shows every score with its rank", "[format]") {
  HeadScores h = sample();
  h.source = "bad\x01name\xff.txt";  // untrusted bytes must come out escaped
  const std::vector<uint8_t> bytes = encode_head_scores(h);
  CHECK(looks_like_head_scores(bytes));
  CHECK_FALSE(looks_like_head_scores(std::span<const uint8_t>(bytes.data(), 7)));
  std::vector<uint8_t> kvz_magic = {0x89, 'K', 'V', 'Z', 0x0D, 0x0A, 0x1A, 0x0A};
  CHECK_FALSE(looks_like_head_scores(kvz_magic));

  const std::string text = describe_head_scores(h, "m.kvh", false);
  CHECK(text.find("L=3 Hkv=2 (6 KV heads)") != std::string::npos);
  CHECK(text.find("4321 tokens, chunk 2000") != std::string::npos);
  CHECK(text.find("bad\\x01name\\xFF.txt") != std::string::npos);
  // values {0.5, 0.25 | 1.0, 0.0 | 0.125, 0.75}: ranks 3 4 | 1 6 | 5 2
  CHECK(text.find("    0   0.5000 (3)  0.2500 (4)\n") != std::string::npos);
  CHECK(text.find("    1   1.0000 (1)  0.0000 (6)\n") != std::string::npos);
  CHECK(text.find("    2   0.1250 (5)  0.7500 (2)\n") != std::string::npos);
  CHECK(text.find("min 0.0000  median 0.5000  max 1.0000") != std::string::npos);

  const std::string json = describe_head_scores(h, "m.kvh", true);
  CHECK(json.find("\"scores\":[[0.5,0.25],[1,0],[0.125,0.75]]") != std::string::npos);
  CHECK(json.find("\"calibration_source\":\"bad\\u0001name\\ufffd.txt\"") != std::string::npos);
  CHECK(json.find("\"n_layers\":3,\"n_kv_heads\":2") != std::string::npos);
}
