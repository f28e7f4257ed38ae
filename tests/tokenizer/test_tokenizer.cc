// Tokenizer unit tests on small hand-made vocabularies: merge order, added-token splitting, the
// pre-tokenizers' splits, invalid UTF-8, streaming decode and validation errors. The real SmolLM2
// vocabulary is checked against Hugging Face in test_tokenizer_golden.cc.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "common/error.h"
#include "tests/support/thrown.h"
#include "tokenizer/detail/bpe.h"
#include "tokenizer/detail/pretokenize.h"
#include "tokenizer/tokenizer.h"

using kvzip::Errc;
using kvzip::model::Tokenizer;
using kvzip::model::TokenizerData;
using kvzip::model::detail::byte_level_encode;

namespace {

// Vocabulary: 3 control tokens, the 256 byte tokens, then every merge result; `merges` are written
// in raw text with one space between the parts ("h e"), and converted to the byte-level alphabet.
kvzip::model::TokenizerData tiny(const std::vector<std::string>& raw_merges,
                                 const std::string& pre = "gpt2") {
  kvzip::model::TokenizerData d;
  d.model = "gpt2";
  d.pre = pre;
  d.tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  d.token_types = {3, 3, 3};
  for (int b = 0; b < 256; ++b) {
    d.tokens.push_back(kvzip::model::detail::byte_to_unicode(static_cast<uint8_t>(b)));
    d.token_types.push_back(1);
  }
  for (const std::string& m : raw_merges) {
    size_t cut = m.find(' ', 1);
    std::string l = byte_level_encode(m.substr(0, cut)), r = byte_level_encode(m.substr(cut + 1));
    d.merges.push_back(l + " " + r);
    d.tokens.push_back(l + r);
    d.token_types.push_back(1);
  }
  d.eos = 2;
  return d;
}

int32_t id_of(const kvzip::model::Tokenizer& t, const std::string& raw) {
  return t.token_id(byte_level_encode(raw));
}

std::vector<int32_t> ids_of(const kvzip::model::Tokenizer& t,
                            const std::vector<std::string>& raws) {
  std::vector<int32_t> out;
  for (const std::string& r : raws) out.push_back(id_of(t, r));
  return out;
}

std::vector<std::string> pieces(const std::string& pre, const std::string& text) {
  kvzip::model::detail::PreTokenizer p(pre);
  std::vector<std::string_view> v;
  p.split(text, v);
  return {v.begin(), v.end()};
}

using Strings = std::vector<std::string>;

}  // namespace

TEST_CASE("BPE merges the lowest-ranked pair first", "[tokenizer][tokenizer]") {
  kvzip::model::Tokenizer t(tiny({"b c", "a b"}));
  CHECK(t.encode("abc", false) == ids_of(t, {"a", "bc"}));
  kvzip::model::Tokenizer u(tiny({"a b", "b c"}));
  CHECK(u.encode("abc", false) == ids_of(u, {"ab", "c"}));
}

TEST_CASE("BPE breaks rank ties by taking the leftmost pair", "[tokenizer][tokenizer]") {
  kvzip::model::Tokenizer t(tiny({"a a"}));
  CHECK(t.encode("aaa", false) == ids_of(t, {"aa", "a"}));
  CHECK(t.encode("aaaaa", false) == ids_of(t, {"aa", "aa", "a"}));
}

TEST_CASE("BPE chains merges and re-examines neighbours after each merge",
          "[tokenizer][tokenizer]") {
  kvzip::model::Tokenizer t(tiny({"l o", "lo w", "e r", "low er", "b c", "a b", "c d"}));
  CHECK(t.encode("lower", false) == ids_of(t, {"lower"}));
  // b+c merges first, after which neither a+bc nor bc+d is a merge.
  CHECK(t.encode("abcd", false) == ids_of(t, {"a", "bc", "d"}));
}

TEST_CASE("bytes without merges encode as byte tokens and decode back", "[tokenizer][tokenizer]") {
  kvzip::model::Tokenizer t(tiny({}));
  std::string text = "Hi \xC3\xA9\t!";
  std::vector<int32_t> ids = t.encode(text, false);
  REQUIRE(ids.size() == text.size());
  CHECK(ids[0] == t.token_id("H"));
  CHECK(ids[2] == t.token_id("\xC4\xA0"));  // ' ' is U+0120 in the byte-level alphabet
  CHECK(t.decode(ids) == text);
}

