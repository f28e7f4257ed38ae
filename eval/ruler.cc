// RULER tasks, scoring and the evaluation driver (eval/ruler.h); the generators are
// eval/detail/ruler_tasks.cc. The driver turns every sample into an eval.h Document with one
// question and runs run_eval per (setting, length, task), so each task gets its own answer budget.
#include "eval/ruler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <tuple>

#include "common/error.h"
#include "common/json.h"
#include "common/text_file.h"
#include "compress/pipeline.h"

namespace kvzip::eval {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
  return out;
}

std::string fmt(const char* f, double a) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, a);
  return buf;
}

}  // namespace

const std::vector<RulerTask>& ruler_tasks() {
  static const std::vector<RulerTask> tasks = {{"niah_single_1", 128, RulerMetric::All},
                                               {"niah_single_2", 128, RulerMetric::All},
                                               {"niah_single_3", 128, RulerMetric::All},
                                               {"niah_multikey_1", 128, RulerMetric::All},
                                               {"niah_multikey_2", 128, RulerMetric::All},
                                               {"niah_multikey_3", 128, RulerMetric::All},
                                               {"niah_multivalue", 128, RulerMetric::All},
                                               {"niah_multiquery", 128, RulerMetric::All},
                                               {"vt", 30, RulerMetric::All},
                                               {"cwe", 120, RulerMetric::All},
                                               {"fwe", 50, RulerMetric::All},
                                               {"qa_1", 32, RulerMetric::Part},
                                               {"qa_2", 32, RulerMetric::Part}};
  return tasks;
}

const RulerTask& ruler_task(std::string_view name) {
  for (const RulerTask& t : ruler_tasks())
    if (t.name == name) return t;
  std::string known;
  for (const RulerTask& t : ruler_tasks()) known += (known.empty() ? "" : ", ") + t.name;
  throw Error(Errc::invalid_argument, "ruler: unknown task '" + std::string(name) +
                                          "'; known: " + known + " (or niah, synthetic, all)");
}

std::vector<std::string> parse_ruler_tasks(std::string_view list) {
  std::vector<bool> on(ruler_tasks().size(), false);
  size_t start = 0;
  bool any = false;
  while (start <= list.size()) {
    const size_t end = std::min(list.find(',', start), list.size());
    const std::string_view item = list.substr(start, end - start);
    start = end + 1;
    if (item.empty()) continue;
    any = true;
    for (size_t i = 0; i < on.size(); ++i) {
      const std::string& n = ruler_tasks()[i].name;
      if (item == "all" || (item == "niah" && n.rfind("niah", 0) == 0) ||
          (item == "synthetic" && n.rfind("qa_", 0) != 0))
        on[i] = true;
    }
    if (item != "all" && item != "niah" && item != "synthetic") {
      const RulerTask& t = ruler_task(item);
      on[&t - ruler_tasks().data()] = true;
    }
  }
  if (!any)
    throw Error(Errc::invalid_argument,
                "ruler: no task given (option ruler, e.g. niah_single_1,vt or all)");
  std::vector<std::string> out;
  for (size_t i = 0; i < on.size(); ++i)
    if (on[i]) out.push_back(ruler_tasks()[i].name);
  return out;
}

double ruler_score(const RulerTask& task, std::string_view prediction,
                   const std::vector<std::string>& outputs) {
  if (outputs.empty()) return 0.0;
  const std::string p = lower(prediction);
  size_t found = 0;
  for (const std::string& o : outputs) found += p.find(lower(o)) != std::string::npos ? 1 : 0;
  if (task.metric == RulerMetric::Part) return found ? 1.0 : 0.0;
  return double(found) / double(outputs.size());
}

