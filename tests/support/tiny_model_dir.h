// Test support: a tiny random-weight llama GGUF (tests/support/tiny_gguf.h) written into a fresh
// temporary folder and loaded as a Model, for the tests that need a real model file (loader,
// eval). The folder, and every file a test writes into it, goes when the object does.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "model/model.h"

namespace kvzip::test {

struct TinyModelSpec;  // tests/support/tiny_gguf.h

struct TinyModelDir {
  std::filesystem::path dir;
  std::unique_ptr<model::Model> model;

  // `tag` names the folder; max_context 0 keeps tiny_gguf_llama_config's; threads as LoadOptions.
  TinyModelDir(const std::string& tag, uint64_t seed, uint32_t max_context = 0,
               uint32_t threads = 0);
  // The model of `spec` (other shapes than the default's).
  TinyModelDir(const std::string& tag, const TinyModelSpec& spec, uint32_t threads = 0);
  ~TinyModelDir();
  TinyModelDir(const TinyModelDir&) = delete;
  TinyModelDir& operator=(const TinyModelDir&) = delete;

  std::string path(const std::string& name) const { return (dir / name).string(); }
};

}  // namespace kvzip::test
