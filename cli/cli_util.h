// Helpers shared by the cli/cmd_*.cc files: loading the model named by -m/$KVZIP_MODEL, default
// output names, and the -t/--threads option every model command shares. User text is read with
// common/text_file.h (exists, not a directory, UTF-8, not empty).
#pragma once
#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "common/text_file.h"  // read_text, check_text: user text with the checks
#include "format/format.h"
#include "model/model.h"

namespace kvzip::cli {

// -t/--threads into `threads`: a whole number >= 0, 0 = every hardware thread. Anything else is
// Errc::invalid_argument; more threads than the machine has are capped to that, with a note on
// stderr (oversubscription only costs time and memory: 10000 threads took 15x longer).
void add_threads_option(CLI::App* app, uint32_t& threads);
uint32_t parse_threads(const std::string& text);  // the option's rule, for tests and callers

// The options several commands share, each with one help text: -m/--model (a GGUF file, else
// $KVZIP_MODEL, else the cached default), -f/--force (replace an existing output), and a
// comma-separated list option that shows its default in --help.
void add_model_option(CLI::App* app, std::string& model);
void add_force_option(CLI::App* app, bool& force);
template <class T>
CLI::Option* add_list_option(CLI::App* app, const std::string& name, std::vector<T>& values,
                             const std::string& help) {
  return app->add_option(name, values, help)->delimiter(',')->capture_default_str();
}

// The file a command writes when -o is not given: `input` with its extension replaced by
// `extension` (".kvz", ".kvh"). Standard input ("-") has no name to reuse: Errc::invalid_argument
// asking for -o, `command` starting the message.
std::string default_output(const std::string& input, const char* extension, const char* command);

// --kv-dtype (alias --dtype) f32 | f16 | bf16 | q8 | q4: Errc::invalid_argument naming `command`
// and the choices for anything else.
format::DType parse_kv_dtype(const std::string& name, const char* command);
inline constexpr const char* kKvDtypeHelp =
    "K/V storage in the file: f32 | f16 | bf16 | q8 | q4 (q8/q4: group-wise 8/4-bit codes of "
    "Hadamard-rotated rows with per-head channel scales, prefix rows kept as f16; "
    "docs/quantized-kv.md)";
// What `kvzip compress` stores K/V as when --kv-dtype is not given. f16 halves the file and the
// load of f32, and on the exact path its answers were f32's, token for token
// (docs/quantized-kv.md).
inline constexpr const char* kDefaultKvDtype = "f16";

// --kv-rotate and --kv-params chose among q8/q4 layouts that the file format no longer has (it
// stores one). They stay registered, hidden, so that a script still passing them gets an error
// that says so instead of "unexpected argument".
struct RemovedKvLayoutOptions {
  std::string rotate, params;
};
void add_removed_kv_layout_options(CLI::App* app, RemovedKvLayoutOptions& o);
// Errc::invalid_argument naming `command` and the option when either was given.
void reject_removed_kv_layout_options(const RemovedKvLayoutOptions& o, const char* command);
inline constexpr const char* kKvGroupHelp =
    "q8/q4: channels per quantization group (divides the head dimension; 0 = all of it)";

// Resolves -m / $KVZIP_MODEL / the default path and loads the model ($KVZIP_WEIGHTS: where its
// weights live; long_running: a server, for which reading them into memory pays off at any size).
std::unique_ptr<model::Model> load_model(const std::string& cli_path, uint32_t threads,
                                         bool long_running = false);

// Library messages name an option as "option FIELD" (e.g. "option force_model"); the command
// line shows its flag there instead ("--force-model"). The one place flags enter library text.
std::string with_flag_names(std::string message);

}  // namespace kvzip::cli
