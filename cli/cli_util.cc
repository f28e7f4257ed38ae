// Shared CLI helpers (see cli_util.h).
#include "cli/cli_util.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <thread>

#include "checkpoint/model_path.h"
#include "common/error.h"

namespace kvzip::cli {

std::string default_output(const std::string& input, const char* extension, const char* command) {
  if (input == "-")
    throw Error(
        Errc::invalid_argument,
        std::string(command) + ": reading the document from stdin needs -o OUT" + extension);
  std::filesystem::path p(input);
  p.replace_extension(extension);
  return p.string();
}

namespace {

// KVZIP_WEIGHTS=auto|memory|map (docs/cli.md): where a GGUF's weights live (model::LoadOptions).
model::LoadOptions::Weights weights_from_env() {
  const char* v = std::getenv("KVZIP_WEIGHTS");
  const std::string s = v ? v : "";
  if (s.empty() || s == "auto") return model::LoadOptions::Weights::Auto;
  if (s == "memory") return model::LoadOptions::Weights::Memory;
  if (s == "map") return model::LoadOptions::Weights::Map;
  throw Error(Errc::invalid_argument, "KVZIP_WEIGHTS='" + s + "': expected auto, memory or map");
}

}  // namespace

std::unique_ptr<model::Model> load_model(const std::string& cli_path, uint32_t threads,
                                         bool long_running) {
  // resolve_model_path calls a directory "not found"; say what it is instead.
  const char* env = std::getenv("KVZIP_MODEL");
  const std::string named = !cli_path.empty() ? cli_path : env ? env : "";
  std::error_code ec;
  if (!named.empty() && std::filesystem::is_directory(named, ec) &&
      !std::filesystem::exists(std::filesystem::path(named) / "config.json", ec))
    throw Error(Errc::invalid_argument,
                "model " + named + " (from " + (cli_path.empty() ? "$KVZIP_MODEL" : "-m") +
                    ") is a directory without config.json; give a GGUF file (e.g. " +
                    (std::filesystem::path(named) / model::kDefaultModelFile).string() +
                    ") or a Hugging Face checkpoint folder");
  model::LoadOptions o;
  o.threads = threads;
  o.weights = weights_from_env();
  o.long_running = long_running;
  const std::string path = model::resolve_model_path(cli_path);
  // A model of a few GB takes seconds to read from disk once (to fingerprint it): say so on a
  // terminal. Small models and pipes get nothing.
  bool shown = false;
  if (isatty(STDERR_FILENO) == 1) {
    o.progress = [&](uint64_t done, uint64_t total) {
      if (total < (uint64_t(512) << 20)) return;
      std::fprintf(stderr, "\rloading %s: %.1f / %.1f GB", path.c_str(), double(done) / 1e9,
                   double(total) / 1e9);
      shown = true;
    };
  }
  std::unique_ptr<model::Model> m = model::Model::load(path, o);
  if (shown) std::fprintf(stderr, "\n");
  return m;
}

void add_removed_kv_layout_options(CLI::App* app, RemovedKvLayoutOptions& o) {
  app->add_option("--kv-rotate", o.rotate)->group("");  // "" hides an option from --help
  app->add_option("--kv-params", o.params)->group("");
}

void reject_removed_kv_layout_options(const RemovedKvLayoutOptions& o, const char* command) {
  const char* name = !o.rotate.empty()   ? "--kv-rotate"
                     : !o.params.empty() ? "--kv-params"
                                         : nullptr;
  if (!name) return;
  throw Error(Errc::invalid_argument,
              std::string(command) + ": " + name +
                  " is no longer an option: the .kvz format stores q8/q4 in one "
                  "layout (Hadamard-rotated rows, byte group parameters, prefix rows as f16; "
                  "spec/kvzip_format.md \"Quantized K/V\"); drop " +
                  name);
}

format::DType parse_kv_dtype(const std::string& name, const char* command) {
  const auto t = format::parse_dtype(name);
  if (!t)
    throw Error(Errc::invalid_argument, std::string(command) + ": --kv-dtype " + name +
                                            " is not one of f32, f16, bf16, q8, q4");
  return *t;
}

uint32_t parse_threads(const std::string& text) {
  const unsigned hw = std::thread::hardware_concurrency() ? std::thread::hardware_concurrency() : 1;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE || v < 0)
    throw Error(Errc::invalid_argument,
                "--threads " + text + ": give a whole number of threads, at least 0 (0 = all " +
                    std::to_string(hw) + " hardware threads)");
  if (v > hw) {
    std::fprintf(stderr,
                 "kvzip: note: --threads %lld is more than the %u hardware threads of this "
                 "machine; using %u\n",
                 v, hw, hw);
    return hw;
  }
  return static_cast<uint32_t>(v);
}

void add_model_option(CLI::App* app, std::string& model) {
  app->add_option("-m,--model", model, "GGUF model file (default: $KVZIP_MODEL, then the cache)");
}

void add_force_option(CLI::App* app, bool& force) {
  app->add_flag("-f,--force", force, "Replace an existing output file");
}

void add_threads_option(CLI::App* app, uint32_t& threads) {
  app->add_option_function<std::string>(
         "-t,--threads", [&threads](const std::string& s) { threads = parse_threads(s); },
         "Threads (0 = all cores; more than the machine has are capped)")
      ->type_name("N");
}

std::string with_flag_names(std::string message) {
  // Longer fields first, so "option force" does not cut "option force_model" short.
  static const std::pair<const char*, const char*> kFlags[] = {
      {"option force_model", "--force-model"},
      {"option compose.max_docs", "--max-compose"},
      {"option all_questions", "--all-questions"},
      {"option head_scores", "--head-scores"},
      {"option kv_dtypes", "--kv-dtypes"},
      {"option hotpotqa", "--hotpotqa"},
      {"option retrieve", "--retrieve"},
      {"option compose", "--compose"},
      {"option matmul", "--matmul"},
      {"option scorer", "--scorer"},
      {"option target", "--target"},
      {"option window", "--window"},
      {"option device", "--device"},
      {"option ratios", "--ratios"},
      {"option alpha", "--alpha"},
      {"option force", "--force"},
      {"option squad", "--squad"},
      {"option ruler", "--ruler"},
      {"the scorer calibration", "`kvzip calibrate --scorer`"},
      {"the head calibration", "`kvzip calibrate`"},
  };
  for (const auto& [field, flag] : kFlags)
    for (size_t at = message.find(field); at != std::string::npos; at = message.find(field, at))
      message.replace(at, std::strlen(field), flag);
  return message;
}

}  // namespace kvzip::cli
