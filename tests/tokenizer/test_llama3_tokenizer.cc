// kvzip's `llama-bpe` tokenizer on the real 128K Llama 3 vocabulary
// (tests/golden/llama3_vocab.bin.zst, Meta's tiktoken ranks from the llama-models wheel) against
// Hugging Face `tokenizers` (tests/golden/tokens_llama3.json;
// scripts/golden/make_llama3_tokenizer_golden.py, which also checks those ids against Meta's
// tiktoken encoder). The test derives the merges from the ranks itself (every split of a token into
// two tokens, by the rank of the token formed) and, through tokenizer.json, checks that the Hugging
// Face loader reads the same vocabulary back.
#include <zstd.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "checkpoint/detail/hf_json.h"
#include "tests/support/hf_fixture.h"
#include "tests/support/source_path.h"
#include "tokenizer/detail/bpe.h"
#include "tokenizer/tokenizer.h"

using namespace kvzip;

namespace {

struct Vocab {
  std::vector<std::string> base;      // raw bytes, rank order (id = rank)
  std::vector<std::string> specials;  // ids 128000 ...
};

Vocab read_vocab() {
  const std::vector<uint8_t> z =
      test::read_file_bytes(kvzip::test::source_path("tests/golden/llama3_vocab.bin.zst"));
  const unsigned long long n = ZSTD_getFrameContentSize(z.data(), z.size());
  REQUIRE(n != ZSTD_CONTENTSIZE_ERROR);
  REQUIRE(n != ZSTD_CONTENTSIZE_UNKNOWN);
  std::vector<uint8_t> b(n);
  REQUIRE(ZSTD_decompress(b.data(), b.size(), z.data(), z.size()) == n);
  size_t o = 0;
  auto u32 = [&]() {
    REQUIRE(o + 4 <= b.size());
    uint32_t v;
    std::memcpy(&v, b.data() + o, 4);
    o += 4;
    return v;
  };
  auto strings = [&](std::vector<std::string>& out) {
    out.resize(u32());
    for (std::string& s : out) {
      REQUIRE(o < b.size());
      const size_t len = b[o++];
      REQUIRE(o + len <= b.size());
      s.assign(reinterpret_cast<const char*>(b.data() + o), len);
      o += len;
    }
  };
  REQUIRE(std::memcmp(b.data(), "KVZL3VOC", 8) == 0);
  o = 8;
  REQUIRE(u32() == 1);
  Vocab v;
  strings(v.base);
  strings(v.specials);
  REQUIRE(o == b.size());
  return v;
}

model::TokenizerData llama3_data(const Vocab& v) {
  std::unordered_map<std::string, int32_t> rank;
  for (size_t i = 0; i < v.base.size(); ++i) rank.emplace(v.base[i], int32_t(i));
  model::TokenizerData d;
  d.model = "gpt2";
  d.pre = "llama-bpe";
  for (const std::string& t : v.base) d.tokens.push_back(model::detail::byte_level_encode(t));
  d.token_types.assign(v.base.size(), int32_t(model::TokenType::Normal));
  for (const std::string& s : v.specials)
    d.tokens.push_back(s), d.token_types.push_back(int32_t(model::TokenType::Control));
  for (const std::string& t : v.base) {
    std::vector<std::pair<std::pair<int32_t, int32_t>, size_t>> cands;  // ((rank l, rank r), split)
    for (size_t i = 1; i < t.size(); ++i) {
      auto l = rank.find(t.substr(0, i)), r = rank.find(t.substr(i));
      if (l != rank.end() && r != rank.end()) cands.push_back({{l->second, r->second}, i});
    }
    std::sort(cands.begin(), cands.end());
    for (const auto& c : cands)
      d.merges.push_back(model::detail::byte_level_encode(t.substr(0, c.second)) + " " +
                         model::detail::byte_level_encode(t.substr(c.second)));
  }
  d.bos = 128000;
  d.eos = 128009;
  d.add_bos = true;
  return d;
}

}  // namespace