TEST_CASE("a byte without a token is dropped before merging, as Hugging Face does",
          "[tokenizer][tokenizer]") {
  kvzip::model::TokenizerData d = tiny({"! !"});
  d.tokens[3 + 0x04] = "unused-slot";  // the vocabulary has no token for byte 0x04
  kvzip::model::Tokenizer t(std::move(d));
  CHECK(t.encode("!\x04!", false) == ids_of(t, {"!!"}));
  CHECK(t.encode("\x04", false).empty());
  CHECK(t.encode("a\x04", false) == ids_of(t, {"a"}));
}

TEST_CASE("control tokens are split out only when parse_special is set", "[tokenizer][tokenizer]") {
  kvzip::model::Tokenizer t(tiny({}));
  std::vector<int32_t> parsed = t.encode("x<|im_end|>y", true);
  CHECK(parsed == std::vector<int32_t>{id_of(t, "x"), 2, id_of(t, "y")});
  std::vector<int32_t> plain = t.encode("x<|im_end|>y", false);
  CHECK(plain.size() == std::string("x<|im_end|>y").size());
  CHECK(std::find(plain.begin(), plain.end(), 2) == plain.end());
  CHECK(t.decode(parsed) == "x<|im_end|>y");
  CHECK(t.decode(plain) == "x<|im_end|>y");
}

TEST_CASE("added tokens match leftmost first, then longest", "[tokenizer][tokenizer]") {
  kvzip::model::TokenizerData d = tiny({});
  d.tokens.insert(d.tokens.end(), {"<a>", "<a><b>", "xy", "yz"});
  d.token_types.insert(d.token_types.end(), {3, 3, 3, 3});
  auto n = static_cast<int32_t>(d.tokens.size());
  kvzip::model::Tokenizer t(std::move(d));
  CHECK(t.encode("<a><b>", true) == std::vector<int32_t>{n - 3});
  CHECK(t.encode("<a><c>", true) ==
        std::vector<int32_t>{n - 4, id_of(t, "<"), id_of(t, "c"), id_of(t, ">")});
  CHECK(t.encode("xyz", true) == std::vector<int32_t>{n - 2, id_of(t, "z")});
}

TEST_CASE("user-defined tokens are split out even without parse_special",
          "[tokenizer][tokenizer]") {
  kvzip::model::TokenizerData d = tiny({});
  d.tokens.push_back("<tool>");
  d.token_types.push_back(4);
  auto id = static_cast<int32_t>(d.tokens.size() - 1);
  kvzip::model::Tokenizer t(std::move(d));
  CHECK(t.encode("a<tool>", false) == std::vector<int32_t>{id_of(t, "a"), id});
  CHECK(t.is_special(id));
  CHECK(t.is_special(2));
  CHECK_FALSE(t.is_special(id_of(t, "a")));
}

TEST_CASE("smollm isolates every digit before the GPT-2 split", "[tokenizer][tokenizer]") {
  kvzip::model::Tokenizer gpt2(tiny({"1 2"}, "gpt2"));
  kvzip::model::Tokenizer smollm(tiny({"1 2"}, "smollm"));
  CHECK(gpt2.encode("123", false) == ids_of(gpt2, {"12", "3"}));
  CHECK(smollm.encode("123", false) == ids_of(smollm, {"1", "2", "3"}));
  CHECK(pieces("smollm", "a 123") == Strings{"a", " ", "1", "2", "3"});
  CHECK(pieces("gpt2", "a 123") == Strings{"a", " 123"});
  CHECK(pieces("smollm", "x\xD9\xA1\xD9\xA2") ==
        Strings{"x", "\xD9\xA1", "\xD9\xA2"});  // Arabic-Indic
}

TEST_CASE("the GPT-2 split leaves the last space of a run to the next word",
          "[tokenizer][tokenizer]") {
  CHECK(pieces("gpt2", "a   b") == Strings{"a", "  ", " b"});
  CHECK(pieces("gpt2", "trailing  ") == Strings{"trailing", "  "});
  CHECK(pieces("gpt2", "x\n\n\ny") == Strings{"x", "\n\n", "\n", "y"});
  CHECK(pieces("gpt2", "don't I'LL") == Strings{"don", "'t", " I", "'", "LL"});
  CHECK(pieces("gpt2", "f(x)=1;") == Strings{"f", "(", "x", ")=", "1", ";"});
}

