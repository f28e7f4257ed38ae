// SQuAD-format question sets as evaluation documents. A SQuAD file is
//   {"data":[{"title","paragraphs":[{"context","qas":[{"question","id","answers":[{"text"}],
//   "is_impossible"}]}]}]}
// (v1.1 files lack "is_impossible": every question is answerable). A document is either a whole
// article (its paragraph contexts joined with "\n\n") or one paragraph, with its questions.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvzip::eval {

struct Question {
  std::string id;
  std::string text;
  std::vector<std::string> answers;  // gold answer texts (empty for an unanswerable question)
  bool impossible = false;           // SQuAD v2 "is_impossible"
  std::string answer_prefix{};       // text the reply starts with, after the chat template's
                                     // assistant opener (RULER's answer prefix); "" for SQuAD
};

struct Document {
  std::string title;  // article title; paragraph documents add " #k" (1-based paragraph number)
  std::string text;
  std::vector<Question> questions;
};

enum class DocumentUnit : uint8_t { Article, Paragraph };
// "article" or "paragraph"; anything else throws Errc::invalid_argument.
DocumentUnit parse_document_unit(std::string_view name);

struct SquadOptions {
  DocumentUnit unit = DocumentUnit::Article;
  bool all_questions = false;  // false: answerable questions only
  uint64_t max_questions = 0;  // > 0: only the first N selected questions of the file, in order
};

// Parses a SQuAD JSON text. Throws Errc::invalid_argument naming the JSON path of the problem
// (e.g. "data[0].paragraphs[3].qas[1].answers: expected an array, found a string") for a
// malformed or mis-shaped file, and when no document is left with a question. Documents left
// without questions (after the filters) are dropped.
std::vector<Document> parse_squad(std::string_view json, const std::string& source,
                                  const SquadOptions& options);
// Reads and parses a file (Errc::not_found / io when it cannot be read).
std::vector<Document> read_squad(const std::string& path, const SquadOptions& options);

}  // namespace kvzip::eval
