// Text forms of an EvalReport: the fixed-width table printed by `kvzip eval`, the CSV file and the
// JSON-lines answer dump.
// Percentages are printed with one decimal, KL with four (nats), times in seconds.
#include <cstdio>
#include <string>

#include "common/atomic_file.h"
#include "common/json.h"
#include "eval/eval.h"

namespace kvzip::eval {
namespace {

// The columns in the order both the table and the CSV show them: what the answers are worth
// against the gold answers first (contains, F1), then how closely the cache stands in for the full
// one (first-token KL, exact agreement, answer-to-answer F1), then counts and times.
std::string line(const char* f, const EvalRow& r) {
  char buf[256];
  std::snprintf(buf, sizeof buf, f, r.method.c_str(), r.ratio, r.achieved_ratio, r.contains, r.f1,
                r.kl, r.agreement, r.answer_f1, static_cast<unsigned long long>(r.questions),
                r.compress_s, r.answer_s);
  return buf;
}

}  // namespace

// The dtype columns: storage type, .kvz bytes, load time.
std::string dtype_cells(const char* f, const EvalRow& r) {
  char buf[128];
  std::snprintf(buf, sizeof buf, f, r.kv_dtype.c_str(),
                static_cast<unsigned long long>(r.file_bytes), r.load_ms);
  return buf;
}

std::string format_table(const EvalReport& report) {
  std::string out =
      "method     ratio   kept  contains%     F1%    KL(nats)  agree%  ansF1%  questions  "
      "compress_s  answer_s";
  out += report.with_kv_dtypes ? "  dtype   file_bytes  load_ms\n" : "\n";
  for (const EvalRow& r : report.rows) {
    std::string l =
        line("%-10s %5.2f  %5.3f  %9.1f  %6.1f  %10.4f  %6.1f  %6.1f  %9llu  %10.2f  %8.2f", r);
    out += l + (report.with_kv_dtypes ? dtype_cells("  %-5s %12llu  %7.1f", r) : "") + "\n";
  }
  if (report.with_kv_dtypes)
    out +=
        "rows of a dtype other than f32: KL, agree% and ansF1% are against the f32 cache of the "
        "same method and ratio\n";
  char buf[320];
  std::snprintf(
      buf, sizeof buf,
      "%u documents, %llu questions, %llu document tokens; shared prefill %.1f s, total %.1f s\n",
      report.documents, static_cast<unsigned long long>(report.questions),
      static_cast<unsigned long long>(report.document_tokens), report.prefill_s, report.total_s);
  out += buf;
  out +=
      "contains%: answers containing a reference answer; F1%: token F1 against the reference "
      "answers "
      "(both SQuAD-normalised); agree%: answers token-identical to the full cache's; ansF1%: token "
      "F1 against the full cache's answer\n";
  if (report.answer_tokens) {
    std::snprintf(
        buf, sizeof buf,
        "compressed-cache answers: %llu tokens; %llu one-token decode passes, %llu batched "
        "draft passes\n",
        static_cast<unsigned long long>(report.answer_tokens),
        static_cast<unsigned long long>(report.decode_steps),
        static_cast<unsigned long long>(report.draft_passes));
    out += buf;
  }
  return out;
}

std::string format_csv(const EvalReport& report) {
  std::string out =
      "method,ratio,achieved_ratio,contains,f1,kl,agreement,answer_f1,questions,compress_s,answer_"
      "s";
  out += report.with_kv_dtypes ? ",kv_dtype,file_bytes,load_ms\n" : "\n";
  for (const EvalRow& r : report.rows)
    out += line("%s,%.4f,%.6f,%.4f,%.4f,%.6g,%.4f,%.4f,%llu,%.4f,%.4f", r) +
           (report.with_kv_dtypes ? dtype_cells(",%s,%llu,%.3f", r) : "") + "\n";
  return out;
}

void write_csv(const std::string& path, const EvalReport& report) {
  write_file_atomically(path, /*force=*/true, format_csv(report));
}

std::string format_answers_jsonl(const EvalReport& report) {
  std::string out;
  for (const AnswerRecord& a : report.answers) {
    const Json line = {{"document", a.document},
                       {"id", a.question_id},
                       {"question", a.question},
                       {"method", a.method},
                       {"ratio", a.ratio},
                       {"answer", a.answer},
                       {"tokens", a.tokens},
                       {"stopped", a.stopped},
                       {"contains", a.contains},
                       {"f1", a.f1},
                       {"kl", a.kl},
                       {"agrees", a.agrees},
                       {"answer_f1", a.answer_f1},
                       {"kv_dtype", a.kv_dtype}};
    out += json_dump(line) + "\n";
  }
  return out;
}

void write_answers(const std::string& path, const EvalReport& report) {
  write_file_atomically(path, /*force=*/true, format_answers_jsonl(report));
}

}  // namespace kvzip::eval
