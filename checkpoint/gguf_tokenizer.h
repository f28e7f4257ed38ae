// The tokenizer a GGUF file carries: tokenizer.ggml.* and tokenizer.chat_template read into the
// TokenizerData that tokenizer/tokenizer.h builds a Tokenizer from.
#pragma once
#include "checkpoint/gguf.h"
#include "tokenizer/tokenizer.h"

namespace kvzip::model {

// Reads tokenizer.ggml.{model, pre, tokens, token_type, merges, scores, bos/eos/eot/unknown/padding
// _token_id, add_bos_token, add_space_prefix} and tokenizer.chat_template. model and tokens are
// required, merges for gpt2 and scores for llama (Errc::corrupt when missing or mistyped); absent
// ids are -1; an absent pre is "default" (which a gpt2 Tokenizer then refuses); an absent
// add_bos_token is true for llama and the Llama 3 pre-tokenizer, as in llama.cpp. The Tokenizer
// constructor does the remaining validation.
TokenizerData tokenizer_data_from_gguf(const gguf::File& file);

}  // namespace kvzip::model
