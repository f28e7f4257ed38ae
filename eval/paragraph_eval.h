// What the evaluations over a SQuAD file's paragraphs share (eval --compose, compose_eval.h; eval
// --retrieve, retrieve_eval.h): how answers are asked (length, system prompt, query template), the
// KVzip scorer's chunk, the forward pass's matrix path and threads, and an optional progress log.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "format/format.h"
#include "kernels/matmul.h"
#include "model/forward.h"

namespace kvzip::eval {

struct ParagraphEvalOptions {
  uint32_t max_answer_tokens = 24;
  std::string system;
  std::string query_template = format::kDefaultQueryTemplate;
  uint32_t kvzip_chunk = 2000;
  kernels::MatmulPath matmul = kernels::MatmulPath::Fast;
  uint32_t threads = 0;
  std::function<void(const std::string&)> log{};  // optional progress lines

  model::ForwardOptions forward_options() const {
    model::ForwardOptions fo;
    fo.threads = threads;
    fo.matmul = matmul;
    return fo;
  }
  void note(const std::string& line) const {
    if (log) log(line);
  }
};

}  // namespace kvzip::eval
