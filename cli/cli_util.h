// Helpers shared by the cli/cmd_*.cc files: loading the model named by -m/$KVZIP_MODEL, default
// output names, and the -t/--threads option every model command shares. User text is read with
// common/text_file.h (exists, not a directory, UTF-8, not empty).
#pragma once
#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "common/text_file.h"  // read_text, check_text: user text with the checks
#include "model/model.h"

namespace kvzip::cli {

// -t/--threads into `threads`: a whole number >= 0, 0 = every hardware thread. Anything else is
// Errc::invalid_argument; more threads than the machine has are capped to that, with a note on
// stderr (oversubscription only costs time and memory: 10000 threads took 15x longer).
void add_threads_option(CLI::App* app, uint32_t& threads);
uint32_t parse_threads(const std::string& text);  // the option's rule, for tests and callers

// The file a command writes when -o is not given: `input` with its extension replaced by
// `extension` (".kvz", ".kvh"). Standard input ("-") has no name to reuse: Errc::invalid_argument
// asking for -o, `command` starting the message.
std::string default_output(const std::string& input, const char* extension, const char* command);

// Resolves -m / $KVZIP_MODEL / the default path and loads the model.
std::unique_ptr<Model> load_model(const std::string& cli_path, uint32_t threads);

}  // namespace kvzip::cli
