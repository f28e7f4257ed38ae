// Chat prompt construction as token ids for the template families kvzip supports, chosen from
// the model's Jinja template text: ChatML (SmolLM2, Qwen2), Llama 3 and Gemma; a base model without
// a template (and without ChatML tokens) gets a plain document-question-answer prompt. Templates
// are not run as Jinja; each family is rendered by code that reproduces what its template produces
// for one system message and one user turn. Control tokens come only from the template structure:
// user text, system text and documents are encoded with parse_special = false, so a literal
// "<|im_end|>" in them stays plain text. Between two control tokens, template text and user text
// are encoded as one string, so chat() gives exactly the ids of tokenizing the rendered prompt.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace kvzip::model {

enum class ChatFormat {
  ChatMl,  // <|im_start|>role\n...<|im_end|>\n
  Llama3,  // <|begin_of_text|><|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>
  Gemma,   // <bos><start_of_turn>user\n...<end_of_turn>\n<start_of_turn>model\n
  Plain,   // <bos>[system\n\n]document{user tail}\nAnswer: (base models, no chat template)
};

class ChatTemplate {
 public:
  // Chooses the family from tokenizer.chat_template(): containing "<|im_start|>" -> ChatML,
  // "<|start_header_id|>" -> Llama 3, "<start_of_turn>" -> Gemma. An empty template falls back to
  // ChatML without a default system prompt when the vocabulary has <|im_start|> and <|im_end|>,
  // else to Plain. Any other template throws Errc::unsupported; a family whose tokens are missing
  // from the vocabulary throws Errc::corrupt.
  // The tokenizer must outlive the template.
  explicit ChatTemplate(const Tokenizer& tokenizer);
  // An explicit family and default system prompt (used when prefix/chat get an empty system; when
  // both are empty there is no system turn).
  ChatTemplate(const Tokenizer& tokenizer, ChatFormat format, std::string default_system);

  ChatFormat format() const { return format_; }
  // The system prompt used when the caller gives none: for ChatML the one the template inserts
  // (SmolLM2: "You are a helpful AI assistant named SmolLM, trained by Hugging Face"), else "".
  // (Llama 3.1+ templates instead open every system turn with a fixed knowledge/date header.)
  const std::string& default_system() const { return default_system_; }

  // [system turn + user-turn opener]: everything before a document. An empty `system` means "no
  // system message", which gives the template's default system turn, or none.
  std::vector<int32_t> prefix(std::string_view system) const;
  // The document's ids (no control tokens). Same as tokenizer.encode(text, false).
  std::vector<int32_t> encode_document(std::string_view text) const;
  // [user_tail + end of user turn + assistant opener]: everything after a document. The caller
  // picks the tail, e.g. "\n\nQuestion: " + question; it may be empty.
  std::vector<int32_t> suffix(std::string_view user_tail) const;
  // [answer + end of the assistant turn + a new user turn + assistant opener]: what follows an
  // assistant's answer when the conversation goes on, so that a prompt ending in suffix() or
  // next_turn() and then `answer` continues as the template renders one more user message.
  std::vector<int32_t> next_turn(std::string_view answer, std::string_view user) const;
  // A whole single-turn prompt, ready for the model to write the assistant's answer.
  std::vector<int32_t> chat(std::string_view system, std::string_view user) const;
  // The same prompt as text (control tokens written out), for display and tests; with `turns`
  // (answer, user message pairs) the conversation goes on as next_turn() extends it.
  std::string render(std::string_view system, std::string_view user,
                     std::span<const std::pair<std::string, std::string>> turns = {}) const;
  // Ids that end an answer: the family's end-of-turn token plus the tokenizer's eos and eot,
  // sorted.
  std::vector<int32_t> stop_tokens() const;

 private:
  // A prompt as a sequence of control tokens and text; adjacent texts are merged before encoding.
  struct Piece {
    int32_t control = -1;  // >= 0: this id; else `text`
    std::string text;
  };
  using Pieces = std::vector<Piece>;

  void init_tokens();
  int32_t require_token(std::string_view text) const;
  void add_prefix(Pieces& p, std::string_view system) const;
  void add_suffix(Pieces& p, std::string_view user_tail) const;
  void add_next_turn(Pieces& p, std::string_view answer, std::string_view user) const;
  std::vector<int32_t> encode(const Pieces& p) const;

  const Tokenizer* tok_;
  ChatFormat format_;
  std::string default_system_;
  std::string system_header_;   // Llama 3.1+: opens every system turn, which is then always emitted
  bool trim_messages_ = false;  // Llama 3 templates apply `| trim` to message contents
  int32_t begin_ = -1;          // Llama 3: <|begin_of_text|>
  int32_t turn_open_ = -1;      // <|im_start|> / <|start_header_id|>
  int32_t header_close_ = -1;   // Llama 3: <|end_header_id|>
  int32_t turn_close_ = -1;     // <|im_end|> / <|eot_id|>
};

// The ChatML default system prompt a Jinja template inserts: the text of a string literal that
// reads '<|im_start|>system\n...<|im_end|>' (escapes decoded), or "" when there is none.
std::string chatml_default_system(std::string_view jinja);

}  // namespace kvzip::model