TEST_CASE("pre-tokenizers use the Unicode White_Space set, not PCRE2's \\s",
          "[tokenizer][tokenizer]") {
  // U+180E was whitespace in old Unicode and still is for PCRE2's \s; Hugging Face treats it as a
  // symbol.
  CHECK(pieces("gpt2",
               "a\xE1\xA0\x8E"
               "b") == Strings{"a", "\xE1\xA0\x8E", "b"});
  // U+00A0 and U+3000 are whitespace for both; only ASCII ' ' joins the word after it.
  CHECK(pieces("gpt2",
               "a\xC2\xA0\xC2\xA0"
               "b") == Strings{"a", "\xC2\xA0", "\xC2\xA0", "b"});
  CHECK(pieces("gpt2", "\xE3\x80\x80x") == Strings{"\xE3\x80\x80", "x"});
}

TEST_CASE("llama-bpe groups digits by three and keeps newlines with punctuation",
          "[tokenizer][tokenizer]") {
  CHECK(pieces("llama-bpe", "1234567") == Strings{"123", "456", "7"});
  CHECK(pieces("qwen2", "1234") == Strings{"1", "2", "3", "4"});
  CHECK(pieces("llama-bpe", "I'LL go.\n\nok") == Strings{"I", "'LL", " go", ".\n\n", "ok"});
  CHECK(pieces("llama-bpe", "a\r\n  b") == Strings{"a", "\r\n", " ", " b"});
}

TEST_CASE("llama-bpe takes a word that is in the vocabulary whole (ignore_merges)",
          "[tokenizer][tokenizer]") {
  kvzip::model::TokenizerData d = tiny({"h e"}, "llama-bpe");
  d.tokens.push_back("hello");
  d.token_types.push_back(1);
  auto hello = static_cast<int32_t>(d.tokens.size() - 1);
  kvzip::model::TokenizerData g = d;
  g.pre = "gpt2";
  CHECK(kvzip::model::Tokenizer(std::move(d)).encode("hello", false) ==
        std::vector<int32_t>{hello});
  kvzip::model::Tokenizer gpt2(std::move(g));
  CHECK(gpt2.encode("hello", false) == ids_of(gpt2, {"he", "l", "l", "o"}));
}

TEST_CASE("invalid UTF-8 is encoded byte by byte without failing", "[tokenizer][tokenizer]") {
  kvzip::model::Tokenizer t(tiny({"a b"}));
  std::string text =
      "ab\xFF"
      "ab\xE2\x82";  // a stray byte, then a truncated 3-byte sequence
  std::vector<int32_t> ids = t.encode(text, true);
  CHECK(ids == std::vector<int32_t>{id_of(t, "ab"), id_of(t, "\xFF"), id_of(t, "ab"),
                                    id_of(t, "\xE2"), id_of(t, "\x82")});
  CHECK(t.decode(ids) == text);
}

TEST_CASE("is_valid_utf8 follows the Unicode definition", "[tokenizer][tokenizer]") {
  using kvzip::is_valid_utf8;
  CHECK(is_valid_utf8(""));
  CHECK(is_valid_utf8("plain ascii"));
  CHECK(is_valid_utf8("\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\xF4\x8F\xBF\xBF"));
  CHECK_FALSE(is_valid_utf8("\xC0\x80"));          // overlong NUL
  CHECK_FALSE(is_valid_utf8("\xE0\x80\xAF"));      // overlong '/'
  CHECK_FALSE(is_valid_utf8("\xED\xA0\x80"));      // surrogate U+D800
  CHECK_FALSE(is_valid_utf8("\xF4\x90\x80\x80"));  // above U+10FFFF
  CHECK_FALSE(is_valid_utf8("\xE2\x82"));          // truncated
  CHECK_FALSE(is_valid_utf8("\x80"));              // lone continuation
  CHECK_FALSE(is_valid_utf8("ok\xFF"));
}

TEST_CASE("the stream decoder holds a character split across tokens until it completes",
          "[tokenizer][tokenizer]") {
  kvzip::model::Tokenizer t(tiny({}));
  kvzip::model::StreamDecoder s(t);
  CHECK(s.push(id_of(t, "a")) == "a");
  CHECK(s.push(id_of(t, "\xE2")) == "");
  CHECK(s.push(id_of(t, "\x82")) == "");
  CHECK(s.push(id_of(t, "\xAC")) == "\xE2\x82\xAC");
  CHECK(s.push(2) == "<|im_end|>");
  CHECK(s.finish() == "");
}

TEST_CASE("the stream decoder replaces bytes that cannot form UTF-8", "[tokenizer][tokenizer]") {
  kvzip::model::Tokenizer t(tiny({}));
  kvzip::model::StreamDecoder s(t);
  CHECK(s.push(id_of(t, "\xFF")) == "\xEF\xBF\xBD");
  CHECK(s.push(id_of(t, "\xE2")) == "");
  CHECK(s.push(id_of(t, "x")) == "\xEF\xBF\xBDx");  // E2 then 'x': the sequence broke off
  CHECK(s.push(id_of(t, "\xF0")) == "");
  CHECK(s.finish() == "\xEF\xBF\xBD");
  CHECK(s.finish() == "");
}

