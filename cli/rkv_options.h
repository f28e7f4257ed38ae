// The --rkv-* options shared by `kvzip generate`, `query` and `chat`: a bounded cache while
// generating (R-KV, or the StreamingLLM baseline with --rkv-streaming), model/rkv.h.
// No --rkv-budget: no bound; the other --rkv-* options then are an error, not silently ignored.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "format/scorer_file.h"
#include "model/model.h"
#include "model/rkv.h"

namespace kvzip::cli {

struct RkvOptions {
  model::RkvParams params;
  CLI::Option* budget = nullptr;
  std::vector<CLI::Option*> others;  // options that only make sense with --rkv-budget
  std::string scorer_file;           // --rkv-scorer: rank generated rows by kvzap's prediction
  // The scorer file as read once, and its coefficients as RkvParams::learned holds them.
  mutable std::shared_ptr<const format::ScorerFile> scorer;
  mutable std::shared_ptr<const std::vector<float>> learned;
};

// Adds --rkv-budget, --rkv-buffer, --rkv-window, --rkv-lambda, --rkv-doc, --rkv-streaming,
// --rkv-scorer.
void add_rkv_options(CLI::App* app, RkvOptions& o);

// The validated parameters, or nullopt without --rkv-budget. Throws Errc::invalid_argument, and
// the scorer file's read errors (read once, on the first call).
std::optional<model::RkvParams> rkv_params(const RkvOptions& o);

// With --rkv-scorer: Errc::model_mismatch unless the scorer file was trained for `model`.
void check_rkv_scorer(const RkvOptions& o, const model::Model& model);

}  // namespace kvzip::cli
