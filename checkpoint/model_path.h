// Where the model comes from, for every command: -m PATH (a GGUF file or a Hugging Face checkpoint
// folder), else $KVZIP_MODEL, else the
// default cache path ${XDG_CACHE_HOME:-~/.cache}/kvzip/models/SmolLM2-135M-Instruct.Q4_1.gguf.
// resolve_model_path throws Errc::not_found with the fetch instructions when nothing exists.
#pragma once
#include <string>

namespace kvzip::model {

inline constexpr const char* kDefaultModelFile = "SmolLM2-135M-Instruct.Q4_1.gguf";

std::string default_model_path();
std::string resolve_model_path(const std::string& cli_path);

}  // namespace kvzip::model
