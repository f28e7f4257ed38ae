// set_scorer_option and make_scorer_options (scorer.h): ScorerOptions fields by name, so the CLI
// can expose every scorer's parameters without one flag per field. Values must parse completely (no
// "7x", no trailing spaces); the scorers' own range checks (make_scorer) then apply unchanged.
#include <charconv>
#include <cmath>
#include <string>

#include "common/error.h"
#include "compress/scorer.h"

namespace kvzip::compress {
namespace {

constexpr const char* kKeys =
    "chunk, hint, seed, sink, snapkv-window, snapkv-kernel, h2o-recent, restkv-window, "
    "restkv-alpha, restkv-kmin, rkv-window, rkv-lambda, rkv-threshold, rkv-kernel, kvzap-window";

[[noreturn]] void bad_value(std::string_view key, std::string_view value, const char* want) {
  throw Error(Errc::invalid_argument, "scorer option " + std::string(key) + "=" +
                                          std::string(value) + ": the value must be " + want);
}

template <class U>
U whole(std::string_view key, std::string_view value) {
  U out{};
  const auto r = std::from_chars(value.data(), value.data() + value.size(), out);
  if (value.empty() || r.ec != std::errc() || r.ptr != value.data() + value.size())
    bad_value(key, value, "a non-negative whole number in range");
  return out;
}

float real(std::string_view key, std::string_view value) {
  float out = 0.0f;
  const auto r = std::from_chars(value.data(), value.data() + value.size(), out);
  if (value.empty() || r.ec != std::errc() || r.ptr != value.data() + value.size() ||
      !std::isfinite(out))
    bad_value(key, value, "a finite number");
  return out;
}

}  // namespace

void set_scorer_option(ScorerOptions& o, std::string_view key, std::string_view value) {
  if (key == "chunk") o.kvzip_chunk = whole<uint32_t>(key, value);
  else if (key == "hint") o.kvzip_hint = whole<uint32_t>(key, value);
  else if (key == "seed") o.seed = whole<uint64_t>(key, value);
  else if (key == "sink") o.sink = whole<uint32_t>(key, value);
  else if (key == "snapkv-window") o.snapkv_window = whole<uint32_t>(key, value);
  else if (key == "snapkv-kernel") o.snapkv_kernel = whole<uint32_t>(key, value);
  else if (key == "h2o-recent") o.h2o_recent = whole<uint32_t>(key, value);
  else if (key == "restkv-window") o.restkv_window = whole<uint32_t>(key, value);
  else if (key == "restkv-alpha") o.restkv_alpha = real(key, value);
  else if (key == "restkv-kmin") o.restkv_kmin = whole<uint32_t>(key, value);
  else if (key == "rkv-window") o.rkv_window = whole<uint32_t>(key, value);
  else if (key == "rkv-lambda") o.rkv_lambda = real(key, value);
  else if (key == "rkv-threshold") o.rkv_threshold = real(key, value);
  else if (key == "rkv-kernel") o.rkv_kernel = whole<uint32_t>(key, value);
  else if (key == "kvzap-window") o.kvzap_window = whole<uint32_t>(key, value);
  else
    throw Error(Errc::invalid_argument,
                "unknown scorer option '" + std::string(key) + "'; known: " + kKeys);
}

void set_scorer_option(ScorerOptions& o, std::string_view kv) {
  const size_t eq = kv.find('=');
  if (eq == std::string_view::npos)
    throw Error(Errc::invalid_argument,
                "scorer option '" + std::string(kv) + "' is not KEY=VALUE; known keys: " + kKeys);
  set_scorer_option(o, kv.substr(0, eq), kv.substr(eq + 1));
}

ScorerOptions make_scorer_options(const model::ChatTemplate& chat, uint32_t kvzip_chunk,
                                  uint64_t seed, std::span<const std::string> overrides) {
  ScorerOptions o;
  o.prompts = reconstruction_prompts(chat);
  o.kvzip_chunk = kvzip_chunk;
  o.seed = seed;
  for (const std::string& kv : overrides) set_scorer_option(o, kv);
  return o;
}

}  // namespace kvzip::compress
