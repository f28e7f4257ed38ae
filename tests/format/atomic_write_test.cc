// Writing never leaves a partial file under the target name: a body that fails midway leaves
// neither the target nor the temporary file, an existing file is refused without force and kept
// intact, and force replaces it.
#include <catch2/catch.hpp>

#include <stdexcept>

#include "tests/format/fixtures.h"
#include "tests/support/thrown.h"

using namespace kvzip;
using namespace kvzip::format;
using namespace kvzip::format::testing;

TEST_CASE("a sink that fails midway leaves no file behind", "[format]") {
  TempDir dir;
  CacheContents c = synthetic({});
  uint64_t written = 0;
  CHECK_THROWS_WITH(write_file_atomically(dir.path("out.kvz"), false,
                                          [&](Sink& sink) {
                                            // Forward to the real file sink, then fail after 5000
                                            // bytes.
                                            struct Failing final : Sink {
                                              Sink& inner;
                                              uint64_t& n;
                                              Failing(Sink& s, uint64_t& c) : inner(s), n(c) {}
                                              void write(const void* d, size_t k) override {
                                                if (n + k > 5000)
                                                  throw Error(Errc::io, "disk full (simulated)");
                                                inner.write(d, k);
                                                n += k;
                                              }
                                            } failing(sink, written);
                                            write_cache(c, failing);
                                          }),
                    Catch::Matchers::Contains("simulated"));
  CHECK(written > 0);  // the temporary file did receive bytes before the failure
  CHECK(dir.list().empty());
}

TEST_CASE("an existing file is not overwritten without force, and is replaced with force",
          "[format]") {
  TempDir dir;
  write_bytes(dir.path("out.kvz"), {1, 2, 3});
  CacheContents c = synthetic({});
  const Error e = test::error_from([&] { write_cache_file(c, dir.path("out.kvz")); },
                                   "overwrote without force");
  CHECK(e.code() == Errc::invalid_argument);
  CHECK_THAT(e.what(), Catch::Matchers::Contains("already exists") &&
                           Catch::Matchers::Contains("option force"));
  CHECK(read_bytes(dir.path("out.kvz")) == std::vector<uint8_t>{1, 2, 3});
  WriteOptions o;
  o.force = true;
  write_cache_file(c, dir.path("out.kvz"), o);
  CHECK(read_bytes(dir.path("out.kvz")) == to_bytes(c));
  CHECK(dir.list() == std::vector<std::string>{"out.kvz"});
}

TEST_CASE("writing into a missing directory is a not_found error naming it", "[format]") {
  TempDir dir;
  const Error e = test::error_from(
      [&] { write_cache_file(synthetic({}), dir.path("no/such/dir/out.kvz")); }, "no error");
  CHECK(e.code() == Errc::not_found);
  CHECK_THAT(e.what(),
             Catch::Matchers::Contains("folder " + dir.path("no/such/dir") + " does not exist"));
}

TEST_CASE("invalid contents fail before any file is created", "[format]") {
  TempDir dir;
  CacheContents c = synthetic({});
  c.layers[0].positions.pop_back();
  CHECK_THROWS_AS(write_cache_file(c, dir.path("out.kvz")), Error);
  CHECK(dir.list().empty());
}
