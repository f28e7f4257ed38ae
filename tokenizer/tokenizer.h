// Byte-level BPE tokenizer (GPT-2 family: SmolLM2, Llama 3, Qwen2) or SentencePiece-style BPE
// (GGUF model "llama": Gemma 3, Llama 2, Mistral 7B v0.1; scores, byte fallback, "▁" spaces,
// tokenizer/detail/spm.h), built from the vocabulary, merges or scores and special-token ids a
// model file carries, and giving the same ids as Hugging Face `tokenizers` (byte-level) or
// llama.cpp (SentencePiece-style) for valid UTF-8 text. Control tokens ("<|im_end|>") are
// recognised in text only when asked (parse_special), so a document cannot inject chat structure.
// Invalid UTF-8 never fails: each invalid byte is encoded as its own byte token (callers that want
// to refuse such text check is_valid_utf8 first, as the CLI does for documents). A byte the
// vocabulary has no token for is dropped, as Hugging Face does (SmolLM2 lacks 0x04 0x06 0x13 0x14
// 0x16 0x1D 0xC0 0xC1 0xF1 0xF2 0xF5-0xFF), so decode(encode(s)) == s only when every byte of s has
// a token.
// A Tokenizer is immutable and thread-safe.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/utf8.h"  // is_valid_utf8: callers check text with it first

namespace kvzip::model {

// GGUF tokenizer.ggml.token_type values.
enum class TokenType : int32_t {
  Normal = 1,
  Unknown = 2,
  Control = 3,
  UserDefined = 4,
  Unused = 5,
  Byte = 6,
};

// Everything a tokenizer is built from, as stored in a model file (tokenizer.ggml.* in GGUF).
struct TokenizerData {
  std::vector<std::string>
      tokens;  // id -> text, in the byte-level alphabet (added tokens verbatim)
  std::vector<int32_t> token_types;  // id -> TokenType value; empty means all normal
  std::vector<std::string>
      merges;  // "left right", highest priority first (gpt2; llama from tokenizer.json)
  std::vector<float> scores;  // id -> merge score, higher first (llama from GGUF)
  std::string model;          // "gpt2" (byte-level BPE) or "llama" (SentencePiece-style)
  std::string pre;            // pre-tokenizer: "smollm", "gpt2", "llama-bpe", "qwen2"
  int32_t bos = -1, eos = -1, eot = -1, unk = -1, pad = -1;  // -1: absent
  bool add_bos = false;          // prepend bos to a raw (non-chat) prompt
  bool add_space_prefix = true;  // llama: a space before the text and after added tokens
  // llama from a tokenizer.json (ranked merges, no scores): the space prefix goes before the first
  // fragment only (Metaspace prepend_scheme "first"), and words split before each "▁" (Metaspace
  // split = true).
  bool space_prefix_first_only = false;
  bool split_words = false;
  bool prefix_unless_space =
      false;                   // Metaspace: no prefix before a fragment starting with " " or "▁"
  bool ranked_merges = false;  // llama from a tokenizer.json: `merges` ranked, no scores
  std::string chat_template;   // Jinja source, may be empty
};

// Whether the byte-level pre-tokenizer `pre` (pre_tokenizer names as in TokenizerData::pre)
// looks a whole word up in the vocabulary before merging (Llama 3); Errc::unsupported for an
// unknown name. Checkpoint readers use it to check a tokenizer.json's ignore_merges.
bool pre_tokenizer_ignores_merges(std::string_view pre);

class Tokenizer {
 public:
  // Validates and indexes `data`: non-empty vocab, token_types sized like tokens, model "gpt2" with
  // a known pre-tokenizer or "llama" (else Errc::unsupported), well-formed merges whose parts and
  // results are in the vocab (gpt2) or one score per token (llama), special ids in range (else
  // Errc::corrupt).
  explicit Tokenizer(TokenizerData data);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // Token ids of `text`, without bos/eos. With parse_special, control and user-defined token texts
  // become their ids; without it only user-defined ones do (as in llama.cpp) and control texts are
  // plain text.
  std::vector<int32_t> encode(std::string_view text, bool parse_special) const;

  // Bytes of the tokens concatenated (added tokens as their text). May end inside a UTF-8 sequence.
  // Throws Errc::invalid_argument on an id outside [0, vocab_size).
  std::string decode(const std::vector<int32_t>& ids) const;
  // Bytes of one token.
  const std::string& token_bytes(int32_t id) const;

  const std::string& token_text(int32_t id) const;  // as stored (byte-level alphabet)
  int32_t token_id(std::string_view text) const;    // id of a stored token text, or -1
  int32_t vocab_size() const;
  TokenType token_type(int32_t id) const;
  bool is_special(int32_t id) const;  // control or user-defined
  int32_t bos() const;
  int32_t eos() const;
  int32_t eot() const;
  int32_t unk() const;
  int32_t pad() const;
  bool add_bos() const;
  const std::string& pre() const;
  const std::string& model() const;  // "gpt2" or "llama"
  const std::string& chat_template() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Incremental decoding for generation: feed ids as they arrive and get back only complete UTF-8;
// bytes of a character split across tokens are held until it completes. Bytes that can never form
// valid UTF-8 come out as U+FFFD, so the output is always valid UTF-8. Holds a reference to the
// tokenizer, which must outlive it.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer) : tokenizer_(&tokenizer) {}

  std::string push(int32_t id);  // text completed by this token (may be empty)
  std::string finish();          // held bytes of an unfinished character, as U+FFFD; then resets

 private:
  const Tokenizer* tokenizer_;
  std::string pending_;  // an incomplete UTF-8 sequence, at most 3 bytes
};

}  // namespace kvzip::model
