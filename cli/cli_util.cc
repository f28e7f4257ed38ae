// Shared CLI helpers (see cli_util.h).
#include "cli/cli_util.h"

#include <unistd.h>

#include <cstdio>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <thread>

#include "common/error.h"
#include "model/model_path.h"

namespace kvzip::cli {

// Offset of the first byte that does not start a valid UTF-8 sequence (npos when none).
static size_t first_invalid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || i + n > s.size() || !is_valid_utf8(std::string_view(s).substr(i, n))) return i;
    i += n;
  }
  return std::string::npos;
}

void check_text(const std::string& text, const std::string& what) {
  if (!is_valid_utf8(text)) {
    const size_t at = first_invalid_utf8(text);
    throw Error(Errc::invalid_argument,
                what + " is not valid UTF-8" +
                    (at != std::string::npos ? " (first bad byte at offset " + std::to_string(at) + ")"
                                             : std::string()) +
                    "; convert it to UTF-8 first (e.g. iconv -f LATIN1 -t UTF-8)");
  }
  if (const size_t nul = text.find('\0'); nul != std::string::npos)
    throw Error(Errc::invalid_argument, what + " contains a NUL byte at offset " +
                                            std::to_string(nul) + "; it is not a text file");
  if (text.find_first_not_of(" \t\r\n\f\v") == std::string::npos)
    throw Error(Errc::invalid_argument, what + " is empty; give a non-empty UTF-8 text");
}

std::string read_text(const std::string& path, const std::string& what) {
  std::string text;
  std::error_code ec;
  if (path != "-" && std::filesystem::is_directory(path, ec))  // an ifstream opens it, reads nothing
    throw Error(Errc::invalid_argument,
                what + " " + path + " is a directory; give a UTF-8 text file ('-' reads standard input)");
  if (path == "-") {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  } else {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      const int err = errno;
      throw Error(err == ENOENT ? Errc::not_found : Errc::io,
                  "cannot open " + what + " " + path + ": " + std::strerror(err));
    }
    std::ostringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  check_text(text, what + " " + (path == "-" ? std::string("(stdin)") : path));
  return text;
}

std::string default_output(const std::string& input, const char* extension, const char* command) {
  if (input == "-")
    throw Error(Errc::invalid_argument, std::string(command) +
                                            ": reading the document from stdin needs -o OUT" +
                                            extension);
  std::filesystem::path p(input);
  p.replace_extension(extension);
  return p.string();
}

std::unique_ptr<Model> load_model(const std::string& cli_path, uint32_t threads) {
  // resolve_model_path calls a directory "not found"; say what it is instead.
  const char* env = std::getenv("KVZIP_MODEL");
  const std::string named = !cli_path.empty() ? cli_path : env ? env : "";
  std::error_code ec;
  if (!named.empty() && std::filesystem::is_directory(named, ec) &&
      !std::filesystem::exists(std::filesystem::path(named) / "config.json", ec))
    throw Error(Errc::invalid_argument,
                "model " + named + " (from " + (cli_path.empty() ? "$KVZIP_MODEL" : "-m") +
                    ") is a directory without config.json; give a GGUF file (e.g. " +
                    (std::filesystem::path(named) / kDefaultModelFile).string() +
                    ") or a Hugging Face checkpoint folder");
  LoadOptions o;
  o.threads = threads;
  const std::string path = resolve_model_path(cli_path);
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
  std::unique_ptr<Model> m = Model::load(path, o);
  if (shown) std::fprintf(stderr, "\n");
  return m;
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
    throw Error(Errc::invalid_argument, "--threads " + text +
                                            ": give a whole number of threads, at least 0 (0 = all " +
                                            std::to_string(hw) + " hardware threads)");
  if (v > hw) {
    std::fprintf(stderr, "kvzip: note: --threads %lld is more than the %u hardware threads of this "
                         "machine; using %u\n", v, hw, hw);
    return hw;
  }
  return static_cast<uint32_t>(v);
}

void add_threads_option(CLI::App* app, uint32_t& threads) {
  app->add_option_function<std::string>(
         "-t,--threads", [&threads](const std::string& s) { threads = parse_threads(s); },
         "Threads (0 = all cores; more than the machine has are capped)")
      ->type_name("N");
}

}  // namespace kvzip::cli
