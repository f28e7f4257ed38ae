// The q8/q4 storage types through the real binary: `prune --kv-dtype` converts a cache and
// re-prunes a quantized one without re-quantizing it, `inspect` names the layout, `export`/`import`
// keep the stored rows (and import converts on request), a bad dtype is a usage error, and the
// removed layout options (--kv-rotate, --kv-params) are refused with a message saying why; and
// ([realmodel]) `compress --ratio R --kv-dtype q4` in one step gives a q4 file (prefix rows f16,
// rotated codes, byte parameters) that `query` answers from, and `compress` stores f16 by default;
// `compress --matmul exact` records the path and keeps about the fast path's rows.
#include <catch2/catch.hpp>

#include <filesystem>
#include <set>

#include "format/format.h"
#include "tests/format/fixtures.h"
#include "tests/support/run_cli.h"
#include "tests/support/skip.h"
#include "tests/support/tiny_gguf.h"

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
  ok({"prune", kGolden, "--ratio", "0.5", "--kv-dtype", "q4", "--kv-group", "2", "-o",
      dir.path("q4.kvz")});
  const CliResult shown = ok({"inspect", dir.path("q4.kvz"), "--verify"});
  CHECK_THAT(shown.out, Contains("format       v1.0"));
  CHECK_THAT(shown.out,
             Contains("kv dtype     q4, groups of 2 channels (byte scale code + zero point each)"));
  CHECK_THAT(shown.out, Contains("rows at positions < 3 stored as f16"));
  CHECK_THAT(shown.out, Contains("codes of Hadamard-"));
  // The options that chose among older layouts are refused, before any work, saying why.
  for (const std::string option : {"--kv-rotate", "--kv-params"})
    for (const bool prune : {true, false}) {
      std::vector<std::string> args = {
          prune ? "prune" : "import", kGolden, "--kv-dtype", "q4", option, "none", "-o",
          dir.path("x.kvz")};
      if (prune) args.insert(args.end(), {"--ratio", "0.5"});
      const CliResult r = run_kvzip(args);
      INFO(args[0] << " " << option);
      CHECK(r.exit_code == 2);
      CHECK_THAT(
          r.err,
          Contains(option + " is no longer an option: the .kvz format stores q8/q4 in one layout"));
    }
  CHECK_FALSE(std::filesystem::exists(dir.path("x.kvz")));

  // Re-pruning keeps the q4 rows as stored: the same file as pruning in memory.
  ok({"prune", dir.path("q4.kvz"), "--ratio", "0.25", "-o", dir.path("q4_small.kvz")});
  const format::CacheContents q4 = format::CacheReader::open(dir.path("q4.kvz")).load();
  const format::CacheContents small = format::CacheReader::open(dir.path("q4_small.kvz")).load();
  std::string why;
  CHECK(same_contents(format::prune(q4, 0.25), small, &why));
  INFO(why);
  CHECK(small.header.kv_dtype == format::DType::Q4);
  CHECK(small.header.kv_f16_below == 3);

  if (format::hdf5_available()) {
    ok({"export", dir.path("q4.kvz"), "--hdf5", dir.path("q4.h5")});
    ok({"import", dir.path("q4.h5"), "-o", dir.path("back.kvz")});
    CHECK(read_bytes(dir.path("back.kvz")) == read_bytes(dir.path("q4.kvz")));
    ok({"import", dir.path("q4.h5"), "--kv-dtype", "q8", "-o", dir.path("q8.kvz")});
    CHECK(format::CacheReader::open(dir.path("q8.kvz")).header().kv_dtype == format::DType::Q8);
  }

  const CliResult bad =
      run_kvzip({"prune", kGolden, "--ratio", "0.5", "--kv-dtype", "q3", "-o", dir.path("x.kvz")});
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Contains("--kv-dtype q3 is not one of f32, f16, bf16, q8, q4"));
  const CliResult group = run_kvzip({"prune", kGolden, "--ratio", "0.5", "--kv-dtype", "q4",
                                     "--kv-group", "3", "-o", dir.path("x.kvz")});
  CHECK(group.exit_code == 2);
  CHECK_THAT(group.err, Contains("does not divide"));
}

TEST_CASE(
    "compress --kv-dtype q4 refuses a head dimension that is not a power of two, before the "
    "prefill",
    "[cli]") {
  TempDir dir;
  test::TinyModelSpec spec;
  spec.config = test::tiny_gguf_llama_config();
  spec.config.head_dim = 12;  // 4 heads of 12 in a 64-wide model: the file says key_length 12
  test::write_file(dir.path("d12.gguf"), test::make_tiny_model(spec).bytes);
  const std::string text = "The Normans gave their name to Normandy.";
  write_bytes(dir.path("doc.txt"), std::vector<uint8_t>(text.begin(), text.end()));
  const CliResult r = run_kvzip({"compress", dir.path("doc.txt"), "-m", dir.path("d12.gguf"),
                                 "--kv-dtype", "q4", "-o", dir.path("doc.kvz"), "-q"});
  INFO(r.err);
  CHECK(r.exit_code == 2);
  // The command's own check, right after the model loads (set_kv_dtype would refuse it too, later).
  CHECK_THAT(r.err, Contains("compress: --kv-dtype q4 needs a power-of-two head dimension") &&
                        Contains("this model's is 12"));
  CHECK_FALSE(std::filesystem::exists(dir.path("doc.kvz")));
}