QaSource qa_source_from_squad(const std::vector<Document>& paragraphs) {
  QaSource src;
  std::map<std::string, uint32_t> index;
  std::map<std::string, std::vector<uint32_t>> article;  // title without " #k" -> paragraphs
  auto base_title = [](const std::string& t) { return t.substr(0, t.rfind(" #")); };
  for (const Document& d : paragraphs) {
    if (index.emplace(d.text, uint32_t(src.paragraphs.size())).second)
      src.paragraphs.push_back(d.text);
    auto& a = article[base_title(d.title)];
    const uint32_t id = index[d.text];
    if (std::find(a.begin(), a.end(), id) == a.end()) a.push_back(id);
  }
  for (const Document& d : paragraphs) {
    const uint32_t id = index[d.text];
    for (const Question& q : d.questions) {
      if (q.impossible || q.answers.empty()) continue;
      QaSource::Item it{q.text, q.answers, {id}, {}};
      for (uint32_t o : article[base_title(d.title)])
        if (o != id) it.related.push_back(o);
      src.items.push_back(std::move(it));
    }
  }
  return src;
}

QaSource read_hotpotqa(const std::string& path) {
  const std::string text = read_text(path, "HotpotQA file");
  const Json root = parse_json(text, path);
  auto fail = [&](const std::string& where, const std::string& what) {
    throw Error(Errc::invalid_argument,
                path + ": " + where + ": " + what +
                    " (expected HotpotQA JSON: [{\"question\",\"answer\",\"context\":"
                    "[[title,[sentences]]]}])");
  };
  if (!root.is_array())
    fail("(root)", std::string("expected an array, found ") + json_type_name(root));
  QaSource src;
  std::map<std::string, uint32_t> index;
  for (size_t i = 0; i < root.size(); ++i) {
    const std::string p = "[" + std::to_string(i) + "]";
    const Json& e = root[i];
    if (!e.is_object()) fail(p, "expected an object");
    for (const char* k : {"question", "answer"})
      if (!e.contains(k) || !e[k].is_string()) fail(p + "." + k, "missing or not a string");
    if (!e.contains("context") || !e["context"].is_array())
      fail(p + ".context", "missing or not an array");
    QaSource::Item it{e["question"].get<std::string>(), {e["answer"].get<std::string>()}, {}, {}};
    const Json& ctx = e["context"];
    for (size_t c = 0; c < ctx.size(); ++c) {
      const std::string cp = p + ".context[" + std::to_string(c) + "]";
      if (!ctx[c].is_array() || ctx[c].size() != 2 || !ctx[c][0].is_string() ||
          !ctx[c][1].is_array())
        fail(cp, "expected [title, [sentences]]");
      std::string para = ctx[c][0].get<std::string>() + "\n";
      for (const Json& s : ctx[c][1]) {
        if (!s.is_string()) fail(cp, "a sentence is not a string");
        para += s.get<std::string>();
      }
      auto [pos, added] = index.emplace(para, uint32_t(src.paragraphs.size()));
      if (added) src.paragraphs.push_back(para);
      it.gold.push_back(pos->second);
    }
    src.items.push_back(std::move(it));
  }
  if (src.items.empty()) fail("(root)", "no questions");
  return src;
}

const char* ruler_setting_name(RulerSetting s) {
  return s == RulerSetting::QueryAware ? "aware" : "agnostic";
}

namespace {

// One group's samples as evaluation documents (query-aware: the question follows the context).
std::vector<Document> sample_documents(const std::vector<RulerSample>& samples,
                                       RulerSetting setting, const std::string& name,
                                       uint32_t len) {
  std::vector<Document> docs;
  for (size_t i = 0; i < samples.size(); ++i) {
    const RulerSample& s = samples[i];
    Document d;
    d.title = name + "/" + std::to_string(len) + "/" + std::to_string(i) +
              (setting == RulerSetting::QueryAware ? "/aware" : "");
    d.text = setting == RulerSetting::QueryAware ? s.document + s.question : s.document;
    Question q;
    q.id = d.title;
    q.text = s.question;
    q.answers = s.outputs;
    q.answer_prefix = s.answer_prefix;
    d.questions.push_back(std::move(q));
    docs.push_back(std::move(d));
  }
  return docs;
}

// The task's score of every f32 row of one group's evaluation, as report rows: the mean over the
// samples and its standard error.
void add_scored_rows(const EvalReport& er, const std::vector<Document>& docs, const RulerTask& task,
                     RulerSetting setting, uint32_t len, RulerReport& report) {
  for (const EvalRow& row : er.rows) {
    if (row.kv_dtype != "f32") continue;
    std::vector<double> scores;
    for (const AnswerRecord& a : er.answers)
      if (a.method == row.method && a.ratio == row.ratio && a.kv_dtype == "f32") {
        const Document& d = *std::find_if(docs.begin(), docs.end(),
                                          [&](const Document& x) { return x.title == a.document; });
        scores.push_back(100.0 * ruler_score(task, a.answer, d.questions[0].answers));
      }
    const MeanError m = mean_standard_error(scores);
    report.rows.push_back({ruler_setting_name(setting), task.name, row.method, len, row.ratio,
                           row.achieved_ratio, m.mean, uint32_t(scores.size()), m.se});
  }
}

}  // namespace

