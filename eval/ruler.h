// RULER-style long-context evaluation (Hsieh et al. 2024, "RULER: What's the Real Context Size of
// Your Long-Context Language Models?"): the synthetic tasks generated in kvzip from RULER's
// published prompt templates, scored as RULER and kvpress score them (string-match recall per
// task), and run through the multi-query protocol of eval.h (each context prefilled once, scored
// once per method, compressed at every ratio, its question asked from every cache).
//
// Every sample splits RULER's prompt at the end of the context: the document (instruction +
// context) is what gets compressed, the question (the template's query part) is asked afterwards
// through the query template "{question}", and the template's answer prefix opens the reply.
// Query-agnostic: only the document is compressed. Query-aware (the question known during
// compression), each method in the query-aware form its authors or kvpress compare with: the
// question is appended to the compressed document (kvpress's compress_questions), so the methods
// that score from the document's last tokens (snapkv, h2o, rest-kv, rkv) see it in their probe
// window, and kvzip also scores with the question as asked (EvalOptions::query_aware: the
// question's attention over each chunk, max-combined with the reconstruction's); streaming and
// random have no use for it. The question is asked again after the compressed context. The full
// cache (kept = 1) is answered once per sample and is every method's ratio 1: ratios of 1 are
// dropped from the methods' grid.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "eval/eval.h"
#include "eval/squad.h"
#include "model/model.h"

