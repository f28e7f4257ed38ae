// Shared pieces of the Hugging Face checkpoint loader (checkpoint/hf_model.h): a JSON file of the
// folder with typed getters whose errors name the file and the key, and the two halves that turn
// JSON into kvzip structures (config.json -> ModelConfig, tokenizer.json -> TokenizerData). JSON
// null counts as absent everywhere, as transformers writes null for unset options.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "common/error.h"
#include "common/model_config.h"
#include "tokenizer/tokenizer.h"

namespace kvzip::model::detail {

class JsonFile {
 public:
  // Parses `path`. A missing file is Errc::not_found naming `what` it was needed for; malformed
  // JSON is Errc::corrupt with nlohmann's byte position.
  static JsonFile read(const std::string& path, std::string_view what);
  // nullopt when the file does not exist.
  static std::optional<JsonFile> read_optional(const std::string& path);

  const std::string& path() const { return path_; }
  const nlohmann::json& root() const { return root_; }
  [[noreturn]] void fail(Errc code, const std::string& what) const;

  // Members of `obj` (root() unless given). `name` is the key as messages show it, for nested
  // objects e.g. "rope_scaling.factor". Absent or null: nullopt; wrong type: Errc::corrupt.
  std::optional<uint64_t> opt_uint(std::string_view key, const nlohmann::json* obj = nullptr,
                                   std::string_view name = {}) const;
  std::optional<double> opt_number(std::string_view key, const nlohmann::json* obj = nullptr,
                                   std::string_view name = {}) const;
  std::optional<std::string> opt_string(std::string_view key, const nlohmann::json* obj = nullptr,
                                        std::string_view name = {}) const;
  std::optional<bool> opt_bool(std::string_view key, const nlohmann::json* obj = nullptr,
                               std::string_view name = {}) const;
  // Absent or null: Errc::corrupt "missing key".
  uint64_t get_uint(std::string_view key, const nlohmann::json* obj = nullptr,
                    std::string_view name = {}) const;
  // The member itself, or nullptr when absent or null.
  const nlohmann::json* member(std::string_view key, const nlohmann::json* obj = nullptr) const;
  // The object member `key` as a file of its own (Gemma3ForConditionalGeneration's text_config);
  // messages name it as "<path>: <key>". Errc::corrupt when it is absent or not an object.
  JsonFile nested(std::string_view key) const;

 private:
  std::string path_;
  nlohmann::json root_;
};

// config.json -> ModelConfig (llama, mistral, qwen2). Errc::unsupported names the key and value
// kvzip cannot run (architecture, activation, rope type, biases, quantization); Errc::corrupt a
// missing or ill-typed key or inconsistent dimensions.
ModelConfig hf_config_from_json(const JsonFile& config);

// tokenizer.json (+ tokenizer_config.json, config.json for special ids; `chat_template` from
// chat_template.jinja when the folder has one, else tokenizer_config.json's) -> TokenizerData with
// `vocab_size` tokens: ids without a token are "[PAD<id>]" of type Unused, as llama.cpp's converter
// writes them. Errc::unsupported for tokenizers other than byte-level BPE with a known
// pre-tokenizer, naming what was found.
TokenizerData hf_tokenizer_from_json(const JsonFile& tokenizer, const JsonFile* tokenizer_config,
                                     const JsonFile& config,
                                     const std::optional<std::string>& chat_template,
                                     uint32_t vocab_size);

}  // namespace kvzip::model::detail