MeanError mean_standard_error(std::span<const double> scores) {
  MeanError m;
  if (scores.empty()) return m;
  const double n = double(scores.size());
  for (double x : scores) m.mean += x;
  m.mean /= n;
  if (scores.size() < 2) return m;
  double ss = 0.0;
  for (double x : scores) ss += (x - m.mean) * (x - m.mean);
  m.se = std::sqrt(ss / (n - 1.0) / n);
  return m;
}

RulerReport run_ruler(const model::Model& model, const RulerOptions& o) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  auto log = [&](const std::string& s) {
    if (o.log) o.log(s);
  };
  RulerReport report;
  report.model_name = o.model_name;
  RulerGenOptions gen = o.gen;
  {
    const compress::DocumentPrompt dp = compress::document_prompt(model.chat(), ".", o.eval.system);
    gen.template_tokens = uint32_t(dp.prefix.size() + dp.suffix.size());
  }
  const model::Tokenizer& tok = model.tokenizer();
  const TokenCounter count = [&](std::string_view s) { return tok.encode(s, false).size(); };
  // Work per group is about proportional to its tokens: the estimate scales the time so far.
  double total_work = 0.0, done_work = 0.0;
  for (uint32_t len : o.lengths)
    total_work += double(len) * o.samples * o.tasks.size() * o.settings.size();
  // Every sample first (tokenizer work only): a task that cannot fit a length fails before any
  // length is evaluated, and both settings use the same samples.
  std::map<std::pair<uint32_t, std::string>, std::vector<RulerSample>> samples;
  for (uint32_t len : o.lengths)
    for (const std::string& name : o.tasks) {
      std::vector<RulerSample>& v = samples[{len, name}];
      if (!v.empty()) continue;
      for (uint32_t i = 0; i < o.samples; ++i)
        v.push_back(make_ruler_sample(name, len, i, gen, count));
    }
  size_t group = 0;
  const size_t groups = o.settings.size() * o.lengths.size() * o.tasks.size();
  for (RulerSetting setting : o.settings)
    for (uint32_t len : o.lengths)
      for (const std::string& name : o.tasks) {
        ++group;
        const RulerTask& task = ruler_task(name);
        const std::vector<Document> docs =
            sample_documents(samples.at({len, name}), setting, name, len);
        EvalOptions eo = o.eval;
        eo.query_aware = setting == RulerSetting::QueryAware;
        // Kept = 1 is the full cache, answered once per sample whatever the methods: a method's
        // ratio-1 row would only repeat it.
        std::erase_if(eo.ratios, [](double r) { return r >= 1.0; });
        if (eo.ratios.empty()) eo.methods.clear();
        eo.query_template = "{question}";
        eo.keep_answers = true;
        eo.max_answer_tokens = o.eval.max_answer_tokens
                                   ? std::min(o.eval.max_answer_tokens, task.tokens_to_generate)
                                   : task.tokens_to_generate;
        log("[" + std::to_string(group) + "/" + std::to_string(groups) + "] " +
            ruler_setting_name(setting) + " " + name + " at " + std::to_string(len) +
            " tokens: " + std::to_string(o.samples) + " samples");
        const EvalReport er = run_eval(model, docs, eo);
        add_scored_rows(er, docs, task, setting, len, report);
        report.answers.insert(report.answers.end(), er.answers.begin(), er.answers.end());
        done_work += double(len) * o.samples;
        const double el = std::chrono::duration<double>(Clock::now() - t0).count();
        log("  done; " + fmt("%.0f s elapsed", el) + ", about " +
            fmt("%.0f s left", el / done_work * (total_work - done_work)));
      }
  report.total_s = std::chrono::duration<double>(Clock::now() - t0).count();
  return report;
}

