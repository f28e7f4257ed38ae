// The q8/q4 storage types through the real binary: `prune --kv-dtype` converts a cache and re-prunes
// a quantized one without re-quantizing it, `inspect` names the layout, `export`/`import` keep the
// stored rows (and import converts on request), a bad dtype is a usage error; q8/q4 are written
// with Hadamard-rotated codes and byte group parameters (v1.4) unless `--kv-params f16` (v1.3) or
// `--kv-rotate none` (v1.2); and ([realmodel]) `compress --ratio R --kv-dtype q4` in one step
// gives a v1.4 file (prefix rows f16, rotated codes, byte parameters) that `query` answers from.
#include <catch2/catch.hpp>

#include "format/format.h"
#include "tests/format/fixtures.h"
#include "tests/support/run_cli.h"
#include "tests/support/skip.h"

using namespace kvzip;
using namespace kvzip::format::testing;
using namespace kvzip::testing;
using Catch::Matchers::Contains;

namespace {

const std::string kGolden = source_path("tests/golden/kvz/tiny_v1_f32.kvz");

CliResult ok(const std::vector<std::string>& args) {
  CliResult r = run_kvzip(args);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return r;
}

}  // namespace

TEST_CASE("prune/inspect/export/import handle q8 and q4 caches", "[cli]") {
  TempDir dir;
  ok({"prune", kGolden, "--ratio", "0.5", "--kv-dtype", "q4", "--kv-group", "2", "-o", dir.path("q4.kvz")});
  const CliResult shown = ok({"inspect", dir.path("q4.kvz"), "--verify"});
  CHECK_THAT(shown.out, Contains("format       v1.4"));  // f16 prefix rows, rotated codes, byte parameters
  CHECK_THAT(shown.out, Contains("kv dtype     q4, groups of 2 channels (byte scale code + zero point each)"));
  CHECK_THAT(shown.out, Contains("rows at positions < 3 stored as f16"));
  CHECK_THAT(shown.out, Contains("codes of Hadamard-"));
  ok({"prune", kGolden, "--ratio", "0.5", "--kv-dtype", "q4", "--kv-group", "2", "--kv-rotate", "none", "-o",
      dir.path("q4_v1_2.kvz")});
  const format::CacheReader v12 = format::CacheReader::open(dir.path("q4_v1_2.kvz"));
  CHECK(v12.version_minor() == 2);
  CHECK_FALSE(v12.header().kv_rotated);
  // Re-pruning a v1.2 file keeps it v1.2 (its rows as stored); asking for rotation converts it.
  ok({"prune", dir.path("q4_v1_2.kvz"), "--ratio", "0.25", "-o", dir.path("q4_v1_2_small.kvz")});
  CHECK(format::CacheReader::open(dir.path("q4_v1_2_small.kvz")).version_minor() == 2);
  ok({"prune", dir.path("q4_v1_2.kvz"), "--ratio", "0.25", "--kv-dtype", "q4", "--kv-rotate", "hadamard", "-o",
      dir.path("q4_rot_small.kvz")});
  CHECK(format::CacheReader::open(dir.path("q4_rot_small.kvz")).header().kv_rotated);
  const CliResult rot = run_kvzip({"prune", kGolden, "--ratio", "0.5", "--kv-rotate", "none", "-o", dir.path("x.kvz")});
  CHECK(rot.exit_code == 2);
  CHECK_THAT(rot.err, Contains("--kv-rotate needs --kv-dtype q8 or q4"));
  // --kv-params f16 writes v1.3 for older readers; re-pruning keeps it; asking for bytes converts.
  ok({"prune", kGolden, "--ratio", "0.5", "--kv-dtype", "q4", "--kv-group", "2", "--kv-params", "f16", "-o",
      dir.path("q4_v1_3.kvz")});
  const format::CacheReader v13 = format::CacheReader::open(dir.path("q4_v1_3.kvz"));
  CHECK(v13.version_minor() == 3);
  CHECK(v13.header().kv_rotated);
  CHECK_FALSE(v13.header().kv_byte_params);
  ok({"prune", dir.path("q4_v1_3.kvz"), "--ratio", "0.25", "-o", dir.path("q4_v1_3_small.kvz")});
  CHECK(format::CacheReader::open(dir.path("q4_v1_3_small.kvz")).version_minor() == 3);
  ok({"prune", dir.path("q4_v1_3.kvz"), "--ratio", "0.25", "--kv-dtype", "q4", "--kv-params", "byte", "-o",
      dir.path("q4_bytes_small.kvz")});
  CHECK(format::CacheReader::open(dir.path("q4_bytes_small.kvz")).header().kv_byte_params);
  const CliResult params = run_kvzip({"prune", kGolden, "--ratio", "0.5", "--kv-dtype", "q4", "--kv-params", "f8",
                                      "-o", dir.path("x.kvz")});
  CHECK(params.exit_code == 2);
  CHECK_THAT(params.err, Contains("--kv-params f8 is not one of byte, f16"));
  const CliResult params_alone = run_kvzip({"prune", kGolden, "--ratio", "0.5", "--kv-params", "f16", "-o", dir.path("x.kvz")});
  CHECK(params_alone.exit_code == 2);
  CHECK_THAT(params_alone.err, Contains("--kv-params needs --kv-dtype q8 or q4"));

  // Re-pruning keeps the q4 rows as stored: the same file as pruning in memory.
  ok({"prune", dir.path("q4.kvz"), "--ratio", "0.25", "-o", dir.path("q4_small.kvz")});
  const format::CacheContents q4 = format::CacheReader::open(dir.path("q4.kvz")).load();
  const format::CacheContents small = format::CacheReader::open(dir.path("q4_small.kvz")).load();
  std::string why;
  CHECK(same_contents(format::prune(q4, 0.25), small, &why));
  INFO(why);
  CHECK(small.header.kv_dtype == format::DType::Q4);
  CHECK(small.header.kv_rotated);
  CHECK(small.header.kv_byte_params);

  if (format::hdf5_available()) {
    ok({"export", dir.path("q4.kvz"), "--hdf5", dir.path("q4.h5")});
    ok({"import", dir.path("q4.h5"), "-o", dir.path("back.kvz")});
    CHECK(read_bytes(dir.path("back.kvz")) == read_bytes(dir.path("q4.kvz")));
    ok({"import", dir.path("q4.h5"), "--kv-dtype", "q8", "-o", dir.path("q8.kvz")});
    CHECK(format::CacheReader::open(dir.path("q8.kvz")).header().kv_dtype == format::DType::Q8);
  }

  const CliResult bad = run_kvzip({"prune", kGolden, "--ratio", "0.5", "--kv-dtype", "q3", "-o", dir.path("x.kvz")});
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Contains("--kv-dtype q3 is not one of f32, f16, bf16, q8, q4"));
  const CliResult group = run_kvzip({"prune", kGolden, "--ratio", "0.5", "--kv-dtype", "q4", "--kv-group", "3",
                                     "-o", dir.path("x.kvz")});
  CHECK(group.exit_code == 2);
  CHECK_THAT(group.err, Contains("does not divide"));
}

