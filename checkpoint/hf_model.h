// Hugging Face checkpoint folders as model files: config.json (llama, mistral, qwen2),
// tokenizer.json (+ tokenizer_config.json, chat_template.jinja when present) and *.safetensors
// (F32/F16/BF16; one file, model.safetensors.index.json with shards, or every *.safetensors).
// Matrices point into the mapped safetensors files exactly as GGUF matrices do (HF rows are already
// in canonical order: no row map); Weights::storage keeps the mappings alive. The fingerprint has
// the same parts as a GGUF's (arch, tokenizer hash, weights hash over the tensor table and bytes),
// so a cache made from a folder is refused by any other model. Errors name the file and tensor.
#pragma once
#include <string>

#include "checkpoint/weights.h"
#include "common/model_config.h"
#include "tokenizer/tokenizer.h"

namespace kvzip::model {

// True when `path` is a directory (loaders treat it as a checkpoint folder, and report what it
// lacks).
bool is_hf_checkpoint_dir(const std::string& path);

// config.json of `dir` -> ModelConfig (Errc::not_found without it; unsupported / corrupt as
// detail/hf_json.h says).
ModelConfig hf_config(const std::string& dir);

struct HfModel {
  Weights weights;
  TokenizerData tokenizer;  // padded to config.vocab_size
  ModelFingerprint fingerprint;
};

// Everything Model::load needs. Errc::not_found for a missing config.json, tokenizer.json or
// safetensors file; Errc::corrupt for a missing tensor or a wrong shape (naming tensor, file, found
// and expected); Errc::unsupported for a dtype other than F32/F16/BF16 (naming tensor and dtype).
HfModel load_hf_model(const std::string& dir);

}  // namespace kvzip::model