std::string format_ruler_table(const RulerReport& r) {
  // Columns: the tasks present, in RULER's order; rows: (setting, length, method, ratio).
  std::vector<std::string> tasks;
  for (const RulerTask& t : ruler_tasks())
    for (const RulerRow& row : r.rows)
      if (row.task == t.name) {
        tasks.push_back(t.name);
        break;
      }
  struct Key {
    std::string setting;
    uint32_t length;
    std::string method;
    double ratio;
    bool operator<(const Key& o) const {
      return std::tie(setting, length, method, ratio) <
             std::tie(o.setting, o.length, o.method, o.ratio);
    }
  };
  std::vector<Key> order;
  std::map<Key, std::map<std::string, const RulerRow*>> cells;
  for (const RulerRow& row : r.rows) {
    const Key k{row.setting, row.length, row.method, row.ratio};
    if (!cells.count(k)) order.push_back(k);
    cells[k][row.task] = &row;
  }
  std::string out = "setting  length  method     ratio  kept ";
  for (const std::string& t : tasks) {
    char b[32];
    std::snprintf(b, sizeof b, " %15s", t.c_str());
    out += b;
  }
  out += "    mean\n";
  for (const Key& k : order) {
    const auto& c = cells[k];
    double kept = 0, sum = 0;
    uint32_t n = 0;
    char b[128];
    std::snprintf(b, sizeof b, "%-8s %6u  %-9s  %5.2f", k.setting.c_str(), k.length,
                  k.method.c_str(), k.ratio);
    out += b;
    std::string cols;
    for (const std::string& t : tasks) {
      const auto it = c.find(t);
      if (it == c.end()) {
        cols += "               -";
        continue;
      }
      kept += it->second->achieved_ratio;
      sum += it->second->score;
      ++n;
      std::snprintf(b, sizeof b, " %15.1f", it->second->score);
      cols += b;
    }
    std::snprintf(b, sizeof b, "  %5.3f", n ? kept / n : 1.0);
    out += b + cols;
    std::snprintf(b, sizeof b, "  %6.1f\n", n ? sum / n : 0.0);
    out += b;
  }
  out +=
      fmt("%.0f s in all", r.total_s) + "; scores are RULER string-match recall (0-100) per task\n";
  return out;
}

std::string format_ruler_csv(const RulerReport& r) {
  std::string out = "setting,length,task,method,ratio,achieved_ratio,score,samples,score_se\n";
  char b[256];
  for (const RulerRow& row : r.rows) {
    std::snprintf(b, sizeof b, "%s,%u,%s,%s,%.4f,%.4f,%.2f,%u,%.2f\n", row.setting.c_str(),
                  row.length, row.task.c_str(), row.method.c_str(), row.ratio, row.achieved_ratio,
                  row.score, row.samples, row.score_se);
    out += b;
  }
  return out;
}

std::string format_kvpress_csv(const RulerReport& r) {
  std::string out =
      "model,method,compression_ratio,task,score,setting,context_length,score_se,samples\n";
  char b[512];
  for (const RulerRow& row : r.rows) {
    const bool full = row.method == "full";
    std::snprintf(b, sizeof b, "%s,%s,%.3f,%s,%.2f,%s,%u,%.2f,%u\n", r.model_name.c_str(),
                  full ? "no_press" : row.method.c_str(), full ? 0.0 : 1.0 - row.ratio,
                  row.task.c_str(), row.score, row.setting.c_str(), row.length, row.score_se,
                  row.samples);
    out += b;
  }
  return out;
}

}  // namespace kvzip::eval