TEST_CASE("accessors report the special ids and token texts", "[tokenizer][tokenizer]") {
  kvzip::model::TokenizerData d = tiny({"a b"});
  d.bos = 1;
  d.eot = 2;
  d.add_bos = true;
  kvzip::model::Tokenizer t(std::move(d));
  CHECK(t.vocab_size() == 3 + 256 + 1);
  CHECK(t.bos() == 1);
  CHECK(t.eos() == 2);
  CHECK(t.eot() == 2);
  CHECK(t.unk() == -1);
  CHECK(t.add_bos());
  CHECK(t.token_text(2) == "<|im_end|>");
  CHECK(t.token_text(id_of(t, " ")) == "\xC4\xA0");
  CHECK(t.token_bytes(id_of(t, " ")) == " ");
  CHECK(t.token_type(0) == kvzip::model::TokenType::Control);
  CHECK(t.token_id("nope") == -1);
  CHECK_THROWS_AS(t.token_text(t.vocab_size()), kvzip::Error);
  CHECK_THROWS_AS(t.decode({-1}), kvzip::Error);
}

TEST_CASE("unsupported tokenizer models and pre-tokenizers are refused by name",
          "[tokenizer][tokenizer]") {
  kvzip::model::TokenizerData d = tiny({});
  d.pre = "falcon";
  const kvzip::Error e = kvzip::test::error_from([&] { kvzip::model::Tokenizer t(d); },
                                                 "accepted an unknown pre-tokenizer");
  CHECK(e.code() == Errc::unsupported);
  CHECK(std::string(e.what()).find("\"falcon\"") != std::string::npos);
  d.pre = "gpt2";
  d.model = "t5";
  const kvzip::Error e2 =
      kvzip::test::error_from([&] { kvzip::model::Tokenizer t(d); }, "accepted a unigram model");
  CHECK(e2.code() == Errc::unsupported);
  CHECK(std::string(e2.what()).find("\"t5\"") != std::string::npos);
  d.model = "llama";  // SentencePiece-style: needs one score per token
  const kvzip::Error e3 =
      kvzip::test::error_from([&] { kvzip::model::Tokenizer t(d); }, "accepted no scores");
  CHECK(e3.code() == Errc::corrupt);
  CHECK(std::string(e3.what()).find("scores") != std::string::npos);
}

namespace {
Errc code_of(kvzip::model::TokenizerData d) {
  try {
    kvzip::model::Tokenizer t(std::move(d));
  } catch (const kvzip::Error& e) {
    return e.code();
  }
  return Errc::internal;  // "no error" shows up as a mismatch below
}
}  // namespace

TEST_CASE("damaged vocabularies and merges are reported as corrupt", "[tokenizer][tokenizer]") {
  kvzip::model::TokenizerData empty = tiny({});
  empty.tokens.clear();
  empty.token_types.clear();
  CHECK(code_of(empty) == Errc::corrupt);

  kvzip::model::TokenizerData types = tiny({});
  types.token_types.pop_back();
  CHECK(code_of(types) == Errc::corrupt);

  kvzip::model::TokenizerData no_space = tiny({});
  no_space.merges.push_back("ab");
  CHECK(code_of(no_space) == Errc::corrupt);

  kvzip::model::TokenizerData unknown_part = tiny({});
  unknown_part.merges.push_back("a zz");
  CHECK(code_of(unknown_part) == Errc::corrupt);

  kvzip::model::TokenizerData no_result = tiny({});
  no_result.merges.push_back("a b");  // "ab" is not in the vocabulary
  CHECK(code_of(no_result) == Errc::corrupt);

  kvzip::model::TokenizerData bos = tiny({});
  bos.bos = static_cast<int32_t>(bos.tokens.size());
  CHECK(code_of(bos) == Errc::corrupt);
}

TEST_CASE("a merge splits at the first space after its first character", "[tokenizer][tokenizer]") {
  // Parts may start with a space: " a b" is (" a", "b"), not ("", "a b").
  kvzip::model::TokenizerData d = tiny({});
  d.tokens.insert(d.tokens.end(), {" a", " ab"});
  d.token_types.insert(d.token_types.end(), {1, 1});
  d.merges.push_back(" a b");
  CHECK_NOTHROW(kvzip::model::Tokenizer(d));
  d.tokens[d.tokens.size() - 2] = "_a";
  CHECK(code_of(d) == Errc::corrupt);
}
