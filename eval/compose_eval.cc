// `kvzip eval --compose K` (see compose_eval.h).
#include "eval/compose_eval.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <sstream>

#include "cache/kv_base.h"
#include "common/error.h"
#include "compress/pipeline.h"
#include "eval/answer.h"
#include "eval/metrics.h"
#include "loader/compose.h"
#include "loader/loader.h"

namespace kvzip::eval {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

std::string answer_text(const model::Tokenizer& tok, const std::vector<int32_t>& ids) {
  model::StreamDecoder dec(tok);
  std::string text;
  for (int32_t id : ids) text += dec.push(id);
  return text + dec.finish();
}

struct Acc {
  double f1 = 0, contains = 0, agree = 0, kl = 0, ttft = 0;
  uint64_t n = 0;
};

// One compressed paragraph: its header (the tokens composition reads) and its cache.
struct Compressed {
  format::CacheHeader header;
  std::unique_ptr<model::KvBase> base;
};

compress::CompressOptions compress_options(const model::Model& model, const ComposeEvalOptions& o,
                                           const std::string& method, double ratio) {
  compress::CompressOptions c;
  c.method = method;
  c.ratio = ratio;
  c.scorer = compress::make_scorer_options(model.chat(), o.kvzip_chunk, 0);
  c.room = 0;
  return c;
}

}  // namespace

void check_compose_documents(size_t paragraphs, uint32_t k, const std::string& source) {
  if (k > paragraphs)
    throw Error(Errc::invalid_argument, "eval option compose " + std::to_string(k) + ": " +
                                            (source.empty() ? "the file" : source) + " has " +
                                            std::to_string(paragraphs) +
                                            (paragraphs == 1 ? " paragraph" : " paragraphs") +
                                            " with questions; option compose " + std::to_string(k) +
                                            " needs at least " + std::to_string(k));
}

void check_compose_options(const ComposeEvalOptions& o) {
  if (o.k < 2)
    throw Error(Errc::invalid_argument,
                "eval option compose " + std::to_string(o.k) + ": compose at least 2 documents");
  const std::vector<std::string> known = compress::scorer_names();
  for (const std::string& m : o.methods)
    if (std::find(known.begin(), known.end(), m) == known.end())
      throw Error(Errc::invalid_argument, "eval option compose: unknown method \"" + m + "\"");
  for (double r : o.ratios)
    if (!(r > 0.0 && r < 1.0))
      throw Error(Errc::invalid_argument,
                  "eval option compose: ratio " + std::to_string(r) + " outside (0, 1)");
  for (double b : o.blends)
    if (!(b >= 0.0 && b <= 1.0))
      throw Error(Errc::invalid_argument,
                  "eval option compose: blend " + std::to_string(b) + " outside [0, 1]");
}

namespace {

// A report row's identity: the setting, method, ratio and blend.
struct Key {
  std::string setting, method;
  double ratio, blend;
};

// One evaluation: every paragraph compressed per (method, ratio), then each question scored.
class ComposeRun {
 public:
  ComposeRun(const model::Model& model, const std::vector<Document>& paras,
             const ComposeEvalOptions& o)
      : model_(model),
        paras_(paras),
        o_(o),
        fw_(model.weights(), o.forward_options()),
        tok_(model.tokenizer()) {}

  ComposeEvalReport run();

 private:
  void log(const std::string& s) const { o_.note(s); }
  void compress_all();
  void make_keys();
  void ask(uint32_t p, size_t qi);
  void score(size_t row, model::AttentionCache& cache, const Question& q, double setup_ms);

