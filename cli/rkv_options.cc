// --rkv-* options (see rkv_options.h).
#include "cli/rkv_options.h"

#include "common/error.h"

namespace kvzip::cli {

void add_rkv_options(CLI::App* app, RkvOptions& o) {
  model::RkvParams& p = o.params;
  o.budget = app->add_option("--rkv-budget", p.budget,
                             "Bound the cache while generating: keep B generated rows per head "
                             "(R-KV; off when not given)");
  o.others = {
      app->add_option("--rkv-buffer", p.buffer, "R-KV: generated tokens between compressions")
          ->capture_default_str(),
      app->add_option("--rkv-window", p.window,
                      "R-KV: most recent tokens always kept (and queries used to score)")
          ->capture_default_str(),
      app->add_option("--rkv-lambda", p.lambda,
                      "R-KV: weight of attention importance vs redundancy, in [0, 1]")
          ->capture_default_str(),
      app->add_flag("--rkv-doc", p.doc_candidates,
                    "R-KV: document and prompt rows may be evicted too (prefix rows never)"),
      app->add_flag("--rkv-streaming", p.streaming,
                    "Bound the cache with StreamingLLM (4 sink + most recent) instead of R-KV"),
      app->add_option("--rkv-scorer", o.scorer_file,
                      "Rank generated rows by a learned scorer's (.kvp of `kvzip calibrate "
                      "--scorer`) predicted KVzip score instead of R-KV's"),
  };
}

std::optional<model::RkvParams> rkv_params(const RkvOptions& o) {
  if (o.budget->count() == 0) {
    for (const CLI::Option* opt : o.others)
      if (opt->count() > 0)
        throw Error(Errc::invalid_argument,
                    opt->get_name() + " needs --rkv-budget B (the rows per head to keep)");
    return std::nullopt;
  }
  if (o.params.budget == 0)
    throw Error(Errc::invalid_argument,
                "--rkv-budget 0: give the number of rows per head to keep (e.g. 512)");
  model::RkvParams p = o.params;
  if (!o.scorer_file.empty()) {
    if (!o.scorer) {
      o.scorer =
          std::make_shared<const format::ScorerFile>(format::read_scorer_file(o.scorer_file));
      o.learned = std::make_shared<const std::vector<float>>(o.scorer->weights);
    }
    p.learned = o.learned;
    p.learned_dim = o.scorer->d_model;
  }
  validate(p);
  return p;
}

void check_rkv_scorer(const RkvOptions& o, const model::Model& model) {
  if (rkv_params(o) && o.scorer)
    format::check_scorer_model(*o.scorer, model.config(), model.fingerprint());
}

}  // namespace kvzip::cli