TEST_CASE("compress --ratio 0.5 --kv-dtype q4 in one step, then query answers from it", "[cli][realmodel]") {
  if (real_model_or_empty().empty()) return test::skip_no_model();
  TempDir dir;
  write_bytes(dir.path("doc.txt"), [] {
    const std::string t =
        "The Normans were the people who in the 10th and 11th centuries gave their name to "
        "Normandy, a region in France. They were descended from Norse raiders and pirates from "
        "Denmark, Iceland and Norway who, under their leader Rollo, agreed to swear fealty to "
        "King Charles III of West Francia.";
    return std::vector<uint8_t>(t.begin(), t.end());
  }());
  ok({"compress", dir.path("doc.txt"), "-o", dir.path("doc.kvz"), "--ratio", "0.5", "--kv-dtype", "q4", "-q",
      "-t", "2"});
  const format::CacheReader r = format::CacheReader::open(dir.path("doc.kvz"), {format::Verify::Full});
  CHECK(r.version_minor() == 4);
  CHECK(r.header().kv_dtype == format::DType::Q4);
  CHECK(r.header().kv_rotated);  // D = 64
  CHECK(r.header().kv_byte_params);
  CHECK(r.header().kv_group_size == r.header().head_dim);
  CHECK(r.header().achieved_ratio == Approx(0.5).margin(0.01));  // selection first, then quantization
  const CliResult q = ok({"query", dir.path("doc.kvz"), "Who led the Normans?", "-n", "4", "-t", "2"});
  CHECK_FALSE(q.out.empty());
}
