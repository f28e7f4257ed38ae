// Byte-level BPE core: the GPT-2 byte <-> unicode alphabet, the vocabulary and merge ranks, and the
// merge loop for one pre-tokenized word. Vocab and merge strings are in the byte-level alphabet
// (0x20 ' ' is "Ġ" = U+0120, and so on); words come in as raw bytes. Invariant after construction:
// every merge's parts and result are in the vocabulary. A byte without a token of its own is
// dropped from the word before merging, as Hugging Face's BPE does when it has no unk token.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kvzip::model::detail {

// UTF-8 of the byte-level character that stands for byte `b`.
const std::string& byte_to_unicode(uint8_t b);
// Byte for a byte-level code point, or -1 when `cp` is not in the 256-character alphabet.
int unicode_to_byte(uint32_t cp);
// Raw bytes of a byte-level string. A string with any code point outside the alphabet is returned
// unchanged (Hugging Face's ByteLevel decoder does the same per token).
std::string byte_level_decode(std::string_view text);
// Byte-level spelling of raw bytes.
std::string byte_level_encode(std::string_view bytes);

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenIndex = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  // Throws Errc::corrupt when a merge is malformed or names a token missing from `tokens`. When a
  // text occurs twice in `tokens`, the later id wins (as in llama.cpp).
  BpeModel(const std::vector<std::string>& tokens, const std::vector<std::string>& merges);

  // Appends the ids of one word (raw bytes). With `ignore_merges`, a word whose byte-level spelling
  // is itself a token becomes that token without running merges.
  void encode_word(std::string_view word, bool ignore_merges, std::vector<int32_t>& out) const;

  // Id of a token by its (byte-level) text, or -1.
  int32_t find(std::string_view text) const;

  // Runs the merge loop over `symbols` (token ids, in order) and appends the result: the lowest
  // ranked adjacent pair first, the leftmost among equals. The SentencePiece-style tokenizer.json
  // (tokenizer/detail/spm.h) starts it from characters and byte-fallback tokens instead of bytes.
  void merge(const std::vector<int32_t>& symbols, std::vector<int32_t>& out) const;

 private:
  struct Merge {
    int32_t rank;    // position in the merge list; lower merges first
    int32_t result;  // id of left+right
  };
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  const Merge* find_merge(int32_t left, int32_t right) const;

  TokenIndex index_;
  std::array<int32_t, 256> byte_ids_{};
  std::unordered_map<uint64_t, Merge> merges_;
};

}  // namespace kvzip::model::detail
