// Hostile input: every file in tests/golden/bad/ fails with its own error code and a message
// naming what is wrong, the committed files still match their generator (bad_cases.cc), and
// damage found lazily (a K/V checksum) surfaces on first access. `kvzip_tests "[.generate-bad]"`
// rewrites the folder from the committed golden files.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>

#include "tests/format/bad_cases.h"
#include "tests/format/fixtures.h"

using namespace kvzip;
using namespace kvzip::format;
using namespace kvzip::format::testing;

namespace {

const std::string kBad = "tests/golden/bad/";

std::vector<BadCase> cases() { return all_bad_cases(); }

void expect_failure(const BadCase& c, const std::function<void()>& f) {
  try {
    f();
    FAIL(c.name << ": no error");
  } catch (const Error& e) {
    INFO(c.name << ": " << e.what());
    CHECK(errc_name(e.code()) == std::string(errc_name(c.code)));
    CHECK_THAT(e.what(), Catch::Matchers::Contains(c.message));
  }
}

}  // namespace

TEST_CASE("generate the bad files", "[.generate-bad]") {
  std::filesystem::create_directories(source_path(kBad));
  for (const BadCase& c : cases()) write_bytes(source_path(kBad + c.name), c.bytes);
}

TEST_CASE("the committed bad files are exactly those the generator makes", "[format]") {
  std::vector<std::string> want, have;
  for (const BadCase& c : cases()) {
    want.push_back(c.name);
    INFO(c.name);
    CHECK(read_bytes(source_path(kBad + c.name)) == c.bytes);
  }
  for (const auto& e : std::filesystem::directory_iterator(source_path(kBad)))
    if (e.path().extension() == ".kvz") have.push_back(e.path().filename().string());
  std::sort(want.begin(), want.end());
  std::sort(have.begin(), have.end());
  CHECK(have == want);
}

TEST_CASE("every bad file fails with its own error code and message", "[format]") {
  ModelFingerprint golden_fp = golden_contents(DType::F32).header.model;
  for (const BadCase& c : cases()) {
    std::string path = source_path(kBad + c.name);
    if (c.mode == BadMode::Open) {
      expect_failure(c, [&] { CacheReader::open(path, {Verify::Full}); });
      expect_failure(c, [&] {  // the in-memory path checks the same way
        auto bytes = read_bytes(path);
        CacheReader::open_memory(bytes, {Verify::Full});
      });
    } else {
      CacheReader r = CacheReader::open(path, {Verify::Full});
      expect_failure(c, [&] { r.check_model(golden_fp, false); });
      CHECK_FALSE(r.check_model(golden_fp, true));  // --force loads it anyway
    }
  }
}

TEST_CASE("the model mismatch message shows both fingerprints", "[format]") {
  CacheReader r = CacheReader::open(source_path(kBad + "wrong_model.kvz"));
  ModelFingerprint mine = golden_contents(DType::F32).header.model;
  try {
    r.check_model(mine, false);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Catch::Matchers::Contains("weights=0x0123456789abcdef") &&
                             Catch::Matchers::Contains("weights=0x99aabbccddeeff00"));
  }
  CHECK(
      CacheReader::open(source_path("tests/golden/kvz/tiny_v1_f32.kvz")).check_model(mine, false));
}

TEST_CASE("a damaged K/V section is caught on first access, not at open, by default", "[format]") {
  CacheReader r = CacheReader::open(source_path(kBad + "kv_checksum.kvz"));
  CHECK(r.kv_view(0));  // layer 0 is intact
  try {
    r.kv_view(1);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::checksum_mismatch);
  }
  std::vector<float> k(r.layer_rows(1) * 4), v(k.size());
  CHECK_THROWS_AS(r.read_kv(1, k, v), Error);
  CHECK_THROWS_AS(r.verify(), Error);
  // Verify::Metadata trusts K/V data: the caller chose speed over the check.
  CacheReader fast = CacheReader::open(source_path(kBad + "kv_checksum.kvz"), {Verify::Metadata});
  CHECK(fast.kv_view(1));
}

TEST_CASE("every prefix of the golden file is refused as truncated", "[format]") {
  auto g = read_bytes(source_path("tests/golden/kvz/tiny_v1_f32.kvz"));
  for (size_t n = 0; n < g.size(); n += (n < 512 ? 1 : 509)) {
    std::vector<uint8_t> cut(g.begin(), g.begin() + static_cast<long>(n));
    try {
      CacheReader::open_memory(cut);
      FAIL("prefix of " << n << " bytes opened");
    } catch (const Error& e) {
      INFO(n << ": " << e.what());
      CHECK(e.code() == Errc::truncated);
    }
  }
}

TEST_CASE("a caller limit on decoded section size refuses larger sections", "[format]") {
  auto g = read_bytes(source_path("tests/golden/kvz/tiny_v1_f32.kvz"));
  OpenOptions o;
  o.max_section_bytes = 100;
  try {
    CacheReader::open_memory(g, o);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::unsupported);
    CHECK_THAT(e.what(), Catch::Matchers::Contains("caller's limit"));
  }
}
