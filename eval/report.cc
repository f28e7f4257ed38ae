// Text forms of an EvalReport: the fixed-width table printed by `kvzip eval`, the CSV file (and
// its rows read back) and the JSON-lines answer dump.
// Percentages are printed with one decimal, KL with four (nats), times in seconds.
#include <charconv>
#include <cstdio>
#include <string>
#include <vector>

#include "common/atomic_file.h"
#include "common/error.h"
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

namespace {

constexpr std::string_view kCsvHeader =
    "method,ratio,achieved_ratio,contains,f1,kl,agreement,answer_f1,questions,compress_s,answer_s";

std::vector<std::string_view> split_fields(std::string_view line) {
  std::vector<std::string_view> out;
  for (size_t start = 0;;) {
    const size_t comma = line.find(',', start);
    out.push_back(line.substr(start, comma == std::string_view::npos ? comma : comma - start));
    if (comma == std::string_view::npos) return out;
    start = comma + 1;
  }
}

template <typename T>
T csv_number(std::string_view field, size_t line_no) {
  T v{};
  const auto [end, ec] = std::from_chars(field.data(), field.data() + field.size(), v);
  if (field.empty() || ec != std::errc() || end != field.data() + field.size())
    throw Error(Errc::invalid_argument, std::string("eval CSV line ")
                                            .append(std::to_string(line_no))
                                            .append(": '")
                                            .append(field)
                                            .append("' is not a number"));
  return v;
}

EvalRow csv_row(const std::vector<std::string_view>& f, bool dtypes, size_t line_no) {
  EvalRow r;
  r.method = std::string(f[0]);
  r.ratio = csv_number<double>(f[1], line_no);
  r.achieved_ratio = csv_number<double>(f[2], line_no);
  r.contains = csv_number<double>(f[3], line_no);
  r.f1 = csv_number<double>(f[4], line_no);
  r.kl = csv_number<double>(f[5], line_no);
  r.agreement = csv_number<double>(f[6], line_no);
  r.answer_f1 = csv_number<double>(f[7], line_no);
  r.questions = csv_number<uint64_t>(f[8], line_no);
  r.compress_s = csv_number<double>(f[9], line_no);
  r.answer_s = csv_number<double>(f[10], line_no);
  if (dtypes) {
    r.kv_dtype = std::string(f[11]);
    r.file_bytes = csv_number<uint64_t>(f[12], line_no);
    r.load_ms = csv_number<double>(f[13], line_no);
  }
  return r;
}

}  // namespace

EvalReport parse_csv(std::string_view text) {
  EvalReport report;
  size_t line_no = 0, fields = 0;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (++line_no == 1) {
      report.with_kv_dtypes =
          line == std::string(kCsvHeader).append(",kv_dtype,file_bytes,load_ms");
      if (line != kCsvHeader && !report.with_kv_dtypes)
        throw Error(Errc::invalid_argument,
                    std::string("eval CSV line 1: expected the header ").append(kCsvHeader));
      fields = report.with_kv_dtypes ? 14 : 11;
      continue;
    }
    if (line.empty()) continue;
    const std::vector<std::string_view> f = split_fields(line);
    if (f.size() != fields)
      throw Error(Errc::invalid_argument, std::string("eval CSV line ")
                                              .append(std::to_string(line_no))
                                              .append(": ")
                                              .append(std::to_string(f.size()))
                                              .append(" fields, the header has ")
                                              .append(std::to_string(fields)));
    report.rows.push_back(csv_row(f, report.with_kv_dtypes, line_no));
  }
  if (line_no == 0) throw Error(Errc::invalid_argument, "eval CSV: empty");
  return report;
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