  const model::Model& model_;
  const std::vector<Document>& paras_;
  const ComposeEvalOptions& o_;
  model::Forward fw_;
  const model::Tokenizer& tok_;
  std::vector<std::pair<std::string, double>> settings_;
  std::vector<compress::DocumentPrompt> prompts_;
  std::map<std::pair<std::string, double>, std::vector<Compressed>> caches_;
  std::vector<uint32_t> suffix_;
  std::vector<int32_t> sep_, prompt_;
  AnswerParams ap_;
  std::vector<Key> keys_;  // rows in report order
  std::vector<Acc> acc_;
  GreedyAnswer ref_;
};

// Every paragraph compressed once per (method, ratio), and whole ("full", 1).
void ComposeRun::compress_all() {
  const uint32_t N = static_cast<uint32_t>(paras_.size());
  settings_ = {{"full", 1.0}};
  for (const std::string& m : o_.methods)
    for (double r : o_.ratios) settings_.emplace_back(m, r);
  for (uint32_t p = 0; p < N; ++p) {
    prompts_.push_back(compress::document_prompt(model_.chat(), paras_[p].text, o_.system));
    for (const auto& [m, r] : settings_) {
      compress::CompressResult res = compress::compress(
          fw_, prompts_[p].prefix, prompts_[p].document, compress_options(model_, o_, m, r));
      Compressed c;
      c.header.prefix_tokens.assign(prompts_[p].prefix.begin(), prompts_[p].prefix.end());
      c.header.document_tokens.assign(prompts_[p].document.begin(), prompts_[p].document.end());
      c.header.suffix_tokens.assign(prompts_[p].suffix.begin(), prompts_[p].suffix.end());
      c.base = std::make_unique<model::KvBase>(std::move(res.cache));
      caches_[{m, r}].push_back(std::move(c));
    }
    log("compressed paragraph " + std::to_string(p + 1) + " of " + std::to_string(N));
  }
}

// Rows in report order: joint; composed per setting and blend; joint-compressed per setting.
void ComposeRun::make_keys() {
  keys_ = {{"joint", "full", 1.0, 0.0}};
  for (const auto& [m, r] : settings_)
    for (double b : o_.blends) keys_.push_back({"composed", m, r, b});
  if (o_.joint_compressed)
    for (const auto& [m, r] : settings_)
      if (r < 1.0) keys_.push_back({"joint-compressed", m, r, 0.0});
  acc_.assign(keys_.size(), Acc{});
}

// Answers the question over `cache` into row `row` (row 0, the joint prefill, first).
void ComposeRun::score(size_t row, model::AttentionCache& cache, const Question& q,
                       double setup_ms) {
  const auto t0 = Clock::now();
  AnswerParams first = ap_;
  first.max_tokens = 1;
  answer_greedy(fw_, cache, prompt_, first);
  const double ttft = setup_ms + ms_since(t0);
  GreedyAnswer a = answer_greedy(fw_, cache, prompt_, ap_);
  if (row == 0) ref_ = a;
  const std::string text = answer_text(tok_, a.tokens);
  Acc& x = acc_[row];
  x.f1 += 100.0 * max_f1(text, q.answers);
  x.contains += contains_any(text, q.answers) ? 100.0 : 0.0;
  x.agree += a.tokens == ref_.tokens ? 100.0 : 0.0;
  x.kl += kl_divergence(ref_.first_logits, a.first_logits);
  x.ttft += ttft;
  ++x.n;
}

void ComposeRun::ask(uint32_t p, size_t qi) {
  const uint32_t N = static_cast<uint32_t>(paras_.size()), K = o_.k;
  const Question& q = paras_[p].questions[qi];
  // The K documents: p at position qi mod K, the others following p in the article.
  const uint32_t at = static_cast<uint32_t>(qi % K);
  std::vector<uint32_t> order(K);
  for (uint32_t i = 0, next = 1; i < K; ++i) order[i] = i == at ? p : (p + next++) % N;
  prompt_ = loader::question_tokens(tok_, o_.query_template, suffix_, q.text);
  std::vector<int32_t> joint_doc;
  for (uint32_t i = 0; i < K; ++i) {
    if (i) joint_doc.insert(joint_doc.end(), sep_.begin(), sep_.end());
    joint_doc.insert(joint_doc.end(), prompts_[order[i]].document.begin(),
                     prompts_[order[i]].document.end());
  }
  {  // the reference: a joint prefill of the K documents
    const auto t0 = Clock::now();
    model::KvCache joint(model::cache_shape(model_.config()));
    std::vector<int32_t> seq = prompts_[order[0]].prefix;
    seq.insert(seq.end(), joint_doc.begin(), joint_doc.end());
    fw_.prefill(joint, seq, model::LogitsMode::None);
    score(0, joint, q, ms_since(t0));
  }
  for (size_t row = 1; row < keys_.size(); ++row) {
    const Key& k = keys_[row];
    std::vector<Compressed>& cs = caches_[{k.method, k.ratio}];
    if (k.setting == "composed") {
      std::vector<const format::CacheHeader*> headers;
      std::vector<const model::KvBase*> bases;
      for (uint32_t i : order) headers.push_back(&cs[i].header), bases.push_back(cs[i].base.get());
      loader::ComposeOptions co;
      co.blend = k.blend;
      co.rule = o_.rule;
      co.doc_prefix = o_.doc_prefix;
      const auto t0 = Clock::now();
      std::unique_ptr<model::ComposedCache> c = loader::compose(fw_, tok_, headers, bases, co);
      score(row, *c, q, ms_since(t0));
    } else {  // the joint document compressed as one cache
      compress::CompressResult res =
          compress::compress(fw_, prompts_[order[0]].prefix, joint_doc,
                             compress_options(model_, o_, k.method, k.ratio));
      score(row, res.cache, q, 0.0);
    }
  }
}

ComposeEvalReport ComposeRun::run() {
  const auto t_start = Clock::now();
  const uint32_t N = static_cast<uint32_t>(paras_.size());
  compress_all();
  suffix_.assign(prompts_[0].suffix.begin(), prompts_[0].suffix.end());
  sep_ = tok_.encode("\n\n", false);
  ap_.max_tokens = o_.max_answer_tokens;
  ap_.stop_tokens = model_.chat().stop_tokens();
  make_keys();
  uint64_t asked = 0, total = 0;
  for (const Document& d : paras_) total += d.questions.size();
  if (o_.max_questions) total = std::min(total, o_.max_questions);
  for (uint32_t p = 0; p < N && asked < total; ++p) {
    for (size_t qi = 0; qi < paras_[p].questions.size() && asked < total; ++qi) {
      ask(p, qi);
      ++asked;
      if (asked % 4 == 0 || asked == total)
        log("question " + std::to_string(asked) + " of " + std::to_string(total) + ", " +
            std::to_string(int(ms_since(t_start) / 1000)) + " s");
    }
  }
  ComposeEvalReport rep;
  rep.k = o_.k;
  rep.documents = N;
  rep.questions = asked;
  for (size_t i = 0; i < keys_.size(); ++i) {
    const Acc& x = acc_[i];
    const double n = x.n ? double(x.n) : 1.0;
    rep.rows.push_back(ComposeEvalRow{keys_[i].setting, keys_[i].method, keys_[i].ratio,
                                      keys_[i].blend, x.f1 / n, x.contains / n, x.agree / n,
                                      x.kl / n, x.ttft / n, x.n});
  }
  rep.total_s = ms_since(t_start) / 1e3;
  return rep;
}

}  // namespace

