// The retrieval evaluation (`kvzip eval --squad FILE --retrieve K`): the library (library/) on a
// SQuAD file. Each paragraph is a document compressed once (method and ratio of the options) and
// written as a cache into a temporary folder, which the library indexes; each question searches
// the whole folder for K caches (BM25, library::Index::search) and is answered over:
//   retrieved  the K caches found, composed in ranking order (what `kvzip ask` does)
//   oracle     its own paragraph's cache and K − 1 others: the found ones when its own is among
//              them (the same composition: its answer is counted again, not recomputed), else its
//              own first and the first K − 1 found (a retriever that never misses)
//   joint      the K found paragraphs prefilled together, full cache: the reference
// Columns: recall@K (the question's own paragraph among the row's documents), SQuAD F1 and
// contains-answer, agreement with the joint answer (token-identical), the first answer token's
// KL(joint || row), and the time to the first answer token split into its parts: search,
// composition (separators and probes), recompute (the blended rows), prefill (joint only) and
// the question with the first answer token. The caches are held in memory, as a server holds
// them: reading files is not part of the time.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "eval/paragraph_eval.h"
#include "eval/squad.h"
#include "format/format.h"
#include "kernels/matmul.h"
#include "loader/compose.h"
#include "model/model.h"

namespace kvzip::eval {

struct RetrieveEvalOptions : ParagraphEvalOptions {
  uint32_t k = 4;              // caches retrieved per question
  uint64_t max_questions = 0;  // > 0: ask only the first N questions (every paragraph is indexed)
  std::string method = "kvzip";
  double ratio = 0.5;          // fraction of document rows kept (1: full caches)
  std::vector<double> blends;  // recompute fractions; empty: the library's default (`kvzip ask`)
  loader::BlendRule rule = loader::BlendRule::deviation;  // loader::ComposeOptions::rule
};

struct RetrieveEvalRow {
  std::string setting;  // "joint", "retrieved", "oracle"
  double blend = 0.0;
  double recall = 0.0;  // percent of questions whose own paragraph is among the row's documents
  double f1 = 0.0, contains = 0.0, agreement = 0.0, kl = 0.0;  // percent, percent, percent, nats
  // Mean milliseconds to the first answer token, and its parts.
  double search_ms = 0.0, compose_ms = 0.0, recompute_ms = 0.0, prefill_ms = 0.0, answer_ms = 0.0;
  double ttft_ms = 0.0;
  uint64_t questions = 0;
};

struct RetrieveEvalReport {
  std::vector<RetrieveEvalRow> rows;  // joint, then retrieved and oracle per blend
  uint32_t k = 0, documents = 0;
  uint64_t questions = 0;
  std::string method;
  double ratio = 1.0;
  double total_s = 0.0;
};

// The library's default recompute fraction for the model (loader::default_blend, as `kvzip ask`
// without --blend).
double library_default_blend(const model::Model& model);

// The options' own checks (k >= 1, a known method, ratio in (0, 1], blends in [0, 1]), made before
// any work: Errc::invalid_argument naming the option.
void check_retrieve_options(const RetrieveEvalOptions& options);
// K retrieved documents need at least K paragraphs with questions in `source` (named in the
// message).
void check_retrieve_documents(size_t paragraphs, uint32_t k, const std::string& source);

// `paragraphs`: SQuAD documents read with DocumentUnit::Paragraph. The caches are written into a
// fresh temporary folder, removed afterwards. The checks above as Errc::invalid_argument.
RetrieveEvalReport run_retrieve_eval(const model::Model& model,
                                     const std::vector<Document>& paragraphs,
                                     const RetrieveEvalOptions& options);

std::string format_retrieve_table(const RetrieveEvalReport& report);
std::string format_retrieve_csv(const RetrieveEvalReport& report);

}  // namespace kvzip::eval
