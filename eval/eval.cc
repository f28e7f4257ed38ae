// run_eval (see eval.h): one document at a time — prefill once with every method's observer, answer
// the reference questions from the uncompressed ragged cache, then per method score once and per
// ratio (highest first) select, evict and answer, with every earlier answer to the same question as
// a draft. Only one compressed cache exists at a time besides the dense one.
#include "eval/eval.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <limits>

#include "cache/branch_cache.h"
#include "common/error.h"
#include "compress/head_level.h"
#include "compress/learned_scorer.h"
#include "compress/quantize.h"
#include "eval/answer.h"
#include "eval/metrics.h"
#include "loader/loader.h"

namespace kvzip::eval {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string fmt(const char* f, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

// Forwards to a method's observer and measures the time it takes (its share of the prefill).
class TimedObserver final : public model::AttentionObserver {
 public:
  explicit TimedObserver(model::AttentionObserver* inner) : inner_(inner) {}
  void on_attention(const model::AttentionObservation& obs) override {
    const auto t = Clock::now();
    inner_->on_attention(obs);
    seconds_ += seconds_since(t);
  }
  double seconds() const { return seconds_; }

 private:
  model::AttentionObserver* inner_;
  double seconds_ = 0.0;
};

// Sums over questions (and documents) of one report row.
struct Accum {
  double f1 = 0, contains = 0, kl = 0, answer_f1 = 0, compress_s = 0, answer_s = 0, load_ms = 0;
  uint64_t agree = 0, n = 0, kept_doc = 0, total_doc = 0, file_bytes = 0;
  void add(const Accum& o) {
    f1 += o.f1, contains += o.contains, kl += o.kl, answer_f1 += o.answer_f1;
    compress_s += o.compress_s, answer_s += o.answer_s;
    load_ms += o.load_ms, agree += o.agree, n += o.n, kept_doc += o.kept_doc,
        total_doc += o.total_doc;
    file_bytes += o.file_bytes;
  }
};

// What every answer of one document needs.
struct DocSetup {
  compress::DocumentPrompt prompt;  // prefix, document, suffix as kvzip compress builds them
  std::vector<std::vector<int32_t>> prompts;  // (questions) question tokens, as kvzip query
  uint32_t answer_room = 0;                   // longest prompt + max answer tokens
};

DocSetup setup_document(const model::Model& model, const Document& doc, const EvalOptions& o) {
  DocSetup s;
  s.prompt = compress::document_prompt(model.chat(), doc.text, o.system);
  const std::vector<uint32_t> suffix(s.prompt.suffix.begin(), s.prompt.suffix.end());
  size_t longest = 0;
  for (const Question& q : doc.questions) {
    s.prompts.push_back(
        loader::question_tokens(model.tokenizer(), o.query_template, suffix, q.text));
    if (!q.answer_prefix.empty()) {  // the reply opens with it: the answer is what follows
      const std::vector<int32_t> p = model.tokenizer().encode(q.answer_prefix, false);
      s.prompts.back().insert(s.prompts.back().end(), p.begin(), p.end());
    }
    longest = std::max(longest, s.prompts.back().size());
  }
  s.answer_room = static_cast<uint32_t>(longest) + o.max_answer_tokens;
  return s;
}

std::string answer_text(const model::Tokenizer& tok, const std::vector<int32_t>& ids) {
  model::StreamDecoder dec(tok);  // as QuerySession::ask builds its text
  std::string text;
  for (int32_t id : ids) text += dec.push(id);
  return text + dec.finish();
}

class DocumentRun {
 public:
  DocumentRun(const model::Model& model, model::Forward& fwd, const Document& doc,
              const EvalOptions& o, EvalReport& report)
      : model_(model),
        fwd_(fwd),
        doc_(doc),
        o_(o),
        report_(report),
        s_(setup_document(model, doc, o)),
        pools_(doc.questions.size()) {}

  // Prefills the document with every scorer's observer; returns the dense cache.
  prefill::PrefillResult prefill(std::vector<std::unique_ptr<compress::Scorer>>& scorers,
                                 std::vector<std::unique_ptr<TimedObserver>>& timers) {
    compress::ObserverFanout fan;
    const auto n_p = static_cast<uint32_t>(s_.prompt.prefix.size());
    const auto n_c = static_cast<uint32_t>(s_.prompt.document.size());
    for (auto& sc : scorers) {
      model::AttentionObserver* obs = sc->prefill_observer(fwd_, n_p, n_c);
      timers.push_back(obs ? std::make_unique<TimedObserver>(obs) : nullptr);
      fan.add(timers.back().get());
    }
    prefill::PrefillOptions po;
    po.answer_room = s_.answer_room;
    for (auto& sc : scorers) po.scoring_room = std::max(po.scoring_room, sc->appended_rows(n_c));
    po.progress = o_.prefill_progress;
    po.observer = fan.empty() ? nullptr : &fan;
    prefill::PrefillResult pre =
        prefill::prefill_document(fwd_, s_.prompt.prefix, s_.prompt.document, po);
    report_.prefill_s += pre.seconds;
    report_.document_tokens += n_c;
    return pre;
  }

  // Answers every question from `cache`; with `reference` null these answers are the reference.
  // Every answer joins its question's draft pool (when drafts are on) for the later caches.
  std::vector<GreedyAnswer> answer_all(model::AttentionCache& cache,
                                       const std::vector<GreedyAnswer>* reference,
                                       const std::string& method, double ratio, Accum& acc) {
    AnswerParams ap;
    ap.max_tokens = o_.max_answer_tokens;
    ap.stop_tokens = model_.chat().stop_tokens();
    std::vector<GreedyAnswer> out;
    const auto t = Clock::now();
    for (size_t q = 0; q < doc_.questions.size(); ++q) {
      const DraftPool* drafts = reference && o_.verify_drafts ? &pools_[q] : nullptr;
      GreedyAnswer a = answer_greedy(fwd_, cache, s_.prompts[q], ap, drafts);
      if (o_.verify_drafts) pools_[q].add(a.tokens);
      record(q, a, reference ? (*reference)[q] : a, method, ratio, acc);
      if (reference) {
        report_.decode_steps += a.decode_steps;
        report_.draft_passes += a.draft_passes;
        report_.answer_tokens += a.tokens.size();
      }
      out.push_back(std::move(a));
    }
    acc.answer_s += seconds_since(t);
    return out;
  }

  // The reference answers again, for a cache identical to the full one.
  void reuse(const std::vector<GreedyAnswer>& reference, const std::string& method, double ratio,
             Accum& acc) {
    for (size_t q = 0; q < reference.size(); ++q)
      record(q, reference[q], reference[q], method, ratio, acc);
  }

  // Scores answer `a` to question q against the gold answers and the reference `ref`.
  void record(size_t q, const GreedyAnswer& a, const GreedyAnswer& ref, const std::string& method,
              double ratio, Accum& acc) {
    const Question& question = doc_.questions[q];
    AnswerRecord rec{doc_.title,
                     question.id,
                     question.text,
                     method,
                     ratio,
                     answer_text(model_.tokenizer(), a.tokens),
                     static_cast<uint32_t>(a.tokens.size()),
                     a.stopped,
                     a.tokens == ref.tokens,
                     0.0,
                     false,
                     0.0,
                     0.0,
                     dtype_};
    rec.f1 = max_f1(rec.answer, question.answers);
    rec.contains = contains_any(rec.answer, question.answers);
    rec.kl = kl_divergence(ref.first_logits, a.first_logits);
    rec.answer_f1 =
        rec.agrees ? 1.0 : answer_f1(rec.answer, answer_text(model_.tokenizer(), ref.tokens));
    acc.f1 += rec.f1;
    acc.contains += rec.contains ? 1.0 : 0.0;
    acc.agree += rec.agrees ? 1 : 0;
    acc.kl += rec.kl;
    acc.answer_f1 += rec.answer_f1;
    ++acc.n;
    if (o_.keep_answers) report_.answers.push_back(std::move(rec));
  }

  // Selects and evicts at `ratio` from the method's scores as compress() does; returns the
  // compressed cache.
  model::RaggedKvCache compress(const model::KvCache& dense, const compress::DocumentScores& scores,
                                const compress::CompressOptions& method, double ratio, Accum& acc) {
    const auto t = Clock::now();
    const compress::Selection sel = compress::select_for_method(method, scores, ratio);
    compress::EvictResult ev = compress::evict(dense, scores, sel, s_.answer_room);
    acc.kept_doc += sel.kept_doc;
    acc.total_doc += sel.total_doc;
    acc.compress_s += seconds_since(t);
    return std::move(ev.cache);
  }

  // compress() with options.stream at `ratio`: the document prefilled again, rows dropped as it
  // is read; the time counts as compression.
  model::RaggedKvCache compress_streaming(compress::CompressOptions method, double ratio,
                                          Accum& acc) {
    const auto t = Clock::now();
    method.ratio = ratio;
    method.room = s_.answer_room;
    method.prefill.answer_room = s_.answer_room;
    compress::CompressResult r =
        compress::compress(fwd_, s_.prompt.prefix, s_.prompt.document, method);
    const ModelConfig& cfg = model_.config();
    uint64_t global_layers = 0;
    for (uint32_t l = 0; l < cfg.n_layers; ++l) global_layers += !cfg.is_local(l);
    const uint64_t total = global_layers * cfg.n_kv_heads * r.n_doc;
    acc.kept_doc += static_cast<uint64_t>(std::llround(r.achieved_ratio * double(total)));
    acc.total_doc += total;
    acc.compress_s += seconds_since(t);
    return std::move(r.cache);
  }

  // `cache` stored as `dtype` the way `kvzip compress --kv-dtype` stores it (selection, then
  // quantization) into a .kvz image in memory, and read back as `kvzip query` reads it: q8/q4
  // rows stay quantized and are attended in place (loader::base_from_reader, KvForm::Auto).
  model::KvBase through_file(const model::RaggedKvCache& cache, format::DType dtype, Accum& acc) {
    compress::CacheDescription d;
    d.prefix = s_.prompt.prefix;
    d.document = s_.prompt.document;
    d.suffix = s_.prompt.suffix;
    d.document_text = doc_.text;
    d.kv = {dtype, o_.kv_group};
    format::VectorSink sink;
    format::write_cache(compress::make_contents(model_, cache, {}, d), sink);
    acc.file_bytes += sink.bytes.size();
    const auto t = Clock::now();
    format::CacheReader reader = format::CacheReader::open_memory(sink.bytes);
    model::KvBase loaded = loader::base_from_reader(reader, s_.answer_room);
    acc.load_ms += 1e3 * seconds_since(t);
    return loaded;
  }

  void set_dtype(const std::string& dtype) { dtype_ = dtype; }  // of the answers recorded next
  uint32_t n_prefix() const { return static_cast<uint32_t>(s_.prompt.prefix.size()); }
  uint32_t answer_room() const { return s_.answer_room; }
  const std::vector<int32_t>& document() const { return s_.prompt.document; }
  const std::vector<std::vector<int32_t>>& prompts() const { return s_.prompts; }

 private:
  const model::Model& model_;
  model::Forward& fwd_;
  const Document& doc_;
  const EvalOptions& o_;
  EvalReport& report_;
  DocSetup s_;
  std::vector<DraftPool> pools_;  // (questions) every answer given so far, for draft verification
  std::string dtype_ = "f32";     // storage type of the cache being answered from
};

void log(const EvalOptions& o, const std::string& line) {
  if (o.log) o.log(line);
}

std::string row_summary(const std::string& method, double ratio, const Accum& a, double seconds) {
  const double n = a.n ? double(a.n) : 1.0;
  return fmt(
      "  %-9s ratio %.2f  kept %.3f  contains %5.1f%%  F1 %5.1f  KL %.4f  agree %5.1f%%  "
      "answer F1 %5.1f  (%.1f s)",
      method.c_str(), ratio, a.total_doc ? double(a.kept_doc) / double(a.total_doc) : 1.0,
      100.0 * a.contains / n, 100.0 * a.f1 / n, a.kl / n, 100.0 * double(a.agree) / n,
      100.0 * a.answer_f1 / n, seconds);
}

// The methods of one document (the reference "full" first), each as the CompressOptions that
// compress() would be given, with its scorer.
struct MethodSet {
  std::vector<compress::CompressOptions> methods;
  std::vector<std::unique_ptr<compress::Scorer>> scorers;
};

MethodSet make_methods(const model::Model& model, const EvalOptions& o,
                       const std::vector<std::vector<int32_t>>& queries) {
  std::vector<compress::CompressOptions> methods(1 + o.methods.size());
  methods[0].method = "full";
  for (size_t m = 0; m < o.methods.size(); ++m) {
    const bool streamed = o.methods[m] == kStreamedMethod;
    methods[1 + m].method = streamed ? compress::kLearnedMethod : o.methods[m];
    methods[1 + m].stream = streamed;
  }
  compress::ScorerOptions so =
      compress::make_scorer_options(model.chat(), o.kvzip_chunk, o.seed, o.scorer_options);
  if (o.query_aware) so.kvzip_queries = queries;
  so.learned = o.learned;
  so.learned_source = o.learned_source;
  std::vector<std::unique_ptr<compress::Scorer>> scorers;
  for (compress::CompressOptions& co : methods) {
    co.level = o.level;
    co.scorer = so;
    co.head.head_scores = o.head_scores;
    co.head.window = o.head_window;
    co.ratio = 1.0;  // the ratios come per selection below
    scorers.push_back(compress::make_method_scorer(co));
  }
  return {std::move(methods), std::move(scorers)};
}

// One document through the whole protocol; `accs` is (1 + methods × ratios), full first.
void eval_document(const model::Model& model, model::Forward& fwd, const Document& doc,
                   const EvalOptions& o, EvalReport& report, std::vector<Accum>& accs) {
  DocumentRun run(model, fwd, doc, o, report);
  auto [methods, scorers] =
      make_methods(model, o, o.query_aware ? run.prompts() : std::vector<std::vector<int32_t>>{});
  std::vector<std::unique_ptr<TimedObserver>> timers;
  prefill::PrefillResult pre = run.prefill(scorers, timers);
  log(o, fmt("  prefill %u tokens in %.1f s", pre.n_prefix + pre.n_doc, pre.seconds));

  std::vector<GreedyAnswer> reference;
  for (size_t m = 0; m < scorers.size(); ++m) {
    const bool full = m == 0;
    auto t = Clock::now();
    const bool streamed = methods[m].stream;  // its own prefill per ratio: no shared scores
    const compress::DocumentScores scores =
        streamed ? compress::DocumentScores{}
                 : scorers[m]->score(
                       compress::ScoreInput{&fwd, &pre.cache, run.n_prefix(), run.document()});
    const double scoring_s =
        streamed ? 0.0 : seconds_since(t) + (timers[m] ? timers[m]->seconds() : 0.0);
    if (!full) log(o, fmt("  %-9s scored in %.1f s", o.methods[m - 1].c_str(), scoring_s));
    const std::vector<double> ratios = full ? std::vector<double>{1.0} : o.ratios;
    // Highest ratio first: each cache's answers are the best drafts for the next, smaller one.
    const size_t n_t = o.kv_dtypes.size();
    for (size_t r = ratios.size(); r-- > 0;) {
      Accum& acc = accs[full ? 0 : 1 + ((m - 1) * o.ratios.size() + r) * n_t];
      Accum one;  // this document only, for the progress line
      t = Clock::now();
      const std::string& name = full ? std::string("full") : o.methods[m - 1];
      model::RaggedKvCache cache =
          streamed ? run.compress_streaming(methods[m], ratios[r], one)
                   : run.compress(pre.cache, scores, methods[m], ratios[r], one);
      one.compress_s += scoring_s;
      const bool same = !full && o.reuse_identical && one.kept_doc == one.total_doc;
      std::vector<GreedyAnswer> answers;  // the f32 cache's: the reference of the other dtypes
      if (full) {
        reference = run.answer_all(cache, nullptr, name, ratios[r], one);
      } else if (same) {
        run.reuse(reference, name, ratios[r], one);
        answers = reference;
      } else {
        answers = run.answer_all(cache, &reference, name, ratios[r], one);
      }
      log(o, row_summary(name, ratios[r], one, seconds_since(t)) +
                 (same ? "  every row kept: the full cache's answers" : ""));
      acc.add(one);
      for (size_t dt = 1; !full && dt < n_t; ++dt) {  // the same rows in another storage type
        Accum q;
        q.kept_doc = one.kept_doc, q.total_doc = one.total_doc;
        t = Clock::now();
        const model::KvBase stored =
            run.through_file(cache, *format::parse_dtype(o.kv_dtypes[dt]), q);
        // Read-only base plus the answers' rows, as a query session on the file answers.
        model::BranchCache branch(stored, run.answer_room());
        run.set_dtype(o.kv_dtypes[dt]);
        run.answer_all(branch, &answers, name, ratios[r], q);
        run.set_dtype("f32");
        log(o, row_summary(name + "/" + o.kv_dtypes[dt], ratios[r], q, seconds_since(t)) +
                   fmt("  vs f32; %.2f MB, loaded in %.1f ms", q.file_bytes / 1e6, q.load_ms));
        accs[1 + ((m - 1) * o.ratios.size() + r) * n_t + dt].add(q);
      }
    }
  }
}

EvalRow make_row(const std::string& method, double ratio, const Accum& a,
                 const std::string& dtype = "f32") {
  EvalRow row;
  row.method = method;
  row.ratio = ratio;
  row.kv_dtype = dtype;
  row.file_bytes = a.file_bytes;
  row.load_ms = a.load_ms;
  row.achieved_ratio = a.total_doc ? double(a.kept_doc) / double(a.total_doc) : 1.0;
  const double n = a.n ? double(a.n) : 1.0;
  row.f1 = 100.0 * a.f1 / n;
  row.contains = 100.0 * a.contains / n;
  row.agreement = 100.0 * double(a.agree) / n;
  row.answer_f1 = 100.0 * a.answer_f1 / n;
  row.kl = a.kl / n;
  row.questions = a.n;
  row.compress_s = a.compress_s;
  row.answer_s = a.answer_s;
  return row;
}

}  // namespace

EvalOptions checked(EvalOptions o) {
  if (o.max_answer_tokens == 0)
    throw Error(Errc::invalid_argument, "eval: the answer length (-n) must be at least 1 token");
  if (o.query_template.find("{question}") == std::string::npos)
    throw Error(Errc::invalid_argument, "eval: the query template must contain {question}");
  std::vector<std::string> methods;
  for (const std::string& m : o.methods) {
    if (m == compress::kHeadLevelMethod && o.head_scores.empty())
      throw Error(Errc::invalid_argument,
                  "eval: method kvzip-head needs option head_scores, a file made by the head "
                  "calibration on a document other than the evaluated ones");
    if ((m == compress::kLearnedMethod || m == kStreamedMethod) && !o.learned)
      throw Error(Errc::invalid_argument,
                  "eval: method kvzap needs option scorer, a .kvp file made by the scorer "
                  "calibration on a text other than the evaluated documents");
    if (m != kStreamedMethod) compress::check_method_name(m);
    if (m != "full" && std::find(methods.begin(), methods.end(), m) == methods.end())
      methods.push_back(m);
  }
  o.methods = std::move(methods);
  compress::ScorerOptions
      probe;  // unknown keys and unparsable values fail here, before any model work
  for (const std::string& kv : o.scorer_options) compress::set_scorer_option(probe, kv);
  for (double r : o.ratios) compress::check_ratio(r);
  std::vector<std::string> dtypes = {"f32"};
  for (const std::string& t : o.kv_dtypes) {
    if (!format::parse_dtype(t))
      throw Error(Errc::invalid_argument,
                  "eval: option kv_dtypes: " + t + " is not one of f32, f16, bf16, q8, q4");
    if (std::find(dtypes.begin(), dtypes.end(), t) == dtypes.end()) dtypes.push_back(t);
  }
  o.kv_dtypes = std::move(dtypes);
  std::sort(o.ratios.begin(), o.ratios.end());
  o.ratios.erase(std::unique(o.ratios.begin(), o.ratios.end()), o.ratios.end());
  if (!o.methods.empty() && o.ratios.empty())
    throw Error(Errc::invalid_argument, "eval: no ratios given (option ratios, e.g. 0.1,0.3,1.0)");
  return o;
}

EvalReport run_eval(const model::Model& model, const std::vector<Document>& documents,
                    const EvalOptions& options) {
  const EvalOptions o = checked(options);
  const auto t0 = Clock::now();
  model::ForwardOptions fo;
  fo.threads = o.threads;
  fo.matmul = o.matmul;
  model::Forward fwd(model.weights(), fo);
  EvalReport report;
  const size_t n_t = o.kv_dtypes.size();
  std::vector<Accum> accs(1 + o.methods.size() * o.ratios.size() * n_t);
  for (size_t d = 0; d < documents.size(); ++d) {
    const Document& doc = documents[d];
    log(o, fmt("[document %zu/%zu] %s: %zu questions", d + 1, documents.size(), doc.title.c_str(),
               doc.questions.size()));
    eval_document(model, fwd, doc, o, report, accs);
    ++report.documents;
    report.questions += doc.questions.size();
  }
  report.rows.push_back(make_row("full", 1.0, accs[0]));
  for (size_t m = 0; m < o.methods.size(); ++m)
    for (size_t r = 0; r < o.ratios.size(); ++r)
      for (size_t dt = 0; dt < n_t; ++dt)
        report.rows.push_back(make_row(o.methods[m], o.ratios[r],
                                       accs[1 + (m * o.ratios.size() + r) * n_t + dt],
                                       o.kv_dtypes[dt]));
  report.with_kv_dtypes = n_t > 1;
  report.total_s = seconds_since(t0);
  return report;
}

}  // namespace kvzip::eval
