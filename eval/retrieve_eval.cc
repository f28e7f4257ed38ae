// `kvzip eval --retrieve K` (see retrieve_eval.h): paragraphs compressed into a temporary library
// folder, each question searched, composed and answered against a joint prefill.
#include "eval/retrieve_eval.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <sstream>

#include "cache/kv_base.h"
#include "common/error.h"
#include "compress/pipeline.h"
#include "eval/answer.h"
#include "eval/metrics.h"
#include "library/library.h"
#include "loader/compose.h"
#include "loader/loader.h"

namespace kvzip::eval {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

std::string decode(const model::Tokenizer& tok, const std::vector<int32_t>& ids) {
  model::StreamDecoder dec(tok);
  std::string text;
  for (int32_t id : ids) text.append(dec.push(id));
  return text.append(dec.finish());
}

// A fresh folder under the system's temporary folder, removed with everything in it on scope exit.
struct TempFolder {
  fs::path path;
  TempFolder() {
    std::random_device rd;
    const fs::path base = fs::temp_directory_path();
    for (int tries = 0; tries < 16 && path.empty(); ++tries) {
      std::string name = "kvzip-retrieve-";
      name.append(std::to_string(::getpid())).append("-").append(std::to_string(rd()));
      if (fs::create_directory(base / name)) path = base / name;
    }
    if (path.empty())
      throw Error(Errc::io, "eval option retrieve: cannot create a temporary folder");
  }
  ~TempFolder() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  TempFolder(const TempFolder&) = delete;
  TempFolder& operator=(const TempFolder&) = delete;
};

// One paragraph's cache: its file's contents (a single-document answer copies the rows from
// them) and the shared rows compositions read.
struct Paragraph {
  format::CacheContents contents;
  std::unique_ptr<model::KvBase> base;
  std::vector<int32_t> document;
};

struct Parts {
  double search = 0, compose = 0, recompute = 0, prefill = 0;
};

// One question's answer over one row's documents.
struct Sample {
  Parts parts;
  double answer_ms = 0, recall = 0, f1 = 0, contains = 0, agree = 0, kl = 0;
};

struct Acc {
  double recall = 0, f1 = 0, contains = 0, agree = 0, kl = 0;
  double search = 0, compose = 0, recompute = 0, prefill = 0, answer = 0;
  uint64_t n = 0;
  void add(const Sample& s);
};

std::string cache_id(uint32_t p) {
  char id[16];
  std::snprintf(id, sizeof id, "p%05u", p);
  return id;
}

class RetrieveRun {
 public:
  RetrieveRun(const model::Model& model, const std::vector<Document>& paras,
              const RetrieveEvalOptions& o)
      : model_(model),
        paras_(paras),
        o_(o),
        fw_(model.weights(), o.forward_options()),
        tok_(model.tokenizer()),
        sep_(tok_.encode("\n\n", false)) {
    blends_ = o.blends.empty() ? std::vector<double>{library_default_blend(model)} : o.blends;
    ap_.max_tokens = o.max_answer_tokens;
    ap_.stop_tokens = model.chat().stop_tokens();
    acc_.resize(1 + 2 * blends_.size());
  }

  RetrieveEvalReport run();

 private:
  void log(const std::string& s) const { o_.note(s); }
  void compress_all();
  void ask(uint32_t own, const Question& q);
  std::unique_ptr<model::AttentionCache> build(const std::vector<uint32_t>& order, double blend,
                                               Parts& parts);
  std::unique_ptr<model::AttentionCache> joint(const std::vector<uint32_t>& order, Parts& parts);
  Sample measure(bool reference, model::AttentionCache& cache, const Question& q,
                 const Parts& parts, bool has_own);

