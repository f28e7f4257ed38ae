// kvzip's SentencePiece-style tokenizer (GGUF tokenizer.ggml.model = "llama",
// tokenizer/detail/spm.h): a tiny hand-made vocabulary (merge order by score, ties, byte fallback,
// space prefix, decoding), and the real Gemma 3 270M vocabulary [realmodel] against llama.cpp's
// llama-tokenize on one sentence and Hugging Face `tokenizers` on the Normans article and mixed
// texts (tests/golden/tokens_gemma3.json, scripts/golden/make_gemma3_tokenizer_golden.py).
#include <catch2/catch.hpp>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checkpoint/gguf.h"
#include "checkpoint/gguf_tokenizer.h"
#include "common/error.h"
#include "tests/support/skip.h"
#include "tests/support/source_path.h"
#include "tokenizer/tokenizer.h"

using kvzip::model::Tokenizer;
using kvzip::model::TokenizerData;
using Ids = std::vector<int32_t>;

namespace {

// ids: 0 <unk>, 1 <s> (control), 2 <nl> (user-defined "\n"), 3..258 <0x00>..<0xFF>, then pieces.
TokenizerData tiny_spm(bool space_prefix) {
  TokenizerData d;
  d.model = "llama";
  d.tokens = {"<unk>", "<s>", "\n"};
  d.token_types = {2, 3, 4};
  d.scores = {0, 0, 0};
  char buf[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    d.tokens.push_back(buf);
    d.token_types.push_back(6);
    d.scores.push_back(0);
  }
  const std::vector<std::pair<std::string, float>> pieces = {{"a", -1},
                                                             {"b", -1},
                                                             {"c", -1},
                                                             {"\xE2\x96\x81", -1},
                                                             {"ab", -5},
                                                             {"bc", -2},
                                                             {"abc", -3},
                                                             {"\xE2\x96\x81"
                                                              "a",
                                                              -4},
                                                             {"é", -1}};
  for (const auto& [t, s] : pieces) {
    d.tokens.push_back(t);
    d.token_types.push_back(1);
    d.scores.push_back(s);
  }
  d.unk = 0;
  d.bos = 1;
  d.add_bos = true;
  d.add_space_prefix = space_prefix;
  return d;
}

int32_t id(const Tokenizer& t, const std::string& s) {
  const int32_t i = t.token_id(s);
  REQUIRE(i >= 0);
  return i;
}

}  // namespace

TEST_CASE("SentencePiece-style BPE merges the best-scored pair first, leftmost on ties",
          "[tokenizer][tokenizer][spm]") {
  const Tokenizer t(tiny_spm(false));
  // "abc": bc (-2) beats ab (-5); then a+bc = abc (-3). "abab": ab twice, leftmost first.
  CHECK(t.encode("abc", false) == Ids{id(t, "abc")});
  CHECK(t.encode("abab", false) == Ids{id(t, "ab"), id(t, "ab")});
  // Spaces become U+2581 and merge like any character; no prefix when add_space_prefix is false.
  CHECK(t.encode("c a", false) == Ids{id(t, "c"), id(t,
                                                     "\xE2\x96\x81"
                                                     "a")});
  // A character without a token: its UTF-8 bytes as <0xXX>; é has one of its own.
  CHECK(t.encode("zé", false) == Ids{3 + 'z', id(t, "é")});
  CHECK(t.encode("\xE6\x9D\xB1", false) == Ids{3 + 0xE6, 3 + 0x9D, 3 + 0xB1});
  // An invalid byte falls back alone; a user-defined token splits the text wherever it occurs.
  CHECK(t.encode("a\xFF"
                 "\nb",
                 false) == Ids{id(t, "a"), 3 + 0xFF, 2, id(t, "b")});
  // Control text is a token only with parse_special.
  CHECK(t.encode("<s>", true) == Ids{1});
  CHECK(t.encode("<s>", false).size() == 3);
  CHECK(t.decode(t.encode("c ab zé\n", false)) == "c ab zé\n");
  CHECK(t.token_bytes(id(t,
                         "\xE2\x96\x81"
                         "a")) == " a");
  CHECK(t.token_bytes(3 + 0x41) == "A");
  CHECK(t.model() == "llama");
}

TEST_CASE("SentencePiece-style add_space_prefix puts a space first and after added tokens",
          "[tokenizer][tokenizer][spm]") {
  const Tokenizer t(tiny_spm(true));
  const int32_t sp_a = id(t,
                          "\xE2\x96\x81"
                          "a");
  CHECK(t.encode("a", false) == Ids{sp_a});
  CHECK(t.encode("a\na", false) == Ids{sp_a, 2, sp_a});
  CHECK(t.encode("\n", false) == Ids{2});
}

TEST_CASE("a SentencePiece vocabulary with a score count unlike its token count is refused",
          "[tokenizer][tokenizer][spm]") {
  TokenizerData d = tiny_spm(false);
  d.scores.pop_back();
  try {
    Tokenizer t(d);
    FAIL("accepted " << d.scores.size() << " scores for " << d.tokens.size() << " tokens");
  } catch (const kvzip::Error& e) {
    CHECK(e.code() == kvzip::Errc::corrupt);
    CHECK(std::string(e.what()).find("tokenizer.ggml.scores") != std::string::npos);
  }
}

TEST_CASE("Gemma 3 tokenizer equals llama-tokenize and Hugging Face tokenizers",
          "[realmodel][gemma3][tokenizer]") {
  KVZIP_GEMMA_MODEL_PATH_OR_SKIP(path);
  const kvzip::model::gguf::File f = kvzip::model::gguf::File::open(path);
  const Tokenizer t(kvzip::model::tokenizer_data_from_gguf(f));
  REQUIRE(t.vocab_size() == 262144);
  CHECK(t.model() == "llama");
  CHECK(t.add_bos());
  CHECK(t.bos() == 2);
  CHECK(t.eos() == 1);
  // llama.cpp's llama-tokenize (BOS first; digits one per token after a lone "▁").
  Ids ids{t.bos()};
  const Ids text =
      t.encode("Hello world! The Normans were the people who in the 10th century", false);
  ids.insert(ids.end(), text.begin(), text.end());
  CHECK(ids == Ids{2, 9259, 1902, 236888, 669, 17509, 743, 964, 506, 1331, 1015, 528, 506, 236743,
                   236770, 236771, 594, 7691});
  CHECK(t.token_text(105) == "<start_of_turn>");
  CHECK(t.token_text(106) == "<end_of_turn>");
  CHECK(t.encode("\n\n", false) == Ids{108});

  std::ifstream in(kvzip::test::source_path("tests/golden/tokens_gemma3.json"));
  REQUIRE(in);
  const nlohmann::json golden = nlohmann::json::parse(in);
  REQUIRE(golden["cases"].size() >= 10);
  size_t total = 0;
  for (const auto& c : golden["cases"]) {
    const std::string s = c["text"].get<std::string>();
    const Ids want = c["ids"].get<Ids>();
    const Ids got = t.encode(s, c["parse_special"].get<bool>());
    INFO("text: " << s.substr(0, 80));
    CHECK(got == want);
    CHECK(t.decode(got) == s);
    total += got.size();
  }
  CHECK(total > 5000);  // the Normans article is in there
}
