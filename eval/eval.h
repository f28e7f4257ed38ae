// The multi-query evaluation of spec/methods.md §5: per document, prefill ONCE (with the prefill
// observers of every method fanned out), score once per method, then for each ratio select, evict
// and ask ALL the document's questions from that one compressed cache (greedy). The full cache
// (method "full", ratio 1) answers are the reference. Prompts are built exactly as `kvzip
// compress` + `kvzip query` build them (compress/pipeline.h document_prompt, then
// loader::question_tokens: query template + suffix), and each stage is the compress pipeline's
// own (make_method_scorer, select_for_method, evict), run once where the pipeline would repeat it.
// Per method × ratio: contains-answer and SQuAD F1 against the gold answers (the headline: what a
// user of the answers sees), KL(full || method) of the first answer token's distribution, and
// agreement with the full cache's answer, exact (token-identical) and tolerant (answer-to-answer
// token F1). With kv_dtypes beyond f32, each
// method × ratio cache is also written as a .kvz image in memory in every other dtype (q8, q4,
// f16, bf16; selection then quantization, as `kvzip compress --kv-dtype`), read back through the
// reader and loader as `kvzip query` would, and asked every question: those rows compare with the
// f32 cache at the same ratio (agreement and KL), which isolates what the storage type costs.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "compress/pipeline.h"
#include "eval/squad.h"
#include "kernels/matmul.h"
#include "model/model.h"

namespace kvzip::eval {

// The eval's name of kvzap compressing with CompressOptions::stream.
inline constexpr const char* kStreamedMethod = "kvzap-stream";

struct EvalOptions {
  std::vector<std::string> methods = {"kvzip", "snapkv", "h2o", "streaming", "random"};
  std::vector<double> ratios = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0};
  compress::SelectionLevel level = compress::SelectionLevel::Global;
  uint32_t max_answer_tokens = 24;
  std::string system;  // "" = the chat template's default system prompt
  std::string query_template = format::kDefaultQueryTemplate;
  uint32_t kvzip_chunk = 2000;
  uint64_t seed = 0;                        // --method random
  std::vector<std::string> scorer_options;  // "KEY=VALUE" (set_scorer_option), after chunk/seed
  // Query-aware KVzip: each document's questions (their prompt tokens, as they are asked) are
  // known at compression, and method "kvzip" scores with them as well as with the reconstruction
  // (ScorerOptions::kvzip_queries). The other methods are unchanged: put the question where their
  // probe window is (at the document's end) to make them query-aware, as `eval --ruler` does.
  bool query_aware = false;
  // Method "kvzip-head" (compress/head_level.h): the (L, Hkv) head scores of `kvzip calibrate`,
  // required when it is among the methods (checked() refuses it without them). Its ratios are
  // fractions of heads kept whole; the rows show the achieved document-row ratio as for the rest.
  std::vector<float> head_scores;
  uint32_t head_window = 0;  // document rows the other heads keep (the last ones)
  // Method "kvzap" (compress/learned_scorer.h): the scorer file of `kvzip calibrate --scorer` and
  // its recorded source, required when it is among the methods. "kvzap-stream" is the same scorer
  // with the rows dropped while the document is read (compress --stream): it prefills the document
  // again for each ratio, since what the later tokens see depends on the ratio.
  std::shared_ptr<const format::ScorerFile> learned;
  compress::MethodParams learned_source;
  // Storage types to evaluate: "f32" (always, first) and any of f16, bf16, q8, q4. Rows of a
  // dtype other than f32 report agreement and KL against the f32 cache of the same method and
  // ratio.
  std::vector<std::string> kv_dtypes = {"f32"};
  uint32_t kv_group = 0;  // q8/q4 channels per group, 0 = D
  // Matrix products of every forward pass. Fast (the default everywhere) rounds activations to
  // int8, which makes answers a step function of the cache: comparing storage types, Exact
  // separates what the storage costs from those steps (BENCHMARKS.md,
  // "File sizes and storage types").
  kernels::MatmulPath matmul = kernels::MatmulPath::Fast;
  uint32_t threads = 0;         // 0 = all cores
  bool verify_drafts = true;    // false: decode every answer token one at a time (answer.h)
  bool keep_answers = false;    // true: EvalReport::answers lists every answer
  bool reuse_identical = true;  // a selection that keeps every row IS the full cache: take
                                // the reference answers instead of answering again
  std::function<void(const std::string&)> log{};  // optional: one progress line per event
  prefill::PrefillProgressFn prefill_progress;    // optional: progress of each document prefill
};

