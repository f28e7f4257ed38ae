// What the commands, the server and Python share of the learned scorer
// (compress/learned_scorer.h): the method a scorer file implies, a scorer refused for another
// model, calibration texts from files and folders, the training options' checks, and training
// into a .kvp on a tiny model file (fingerprint, source, progress, an existing output refused).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "common/error.h"
#include "compress/learned_scorer.h"
#include "format/scorer_file.h"
#include "tests/support/tiny_model_dir.h"

using namespace kvzip;

namespace {

constexpr Errc kNoError = static_cast<Errc>(0);

Errc code_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code();
  }
  return kNoError;
}

void write_text(const std::filesystem::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary) << text;
}

// Prose of about `sentences` × 10 tokens for the tiny tokenizer.
std::string prose(int sentences) {
  const char* words[] = {"the",   "harbor", "froze",  "and",  "keeper", "counted", "ships", "at",
                         "night", "while",  "winter", "came", "over",   "hills",   "slowly"};
  std::string s;
  for (int i = 0; i < sentences; ++i) {
    for (int w = 0; w < 9; ++w) s.append(words[(i * 7 + w * 3) % 15]).append(" ");
    s.append("end.\n");
  }
  return s;
}

}  // namespace

TEST_CASE("a scorer file implies kvzap, and kvzap needs one", "[compress]") {
  CHECK(compress::method_with_scorer("", true) == "kvzap");
  CHECK(compress::method_with_scorer("kvzap", true) == "kvzap");
  CHECK(compress::method_with_scorer("", false) == "kvzip");
  CHECK(compress::method_with_scorer("snapkv", false) == "snapkv");
  CHECK_THROWS_WITH(compress::method_with_scorer("snapkv", true),
                    Catch::Matchers::Contains("method snapkv cannot use it"));
  CHECK_THROWS_WITH(compress::method_with_scorer("kvzip", true),
                    Catch::Matchers::Contains("option scorer"));
  CHECK_THROWS_WITH(compress::method_with_scorer("kvzap", false),
                    Catch::Matchers::Contains("method kvzap needs option scorer"));
}

TEST_CASE("calibration targets and training options are checked", "[compress]") {
  CHECK(compress::parse_scorer_target("kvzip") == format::ScorerTarget::Kvzip);
  CHECK(compress::parse_scorer_target("kvzip+") == format::ScorerTarget::KvzipPlus);
  CHECK_THROWS_WITH(compress::parse_scorer_target("logits"),
                    Catch::Matchers::Contains("expected kvzip or kvzip+"));
  compress::TrainOptions o;
  CHECK(code_of([&] { compress::check_train_options(o); }) == kNoError);
  o.window = 15;
  CHECK(code_of([&] { compress::check_train_options(o); }) == Errc::invalid_argument);
  o.window = 16;
  o.alpha = -1;
  CHECK(code_of([&] { compress::check_train_options(o); }) == Errc::invalid_argument);
  o.alpha = std::numeric_limits<double>::infinity();
  CHECK(code_of([&] { compress::check_train_options(o); }) == Errc::invalid_argument);
}

TEST_CASE("calibration texts: files as given, folders by name, empty folders refused",
          "[compress]") {
  test::TinyModelDir d("learned_files_texts", 5);
  std::filesystem::create_directories(d.dir / "texts");
  write_text(d.dir / "texts" / "b.txt", "second");
  write_text(d.dir / "texts" / "a.txt", "first");
  write_text(d.dir / "one.txt", "alone");
  const auto t = compress::read_calibration_texts({d.path("one.txt"), d.path("texts")});
  REQUIRE(t.size() == 3);
  CHECK(t[0].text == "alone");
  CHECK(t[1].text == "first");
  CHECK(t[2].text == "second");
  CHECK(std::filesystem::path(t[2].name).filename() == "b.txt");
  std::filesystem::create_directories(d.dir / "empty");
  CHECK_THROWS_WITH(compress::read_calibration_texts({d.path("empty")}),
                    Catch::Matchers::Contains("holds no files"));
  CHECK(code_of([&] { compress::read_calibration_texts({d.path("none.txt")}); }) ==
        Errc::not_found);
}

TEST_CASE("calibrate_scorer_file trains for the model and writes its .kvp", "[compress]") {
  test::TinyModelDir d("learned_files_train", 7, 4096, 1);
  test::TinyModelDir other("learned_files_other", 8, 4096, 1);
  const std::vector<compress::CalibrationText> texts = {{d.path("first.txt"), prose(40)},
                                                        {"second.txt", prose(25)}};
  compress::CalibrateScorerOptions co;
  co.train.window = 64;
  co.train.heldout_every = 3;
  co.threads = 1;
  std::vector<std::pair<uint64_t, uint64_t>> seen;
  co.progress = [&](uint64_t done, uint64_t total) { seen.emplace_back(done, total); };
  const std::string out = d.path("tiny.kvp");
  const compress::TrainResult r = compress::calibrate_scorer_file(*d.model, texts, out, co);
  REQUIRE(!seen.empty());
  CHECK(seen.back().first == seen.back().second);
  CHECK(seen.back().second == r.file.train_tokens + r.file.heldout_tokens);
  CHECK(r.file.heldout_windows > 0);
  REQUIRE(r.fits.size() == 2);

  const format::ScorerFile f = format::read_scorer_file(out);
  CHECK(f.source == "first.txt, second.txt");
  CHECK(f.checksum == r.file.checksum);
  CHECK(f.model.weights_hash == d.model->fingerprint().weights_hash);
  CHECK(f.n_layers == d.model->config().n_layers);

  // The file works for its model only.
  const compress::LearnedScorerFile s = compress::load_learned_scorer(out);
  CHECK(s.source.front() == std::make_pair(std::string("scorer"), std::string("tiny.kvp")));
  compress::ScorerOptions so;
  compress::use_learned_scorer(so, s, *d.model);
  CHECK(so.learned == s.file);
  CHECK(code_of([&] { compress::use_learned_scorer(so, s, *other.model); }) ==
        Errc::model_mismatch);

  // An existing output is refused before any training, and stays as it was.
  co.progress = [](uint64_t, uint64_t) { FAIL("trained although the output exists"); };
  CHECK(code_of([&] { compress::calibrate_scorer_file(*d.model, texts, out, co); }) ==
        Errc::invalid_argument);
  CHECK(format::read_scorer_file(out).checksum == f.checksum);
  co.train.window = 8;
  co.force = true;
  CHECK(code_of([&] { compress::calibrate_scorer_file(*d.model, texts, out, co); }) ==
        Errc::invalid_argument);
}