TEST_CASE("compress --ratio 0.5 --kv-dtype q4 in one step, then query answers from it",
          "[cli][realmodel]") {
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
  ok({"compress", dir.path("doc.txt"), "-o", dir.path("doc.kvz"), "--ratio", "0.5", "--kv-dtype",
      "q4", "-q", "-t", "2"});
  const format::CacheReader r =
      format::CacheReader::open(dir.path("doc.kvz"), {format::Verify::Full});
  CHECK(r.version_minor() == 0);
  CHECK(r.header().kv_dtype == format::DType::Q4);
  CHECK(r.header().kv_f16_below == r.header().prefix_length());
  CHECK(r.header().kv_group_size == r.header().head_dim);
  CHECK(r.header().achieved_ratio ==
        Approx(0.5).margin(0.01));  // selection first, then quantization
  const CliResult q =
      ok({"query", dir.path("doc.kvz"), "Who led the Normans?", "-n", "4", "-t", "2"});
  CHECK_FALSE(q.out.empty());
  const CliResult removed = run_kvzip({"compress", dir.path("doc.txt"), "-o", dir.path("x.kvz"),
                                       "--kv-dtype", "q4", "--kv-params", "f16", "-q"});
  CHECK(removed.exit_code == 2);
  CHECK_THAT(removed.err, Contains("--kv-params is no longer an option"));
  // Without --kv-dtype the cache is stored as f16.
  ok({"compress", dir.path("doc.txt"), "-o", dir.path("default.kvz"), "--ratio", "0.5", "-q", "-t",
      "2"});
  CHECK(format::CacheReader::open(dir.path("default.kvz")).header().kv_dtype == format::DType::F16);
}

// `compress --matmul exact` runs the prefill and KVzip's scoring in fp32 (as `query` and `eval`
// can): the file records it, and its kept (layer, head, position) set is close to the fast
// path's — the CLI's view of the Normans-article bar in tests/compress/test_realmodel.cc (0.97
// there over ~5,600 tokens; a 60-token document moves more per changed row, so 0.8 here).
TEST_CASE("compress --matmul exact keeps about the fast path's set and records the path",
          "[cli][realmodel]") {
  if (real_model_or_empty().empty()) return test::skip_no_model();
  TempDir dir;
  const std::string t =
      "The Normans were the people who in the 10th and 11th centuries gave their name to "
      "Normandy, a region in France. They were descended from Norse raiders and pirates from "
      "Denmark, Iceland and Norway who, under their leader Rollo, agreed to swear fealty to "
      "King Charles III of West Francia.";
  write_bytes(dir.path("doc.txt"), std::vector<uint8_t>(t.begin(), t.end()));
  for (const std::string m : {"fast", "exact"})
    ok({"compress", dir.path("doc.txt"), "-o", dir.path(m + ".kvz"), "--ratio", "0.3", "--matmul",
        m, "-q", "-t", "2"});
  const format::CacheReader fast = format::CacheReader::open(dir.path("fast.kvz"));
  const format::CacheReader exact = format::CacheReader::open(dir.path("exact.kvz"));
  auto param = [](const format::CacheReader& r, const std::string& key) {
    for (const auto& [k, v] : r.header().params)
      if (k == key) return v;
    return std::string();
  };
  CHECK(param(exact, "matmul") == "exact");
  CHECK(param(fast, "matmul").empty());
  uint64_t both = 0, either = 0;
  const uint32_t P = uint32_t(fast.header().prefix_length());
  for (uint32_t l = 0; l < fast.header().n_layers; ++l) {
    const auto pa = fast.positions(l), pb = exact.positions(l);
    const auto ha = fast.head_rows(l), hb = exact.head_rows(l);
    size_t ia = 0, ib = 0;
    for (size_t h = 0; h < ha.size(); ++h) {  // document rows only: the prefix is always kept
      std::set<uint32_t> sa, sb;
      for (uint32_t i = 0; i < ha[h]; ++i)
        if (pa[ia + i] >= P) sa.insert(pa[ia + i]);
      for (uint32_t i = 0; i < hb[h]; ++i)
        if (pb[ib + i] >= P) sb.insert(pb[ib + i]);
      ia += ha[h], ib += hb[h];
      for (uint32_t p : sa) both += sb.count(p);
      either += sa.size() + sb.size();
    }
  }
  either -= both;
  REQUIRE(either > 0);
  const double jaccard = double(both) / double(either);
  WARN("compress fast vs --matmul exact, kept document rows at ratio 0.3: Jaccard "
       << std::to_string(jaccard));
  CHECK(jaccard >= 0.8);
  // The GPU path has its own arithmetic: refused before any work.
  const CliResult cuda = run_kvzip({"compress", dir.path("doc.txt"), "-o", dir.path("x.kvz"),
                                    "--matmul", "exact", "--device", "cuda", "-q"});
  CHECK(cuda.exit_code != 0);
  // --matmul exact's refusal, or a build without CUDA
  CHECK_THAT(cuda.err, Contains("cuda", Catch::CaseSensitive::No));
  CHECK_FALSE(std::filesystem::exists(dir.path("x.kvz")));
}
