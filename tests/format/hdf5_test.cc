// HDF5 export/import: the round trip is exact for every dtype (same contents, same .kvz bytes),
// h5dump reads the export, and a file that is not a kvzip export is refused with its own code.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>

#include "tests/format/fixtures.h"

using namespace kvzip;
using namespace kvzip::format;
using namespace kvzip::format::testing;

TEST_CASE("HDF5 export then import reproduces the cache exactly for every dtype", "[format]") {
  if (!hdf5_available()) KVZIP_FORMAT_SKIP("built without HDF5");
  TempDir dir;
  auto dtype = GENERATE(DType::F32, DType::F16, DType::BF16);
  bool scores = GENERATE(true, false);
  SyntheticSpec spec;
  spec.dtype = dtype;
  spec.scores = scores;
  CacheContents in = synthetic(spec);
  in.header.params = {{"zeta", "1"}, {"alpha", "two words"}, {"mid", ""}};  // order must survive
  in.header.rope_scaling = {RopeScalingKind::Llama3, 8.0f, 1.0f, 4.0f, 8192, {}};
  in.header.created_unix = -5;
  in.header.document_text.assign(300000, 'x');
  in.header.document_text.append(" \xc3\xa9");  // beyond HDF5's 64 KiB compact limit
  export_hdf5(in, dir.path("c.h5"), false);
  CacheContents out = import_hdf5(dir.path("c.h5"));
  std::string why;
  INFO(dtype_name(dtype));
  CHECK(same_contents(in, out, &why));
  INFO(why);
  CHECK(to_bytes(in) == to_bytes(out));
  CHECK(dir.list() == std::vector<std::string>{"c.h5"});
}

TEST_CASE("HDF5 export refuses to overwrite without force and h5dump can read it", "[format]") {
  if (!hdf5_available()) KVZIP_FORMAT_SKIP("built without HDF5");
  TempDir dir;
  CacheContents c = golden_contents(DType::F16);
  export_hdf5(c, dir.path("g.h5"), false);
  CHECK_THROWS_MATCHES(export_hdf5(c, dir.path("g.h5"), false), Error,
                       Catch::Matchers::Predicate<Error>(
                           [](const Error& e) { return e.code() == Errc::invalid_argument; }));
  export_hdf5(c, dir.path("g.h5"), true);
  if (std::system("command -v h5dump >/dev/null 2>&1") != 0)
    KVZIP_FORMAT_SKIP("h5dump not installed");
  std::string cmd =
      "h5dump -d /layers/0001/positions " + dir.path("g.h5") + " > " + dir.path("dump.txt");
  REQUIRE(std::system(cmd.c_str()) == 0);
  auto text = read_bytes(dir.path("dump.txt"));
  std::string s(text.begin(), text.end());
  CHECK_THAT(s, Catch::Matchers::Contains("(0): 0, 1, 2, 7, 0, 1, 2, 3, 4, 5, 6"));
}

TEST_CASE("importing a file that is not a kvzip HDF5 export fails with its own code", "[format]") {
  if (!hdf5_available()) KVZIP_FORMAT_SKIP("built without HDF5");
  TempDir dir;
  write_bytes(dir.path("x.h5"), {'n', 'o', 't', ' ', 'h', 'd', 'f'});
  try {
    import_hdf5(dir.path("x.h5"));
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::bad_magic);
  }
  CHECK_THROWS_AS(import_hdf5(dir.path("missing.h5")), Error);
}
