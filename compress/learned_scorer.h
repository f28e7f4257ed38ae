// compress/ learned scorer (KVzap-style; spec/methods.md §1 step 10): a per-layer ridge regression
// from the layer's input-normed hidden state to the log of each KV head's KVzip (or KVzip+) score,
// trained once per model on a calibration text (`kvzip calibrate --scorer`, stored as a .kvp,
// format/scorer_file.h) and applied during the document's prefill (method "kvzap"): token i's
// predicted score depends on its own hidden state only, so it is final as soon as the token is
// prefilled, and compressing needs no reconstruction pass. The fit is closed-form: XᵀX and Xᵀy
// are accumulated per layer in double precision (no features are stored) and solved by Cholesky.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "compress/scorer.h"
#include "format/scorer_file.h"
#include "model/forward.h"
#include "model/model.h"

namespace kvzip::compress {

inline constexpr const char* kLearnedMethod = "kvzap";

// The normal equations of one ridge regression with an intercept: `dim` features, `outputs`
// targets fitted together (they share XᵀX).
class RidgeSystem {
 public:
  RidgeSystem(uint32_t dim, uint32_t outputs);
  // Adds n rows: x (n, dim) with rows `x_stride` floats apart, y (n, outputs).
  void add(const float* x, size_t x_stride, const float* y, uint32_t n);
  uint64_t rows() const { return rows_; }
  uint32_t dim() const { return dim_; }
  uint32_t outputs() const { return outputs_; }
  // Solves (XᵀX + alpha·I′)w = Xᵀy, I′ the identity without the intercept's entry (the intercept is
  // not penalised, as centring the data would do), by Cholesky in double precision (LAPACK dposv).
  // Returns (outputs, dim + 1): each output's coefficients, then its intercept. Errc::
  // invalid_argument when there are no rows or the system is not positive definite.
  std::vector<double> solve(double alpha) const;

