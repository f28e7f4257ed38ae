// The composition evaluation (`kvzip eval --compose K`): multi-document question answering over
// compressed caches composed at question time (loader/compose.h). Each SQuAD paragraph is a
// document, compressed once per method and ratio; each question is asked over K documents: its
// own paragraph and the K − 1 that follow it in the article (wrapping around), its own at
// position (question index mod K), so every position is exercised. Rows:
//   joint            the K documents prefilled together, full cache: the reference
//   composed         the K documents' caches composed (ratio 1: what composition alone loses),
//                    per method × ratio × blend (selective recompute)
//   joint-compressed the joint prefill compressed as one cache at the same ratio (the ceiling a
//                    single-document cache reaches)
// Columns: SQuAD F1 and contains-answer, agreement with the joint answer (token-identical), the
// first answer token's KL(joint || row), and the mean time to the first answer token from the
// compressed caches in memory (joint: the prefill of the K documents and the question; composed:
// composing and the question; joint-compressed: the question only).
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

struct ComposeEvalOptions : ParagraphEvalOptions {
  uint32_t k = 4;              // documents per question
  uint64_t max_questions = 0;  // > 0: ask only the first N questions (every
                               // paragraph is still a document to compose)
  std::vector<std::string> methods = {"kvzip"};
  std::vector<double> ratios = {0.5, 0.3};  // besides 1.0 (composed full caches)
  std::vector<double> blends = {0.0, 0.3};  // selective recompute fractions to compare
  bool doc_prefix = false;                  // loader::ComposeOptions::doc_prefix
  loader::BlendRule rule = loader::BlendRule::deviation;  // loader::ComposeOptions::rule
  bool joint_compressed = true;                           // the joint-compressed rows
};

struct ComposeEvalRow {
  std::string setting;  // "joint", "composed", "joint-compressed"
  std::string method;   // "full" for ratio 1
  double ratio = 1.0;
  double blend = 0.0;
  double f1 = 0.0, contains = 0.0, agreement = 0.0, kl = 0.0;  // percent, percent, percent, nats
  double ttft_ms = 0.0;
  uint64_t questions = 0;
};

struct ComposeEvalReport {
  std::vector<ComposeEvalRow> rows;
  uint32_t k = 0, documents = 0;
  uint64_t questions = 0;
  double total_s = 0.0;
};

// The options' own checks (method names, ratios in (0, 1), blends in [0, 1], k >= 2), made
// before any work: Errc::invalid_argument naming the option.
void check_compose_options(const ComposeEvalOptions& options);
// k documents per question need k paragraphs with questions in `source` (named in the message).
void check_compose_documents(size_t paragraphs, uint32_t k, const std::string& source);

// `paragraphs`: SQuAD documents read with DocumentUnit::Paragraph. Errc::invalid_argument for
// k < 2 or k > the number of paragraphs, an unknown method, a ratio outside (0, 1) or a blend
// outside [0, 1].
ComposeEvalReport run_compose_eval(const model::Model& model,
                                   const std::vector<Document>& paragraphs,
                                   const ComposeEvalOptions& options);

std::string format_compose_table(const ComposeEvalReport& report);
std::string format_compose_csv(const ComposeEvalReport& report);

}  // namespace kvzip::eval