  const model::Model& model_;
  const std::vector<Document>& paras_;
  const RetrieveEvalOptions& o_;
  model::Forward fw_;
  const model::Tokenizer& tok_;
  const std::vector<int32_t> sep_;
  std::vector<double> blends_;
  AnswerParams ap_;
  TempFolder folder_;
  std::vector<Paragraph> caches_;
  std::map<std::string, uint32_t> by_id_;
  std::vector<int32_t> prefix_;  // the first paragraph's (every document prompt's, no system)
  std::vector<uint32_t> suffix_;
  std::vector<int32_t> prompt_;  // the question being asked
  GreedyAnswer ref_;
  std::unique_ptr<library::Index> index_;
  std::vector<Acc> acc_;  // joint, then (retrieved, oracle) per blend
};

void RetrieveRun::compress_all() {
  const uint32_t n = static_cast<uint32_t>(paras_.size());
  const bool full = o_.ratio >= 1.0;
  for (uint32_t p = 0; p < n; ++p) {
    const compress::DocumentPrompt dp =
        compress::document_prompt(model_.chat(), paras_[p].text, o_.system);
    compress::CompressOptions c;
    c.method = full ? "full" : o_.method;
    c.ratio = o_.ratio;
    c.scorer = compress::make_scorer_options(model_.chat(), o_.kvzip_chunk, 0);
    c.room = 0;
    compress::CompressResult res = compress::compress(fw_, dp.prefix, dp.document, c);
    compress::CacheDescription d;
    d.prefix = dp.prefix;
    d.document = dp.document;
    d.suffix = dp.suffix;
    d.document_text = paras_[p].text;
    d.method = res.method;
    d.params = res.params;
    d.params.emplace_back("query_template", o_.query_template);
    d.requested_ratio = o_.ratio;
    Paragraph x;
    x.contents = compress::make_contents(model_, res.cache, res.kept_scores, d);
    format::WriteOptions w;
    w.force = true;
    format::write_cache_file(x.contents, (folder_.path / (cache_id(p) + ".kvz")).string(), w);
    x.base = std::make_unique<model::KvBase>(std::move(res.cache));
    x.document = dp.document;
    if (p == 0) suffix_.assign(dp.suffix.begin(), dp.suffix.end()), prefix_ = dp.prefix;
    by_id_[cache_id(p)] = p;
    caches_.push_back(std::move(x));
    log("compressed paragraph " + std::to_string(p + 1) + " of " + std::to_string(n));
  }
}

// The documents of `order` as one attention cache: composed (two or more), one cache's rows
// copied (one), or the prompt's prefix alone (none: a question no cache matched a word of).
std::unique_ptr<model::AttentionCache> RetrieveRun::build(const std::vector<uint32_t>& order,
                                                          double blend, Parts& parts) {
  const auto t0 = Clock::now();
  if (order.size() >= 2) {
    std::vector<const format::CacheHeader*> headers;
    std::vector<const model::KvBase*> bases;
    for (uint32_t i : order) {
      headers.push_back(&caches_[i].contents.header);
      bases.push_back(caches_[i].base.get());
    }
    loader::ComposeOptions co;
    co.blend = blend;
    co.rule = o_.rule;
    loader::ComposeStats st;
    std::unique_ptr<model::AttentionCache> c = loader::compose(fw_, tok_, headers, bases, co, &st);
    const double total = ms_since(t0);
    parts.recompute = st.probe_ms + st.recompute_ms;
    parts.compose = std::max(0.0, total - parts.recompute);
    return c;
  }
  std::unique_ptr<model::AttentionCache> c;
  if (order.size() == 1) {
    c = std::make_unique<model::RaggedKvCache>(
        loader::cache_from_contents(caches_[order[0]].contents));
  } else {
    auto kv = std::make_unique<model::KvCache>(model::cache_shape(model_.config()));
    if (!prefix_.empty()) fw_.prefill(*kv, prefix_, model::LogitsMode::None);
    c = std::move(kv);
  }
  parts.compose = ms_since(t0);
  return c;
}

// The documents of `order` prefilled together after the first one's prefix, full cache.
std::unique_ptr<model::AttentionCache> RetrieveRun::joint(const std::vector<uint32_t>& order,
                                                          Parts& parts) {
  const auto t0 = Clock::now();
  auto kv = std::make_unique<model::KvCache>(model::cache_shape(model_.config()));
  std::vector<int32_t> seq = prefix_;
  for (size_t i = 0; i < order.size(); ++i) {
    if (i) seq.insert(seq.end(), sep_.begin(), sep_.end());
    const std::vector<int32_t>& doc = caches_[order[i]].document;
    seq.insert(seq.end(), doc.begin(), doc.end());
  }
  if (!seq.empty()) fw_.prefill(*kv, seq, model::LogitsMode::None);
  parts.prefill = ms_since(t0);
  return kv;
}

// The question being asked answered over `cache` (row 0, the joint prefill, first: the
// reference of agreement and KL).
Sample RetrieveRun::measure(bool reference, model::AttentionCache& cache, const Question& q,
                            const Parts& parts, bool has_own) {
  const auto t0 = Clock::now();
  AnswerParams first = ap_;
  first.max_tokens = 1;
  answer_greedy(fw_, cache, prompt_, first);
  Sample x;
  x.parts = parts;
  x.answer_ms = ms_since(t0);
  GreedyAnswer a = answer_greedy(fw_, cache, prompt_, ap_);
  if (reference) ref_ = a;
  const std::string text = decode(tok_, a.tokens);
  x.recall = has_own ? 100.0 : 0.0;
  x.f1 = 100.0 * max_f1(text, q.answers);
  x.contains = contains_any(text, q.answers) ? 100.0 : 0.0;
  x.agree = a.tokens == ref_.tokens ? 100.0 : 0.0;
  x.kl = kl_divergence(ref_.first_logits, a.first_logits);
  return x;
}

void Acc::add(const Sample& s) {
  recall += s.recall, f1 += s.f1, contains += s.contains, agree += s.agree, kl += s.kl;
  search += s.parts.search, compose += s.parts.compose, recompute += s.parts.recompute;
  prefill += s.parts.prefill, answer += s.answer_ms;
  ++n;
}

void RetrieveRun::ask(uint32_t own, const Question& q) {
  Parts found;
  const auto t0 = Clock::now();
  const std::vector<library::Hit> hits = index_->search(q.text, o_.k, &model_.fingerprint());
  found.search = ms_since(t0);
  std::vector<uint32_t> retrieved;
  for (const library::Hit& h : hits) retrieved.push_back(by_id_.at(h.id));
  const bool hit = std::find(retrieved.begin(), retrieved.end(), own) != retrieved.end();
  std::vector<uint32_t> oracle = retrieved;
  if (!hit) {
    oracle.assign(1, own);
    for (size_t i = 0; oracle.size() < o_.k && i < retrieved.size(); ++i)
      oracle.push_back(retrieved[i]);
  }
  prompt_ = loader::question_tokens(tok_, o_.query_template, suffix_, q.text);
  {
    Parts parts;
    std::unique_ptr<model::AttentionCache> c = joint(retrieved, parts);
    acc_[0].add(measure(true, *c, q, parts, hit));
  }
  for (size_t b = 0; b < blends_.size(); ++b) {
    Parts parts = found;
    std::unique_ptr<model::AttentionCache> c = build(retrieved, blends_[b], parts);
    const Sample s = measure(false, *c, q, parts, hit);
    acc_[1 + 2 * b].add(s);
    if (hit) {  // the oracle's documents are the ones found: the same composition
      acc_[2 + 2 * b].add(s);
      continue;
    }
    parts = found;
    c = build(oracle, blends_[b], parts);
    acc_[2 + 2 * b].add(measure(false, *c, q, parts, true));
  }
}

RetrieveEvalReport RetrieveRun::run() {
  const auto t_start = Clock::now();
  compress_all();
  library::IndexOptions io;
  io.warn = [this](const std::string& s) { log(s); };
  index_ = std::make_unique<library::Index>(folder_.path.string(), io);
  const library::RefreshStats rs = index_->refresh();
  log("indexed " + std::to_string(rs.indexed) + " caches");
  uint64_t asked = 0, total = 0;
  for (const Document& d : paras_) total += d.questions.size();
  if (o_.max_questions) total = std::min(total, o_.max_questions);
  for (uint32_t p = 0; p < paras_.size() && asked < total; ++p)
    for (size_t qi = 0; qi < paras_[p].questions.size() && asked < total; ++qi) {
      ask(p, paras_[p].questions[qi]);
      if (++asked % 4 == 0 || asked == total)
        log("question " + std::to_string(asked) + " of " + std::to_string(total) + ", " +
            std::to_string(int(ms_since(t_start) / 1000)) + " s");
    }
  RetrieveEvalReport rep;
  rep.k = o_.k;
  rep.documents = static_cast<uint32_t>(paras_.size());
  rep.questions = asked;
  rep.method = o_.ratio >= 1.0 ? "full" : o_.method;
  rep.ratio = o_.ratio;
  for (size_t i = 0; i < acc_.size(); ++i) {
    const Acc& x = acc_[i];
    const double n = x.n ? double(x.n) : 1.0;
    RetrieveEvalRow r;
    r.setting = i == 0 ? "joint" : i % 2 ? "retrieved" : "oracle";
    r.blend = i == 0 ? 0.0 : blends_[(i - 1) / 2];
    r.recall = x.recall / n;
    r.f1 = x.f1 / n, r.contains = x.contains / n, r.agreement = x.agree / n, r.kl = x.kl / n;
    r.search_ms = x.search / n, r.compose_ms = x.compose / n, r.recompute_ms = x.recompute / n;
    r.prefill_ms = x.prefill / n, r.answer_ms = x.answer / n;
    r.ttft_ms = r.search_ms + r.compose_ms + r.recompute_ms + r.prefill_ms + r.answer_ms;
    r.questions = x.n;
    rep.rows.push_back(r);
  }
  rep.total_s = ms_since(t_start) / 1e3;
  return rep;
}

}  // namespace

