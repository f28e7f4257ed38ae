// Skips that CTest reports (see skip.h): the record the runner reads at exit.
#include "tests/support/skip.h"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>

namespace kvzip::test {
namespace {

std::vector<std::string>& records() {
  static std::vector<std::string> r;
  return r;
}

bool required(const char* var) {
  const char* v = std::getenv(var);
  return v != nullptr && *v != '\0' && std::string(v) != "0";
}

}  // namespace

void skip(const char* require, const std::string& why) {
  if (required(require)) FAIL(why << " (" << require << " is set: this run must not skip)");
  WARN("skipped: " << why);
  records().push_back(Catch::getResultCapture().getCurrentTestName() + ": " + why);
}

std::string real_model_path() {
  const char* env = std::getenv("KVZIP_MODEL");
  std::error_code ec;
  if (env == nullptr || *env == '\0' || !std::filesystem::is_regular_file(env, ec)) return "";
  return env;
}

void skip_no_model() {
  const char* env = std::getenv("KVZIP_MODEL");
  skip("KVZIP_REQUIRE_MODEL",
       env && *env ? std::string("$KVZIP_MODEL (") + env + ") is not a file"
                   : "set KVZIP_MODEL to SmolLM2-135M-Instruct.Q4_1.gguf to run this test");
}

namespace {

// $`var` when set (the file it names, or "" when that is not a file), else `file` in the folder
// scripts/fetch-model.sh writes to when it is there, else "".
std::string named_or_fetched(const char* var, const char* file) {
  std::error_code ec;
  if (const char* env = std::getenv(var); env && *env)
    return std::filesystem::is_regular_file(env, ec) ? std::string(env) : std::string();
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const std::string base = xdg && *xdg ? std::string(xdg)
                           : home      ? std::string(home) + "/.cache"
                                       : std::string();
  if (base.empty()) return "";
  const std::string path = base + "/kvzip/models/" + file;
  return std::filesystem::is_regular_file(path, ec) ? path : std::string();
}

}  // namespace

std::string gemma_model_path() {
  return named_or_fetched("KVZIP_GEMMA_MODEL", "gemma-3-270m-q4_k_m.gguf");
}

std::string qwen_model_path() {
  return named_or_fetched("KVZIP_QWEN_MODEL", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf");
}

void skip_no_qwen() {
  skip("KVZIP_REQUIRE_QWEN",
       "no Qwen2.5-Coder-0.5B-Instruct GGUF: run scripts/fetch-model.sh "
       "qwen2.5-0.5b or set KVZIP_QWEN_MODEL");
}

void skip_no_gemma() {
  skip("KVZIP_REQUIRE_GEMMA",
       "no Gemma 3 270M GGUF: run scripts/fetch-model.sh gemma3-270m or set "
       "KVZIP_GEMMA_MODEL");
}

void skip_no_gpu(const std::string& why) { skip("KVZIP_REQUIRE_GPU", why); }

const std::vector<std::string>& skipped() { return records(); }

}  // namespace kvzip::test
