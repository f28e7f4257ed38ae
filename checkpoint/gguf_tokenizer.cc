// tokenizer_data_from_gguf: the tokenizer.ggml.* keys of a GGUF file as TokenizerData.
#include "checkpoint/gguf_tokenizer.h"

#include <string>

#include "common/error.h"

namespace kvzip::model {

TokenizerData tokenizer_data_from_gguf(const gguf::File& f) {
  TokenizerData d;
  d.model = f.get_string("tokenizer.ggml.model");
  d.pre = f.get_string_or("tokenizer.ggml.pre", "default");
  d.tokens = f.get_string_array("tokenizer.ggml.tokens");
  if (f.has("tokenizer.ggml.token_type"))
    d.token_types = f.get_i32_array("tokenizer.ggml.token_type");
  if (d.model != "llama" || f.has("tokenizer.ggml.merges"))
    d.merges = f.get_string_array("tokenizer.ggml.merges");
  if (d.model == "llama") {
    d.scores = f.get_f32_array("tokenizer.ggml.scores");
    d.add_space_prefix = f.get_bool_or("tokenizer.ggml.add_space_prefix", true);
  }
  auto id = [&](const char* key) -> int32_t {
    if (!f.has(key)) return -1;
    int64_t v = f.get_i64(key);
    if (v < 0 || v >= static_cast<int64_t>(d.tokens.size()))
      throw Error(Errc::corrupt, f.source() + ": " + key + " = " + std::to_string(v) +
                                     " is outside the vocabulary of " +
                                     std::to_string(d.tokens.size()) + " tokens");
    return static_cast<int32_t>(v);
  };
  d.bos = id("tokenizer.ggml.bos_token_id");
  d.eos = id("tokenizer.ggml.eos_token_id");
  d.eot = id("tokenizer.ggml.eot_token_id");
  d.unk = id("tokenizer.ggml.unknown_token_id");
  d.pad = id("tokenizer.ggml.padding_token_id");
  bool llama3 = d.pre == "llama-bpe" || d.pre == "llama3" || d.pre == "llama-v3";
  d.add_bos = f.get_bool_or("tokenizer.ggml.add_bos_token", llama3 || d.model == "llama");
  d.chat_template = f.get_string_or("tokenizer.chat_template", "");
  return d;
}

}  // namespace kvzip::model
