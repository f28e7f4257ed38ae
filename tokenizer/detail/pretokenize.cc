// Pre-tokenizer patterns and the PCRE2 wrapper that runs them. The patterns are the ones Hugging
// Face tokenizer.json files use, with the Unicode classes spelled out so that PCRE2 agrees with
// `tokenizers` (Oniguruma regexes, Rust char::is_numeric for Digits) code point for code point:
//  * \s is written as the Unicode White_Space list: PCRE2's \s also matches U+180E, Oniguruma's
//    not;
//  * \p{L} / \p{N} get the code points added in Unicode 15-16 (PCRE2 10.42 ships Unicode 14), and
//    the Digits class also the ones Rust's char::is_numeric adds from Unicode 17. The ranges were
//    measured code point by code point against tokenizers 0.23.3; a newer PCRE2 that already has
//    them is unaffected.
#include "tokenizer/detail/pretokenize.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "common/error.h"

namespace kvzip::model::detail {
namespace {

// Inner parts of character classes (no brackets), so they can be combined and negated.
const std::string kSpace =
    R"(\t\n\x{0B}\f\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";
const std::string kLetter =
    R"(\p{L}\x{1C89}-\x{1C8A}\x{A7CB}-\x{A7CD}\x{A7DA}-\x{A7DC}\x{105C0}-\x{105F3}\x{10D4A}-\x{10D65})"
    R"(\x{10D6F}-\x{10D85}\x{10EC2}-\x{10EC4}\x{1123F}-\x{11240}\x{11380}-\x{11389}\x{1138B}\x{1138E})"
    R"(\x{11390}-\x{113B5}\x{113B7}\x{113D1}\x{113D3}\x{11BC0}-\x{11BE0}\x{11F02}\x{11F04}-\x{11F10})"
    R"(\x{11F12}-\x{11F33}\x{1342F}\x{13441}-\x{13446}\x{13460}-\x{143FA}\x{16100}-\x{1611D})"
    R"(\x{16D40}-\x{16D6C}\x{18CFF}\x{1B132}\x{1B155}\x{1DF25}-\x{1DF2A}\x{1E030}-\x{1E06D})"
    R"(\x{1E4D0}-\x{1E4EB}\x{1E5D0}-\x{1E5ED}\x{1E5F0}\x{2B739}\x{2EBF0}-\x{2EE5D}\x{31350}-\x{323AF})";
const std::string kNumber =
    R"(\p{N}\x{10D40}-\x{10D49}\x{116D0}-\x{116E3}\x{11BF0}-\x{11BF9}\x{11F50}-\x{11F59})"
    R"(\x{16130}-\x{16139}\x{16D70}-\x{16D79}\x{1CCF0}-\x{1CCF9}\x{1D2C0}-\x{1D2D3}\x{1E4F0}-\x{1E4F9})"
    R"(\x{1E5F1}-\x{1E5FA})";
// Rust's char::is_numeric (HF Digits) is one Unicode version ahead of Oniguruma's \p{N}.
const std::string kDigitsNumeric = kNumber + R"(\x{11DE0}-\x{11DE9}\x{16FF4}-\x{16FF6})";

std::string cls(const std::string& inner) { return "[" + inner + "]"; }
std::string not_cls(const std::string& inner) { return "[^" + inner + "]"; }

// GPT-2 (HF ByteLevel use_regex=true):
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
std::string gpt2_pattern() {
  return "'s|'t|'re|'ve|'m|'ll|'d| ?" + cls(kLetter) + "+| ?" + cls(kNumber) + "+| ?" +
         not_cls(kSpace + kLetter + kNumber) + "+|" + cls(kSpace) + "+(?!" + not_cls(kSpace) +
         ")|" + cls(kSpace) + "+";
}

// Llama 3 / Qwen2 (tokenizer.json Split), differing only in the digit group:
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|<digits>| ?[^\s\p{L}\p{N}]+[\r\n]*
//   |\s*[\r\n]+|\s+(?!\S)|\s+
// (?i) uses Unicode case folding in both engines, so 'ſ matches like 's.
std::string llama3_like_pattern(const std::string& digits) {
  return "(?i:'s|'t|'re|'ve|'m|'ll|'d)|" + not_cls(R"(\r\n)" + kLetter + kNumber) + "?" +
         cls(kLetter) + "+|" + digits + "| ?" + not_cls(kSpace + kLetter + kNumber) +
         R"(+[\r\n]*|)" + cls(kSpace) + R"(*[\r\n]+|)" + cls(kSpace) + "+(?!" + not_cls(kSpace) +
         ")|" + cls(kSpace) + "+";
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}

// Length of the UTF-8 sequence starting with lead byte `b` (text is known to be valid).
size_t utf8_len(unsigned char b) { return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4; }

}  // namespace

Regex::Regex(const std::string& pattern) {
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &err, &err_offset, nullptr);
  if (code == nullptr)
    throw Error(Errc::internal, "pre-tokenizer pattern does not compile at offset " +
                                    std::to_string(err_offset) + ": " + pcre2_message(err));
  // JIT is an optimisation only: pcre2_match falls back to the interpreter when it is unavailable.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  code_ = code;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

MatchData::MatchData() {
  // One ovector pair suffices: the patterns have no capturing groups.
  md_ = pcre2_match_data_create(1, nullptr);
  if (md_ == nullptr)
    throw Error(Errc::out_of_memory, "pre-tokenizer: cannot allocate PCRE2 match data");
}

MatchData::~MatchData() { pcre2_match_data_free(static_cast<pcre2_match_data*>(md_)); }

void Regex::split(std::string_view text, MatchData& match,
                  std::vector<std::string_view>& out) const {
  auto* code = static_cast<pcre2_code*>(code_);
  auto* md = static_cast<pcre2_match_data*>(match.get());
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t gap_start = 0, pos = 0;
  while (pos < text.size()) {
    int rc = pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0)
      throw Error(Errc::invalid_argument, "pre-tokenizer: PCRE2 match failed at byte " +
                                              std::to_string(pos) + ": " + pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    size_t begin = ov[0], end = ov[1];
    if (end == begin) {  // no supported pattern matches empty; step over one character regardless
      pos = begin + utf8_len(static_cast<unsigned char>(text[begin]));
      continue;
    }
    if (begin > gap_start) out.push_back(text.substr(gap_start, begin - gap_start));
    out.push_back(text.substr(begin, end - begin));
    gap_start = pos = end;
  }
  if (gap_start < text.size()) out.push_back(text.substr(gap_start));
}

PreTokenizerSpec pre_tokenizer_spec(std::string_view name) {
  if (name == "smollm") return {{cls(kDigitsNumeric), gpt2_pattern()}, false};
  if (name == "gpt2") return {{gpt2_pattern()}, false};
  if (name == "llama-bpe" || name == "llama3" || name == "llama-v3")
    return {{llama3_like_pattern(cls(kNumber) + "{1,3}")}, true};
  if (name == "qwen2") return {{llama3_like_pattern(cls(kNumber))}, false};
  throw Error(Errc::unsupported,
              "tokenizer.ggml.pre = \"" + std::string(name) +
                  "\" is not a pre-tokenizer kvzip implements (smollm, gpt2, llama-bpe, qwen2); "
                  "use a model with one of these tokenizers");
}

PreTokenizer::PreTokenizer(std::string_view name) {
  PreTokenizerSpec spec = pre_tokenizer_spec(name);
  for (const std::string& p : spec.patterns) regexes_.push_back(std::make_unique<Regex>(p));
  ignore_merges_ = spec.ignore_merges;
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& out) const {
  if (text.empty()) return;
  MatchData md;
  std::vector<std::string_view> cur{text}, next;
  for (size_t r = 0; r + 1 < regexes_.size(); ++r) {
    next.clear();
    for (std::string_view piece : cur) regexes_[r]->split(piece, md, next);
    cur.swap(next);
  }
  for (std::string_view piece : cur) regexes_.back()->split(piece, md, out);
}

}  // namespace kvzip::model::detail