// Throws Errc::invalid_argument for an unknown method, a ratio outside (0, 1], a template
// without {question}, max_answer_tokens == 0, or "kvzip-head" without head scores. Sorts and
// de-duplicates methods (keeping their order) and ratios (ascending); "full" among the methods is
// dropped (it is always the reference).
EvalOptions checked(EvalOptions options);

struct EvalRow {
  std::string method;
  double ratio = 1.0;           // requested
  double achieved_ratio = 1.0;  // kept document rows / all document rows, over every document
  double f1 = 0.0;              // mean SQuAD F1, percent
  double contains = 0.0;        // questions whose answer contains a gold answer, percent
  double agreement = 0.0;       // answers token-identical to the full-cache answer, percent
  double answer_f1 = 0.0;  // mean token F1 of the answer against the full-cache answer, percent
  double kl = 0.0;         // mean first-token KL(full || method), nats
  uint64_t questions = 0;
  double compress_s = 0.0;       // method work on top of the shared prefill: its prefill observer,
                                 // its scoring pass, selection + eviction at this ratio
  double answer_s = 0.0;         // answering every question from the compressed cache
  std::string kv_dtype = "f32";  // storage type; not f32: agreement and KL are against f32
  uint64_t file_bytes = 0;       // the cache as a .kvz (summed over documents; 0 when not written)
  double load_ms = 0.0;          // reading that image back into a cache (open + loader), summed
};

// One answer of one question from one compressed cache (kept when EvalOptions::keep_answers).
struct AnswerRecord {
  std::string document, question_id, question, method;
  double ratio = 1.0;
  std::string answer;  // decoded text
  uint32_t tokens = 0;
  bool stopped = false;  // ended on a stop token
  bool agrees = false;   // token-identical to the full-cache answer
  double f1 = 0.0;       // fraction
  bool contains = false;
  double kl = 0.0;               // first-token KL(full || this), nats
  double answer_f1 = 0.0;        // token F1 against the full-cache answer, fraction
  std::string kv_dtype = "f32";  // not f32: agrees, answer_f1 and kl are against the f32 cache's
};

struct EvalReport {
  std::vector<EvalRow> rows;  // "full" first, then methods × ratios in option order
  uint32_t documents = 0;
  uint64_t questions = 0;
  uint64_t document_tokens = 0;  // Σ n_c
  double prefill_s = 0.0;        // the shared document prefills (including all observers)
  double total_s = 0.0;
  uint64_t decode_steps = 0;          // one-token passes run for non-reference answers
  uint64_t draft_passes = 0;          // batched draft passes run for them
  uint64_t answer_tokens = 0;         // tokens of those answers (decode_steps / answer_tokens shows
                                      // how much the draft verification saved)
  std::vector<AnswerRecord> answers;  // in evaluation order, when keep_answers
  bool with_kv_dtypes = false;  // more than f32 was asked: the table and CSV show the dtype columns
};

// Runs the protocol over every document. Throws what compress/prefill throw (a document that does
// not fit the model's context, with both numbers).
EvalReport run_eval(const model::Model& model, const std::vector<Document>& documents,
                    const EvalOptions& options);

// Fixed-width table, one line per row, with a header and a summary line.
std::string format_table(const EvalReport& report);
// CSV with the header method,ratio,achieved_ratio,contains,f1,kl,agreement,answer_f1,questions,
// compress_s,answer_s (+ kv_dtype,file_bytes,load_ms with with_kv_dtypes).
std::string format_csv(const EvalReport& report);
// Writes format_csv(report) to `path` atomically (common/atomic_file.h; Errc::io on failure).
void write_csv(const std::string& path, const EvalReport& report);
// The rows of a CSV that format_csv wrote (either header), in file order, so that the rows of
// separate runs, merged into one file, can be drawn again (`eval --plot-csv`); the report's other
// fields stay empty. Errc::invalid_argument naming the line for another header, a line with the
// wrong number of fields or a number that does not parse.
EvalReport parse_csv(std::string_view text);
// The rows of a CSV that format_csv wrote (either header), in file order, so that the rows of
// separate runs, merged into one file, can be drawn again (`eval --plot-csv`); the report's other
// fields stay empty. Errc::invalid_argument naming the line for another header, a line with the
// wrong number of fields or a number that does not parse.
EvalReport parse_csv(std::string_view text);
// One JSON object per line per kept answer: document, id, question, method, ratio, answer,
// tokens, stopped, contains, f1, kl, agrees, answer_f1, kv_dtype.
std::string format_answers_jsonl(const EvalReport& report);
void write_answers(const std::string& path, const EvalReport& report);

}  // namespace kvzip::eval
