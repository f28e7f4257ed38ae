// Pre-tokenizers of byte-level BPE vocabularies: the regex splits that cut text into "words" before
// BPE merges run on each word. A pre-tokenizer is a sequence of PCRE2 patterns; each pattern splits
// every current piece into its matches and the gaps between them (Hugging Face "Isolated"), and a
// pattern never sees past the piece it runs on. Input must be valid UTF-8 (the caller splits off
// invalid bytes first). Pieces are views into the input and concatenate back to it exactly.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kvzip::model::detail {

// PCRE2 match data for one thread; reused across matches (the patterns have no capture groups).
class MatchData {
 public:
  MatchData();
  ~MatchData();
  MatchData(const MatchData&) = delete;
  MatchData& operator=(const MatchData&) = delete;
  void* get() { return md_; }  // pcre2_match_data_8*

 private:
  void* md_ = nullptr;
};

// One compiled PCRE2 pattern (UTF + UCP, JIT-compiled when the library supports it).
class Regex {
 public:
  explicit Regex(const std::string& pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends to `out` the pieces of `text` (valid UTF-8): every match and every non-empty gap, in
  // order.
  void split(std::string_view text, MatchData& match, std::vector<std::string_view>& out) const;

 private:
  void* code_ = nullptr;  // pcre2_code_8*
};

// Settings a `tokenizer.ggml.pre` name selects.
struct PreTokenizerSpec {
  std::vector<std::string> patterns;  // applied in order
  bool ignore_merges = false;         // a word already in the vocab is one token (Llama 3)
};

// The spec for a pre-tokenizer name: "smollm", "gpt2", "llama-bpe" (also "llama3", "llama-v3"),
// "qwen2". Throws Errc::unsupported naming the value for any other name.
PreTokenizerSpec pre_tokenizer_spec(std::string_view name);

class PreTokenizer {
 public:
  explicit PreTokenizer(std::string_view name);

  // Appends the words of `text` (valid UTF-8) to `out`; they are views into `text`.
  void split(std::string_view text, std::vector<std::string_view>& out) const;
  bool ignore_merges() const { return ignore_merges_; }

 private:
  std::vector<std::unique_ptr<Regex>> regexes_;
  bool ignore_merges_ = false;
};

}  // namespace kvzip::model::detail
