// SentencePiece-style BPE (GGUF tokenizer.ggml.model = "llama": Gemma, Llama 2, Mistral 7B v0.1),
// as llama.cpp runs it: spaces become U+2581 "▁", the text is cut into UTF-8 characters, and the
// adjacent pair whose concatenation is the best-scored vocabulary token is merged first (the
// leftmost among equal scores) until no pair forms a token; a character left without a token of
// its own becomes its bytes' <0xXX> tokens (byte fallback), or unk when the vocabulary lacks them.
// Added tokens are split off before this (tokenizer/tokenizer.cc), so a fragment here is plain
// text. The same vocabulary in a Hugging Face tokenizer.json (BPE with byte_fallback, spaces
// replaced by "▁") carries ranked merges instead of scores: built from merges, the model runs
// Hugging Face's loop instead, the lowest-ranked listed pair first, from characters (a character
// without a token becomes its bytes' <0xXX> tokens before merging, or unk).
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/detail/bpe.h"  // TokenIndex

namespace kvzip::model::detail {

class SpmModel {
 public:
  // scores: one per token (higher merges first). Throws Errc::corrupt when the sizes differ.
  SpmModel(const std::vector<std::string>& tokens, const std::vector<float>& scores, int32_t unk);
  // Ranked merges ("left right", first = merged first). With split_words the escaped text is cut
  // before every "▁" and merges never cross a cut (Metaspace with split = true).
  SpmModel(const std::vector<std::string>& tokens, const std::vector<std::string>& merges,
           int32_t unk, bool split_words);

  // Appends the ids of `text` (raw bytes; invalid UTF-8 bytes are characters of their own and
  // fall back to byte tokens). With `space_prefix` a space is put in front first (Llama 2's
  // add_space_prefix, applied by the caller to the first fragment and after added tokens).
  void encode(std::string_view text, bool space_prefix, std::vector<int32_t>& out) const;

  int32_t find(std::string_view text) const;
  int32_t byte_token(uint8_t b) const { return byte_ids_[b]; }  // -1 when absent

 private:
  void init_bytes();
  void encode_ranked(std::string_view escaped, std::vector<int32_t>& out) const;

  TokenIndex index_;
  std::vector<float> scores_;
  std::optional<BpeModel> ranked_;  // tokenizer.json: merges by rank instead of scores
  int32_t unk_ = -1;
  bool split_words_ = false;
  std::array<int32_t, 256> byte_ids_{};
};

// Bytes a SentencePiece vocabulary token stands for: "▁" -> " ", "<0xXX>" of a byte token -> that
// byte, anything else as written.
std::string spm_token_bytes(std::string_view text, bool is_byte_token);

}  // namespace kvzip::model::detail