double library_default_blend(const model::Model& model) {
  return loader::default_blend(model.config().arch);
}

void check_retrieve_options(const RetrieveEvalOptions& o) {
  if (o.k < 1)
    throw Error(Errc::invalid_argument, "eval option retrieve 0: retrieve at least 1 document");
  if (o.k > loader::ComposeOptions{}.max_docs) {
    std::string m = "eval option retrieve ";
    m.append(std::to_string(o.k)).append(": a composition takes at most ");
    throw Error(Errc::invalid_argument,
                m.append(std::to_string(loader::ComposeOptions{}.max_docs)));
  }
  const std::vector<std::string> known = compress::scorer_names();
  if (std::find(known.begin(), known.end(), o.method) == known.end()) {
    std::string m = "eval option retrieve: unknown method \"";
    throw Error(Errc::invalid_argument, m.append(o.method).append("\""));
  }
  compress::check_ratio(o.ratio);
  for (double b : o.blends)
    if (!(b >= 0.0 && b <= 1.0)) {
      std::string m = "eval option retrieve: blend ";
      throw Error(Errc::invalid_argument, m.append(std::to_string(b)).append(" outside [0, 1]"));
    }
}

void check_retrieve_documents(size_t paragraphs, uint32_t k, const std::string& source) {
  if (k <= paragraphs) return;
  std::string m = "eval option retrieve ";
  m.append(std::to_string(k)).append(": ").append(source.empty() ? "the file" : source);
  m.append(" has ").append(std::to_string(paragraphs));
  m.append(paragraphs == 1 ? " paragraph" : " paragraphs")
      .append(" with questions; option retrieve ");
  m.append(std::to_string(k)).append(" needs at least ").append(std::to_string(k));
  throw Error(Errc::invalid_argument, m);
}