 private:
  uint32_t dim_, outputs_;
  std::vector<double> xtx_;  // (dim + 1)² column-major; the upper triangle is kept
  std::vector<double> xty_;  // (outputs, dim + 1)
  std::vector<double> buf_;  // (rows, dim + 1) staging of add()
  uint64_t rows_ = 0;
};

// Coefficient of determination 1 − SS_res / SS_tot of `predicted` against `target` (NaN when
// there are fewer than 2 values or the target is constant).
double r_squared(std::span<const float> target, std::span<const float> predicted);
// Spearman's rank correlation (average ranks for ties; NaN for fewer than 2 values or a constant).
double spearman(std::span<const float> a, std::span<const float> b);

// The predicted log score of every document row of one layer: x (n, E) the rows' input-normed
// hidden states, out (Hkv, out_stride) receives row j of head h at out[h·out_stride + j]. Plain
// fp32 dot products in a fixed order, so a scorer file's predictions repeat bit for bit.
void predict_layer(const format::ScorerFile& scorer, uint32_t layer, const float* x, uint32_t n,
                   float* out, size_t out_stride);

// Errc::model_mismatch unless the model's L, Hkv and E are the scorer file's.
void check_scorer_shape(const format::ScorerFile& scorer, const ModelConfig& config);

// ---- Training ----------------------------------------------------------------------------------

struct TrainOptions {
  format::ScorerTarget target = format::ScorerTarget::KvzipPlus;  // what the file predicts
  uint32_t window = 1000;       // tokens per calibration window (each its own document)
  uint32_t heldout_every = 10;  // every k-th window is held back for the fit quality (0: none)
  double alpha = 1.0;           // ridge penalty
  ScorerOptions scorer;         // the reconstruction prompts (make_scorer_options)
  // Called after every window with (windows done, windows in all).
  std::function<void(uint32_t, uint32_t)> progress;
};

// Held-out quality of one target (both targets are always fitted, so that they can be compared).
struct TargetFit {
  format::ScorerTarget target = format::ScorerTarget::KvzipPlus;
  // (L): within each KV head, averaged over the layer's heads; NaN for an unscored
  // (sliding-window) layer or no split
  std::vector<float> r2, spearman;
};

struct TrainResult {
  format::ScorerFile file;      // options.target's predictor; the caller sets model and source
  std::vector<TargetFit> fits;  // kvzip, then kvzip+
  double seconds = 0.0;
};

// The calibration windows of a token sequence: consecutive pieces of `window` tokens; a last
// piece shorter than window / 4 joins the previous one.
std::vector<std::span<const int32_t>> calibration_windows(std::span<const int32_t> tokens,
                                                          uint32_t window);

// The KVzip targets of one window (spec/methods.md §1 step 10): prefills [prefix ; window], runs
// the reconstruction of the whole window as one chunk, and returns the layer features x (L, n, E)
// and targets y (L, n, 2·Hkv): log KVzip for each KV head, then log KVzip+. Sliding-window layers
// keep zeros.
struct WindowTargets {
  uint32_t n = 0;
  std::vector<float> x, y;
};
WindowTargets window_targets(model::Forward& forward, std::span<const int32_t> prefix,
                             std::span<const int32_t> window, const ScorerOptions& options);

// Trains on every window of every text (windows of each text never straddle texts), the held-out
// windows last. Errc::invalid_argument with no tokens, a window of 0, or fewer training rows than
// features + 1 in a layer.
TrainResult train_scorer(model::Forward& forward, std::span<const int32_t> prefix,
                         const std::vector<std::vector<int32_t>>& texts,
                         const TrainOptions& options);

// ---- Scoring ------------------------------------------------------------------------------------

// The method "kvzap": scores every document row during the prefill with `scorer`'s predictor
// (prefill_observer is required). `source` is recorded with the method's parameters (the file's
// name and checksum). Errc::model_mismatch at prefill_observer when the model's L, Hkv or E
// differ from the file's.
// The document's last `window` rows of every scored layer are always kept (they count toward the
// ratio, as every method's protected rows do).
std::unique_ptr<Scorer> make_learned_scorer(std::shared_ptr<const format::ScorerFile> scorer,
                                            MethodParams source, uint32_t window = 256);

// The recorded source of a scorer file: "scorer" (its name without folders), "scorer_xxh64",
// "scorer_target".
MethodParams learned_scorer_source(const format::ScorerFile& scorer, const std::string& file_name);

// ---- What the commands, the server and Python share ------------------------------------------

// The method of a request that may carry a scorer file. `method` empty is the default: kvzap with
// a scorer, else kvzip. Errc::invalid_argument for a scorer with another method, or kvzap without
// one (the messages name option scorer).
std::string method_with_scorer(const std::string& method, bool has_scorer);

// A scorer file as compression uses it: the predictor and the source a cache records of it.
struct LearnedScorerFile {
  std::shared_ptr<const format::ScorerFile> file;
  MethodParams source;  // learned_scorer_source
  explicit operator bool() const { return file != nullptr; }
};
// Reads a .kvp (format::read_scorer_file's errors) and records its name and checksum.
LearnedScorerFile load_learned_scorer(const std::string& path);
// Puts `scorer` into `options` for compressing with `model`. Errc::model_mismatch when it was
// trained on another model (format::check_scorer_model).
void use_learned_scorer(ScorerOptions& options, const LearnedScorerFile& scorer,
                        const model::Model& model);

// One calibration text and the name its file records.
struct CalibrationText {
  std::string name, text;
};
// The texts of `paths`: each file, and the regular files of each folder (by name, not recursive);
// "-" is standard input. read_text's errors (common/text_file.h); Errc::invalid_argument for a
// folder without files.
std::vector<CalibrationText> read_calibration_texts(const std::vector<std::string>& paths);
// "kvzip" or "kvzip+"; Errc::invalid_argument (option target) for anything else.
format::ScorerTarget parse_scorer_target(const std::string& name);
// Errc::invalid_argument for a window under 16 tokens or a negative or non-finite alpha.
void check_train_options(const TrainOptions& options);

struct CalibrateScorerOptions {
  TrainOptions train;  // train.scorer is set from the model's chat template; train.progress
                       // from `progress`
  // Called after every window with (tokens done, tokens in all), the windows' share of the texts.
  std::function<void(uint64_t, uint64_t)> progress;
  std::string system;  // the prompt's system message (empty: the template's)
  uint32_t threads = 0;
  bool force = false;  // replace an existing output
};
// Trains the learned scorer for `model` on `texts` and writes it to `out` (atomically; an existing
// `out` is refused before any work unless force). The file records the model's fingerprint and the
// texts' names. Throws what check_train_options and train_scorer throw.
TrainResult calibrate_scorer_file(const model::Model& model,
                                  const std::vector<CalibrationText>& texts, const std::string& out,
                                  CalibrateScorerOptions options);

}  // namespace kvzip::compress
