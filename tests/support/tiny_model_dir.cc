// TinyModelDir (tiny_model_dir.h): the folder is named by tag, process id and a random number, so
// tests running in parallel processes never share one.
#include "tests/support/tiny_model_dir.h"

#include <unistd.h>

#include <cstdlib>

#include "tests/support/tiny_gguf.h"

namespace kvzip::test {

namespace {

TinyModelSpec default_spec(uint64_t seed, uint32_t max_context) {
  TinyModelSpec spec;
  spec.config = tiny_gguf_llama_config();
  if (max_context) spec.config.max_context = max_context;
  spec.seed = seed;
  return spec;
}

}  // namespace

TinyModelDir::TinyModelDir(const std::string& tag, uint64_t seed, uint32_t max_context,
                           uint32_t threads)
    : TinyModelDir(tag, default_spec(seed, max_context), threads) {}

TinyModelDir::TinyModelDir(const std::string& tag, const TinyModelSpec& spec, uint32_t threads) {
  dir = std::filesystem::temp_directory_path() /
        ("kvzip-" + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(rand()));
  std::filesystem::create_directories(dir);
  write_file(path("m.gguf"), make_tiny_model(spec).bytes);
  model::LoadOptions o;
  o.threads = threads;
  model = model::Model::load(path("m.gguf"), o);
}

TinyModelDir::~TinyModelDir() {
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

}  // namespace kvzip::test