ComposeEvalReport run_compose_eval(const model::Model& model, const std::vector<Document>& paras,
                                   const ComposeEvalOptions& o) {
  check_compose_options(o);
  check_compose_documents(paras.size(), o.k, "");
  ComposeRun run(model, paras, o);
  return run.run();
}

std::string format_compose_table(const ComposeEvalReport& r) {
  std::ostringstream out;
  char line[256];
  std::snprintf(line, sizeof line, "%-17s %-9s %5s %5s %6s %8s %9s %8s %9s\n", "setting", "method",
                "ratio", "blend", "F1", "contains", "agreement", "KL", "TTFT ms");
  out << line;
  for (const ComposeEvalRow& x : r.rows) {
    std::snprintf(line, sizeof line, "%-17s %-9s %5.2f %5.2f %6.1f %8.1f %9.1f %8.4f %9.1f\n",
                  x.setting.c_str(), x.method.c_str(), x.ratio, x.blend, x.f1, x.contains,
                  x.agreement, x.kl, x.ttft_ms);
    out << line;
  }
  std::snprintf(line, sizeof line, "%llu questions over K = %u of %u documents, %.1f s\n",
                static_cast<unsigned long long>(r.questions), r.k, r.documents, r.total_s);
  out << line;
  return out.str();
}

std::string format_compose_csv(const ComposeEvalReport& r) {
  std::ostringstream out;
  out << "setting,method,ratio,blend,f1,contains,agreement,kl,ttft_ms,questions\n";
  for (const ComposeEvalRow& x : r.rows)
    out << x.setting << ',' << x.method << ',' << x.ratio << ',' << x.blend << ',' << x.f1 << ','
        << x.contains << ',' << x.agreement << ',' << x.kl << ',' << x.ttft_ms << ',' << x.questions
        << '\n';
  return out.str();
}

}  // namespace kvzip::eval
