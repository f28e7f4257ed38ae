// Golden tests against Hugging Face `tokenizers` (tests/golden/tokens_smollm2.txt, written by
// scripts/golden/make_token_golden.py): pre-tokenizer splits for every supported pre-tokenizer
// (no model needed), and SmolLM2 token ids from the real GGUF ([realmodel], needs $KVZIP_MODEL).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "checkpoint/gguf.h"
#include "checkpoint/gguf_tokenizer.h"
#include "common/utf8.h"
#include "tests/support/skip.h"
#include "tests/support/source_path.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/detail/bpe.h"
#include "tokenizer/detail/pretokenize.h"
#include "tokenizer/tokenizer.h"

namespace {

struct Golden {
  struct Encode {
    bool parse_special;
    std::string text;
    std::vector<int32_t> ids;
  };
  struct Pretok {
    std::string pre, text;
    std::vector<std::string> pieces;
  };
  std::vector<Encode> encodes;
  std::vector<Pretok> pretoks;
};

// Parses the JSON string literal starting at line[pos] (a '"'); leaves pos after it.
std::string json_string(const std::string& line, size_t& pos) {
  REQUIRE(pos < line.size());
  REQUIRE(line[pos] == '"');
  std::string out;
  for (++pos; pos < line.size() && line[pos] != '"'; ++pos) {
    char c = line[pos];
    if (c != '\\') {
      out += c;
      continue;
    }
    char e = line[++pos];
    switch (e) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'u': {
        uint32_t cp = std::stoul(line.substr(pos + 1, 4), nullptr, 16);
        pos += 4;
        if (cp >= 0xD800 && cp < 0xDC00 && line.compare(pos + 1, 2, "\\u") == 0) {
          uint32_t lo = std::stoul(line.substr(pos + 3, 4), nullptr, 16);
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          pos += 6;
        }
        kvzip::append_utf8(out, cp);
        break;
      }
      default: out += e; break;  // \" \\ \/
    }
  }
  REQUIRE(pos < line.size());
  ++pos;
  return out;
}

Golden load_golden() {
  const std::string path = kvzip::test::source_path("tests/golden/tokens_smollm2.txt");
  std::ifstream in(path);
  REQUIRE(in.good());
  std::string line;
  std::getline(in, line);
  REQUIRE(line == "kvzip-token-golden v1");  // a stale or foreign golden file fails here
  Golden g;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::string next;
    REQUIRE(std::getline(in, next));
    if (line.rfind("encode ", 0) == 0) {
      size_t pos = 9;
      Golden::Encode e{line[7] == '1', json_string(line, pos), {}};
      REQUIRE(next.rfind("ids", 0) == 0);
      std::istringstream ids(next.substr(3));
      for (int32_t id; ids >> id;) e.ids.push_back(id);
      g.encodes.push_back(std::move(e));
    } else {
      REQUIRE(line.rfind("pretok ", 0) == 0);
      size_t sp = line.find(' ', 7);
      Golden::Pretok p{line.substr(7, sp - 7), "", {}};
      size_t pos = sp + 1;
      p.text = json_string(line, pos);
      REQUIRE(next.rfind("pieces", 0) == 0);
      for (size_t q = 6; q < next.size();) {
        REQUIRE(next[q] == ' ');
        ++q;
        p.pieces.push_back(json_string(next, q));
      }
      g.pretoks.push_back(std::move(p));
    }
  }
  return g;
}

std::string head(const std::string& s) { return s.size() <= 80 ? s : s.substr(0, 80) + "..."; }

// "" when equal, else where and how the sequences first differ.
template <typename T>
std::string first_difference(const std::vector<T>& want, const std::vector<T>& got) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  if (i == want.size() && i == got.size()) return "";
  std::ostringstream os;
  os << "first difference at position " << i << " of " << want.size() << " expected / "
     << got.size() << " got: expected ";
  if (i < want.size()) os << "[" << want[i] << "]";
  else os << "(end)";
  os << ", got ";
  if (i < got.size()) os << "[" << got[i] << "]";
  else os << "(end)";
  return os.str();
}

}  // namespace

TEST_CASE("pre-tokenizers split text exactly as Hugging Face tokenizers does",
          "[tokenizer][tokenizer]") {
  Golden g = load_golden();
  REQUIRE(g.pretoks.size() > 100);
  for (const Golden::Pretok& p : g.pretoks) {
    kvzip::model::detail::PreTokenizer pre(p.pre);
    std::vector<std::string_view> views;
    pre.split(p.text, views);
    std::vector<std::string> got(views.begin(), views.end());
    INFO(p.pre << " on \"" << head(p.text) << "\": " << first_difference(p.pieces, got));
    CHECK(got == p.pieces);
  }
}

TEST_CASE("SmolLM2 token ids match Hugging Face tokenizers on every golden case",
          "[tokenizer][tokenizer][realmodel]") {
  KVZIP_REAL_MODEL_PATH_OR_SKIP(path);
  kvzip::model::Tokenizer tok(
      kvzip::model::tokenizer_data_from_gguf(kvzip::model::gguf::File::open(path)));
  CHECK(tok.vocab_size() == 49152);
  CHECK(tok.pre() == "smollm");
  Golden g = load_golden();
  REQUIRE(g.encodes.size() > 250);
  size_t failures = 0;
  for (const Golden::Encode& e : g.encodes) {
    std::vector<int32_t> got = tok.encode(e.text, e.parse_special);
    std::string diff = first_difference(e.ids, got);
    INFO("parse_special=" << e.parse_special << " text \"" << head(e.text) << "\": " << diff);
    CHECK(diff.empty());
    failures += !diff.empty();
    bool all_bytes_known = true;  // bytes without a token are dropped, so only these round-trip
    for (char c : e.text)
      all_bytes_known &=
          tok.token_id(kvzip::model::detail::byte_to_unicode(static_cast<uint8_t>(c))) >= 0;
    if (all_bytes_known) CHECK(tok.decode(got) == e.text);
  }
  CHECK(failures == 0);
}

TEST_CASE("SmolLM2's chat template renders as its Jinja source does",
          "[tokenizer][tokenizer][realmodel]") {
  KVZIP_REAL_MODEL_PATH_OR_SKIP(path);
  kvzip::model::Tokenizer tok(
      kvzip::model::tokenizer_data_from_gguf(kvzip::model::gguf::File::open(path)));
  kvzip::model::ChatTemplate chat(tok);
  CHECK(chat.format() == kvzip::model::ChatFormat::ChatMl);
  CHECK(chat.default_system() ==
        "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  std::string want =
      "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
      "Face<|im_end|>\n"
      "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n";
  CHECK(chat.render("", "hi") == want);
  CHECK(chat.chat("", "hi") == tok.encode(want, true));
  CHECK(chat.stop_tokens() == std::vector<int32_t>{2});
  // A document without leading/trailing whitespace tokenizes the same alone as inside the prompt.
  std::string doc = "The Normans gave their name to Normandy.",
              tail = "\n\nQuestion: What did they name?";
  std::vector<int32_t> parts = chat.prefix("");
  for (const auto& p : {chat.encode_document(doc), chat.suffix(tail)})
    parts.insert(parts.end(), p.begin(), p.end());
  CHECK(parts == chat.chat("", doc + tail));
  CHECK_FALSE(tok.add_bos());
}
