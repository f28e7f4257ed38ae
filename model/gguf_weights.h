// GGUF -> kvzip model: ModelConfig from the {arch}.* metadata, fp32 Weights in the canonical
// layout (model/weights.h), and the ModelFingerprint a cache records. Supported architectures:
// llama (also SmolLM), mistral (llama layout) and qwen2 (q/k/v biases). For llama-type archs the
// loader undoes llama.cpp's Q/K row permutation (GGUF row pair (2i, 2i+1) of a head holds HF rows
// (i, i+D/2)); qwen2 GGUFs are stored unpermuted. Unknown archs throw Errc::unsupported.
#pragma once
#include "common/model_config.h"
#include "model/gguf.h"
#include "model/weights.h"

namespace kvzip {

// Reads the architecture hyper-parameters. Errc::unsupported for an unknown general.architecture,
// Errc::not_found/corrupt for a missing or ill-typed key, Errc::corrupt for inconsistent values.
ModelConfig config_from_gguf(const gguf::File& file);

// Dequantizes every tensor to fp32 (rows spread over `threads` threads), checking each tensor's
// shape against config_from_gguf (Errc::corrupt naming the tensor, found and expected shape).
// Matrices stored as Q4_0, Q4_1 or Q8_0 also keep their blocks (LayerWeights::quant,
// Weights::quant_tok_embd/quant_output; Q/K rows reordered like the fp32 copy) for the decode GEMV.
Weights load_weights(const gguf::File& file, int threads);

// arch, general.name, xxh64 of tokenizer tokens + token types + merges, and xxh64 of the tensor
// table (names, types, shapes) and tensor bytes as stored.
ModelFingerprint fingerprint_from_gguf(const gguf::File& file);

// Whether the architecture's GGUF Q/K rows are stored permuted for interleaved RoPE.
bool gguf_qk_permuted(const std::string& arch);

}  // namespace kvzip