TEST_CASE("Llama 3 (real 128K vocabulary): token ids match Hugging Face tokenizers",
          "[tokenizer][hf][tokenizer]") {
  const Vocab v = read_vocab();
  REQUIRE(v.base.size() == 128000);
  REQUIRE(v.specials.size() == 256);
  const std::vector<uint8_t> g =
      test::read_file_bytes(kvzip::test::source_path("tests/golden/tokens_llama3.json"));
  const nlohmann::json golden = nlohmann::json::parse(g.begin(), g.end());
  REQUIRE(golden["format"] == "kvzip-token-golden-json v1");
  model::TokenizerData data = llama3_data(v);
  CHECK(data.merges.size() ==
        golden["n_merges"].get<size_t>());  // 280147, as Meta's tokenizer.json
  const model::Tokenizer tok(data);
  size_t failures = 0, n = 0;
  for (const nlohmann::json& c : golden["cases"]) {
    const std::string text = c["text"];
    const bool special = c["parse_special"];
    const std::vector<int32_t> want = c["ids"].get<std::vector<int32_t>>();
    const std::vector<int32_t> got = tok.encode(text, special);
    INFO("parse_special=" << special << " text \"" << text.substr(0, 80) << "\"");
    CHECK(got == want);
    failures += got != want;
    CHECK(tok.decode(got) == text);  // every byte has a token in Llama 3
    ++n;
  }
  CHECK(n > 500);
  CHECK(failures == 0);
}

TEST_CASE("Llama 3 (real 128K vocabulary): tokenizer.json reads back through the HF loader",
          "[tokenizer][hf][tokenizer]") {
  const model::TokenizerData want = llama3_data(read_vocab());
  nlohmann::json vocab = nlohmann::json::object(), merges = nlohmann::json::array(),
                 added = nlohmann::json::array();
  for (size_t i = 0; i < 128000; ++i) vocab[want.tokens[i]] = i;
  for (const std::string& m : want.merges) {
    const size_t sp = m.find(' ');
    merges.push_back({m.substr(0, sp), m.substr(sp + 1)});
  }
  for (size_t i = 128000; i < want.tokens.size(); ++i)
    added.push_back({{"id", i}, {"content", want.tokens[i]}, {"special", true}});
  const std::string regex =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  const nlohmann::json tj = {{"version", "1.0"},
                             {"added_tokens", added},
                             {"normalizer", nullptr},
                             {"pre_tokenizer",
                              {{"type", "Sequence"},
                               {"pretokenizers",
                                {{{"type", "Split"},
                                  {"pattern", {{"Regex", regex}}},
                                  {"behavior", "Isolated"},
                                  {"invert", false}},
                                 {{"type", "ByteLevel"},
                                  {"add_prefix_space", false},
                                  {"trim_offsets", true},
                                  {"use_regex", false}}}}}},
                             {"decoder", {{"type", "ByteLevel"}}},
                             {"model",
                              {{"type", "BPE"},
                               {"ignore_merges", true},
                               {"byte_fallback", false},
                               {"vocab", vocab},
                               {"merges", merges}}}};
  test::HfCopy dir("llama3");  // a scratch folder
  const std::string text = tj.dump();
  test::write_file_bytes(dir.path("tokenizer.json"),
                         std::vector<uint8_t>(text.begin(), text.end()));
  dir.edit_json("tokenizer_config.json", [](nlohmann::json& j) {
    j["bos_token"] = "<|begin_of_text|>";
    j["eos_token"] = "<|eot_id|>";
  });
  const std::optional<model::detail::JsonFile> tc =
      model::detail::JsonFile::read_optional(dir.path("tokenizer_config.json"));
  REQUIRE(tc);
  const model::TokenizerData got = model::detail::hf_tokenizer_from_json(
      model::detail::JsonFile::read(dir.path("tokenizer.json"), "test"), &*tc,
      model::detail::JsonFile::read(dir.path("config.json"), "test"), std::nullopt, 128256);
  CHECK(got.pre == "llama-bpe");
  CHECK(got.tokens == want.tokens);
  CHECK(got.token_types == want.token_types);
  CHECK(got.merges == want.merges);
  CHECK(got.bos == 128000);
  CHECK(got.eos == 128009);
  CHECK(got.eot == 128009);
}
