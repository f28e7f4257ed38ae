// The learned scorer as the commands, the server and Python use it (compress/learned_scorer.h):
// which method a scorer file implies, loading a .kvp for a model, reading calibration texts and
// training into a .kvp. One copy of each, so that `kvzip compress --scorer`, `kvzip serve
// --scorer`, `kvzip calibrate --scorer` and kvzip.compress / kvzip.calibrate agree.
#include <algorithm>
#include <cmath>
#include <filesystem>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/text_file.h"
#include "compress/learned_scorer.h"

namespace kvzip::compress {

std::string method_with_scorer(const std::string& method, bool has_scorer) {
  if (has_scorer) {
    if (!method.empty() && method != kLearnedMethod)
      throw Error(Errc::invalid_argument,
                  std::string("option scorer is the learned scorer (method kvzap); method ")
                      .append(method)
                      .append(" cannot use it"));
    return kLearnedMethod;
  }
  if (method == kLearnedMethod)
    throw Error(Errc::invalid_argument,
                "method kvzap needs option scorer, a .kvp file made by the scorer calibration on a "
                "text other than the documents");
  return method.empty() ? std::string("kvzip") : method;
}

LearnedScorerFile load_learned_scorer(const std::string& path) {
  LearnedScorerFile s;
  auto file = std::make_shared<const format::ScorerFile>(format::read_scorer_file(path));
  s.source = learned_scorer_source(*file, path);
  s.file = std::move(file);
  return s;
}

void use_learned_scorer(ScorerOptions& options, const LearnedScorerFile& scorer,
                        const model::Model& model) {
  if (!scorer) throw Error(Errc::internal, "use_learned_scorer: no scorer file");
  format::check_scorer_model(*scorer.file, model.config(), model.fingerprint());
  options.learned = scorer.file;
  options.learned_source = scorer.source;
}

std::vector<CalibrationText> read_calibration_texts(const std::vector<std::string>& paths) {
  namespace fs = std::filesystem;
  std::vector<CalibrationText> out;
  for (const std::string& p : paths) {
    std::error_code ec;
    if (p != "-" && fs::is_directory(p, ec)) {
      std::vector<std::string> files;
      for (const fs::directory_entry& e : fs::directory_iterator(p))
        if (e.is_regular_file()) files.push_back(e.path().string());
      std::sort(files.begin(), files.end());
      if (files.empty())
        throw Error(Errc::invalid_argument,
                    std::string("folder ").append(p).append(" holds no files to calibrate on"));
      for (const std::string& f : files) out.push_back({f, read_text(f, "calibration text")});
    } else {
      out.push_back({p, read_text(p, "calibration text")});
    }
  }
  return out;
}

format::ScorerTarget parse_scorer_target(const std::string& name) {
  if (name == "kvzip") return format::ScorerTarget::Kvzip;
  if (name == "kvzip+") return format::ScorerTarget::KvzipPlus;
  throw Error(Errc::invalid_argument,
              std::string("option target is '").append(name).append("'; expected kvzip or kvzip+"));
}

void check_train_options(const TrainOptions& o) {
  if (o.window < 16)
    throw Error(Errc::invalid_argument, "option window must be at least 16 tokens");
  if (!(o.alpha >= 0) || !std::isfinite(o.alpha))
    throw Error(Errc::invalid_argument, "option alpha must be a finite value >= 0");
}

namespace {

// The texts' file names, as the scorer file records them (at most 64 KiB).
std::string source_of(const std::vector<CalibrationText>& texts) {
  std::string source;
  for (const CalibrationText& t : texts) {
    if (!source.empty()) source.append(", ");
    source.append(t.name == "-" ? std::string("(stdin)")
                                : std::filesystem::path(t.name).filename().string());
  }
  return source.size() > 65536 ? source.substr(0, 65536) : source;
}

}  // namespace

TrainResult calibrate_scorer_file(const model::Model& model,
                                  const std::vector<CalibrationText>& texts, const std::string& out,
                                  CalibrateScorerOptions o) {
  check_train_options(o.train);
  if (texts.empty()) throw Error(Errc::invalid_argument, "calibrate: give at least one text");
  check_writable(out, o.force);  // not after minutes of training
  o.train.scorer = make_scorer_options(model.chat(), o.train.window, /*seed=*/0);
  std::vector<std::vector<int32_t>> tokens;
  uint64_t total = 0;
  for (const CalibrationText& t : texts) {
    tokens.push_back(model.chat().encode_document(t.text));
    total += tokens.back().size();
  }
  if (o.progress)
    o.train.progress = [fn = o.progress, total](uint32_t done, uint32_t n) {
      fn(total * done / std::max<uint32_t>(n, 1), total);
    };
  model::ForwardOptions fo;
  fo.threads = o.threads;
  model::Forward forward(model.weights(), fo);
  TrainResult r = train_scorer(forward, model.chat().prefix(o.system), tokens, o.train);
  r.file.model = model.fingerprint();
  r.file.source = source_of(texts);
  format::write_scorer_file(r.file, out, o.force);
  return r;
}

}  // namespace kvzip::compress