namespace kvzip::eval {

// How a task's answers are scored against its reference outputs (RULER scripts/eval):
//   All  (string_match_all):  the fraction of the outputs found in the prediction
//   Part (string_match_part): 1 when any output is found
// "found" = a case-insensitive substring match.
enum class RulerMetric : uint8_t { All, Part };

struct RulerTask {
  std::string name;             // niah_single_1 ... qa_2
  uint32_t tokens_to_generate;  // RULER's answer budget for the task
  RulerMetric metric;
};

// Every task, in RULER's order: niah_single_1..3, niah_multikey_1..3, niah_multivalue,
// niah_multiquery, vt, cwe, fwe, qa_1, qa_2.
const std::vector<RulerTask>& ruler_tasks();
// The task named `name`; Errc::invalid_argument listing the names for any other.
const RulerTask& ruler_task(std::string_view name);
// A comma-separated list of task names, "niah" (the eight NIAH tasks), "synthetic" (all but the
// QA tasks) or "all"; duplicates dropped, RULER's order kept. Errc::invalid_argument when empty
// or a name is unknown.
std::vector<std::string> parse_ruler_tasks(std::string_view list);

// Counts the tokens a text takes (the model's tokenizer; tests count words).
using TokenCounter = std::function<size_t(std::string_view)>;

struct RulerSample {
  std::string task;
  uint32_t length = 0;               // the target sequence length (prompt + answer budget)
  uint32_t index = 0;                // sample number within (task, length)
  std::string document;              // instruction + context: what is compressed
  std::string question;              // the rest of the template: what is asked after the context
  std::string answer_prefix;         // the template's answer prefix: the reply starts with it
  std::vector<std::string> outputs;  // reference answers
};

// The QA tasks' source: paragraphs and their answerable questions (qa_1: SQuAD, qa_2: HotpotQA).
struct QaSource {
  std::vector<std::string> paragraphs;  // distinct, in file order
  struct Item {
    std::string question;
    std::vector<std::string> answers;
    std::vector<uint32_t> gold;     // paragraphs the answer is in
    std::vector<uint32_t> related;  // other paragraphs of the same article (SQuAD), added first
  };
  std::vector<Item> items;
};
// SQuAD v1.1/v2.0 JSON (answerable questions) as RULER's qa_1 reads it.
QaSource qa_source_from_squad(const std::vector<Document>& paragraphs);
// HotpotQA JSON ([{"question","answer","context":[[title,[sentences...]]...]}...]) as RULER's
// qa_2 reads it: each context entry is the paragraph "title\nsentences joined". Errc::not_found/io
// when unreadable, Errc::invalid_argument naming the JSON path of a malformed entry.
QaSource read_hotpotqa(const std::string& path);

struct RulerGenOptions {
  uint64_t seed = 42;
  // The essay haystack (RULER: Paul Graham's essays) of the niah essay tasks; empty: those tasks
  // use the built-in noise haystack ("The grass is green. ...") as niah_single_1 and vt do.
  std::string haystack;
  const QaSource* squad = nullptr;     // qa_1 (required for it)
  const QaSource* hotpotqa = nullptr;  // qa_2 (required for it)
  // Tokens of the prompt outside the sample's text (the chat template around document and
  // question): the sample's text, its answer prefix, this and the task's answer budget fit
  // `length`.
  uint32_t template_tokens = 0;
};

// One sample of `task` at `length` tokens: the largest haystack whose prompt fits (binary search
// over haystack units, as RULER sizes it), with every random choice drawn from (seed, task,
// length, index). Errc::invalid_argument when the task cannot fit `length` at all, or a QA task
// lacks its source.
RulerSample make_ruler_sample(std::string_view task, uint32_t length, uint32_t index,
                              const RulerGenOptions& options, const TokenCounter& count_tokens);

// The sample's score in [0, 1] by the task's metric.
double ruler_score(const RulerTask& task, std::string_view prediction,
                   const std::vector<std::string>& outputs);

// The mean of per-sample scores and its standard error: the sample standard deviation (divisor
// n - 1) over sqrt(n), so that a cell's mean reads as mean ± se. The error is 0 for fewer than two
// samples (no spread to estimate); both are 0 for none.
struct MeanError {
  double mean = 0.0, se = 0.0;
};
MeanError mean_standard_error(std::span<const double> scores);

// ---- The evaluation --------------------------------------------------------------------------

enum class RulerSetting : uint8_t { QueryAgnostic, QueryAware };
const char* ruler_setting_name(RulerSetting s);  // "agnostic" | "aware"

struct RulerOptions {
  EvalOptions eval;  // methods, ratios, level, threads, ...; max_answer_tokens caps
                     // each task's own budget; query_template and keep_answers are set
  std::vector<std::string> tasks = {"niah_single_1"};
  std::vector<uint32_t> lengths = {4096};
  uint32_t samples = 1;  // per task and length
  std::vector<RulerSetting> settings = {RulerSetting::QueryAgnostic};
  RulerGenOptions gen;
  std::string model_name;                         // the kvpress CSV's model column
  std::function<void(const std::string&)> log{};  // progress lines (with elapsed time and estimate)
};

struct RulerRow {
  std::string setting, task, method;
  uint32_t length = 0;
  double ratio = 1.0, achieved_ratio = 1.0;
  double score = 0.0;  // mean RULER score, 0..100
  uint32_t samples = 0;
  double score_se = 0.0;  // the standard error of `score` over the samples (0 for one sample)
};

struct RulerReport {
  std::vector<RulerRow> rows;         // per setting, length, task: "full" then methods × ratios
  std::vector<AnswerRecord> answers;  // every answer (document = "task/length/index", + "/aware"
                                      // in the query-aware setting)
  std::string model_name;
  double total_s = 0.0;
};

// Generates every sample and runs the protocol per (setting, length, task). Throws what
// make_ruler_sample and run_eval throw.
RulerReport run_ruler(const model::Model& model, const RulerOptions& options);

// Table: one line per (setting, length, method, ratio) with a column per task and their mean.
std::string format_ruler_table(const RulerReport& report);
// setting,length,task,method,ratio,achieved_ratio,score,samples,score_se
std::string format_ruler_csv(const RulerReport& report);
// The kvpress leaderboard's layout: model,method,compression_ratio,task,score (+ setting and
// context length, then score_se and samples), compression_ratio = 1 - kept ratio; the full cache is
// method no_press at 0.
std::string format_kvpress_csv(const RulerReport& report);

}  // namespace kvzip::eval
