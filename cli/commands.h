// Each cli/cmd_*.cc file adds its subcommands to the app through one function declared here.
// Subcommand callbacks throw kvzip::Error; main.cc maps its code to the exit status.
#pragma once
#include <CLI/CLI.hpp>

namespace kvzip::cli {

void add_model_commands(CLI::App& app);      // generate, tokenize, perplexity (cmd_model.cc)
void add_query_commands(CLI::App& app);      // query, chat (cmd_query.cc)
void add_compress_commands(CLI::App& app);   // compress (cmd_compress.cc)
void add_calibrate_commands(CLI::App& app);  // calibrate (cmd_calibrate.cc)
void add_format_commands(CLI::App& app);     // inspect, prune, export, import (cmd_format.cc)
void add_eval_commands(CLI::App& app);       // eval (cmd_eval.cc)
void add_serve_commands(CLI::App& app);      // serve (cmd_serve.cc)
void add_library_commands(CLI::App& app);    // index, search, ask (cmd_library.cc)

}  // namespace kvzip::cli
