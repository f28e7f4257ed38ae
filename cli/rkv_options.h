// The --rkv-* options shared by `kvzip generate`, `query` and `chat`: a bounded cache while
// generating (R-KV, or the StreamingLLM baseline with --rkv-streaming), model/rkv.h.
// No --rkv-budget: no bound; the other --rkv-* options then are an error, not silently ignored.
#pragma once
#include <optional>

#include <CLI/CLI.hpp>

#include "model/rkv.h"

namespace kvzip::cli {

struct RkvOptions {
  model::RkvParams params;
  CLI::Option* budget = nullptr;
  std::vector<CLI::Option*> others;  // options that only make sense with --rkv-budget
};

// Adds --rkv-budget, --rkv-buffer, --rkv-window, --rkv-lambda, --rkv-doc, --rkv-streaming.
void add_rkv_options(CLI::App* app, RkvOptions& o);

// The validated parameters, or nullopt without --rkv-budget. Throws Errc::invalid_argument.
std::optional<model::RkvParams> rkv_params(const RkvOptions& o);

}  // namespace kvzip::cli
