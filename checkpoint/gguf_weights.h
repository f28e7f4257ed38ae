// GGUF -> kvzip model: ModelConfig from the {arch}.* metadata, Weights whose matrices point into
// the mapped file (checkpoint/weights.h; nothing is dequantized but norms and biases), and the
// ModelFingerprint a cache records. Supported architectures:
// llama (also SmolLM), mistral (llama layout) and qwen2 (q/k/v biases). For llama-type archs the
// loader undoes llama.cpp's Q/K row permutation (GGUF row pair (2i, 2i+1) of a head holds HF rows
// (i, i+D/2)); qwen2 GGUFs are stored unpermuted. Unknown archs throw Errc::unsupported.
#pragma once
#include <functional>
#include <memory>

#include "checkpoint/gguf.h"
#include "checkpoint/weights.h"
#include "common/model_config.h"

namespace kvzip::model {

// Reads the architecture hyper-parameters. Errc::unsupported for an unknown general.architecture,
// Errc::not_found/corrupt for a missing or ill-typed key, Errc::corrupt for inconsistent values.
ModelConfig config_from_gguf(const gguf::File& file);

// Checks every tensor's shape against config_from_gguf (Errc::corrupt naming the tensor, found and
// expected shape) and type (Errc::unsupported naming the type and the tensor), and returns Weights
// whose matrices point into the file's bytes: `file` must outlive them. The second form keeps the
// file alive through Weights::storage.
Weights load_weights(const gguf::File& file);
Weights load_weights(std::shared_ptr<const gguf::File> file);
inline Weights load_weights(gguf::File&& file) {
  return load_weights(std::make_shared<const gguf::File>(std::move(file)));
}

// arch, general.name, xxh64 of tokenizer tokens + token types + merges, and xxh64 of the tensor
// table (names, types, shapes) and tensor bytes as stored.
// progress (optional) is called as the tensor bytes are hashed: (bytes done, bytes in all).
ModelFingerprint fingerprint_from_gguf(
    const gguf::File& file, const std::function<void(uint64_t, uint64_t)>& progress = nullptr);

// Whether the architecture's GGUF Q/K rows are stored permuted for interleaved RoPE.
bool gguf_qk_permuted(const std::string& arch);

}  // namespace kvzip::model
