// The learned scorer's half of the extension (kvzip.calibrate): training a .kvp through
// compress::calibrate_scorer_file, the library call `kvzip calibrate --scorer` makes, and the
// calibration texts of files and folders. The GIL is released while it trains; progress takes it
// back.
#include <nanobind/stl/function.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "compress/learned_scorer.h"
#include "format/scorer_file.h"
#include "python/src/engine.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace kvzip::python {
namespace {

// One target's held-out fit per layer: {"r2": [...], "spearman": [...]} (NaN where unscored).
nb::dict fit_dict(const compress::TargetFit& f) {
  nb::dict d;
  d["r2"] = f.r2;
  d["spearman"] = f.spearman;
  return d;
}

// Trains the learned scorer on (name, text) pairs into the file `out`; returns its summary.
nb::dict calibrate_scorer(const PyModel& pm,
                          const std::vector<std::pair<std::string, std::string>>& texts,
                          const std::string& out, const std::string& target, uint32_t window,
                          uint32_t heldout_every, double alpha, bool force,
                          const std::string& system, uint32_t threads,
                          const std::optional<Progress>& progress) {
  compress::CalibrateScorerOptions co;
  co.train.target = compress::parse_scorer_target(target);
  co.train.window = window;
  co.train.heldout_every = heldout_every;
  co.train.alpha = alpha;
  co.system = system;
  co.threads = threads;
  co.force = force;
  if (progress)
    co.progress = [fn = *progress](uint64_t done, uint64_t total) {
      nb::gil_scoped_acquire acquire;
      fn(done, total);
    };
  std::vector<compress::CalibrationText> ts;
  for (const auto& [name, text] : texts) ts.push_back({name, text});
  const compress::TrainResult r = [&] {
    nb::gil_scoped_release release;
    return compress::calibrate_scorer_file(*pm.m, ts, out, co);
  }();
  const format::ScorerFile& f = r.file;
  nb::dict d;
  d["path"] = out;
  d["target"] = std::string(format::scorer_target_name(f.target));
  d["checksum"] = format::scorer_checksum_text(f);
  d["window"] = f.window;
  d["train_windows"] = f.train_windows;
  d["heldout_windows"] = f.heldout_windows;
  d["train_tokens"] = f.train_tokens;
  d["heldout_tokens"] = f.heldout_tokens;
  d["seconds"] = r.seconds;
  nb::dict fits;
  for (const compress::TargetFit& t : r.fits)
    fits[format::scorer_target_name(t.target)] = fit_dict(t);
  d["fits"] = fits;
  return d;
}

}  // namespace

void bind_scorer(nb::module_& m) {
  m.def("calibrate", &calibrate_scorer, "model"_a, "texts"_a, "out"_a, "target"_a = "kvzip+",
        "window"_a = 1000, "heldout_every"_a = 10, "alpha"_a = 1.0, "force"_a = false,
        "system"_a = "", "threads"_a = 0, "progress"_a = nb::none());
  m.def(
      "calibration_texts",
      [](const std::vector<std::string>& paths) {
        std::vector<std::pair<std::string, std::string>> out;
        for (auto& t : compress::read_calibration_texts(paths)) out.emplace_back(t.name, t.text);
        return out;
      },
      "paths"_a);
}

}  // namespace kvzip::python