RetrieveEvalReport run_retrieve_eval(const model::Model& model, const std::vector<Document>& paras,
                                     const RetrieveEvalOptions& o) {
  check_retrieve_options(o);
  check_retrieve_documents(paras.size(), o.k, "");
  RetrieveRun run(model, paras, o);
  return run.run();
}

std::string format_retrieve_table(const RetrieveEvalReport& r) {
  std::ostringstream out;
  char line[256];
  std::snprintf(line, sizeof line, "%-9s %5s %6s %6s %8s %9s %8s %7s %7s %9s %7s %7s %8s\n",
                "setting", "blend", "recall", "F1", "contains", "agreement", "KL", "search",
                "compose", "recompute", "prefill", "answer", "TTFT ms");
  out << line;
  for (const RetrieveEvalRow& x : r.rows) {
    std::snprintf(line, sizeof line,
                  "%-9s %5.2f %6.1f %6.1f %8.1f %9.1f %8.4f %7.1f %7.1f %9.1f %7.1f %7.1f %8.1f\n",
                  x.setting.c_str(), x.blend, x.recall, x.f1, x.contains, x.agreement, x.kl,
                  x.search_ms, x.compose_ms, x.recompute_ms, x.prefill_ms, x.answer_ms, x.ttft_ms);
    out << line;
  }
  std::snprintf(line, sizeof line,
                "%llu questions, K = %u of %u documents (%s %.2f), recall@%u %.1f%%, %.1f s\n",
                static_cast<unsigned long long>(r.questions), r.k, r.documents, r.method.c_str(),
                r.ratio, r.k, r.rows.size() > 1 ? r.rows[1].recall : 0.0, r.total_s);
  out << line;
  return out.str();
}

std::string format_retrieve_csv(const RetrieveEvalReport& r) {
  std::ostringstream out;
  out << "setting,method,ratio,k,blend,recall,f1,contains,agreement,kl,search_ms,compose_ms,"
         "recompute_ms,prefill_ms,answer_ms,ttft_ms,questions\n";
  for (const RetrieveEvalRow& x : r.rows)
    out << x.setting << ',' << (x.setting == "joint" ? "full" : r.method) << ','
        << (x.setting == "joint" ? 1.0 : r.ratio) << ',' << r.k << ',' << x.blend << ',' << x.recall
        << ',' << x.f1 << ',' << x.contains << ',' << x.agreement << ',' << x.kl << ','
        << x.search_ms << ',' << x.compose_ms << ',' << x.recompute_ms << ',' << x.prefill_ms << ','
        << x.answer_ms << ',' << x.ttft_ms << ',' << x.questions << '\n';
  return out.str();
}

}  // namespace kvzip::eval
