// tokenizer_data_from_gguf on small GGUF images built here (metadata only, no tensors): which keys
// are read, the defaults for absent optional keys, and the errors for missing or bad ones.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "checkpoint/gguf.h"
#include "checkpoint/gguf_tokenizer.h"
#include "common/error.h"
#include "tokenizer/detail/bpe.h"
#include "tokenizer/tokenizer.h"

namespace {

// Writes a GGUF v3 image with metadata key/values and no tensors.
class GgufImage {
 public:
  GgufImage& str(const std::string& key, const std::string& v) {
    head(key, 8);
    put_str(v);
    return *this;
  }
  GgufImage& u32(const std::string& key, uint32_t v) {
    head(key, 4);
    put(v);
    return *this;
  }
  GgufImage& boolean(const std::string& key, bool v) {
    head(key, 7);
    body_.push_back(v ? 1 : 0);
    return *this;
  }
  GgufImage& strings(const std::string& key, const std::vector<std::string>& v) {
    head(key, 9);
    put(uint32_t{8});
    put(uint64_t{v.size()});
    for (const std::string& s : v) put_str(s);
    return *this;
  }
  GgufImage& i32s(const std::string& key, const std::vector<int32_t>& v) {
    head(key, 9);
    put(uint32_t{5});
    put(uint64_t{v.size()});
    for (int32_t x : v) put(x);
    return *this;
  }
  kvzip::model::gguf::File file() const {
    std::vector<uint8_t> out = {'G', 'G', 'U', 'F'};
    auto append = [&](auto v) {
      uint8_t b[sizeof v];
      std::memcpy(b, &v, sizeof v);
      out.insert(out.end(), b, b + sizeof v);
    };
    append(uint32_t{3});
    append(uint64_t{0});
    append(n_kv_);
    out.insert(out.end(), body_.begin(), body_.end());
    return kvzip::model::gguf::File::from_bytes(std::move(out), "test.gguf");
  }

 private:
  template <typename T>
  void put(T v) {
    uint8_t b[sizeof v];
    std::memcpy(b, &v, sizeof v);
    body_.insert(body_.end(), b, b + sizeof v);
  }
  void put_str(const std::string& s) {
    put(uint64_t{s.size()});
    body_.insert(body_.end(), s.begin(), s.end());
  }
  void head(const std::string& key, uint32_t type) {
    put_str(key);
    put(type);
    ++n_kv_;
  }
  std::vector<uint8_t> body_;
  uint64_t n_kv_ = 0;
};

// A complete tiny byte-level vocabulary: two control tokens, 256 bytes, "ab" from merge "a b".
GgufImage tiny_image(const std::string& pre) {
  std::vector<std::string> tokens = {"<|im_start|>", "<|im_end|>"};
  std::vector<int32_t> types = {3, 3};
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(kvzip::model::detail::byte_to_unicode(static_cast<uint8_t>(b)));
    types.push_back(1);
  }
  tokens.push_back("ab");
  types.push_back(1);
  GgufImage g;
  g.str("tokenizer.ggml.model", "gpt2").strings("tokenizer.ggml.tokens", tokens);
  g.i32s("tokenizer.ggml.token_type", types).strings("tokenizer.ggml.merges", {"a b"});
  if (!pre.empty()) g.str("tokenizer.ggml.pre", pre);
  return g;
}

kvzip::Errc code_of(const GgufImage& g) {
  try {
    kvzip::model::tokenizer_data_from_gguf(g.file());
  } catch (const kvzip::Error& e) {
    return e.code();
  }
  return kvzip::Errc::internal;
}

}  // namespace

TEST_CASE("tokenizer data is read from the tokenizer.ggml keys of a GGUF file",
          "[tokenizer][tokenizer]") {
  GgufImage g = tiny_image("smollm");
  g.u32("tokenizer.ggml.bos_token_id", 0).u32("tokenizer.ggml.eos_token_id", 1);
  g.u32("tokenizer.ggml.eot_token_id", 1).u32("tokenizer.ggml.unknown_token_id", 2);
  g.u32("tokenizer.ggml.padding_token_id", 3).u32("tokenizer.ggml.seperator_token_id", 4);
  g.boolean("tokenizer.ggml.add_bos_token", true)
      .str("tokenizer.chat_template", "{{ '<|im_start|>' }}");
  kvzip::model::TokenizerData d = kvzip::model::tokenizer_data_from_gguf(g.file());
  CHECK(d.model == "gpt2");
  CHECK(d.pre == "smollm");
  CHECK(d.tokens.size() == 259);
  CHECK(d.token_types.size() == 259);
  CHECK(d.merges == std::vector<std::string>{"a b"});
  CHECK(d.bos == 0);
  CHECK(d.eos == 1);
  CHECK(d.eot == 1);
  CHECK(d.unk == 2);
  CHECK(d.pad == 3);
  CHECK(d.add_bos);
  CHECK(d.chat_template == "{{ '<|im_start|>' }}");
  kvzip::model::Tokenizer t(std::move(d));
  CHECK(t.encode("<|im_start|>ab", true) == std::vector<int32_t>{0, 258});
}

TEST_CASE("absent optional tokenizer keys take llama.cpp's defaults", "[tokenizer][tokenizer]") {
  kvzip::model::TokenizerData d =
      kvzip::model::tokenizer_data_from_gguf(tiny_image("smollm").file());
  CHECK(d.bos == -1);
  CHECK(d.eos == -1);
  CHECK(d.eot == -1);
  CHECK(d.unk == -1);
  CHECK(d.pad == -1);
  CHECK_FALSE(d.add_bos);
  CHECK(d.chat_template.empty());
  CHECK(kvzip::model::tokenizer_data_from_gguf(tiny_image("llama-bpe").file()).add_bos);
  kvzip::model::TokenizerData no_pre =
      kvzip::model::tokenizer_data_from_gguf(tiny_image("").file());
  CHECK(no_pre.pre == "default");
  CHECK_THROWS_AS(kvzip::model::Tokenizer(std::move(no_pre)), kvzip::Error);
}

TEST_CASE("missing or out-of-range tokenizer keys are reported as corrupt",
          "[tokenizer][tokenizer]") {
  GgufImage no_tokens;
  no_tokens.str("tokenizer.ggml.model", "gpt2").strings("tokenizer.ggml.merges", {});
  CHECK(code_of(no_tokens) == kvzip::Errc::corrupt);
  GgufImage no_merges;
  no_merges.str("tokenizer.ggml.model", "gpt2").strings("tokenizer.ggml.tokens", {"a"});
  CHECK(code_of(no_merges) == kvzip::Errc::corrupt);
  GgufImage bad_eos = tiny_image("gpt2");
  bad_eos.u32("tokenizer.ggml.eos_token_id", 259);
  CHECK(code_of(bad_eos) == kvzip::Errc::corrupt);
  GgufImage bad_type = tiny_image("gpt2");
  bad_type.u32("tokenizer.ggml.eos_token_id", 0);
  bad_type.strings("tokenizer.ggml.bos_token_id", {"1"});
  CHECK(code_of(bad_type) == kvzip::Errc::corrupt);
}
