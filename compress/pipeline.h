// compress/ pipeline: a document in, a compressed cache and a .kvz file out. compress() runs the
// stages in order: check everything that needs no model work, prefill [prefix ; document] (with
// the scorer's observer), score, select, evict; compress_gpu() is the same pipeline with the
// prefill and KVzip's scoring on a CUDA device. compress_to_file() is the one call behind
// `kvzip compress` (and a future server): prompt, compress, file contents, atomic write. `kvzip
// eval` shares one prefill between methods and one scoring pass between ratios, so it calls the
// stages (make_method_scorer, select_for_method, evict) itself instead of compress().
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cache/ragged_cache.h"
#include "compress/head_level.h"
#include "compress/quantize.h"
#include "compress/scorer.h"
#include "compress/selection.h"
#include "format/format.h"
#include "format/head_scores.h"
#include "kernels/device.h"
#include "kernels/matmul.h"
#include "model/gpu_forward.h"
#include "model/model.h"
#include "model/prefill.h"

namespace kvzip::compress {

// CompressOptions::ratio of every row-level method when none is asked.
inline constexpr double kDefaultRatio = 0.3;

struct CompressOptions {
  std::string method = "kvzip";  // one of scorer_names(), kHeadLevelMethod or kvzap
  double ratio = kDefaultRatio;  // fraction of the L·Hkv·n_c document rows to keep;
                                 // kvzip-head: fraction of the L·Hkv heads kept whole
  SelectionLevel level = SelectionLevel::Global;  // row selection (not for kvzip-head)
  ScorerOptions scorer;
  HeadLevelOptions head;            // kvzip-head only: head scores, window, recorded source
  prefill::PrefillOptions prefill;  // chunk, answer_room, progress, observer
  uint32_t room = 256;              // append rows per head of the compressed cache
  // Evict while the document is read (method kvzap only, compress/stream.cc): each chunk of
  // options.prefill.chunk tokens is scored as it is prefilled and the rows that can no longer be
  // among the kept ones are dropped at once (RunningSelection), so later tokens attend to the kept
  // rows only and memory follows the kept rows, not the document.
  bool stream = false;
};

struct CompressResult {
  model::RaggedKvCache cache;
  std::vector<std::vector<float>> kept_scores;  // as EvictResult::kept_scores
  double requested_ratio = 1.0;
  double achieved_ratio = 1.0;
  std::string method;
  MethodParams params;  // the method's parameters as a cache file records them
  uint32_t n_prefix = 0;
  uint32_t n_doc = 0;
  double prefill_s = 0.0;  // document prefill (with any prefill observer)
  double scoring_s = 0.0;  // scoring pass after the prefill (kvzip: the reconstruction passes;
                           // 0 for kvzip-head, which has none)
  double select_s = 0.0;   // selection and eviction
  // Streaming compression only (0 otherwise): the most rows the cache held at once, over all
  // (layer, head), and the most bytes its row storage had allocated.
  uint64_t peak_rows = 0;
  uint64_t peak_bytes = 0;
};

// ---- The stages ---------------------------------------------------------------------------------

// The ratio a front end asks for when the user gave none: kHeadLevelDefaultRatio for kvzip-head,
// kDefaultRatio for every other method.
double default_ratio(std::string_view method);

// The one check of the options that needs no model, shared by every front end (command line,
// server, Python): ratio in (0, 1], a known method, and for kvzip-head head scores that are
// present and none NaN (kvzip-head selects whole heads: `level` is not read). Errc::
// invalid_argument naming the option or the concept, never a flag.
void check_options(const CompressOptions& options);

// Whether `device` runs options.method (Errc::unsupported unless so): the CPU runs every method;
// a CUDA device runs "kvzip" and "full" only (kvzip-head has no scoring pass to speed up).
void check_device(const CompressOptions& options, kernels::Device device);

// The scorer of options.method: make_scorer, or for kvzip-head the head-level scorer, after
// check_options.
std::unique_ptr<Scorer> make_method_scorer(const CompressOptions& options);
// The rows to keep at `ratio`: select_heads(scores, ratio, head.window) for kvzip-head (whole
// heads), select_rows(scores, ratio, level) for every other method.
Selection select_for_method(const CompressOptions& options, const DocumentScores& scores,
                            double ratio);

// ---- The whole pipeline -------------------------------------------------------------------------

// compress() with options.stream: one pass over [prefix ; document] in chunks, each chunk's rows
// scored by the kvzap predictor as they are prefilled, then the rows outside the running selection
// dropped. The kept set is select_rows' over the predicted scores; those scores differ from a full
// prefill's only because later tokens saw the kept rows only. params gain "stream" = "on".
CompressResult compress_streaming(model::Forward& forward, std::span<const int32_t> prefix,
                                  std::span<const int32_t> document,
                                  const CompressOptions& options);

// Validates first (make_method_scorer, the context), then prefills [prefix ; document], scores,
// selects and evicts. Method "full" ignores the ratio: it keeps every row and records requested =
// achieved = 1. The recorded params are the scorer's plus "level"; for kvzip-head they are level
// "head", head_ratio, heads_kept "k/H", window, doc_ratio, then options.head.source, and the
// requested ratio is the head fraction. KVzip's R_t continue at positions n_p + n_c onwards (up to
// ~m + 30 more); the context check covers only the document and the answer room, as in the
// authors' code.
CompressResult compress(model::Forward& forward, std::span<const int32_t> prefix,
                        std::span<const int32_t> document, const CompressOptions& options);

// KVzip scores (spec/methods.md §1) computed on the device: `cache` is the dense GpuCache after
// prefilling [prefix ; document] with `forward` (logical length n_prefix + document.size()); the
// reconstruction passes run on the device and are rolled back. Same layout and meaning as the CPU
// scorer's DocumentScores (kernels/attention_score.h computes the local-softmax max).
DocumentScores kvzip_scores_gpu(model::GpuForward& forward, model::GpuCache& cache,
                                uint32_t n_prefix, std::span<const int32_t> document,
                                const ScorerOptions& options);

// compress() with the prefill and the scoring on the device: methods "kvzip" and "full" (others
// throw Errc::unsupported: check_device). The prefill runs in calls of options.prefill.chunk
// tokens with the same progress reports as on the CPU; a prefill observer is a CPU object and is
// refused (Errc::unsupported). Selection and eviction run on the host over the dense cache copied
// back once; params gain "device" = "cuda". Errc::unsupported without a CUDA build or device.
CompressResult compress_gpu(model::GpuForward& forward, std::span<const int32_t> prefix,
                            std::span<const int32_t> document, const CompressOptions& options);

// ---- The cache file -----------------------------------------------------------------------------

// What a cache file records besides the rows: the prompt pieces and how the cache was made.
struct CacheDescription {
  std::vector<int32_t> prefix;    // (n_p) template opener (+ system prompt), never evicted
  std::vector<int32_t> document;  // (n_c)
  std::vector<int32_t> suffix;    // template tokens that close the user turn at query time
  std::string document_text;
  std::string method = "full";
  MethodParams params;  // includes "query_template" if set
  double requested_ratio = 1.0;
  KvStorage kv;  // q8/q4: make_contents quantizes (compress/quantize.h)
};

// Rows of a ragged cache as a file's per-layer content. kept_scores, when not empty, holds per
// layer the score of every kept row in the cache's row order (L vectors of R_l floats).
std::vector<format::LayerKv> layers_from_cache(const model::RaggedKvCache& cache,
                                               const std::vector<std::vector<float>>& kept_scores);

// The full content of a cache file for `cache` (made by `model`); the achieved ratio is counted
// over document rows only (kept rows at positions >= n_p over L·Hkv·n_c).
format::CacheContents make_contents(const model::Model& model, const model::RaggedKvCache& cache,
                                    const std::vector<std::vector<float>>& kept_scores,
                                    const CacheDescription& description);
// The same from the file's layers themselves (layers_from_cache's form, taken over, not copied):
// a streamed compression writes its rows this way without ever holding them twice.
format::CacheContents make_contents(const model::Model& model, std::vector<format::LayerKv> layers,
                                    bool has_scores, const CacheDescription& description);

// ---- A document into a file ---------------------------------------------------------------------

// The prompt pieces of a document as `kvzip compress` and `kvzip eval` build them: prefix =
// chat.prefix(system) ("" = the template's default system prompt), document =
// chat.encode_document(text), suffix = chat.suffix("").
struct DocumentPrompt {
  std::vector<int32_t> prefix, document, suffix;
};
DocumentPrompt document_prompt(const model::ChatTemplate& chat, std::string_view text,
                               std::string_view system);

// Head-level options from a head-scores file: its values, `window`, and as the recorded source
// the file's name (`file_name`, without folders), checksum, calibration text and token count.
HeadLevelOptions head_level_options(const format::HeadScores& scores, const std::string& file_name,
                                    uint32_t window);

struct CompressFileOptions {
  CompressOptions compress;  // what to keep; prefill.progress reports the document's prefill
  std::string system;        // system prompt; "" = the chat template's default
  std::string query_template = format::kDefaultQueryTemplate;  // recorded; must hold {question}
  KvStorage kv;                                   // q8/q4: selection first, then quantization
  format::WriteOptions write;                     // zstd level, force (replace an existing file)
  kernels::Device device = kernels::Device::Cpu;  // Cuda: compress_gpu (kvzip and full only)
  uint32_t threads = 0;                           // CPU forward threads, 0 = all cores
  // CPU matrix products of the prefill and the scoring: Fast (int8 activations where the CPU has
  // the kernels) or Exact (fp32, for checking KVzip against a reference); Exact is recorded in
  // the header as "matmul" = "exact". Device::Cuda takes Fast only (Errc::unsupported).
  kernels::MatmulPath matmul = kernels::MatmulPath::Fast;
  MethodParams extra_params;  // recorded in the header after the method's (e.g. corpus_key)
};

// check_options(options.compress) and what the file adds: a query template holding {question},
// a zstd level in 0 (off) .. 19 (Errc::invalid_argument); check_device, and the exact matrix
// products only on the CPU (Errc::unsupported). Needs no model: front ends call it before loading
// one; compress_to_file calls it again first, so a caller that skips it loses nothing.
void check_file_options(const CompressFileOptions& options);

// Compresses UTF-8 `text` with `model` and writes the .kvz file to `path` atomically (temporary
// file, fsync, rename: a failure leaves no file behind). check_file_options first, then the
// quantization group against the model's head dimension, all before any model work. Returns the
// compression's result (the cache included) for reporting; a streamed compression's rows go from
// its stream cache to the file layer by layer, never held twice, so its result's cache keeps no
// rows.
CompressResult compress_to_file(const model::Model& model, std::string_view text,
                                const CompressFileOptions& options, const std::string& path);

}  // namespace kvzip::compress
