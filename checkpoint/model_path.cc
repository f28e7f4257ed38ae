// Model file resolution (see model_path.h for the order).
#include "checkpoint/model_path.h"

#include <cstdlib>
#include <filesystem>

#include "common/error.h"

namespace kvzip::model {

std::string default_model_path() {
  std::string base;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) {
    base = x;
  } else if (const char* h = std::getenv("HOME"); h && *h) {
    base = std::string(h) + "/.cache";
  } else {
    base = ".cache";
  }
  return base + "/kvzip/models/" + kDefaultModelFile;
}

std::string resolve_model_path(const std::string& cli_path) {
  namespace fs = std::filesystem;
  std::string path, from;
  if (!cli_path.empty()) {
    path = cli_path, from = "-m";
  } else if (const char* e = std::getenv("KVZIP_MODEL"); e && *e) {
    path = e, from = "$KVZIP_MODEL";
  } else {
    path = default_model_path(), from = "the default cache path";
  }
  std::error_code ec;
  if (fs::is_regular_file(path, ec) || fs::is_directory(path, ec))
    return path;  // GGUF or HF folder
  throw Error(Errc::not_found,
              "model file not found: " + path + " (from " + from +
                  "). Fetch the default model with `scripts/fetch-model.sh`, or pass -m PATH / set "
                  "KVZIP_MODEL to a GGUF file or a Hugging Face checkpoint folder.");
}

}  // namespace kvzip::model
