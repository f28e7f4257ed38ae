// RULER's task generators (eval/ruler.h make_ruler_sample): the prompt templates, needles and
// haystacks of RULER's scripts/data/synthetic (niah, variable tracking, common and frequent words,
// QA), re-implemented with kvzip's own deterministic random stream so that a (seed, task, length,
// index) gives the same sample on every platform. Word sources are built in: keys of the NIAH
// tasks are adjective-noun pairs from short lists, and the common-words vocabulary is made of
// synthetic consonant-vowel words (RULER draws from the wonderwords lists).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <numeric>
#include <set>

#include "common/error.h"
#include "eval/ruler.h"

namespace kvzip::eval {
namespace {

// splitmix64: a fixed, portable stream (std::uniform_int_distribution differs between libraries).
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint64_t below(uint64_t n) { return next() % n; }
  double unit() { return double(next() >> 11) * 0x1.0p-53; }
  template <class T>
  void shuffle(std::vector<T>& v) {
    for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[below(i)]);
  }
  // k distinct values of [0, n), in draw order.
  std::vector<uint32_t> sample(uint32_t n, uint32_t k) {
    std::vector<uint32_t> idx(n);
    std::iota(idx.begin(), idx.end(), 0u);
    for (uint32_t i = 0; i < k; ++i) std::swap(idx[i], idx[i + below(n - i)]);
    idx.resize(k);
    return idx;
  }

 private:
  uint64_t s_;
};

uint64_t hash_str(std::string_view s) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (char c : s) h = (h ^ uint8_t(c)) * 1099511628211ull;
  return h;
}

uint64_t sample_seed(uint64_t seed, std::string_view task, uint32_t length, uint32_t index) {
  Rng r(seed ^ hash_str(task));
  r.next();
  return r.next() ^ (uint64_t(length) << 32) ^ index;
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size()))
    s.replace(p, from.size(), to);
}

std::string join(const std::vector<std::string>& v, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? std::string(sep) : std::string()) + v[i];
  return out;
}

constexpr const char* kNoise =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";
constexpr const char* kNeedle = "One of the special magic {v} for {key} is: {value}.";

const std::vector<std::string>& adjectives() {
  static const std::vector<std::string> v = {
      "able",   "acid",   "agile",  "amber",  "ancient", "angry",  "bitter", "bold",   "brave",
      "bright", "broad",  "calm",   "cheap",  "clever",  "cold",   "cozy",   "crisp",  "curly",
      "damp",   "dark",   "deep",   "dizzy",  "eager",   "early",  "empty",  "fancy",  "fierce",
      "flat",   "fresh",  "gentle", "giant",  "glossy",  "golden", "grumpy", "happy",  "heavy",
      "hollow", "humble", "icy",    "jolly",  "keen",    "lazy",   "lively", "loud",   "lucky",
      "mellow", "misty",  "modern", "narrow", "noisy",   "odd",    "pale",   "polite", "proud",
      "quick",  "quiet",  "rapid",  "rare",   "rough",   "rusty",  "salty",  "shiny",  "silent",
      "sleepy", "smooth", "solid",  "sour",   "steep",   "sticky", "sunny",  "tame",   "tender",
      "tidy",   "tiny",   "vast",   "warm",   "wary",    "wild",   "windy",  "young"};
  return v;
}
const std::vector<std::string>& nouns() {
  static const std::vector<std::string> v = {
      "anchor",   "apple",   "arch",    "badge",  "basket", "beacon",  "bicycle",  "blanket",
      "bridge",   "brush",   "cabin",   "camera", "candle", "canyon",  "castle",   "cellar",
      "chair",    "cliff",   "clock",   "cloud",  "comet",  "cottage", "crater",   "desert",
      "dragon",   "drum",    "eagle",   "engine", "falcon", "feather", "fence",    "forest",
      "fountain", "garden",  "glacier", "harbor", "helmet", "island",  "jacket",   "kettle",
      "ladder",   "lantern", "lemon",   "meadow", "mirror", "monkey",  "mountain", "needle",
      "ocean",    "orchard", "otter",   "palace", "parrot", "pebble",  "pencil",   "piano",
      "pillow",   "planet",  "pocket",  "pond",   "rabbit", "river",   "rocket",   "saddle",
      "shovel",   "signal",  "spider",  "statue", "swamp",  "teapot",  "temple",   "thunder",
      "tiger",    "tower",   "tunnel",  "valley", "violin", "wagon",   "whistle",  "window"};
  return v;
}

// The common-words vocabulary: consonant-vowel-consonant-vowel(-consonant) words, all distinct.
const std::vector<std::string>& cwe_vocabulary() {
  static const std::vector<std::string> v = [] {
    const std::string c = "bdfgklmnprstvz", vow = "aeiou", tail = "lnrst";
    std::vector<std::string> out;
    for (char a : c)
      for (char b : vow)
        for (char d : c)
          for (char e : vow)
            for (char f : tail) out.push_back(std::string{a, b, d, e, f});
    return out;  // 14·5·14·5·5 = 24 500 words
  }();
  return v;
}

std::string random_value(Rng& r, std::string_view type) {
  if (type == "numbers") return std::to_string(1000000 + r.below(9000000));
  if (type == "words") {
    const auto& a = adjectives();
    const auto& n = nouns();
    return a[r.below(a.size())] + "-" + n[r.below(n.size())];
  }
  // uuids: version 4, variant 10xx, as uuid.UUID(int=..., version=4) prints it
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (int i = 0; i < 32; ++i) {
    uint64_t d = r.below(16);
    if (i == 12) d = 4;
    if (i == 16) d = 8 + (d & 3);
    if (i == 8 || i == 12 || i == 16 || i == 20) s += '-';
    s += hex[d];
  }
  return s;
}

// Splits text into sentences after '.', '!' or '?' followed by a space (nltk's sent_tokenize on
// plain prose, closely enough for placing needles between sentences).
std::vector<std::string> sentences(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i + 1 < text.size(); ++i)
    if ((text[i] == '.' || text[i] == '!' || text[i] == '?') && text[i + 1] == ' ') {
      out.push_back(text.substr(start, i + 1 - start));
      start = i + 2;
    }
  if (start < text.size()) out.push_back(text.substr(start));
  return out;
}

std::vector<std::string> split_words(const std::string& text) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && std::isspace(uint8_t(text[i]))) ++i;
    size_t j = i;
    while (j < text.size() && !std::isspace(uint8_t(text[j]))) ++j;
    if (j > i) out.push_back(text.substr(i, j - i));
    i = j;
  }
  return out;
}

// RULER's DEPTHS: round(linspace(0, 100, 40)).
std::vector<uint32_t> depths() {
  std::vector<uint32_t> d;
  for (int i = 0; i < 40; ++i) d.push_back(uint32_t(std::lround(100.0 * i / 39.0)));
  return d;
}

// Essay text of `n` words (the haystack repeated as needed) with `inserts` placed between
// sentences at distinct random depths, joined by spaces.
std::string essay_with(const std::vector<std::string>& words, uint32_t n,
                       const std::vector<std::string>& inserts, Rng& r) {
  std::vector<std::string> w;
  for (uint32_t i = 0; i < n; ++i) w.push_back(words[i % words.size()]);
  const std::vector<std::string> sents = sentences(join(w, " "));
  const std::vector<uint32_t> d = depths();
  std::vector<uint32_t> pos;
  for (uint32_t k : r.sample(uint32_t(d.size()), uint32_t(std::min(inserts.size(), d.size()))))
    pos.push_back(uint32_t(sents.size() * d[k] / 100));
  std::sort(pos.begin(), pos.end());
  pos.insert(pos.begin(), 0);
  pos.push_back(uint32_t(sents.size()));
  std::vector<std::string> parts;
  for (size_t i = 1; i < pos.size(); ++i) {
    parts.push_back(
        join(std::vector<std::string>(sents.begin() + pos[i - 1], sents.begin() + pos[i]), " "));
    if (i - 1 < inserts.size()) parts.push_back(inserts[i - 1]);
  }
  return join(parts, " ");
}

struct Built {
  std::string document, question, answer_prefix;
  std::vector<std::string> outputs;
};

struct NiahConfig {
  const char* haystack;  // noise | essay | needle
  const char *key, *value;
  uint32_t k, v, q;
};

NiahConfig niah_config(std::string_view task) {
  if (task == "niah_single_1") return {"noise", "words", "numbers", 1, 1, 1};
  if (task == "niah_single_2") return {"essay", "words", "numbers", 1, 1, 1};
  if (task == "niah_single_3") return {"essay", "words", "uuids", 1, 1, 1};
  if (task == "niah_multikey_1") return {"essay", "words", "numbers", 4, 1, 1};
  if (task == "niah_multikey_2") return {"needle", "words", "numbers", 1, 1, 1};
  if (task == "niah_multikey_3") return {"needle", "uuids", "uuids", 1, 1, 1};
  if (task == "niah_multivalue") return {"essay", "words", "numbers", 1, 4, 1};
  return {"essay", "words", "numbers", 1, 1, 4};  // niah_multiquery
}

std::string needle(std::string_view v, const std::string& key, const std::string& value) {
  std::string s = kNeedle;
  replace_all(s, "{v}", v);
  replace_all(s, "{key}", key);
  replace_all(s, "{value}", value);
  return s;
}

// RULER niah.py generate_input_output with `n` haystack units (words of the essay, else sentences).
Built niah(std::string_view task, uint32_t n, uint64_t seed,
           const std::vector<std::string>& essay_words) {
  NiahConfig c = niah_config(task);
  std::string haystack = c.haystack;
  if (haystack == "essay" && essay_words.empty()) haystack = "noise";
  Rng r(seed);
  const uint32_t k = std::max(c.k, c.q);
  std::vector<std::string> keys, needles;
  std::vector<std::vector<std::string>> values(k);
  for (uint32_t i = 0; i < k; ++i) {
    keys.push_back(random_value(r, c.key));
    for (uint32_t j = 0; j < c.v; ++j) {
      values[i].push_back(random_value(r, c.value));
      needles.push_back(needle(c.value, keys[i], values[i].back()));
    }
  }
  r.shuffle(needles);
  std::string context;
  if (haystack == "essay") {
    context = essay_with(essay_words, n, needles, r);
  } else {
    std::vector<std::string> sents;
    for (uint32_t i = 0; i < n; ++i)
      sents.push_back(haystack == "noise"
                          ? std::string(kNoise)
                          : needle(c.value, random_value(r, c.key), random_value(r, c.value)));
    std::vector<uint32_t> at = r.sample(n, std::min<uint32_t>(n, uint32_t(needles.size())));
    std::sort(at.rbegin(), at.rend());
    for (size_t i = 0; i < at.size(); ++i) sents.insert(sents.begin() + at[i], needles[i]);
    for (size_t i = at.size(); i < needles.size(); ++i) sents.insert(sents.begin(), needles[i]);
    context = join(sents, "\n");
  }
  Built b;
  std::vector<std::string> queries;
  for (uint32_t i : r.sample(k, c.q)) {
    queries.push_back(keys[i]);
    for (const std::string& v : values[i]) b.outputs.push_back(v);
  }
  std::string query = queries[0];
  if (queries.size() > 1) {
    query = join(std::vector<std::string>(queries.begin(), queries.end() - 1), ", ") + ", and " +
            queries.back();
  }
  std::string head =
      "Some special magic {v} are hidden within the following text. Make sure to memorize it. "
      "I will quiz you about the {v} afterwards.\n";
  std::string question =
      "\nWhat are all the special magic {v} for {query} mentioned in the provided text?";
  std::string prefix = " The special magic {v} for {query} mentioned in the provided text are";
  std::string v = c.value;
  if (c.q * c.v == 1) {  // RULER's singular wording
    for (std::string* s : {&head, &question, &prefix}) {
      replace_all(*s, "Some", "A");
      replace_all(*s, "are all", "is");
      replace_all(*s, "are", "is");
      replace_all(*s, "answers", "answer");
    }
    v.pop_back();
  }
  for (std::string* s : {&head, &question, &prefix}) {
    replace_all(*s, "{v}", v);
    replace_all(*s, "{query}", query);
  }
  b.document = head + context;
  b.question = question;
  b.answer_prefix = prefix;
  return b;
}

// RULER variable_tracking.py: one chain of 4 hops in the noise haystack, after a one-shot example.
Built vt_instance(uint32_t n, Rng& r, uint32_t var_len) {
  std::set<std::string> seen;
  std::vector<std::string> vars;
  while (vars.size() < 5) {
    std::string s;
    for (uint32_t i = 0; i < var_len; ++i) s += char('A' + r.below(26));
    if (seen.insert(s).second) vars.push_back(s);
  }
  const std::string value = std::to_string(10000 + r.below(89999));
  std::vector<std::string> chain = {"VAR " + vars[0] + " = " + value};
  for (size_t j = 0; j + 1 < vars.size(); ++j)
    chain.push_back("VAR " + vars[j + 1] + " = VAR " + vars[j] + " ");
  std::vector<std::string> sents(n, kNoise);
  std::vector<uint32_t> at = r.sample(n, std::min<uint32_t>(n, uint32_t(chain.size())));
  std::sort(at.begin(), at.end());
  for (size_t j = 0; j < chain.size(); ++j)
    sents.insert(sents.begin() + (j < at.size() ? at[j] + j : j), chain[j]);
  std::string context = join(sents, "\n");
  replace_all(context, ". \n", ".\n");
  Built b;
  b.document =
      "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n" +
      context;
  b.question =
      "\nQuestion: Find all variables that are assigned the value " + value + " in the text above.";
  b.answer_prefix =
      " Answer: According to the chain(s) of variable assignment in the text above, 5 variables "
      "are assigned the value " +
      value + ", they are: ";
  b.outputs = vars;
  return b;
}

// RULER common_words_extraction.py get_example: the first `common` of `num_words` distinct words
// repeated `cr` times, the others `ur` times, shuffled into a numbered list.
std::pair<std::string, std::vector<std::string>> cwe_example(uint32_t num_words, uint32_t cr,
                                                             uint32_t ur, Rng& r) {
  const auto& vocab = cwe_vocabulary();
  std::vector<std::string> words;
  for (uint32_t i :
       r.sample(uint32_t(vocab.size()), std::min<uint32_t>(num_words, uint32_t(vocab.size()))))
    words.push_back(vocab[i]);
  const size_t common = std::min<size_t>(10, words.size());
  std::vector<std::string> list;
  for (size_t i = 0; i < words.size(); ++i)
    for (uint32_t t = 0; t < (i < common ? cr : ur); ++t) list.push_back(words[i]);
  r.shuffle(list);
  std::string ctx;
  for (size_t i = 0; i < list.size(); ++i)
    ctx += (i ? " " : "") + std::to_string(i + 1) + ". " + list[i];
  return {ctx, std::vector<std::string>(words.begin(), words.begin() + common)};
}

constexpr const char* kCweHead =
    "Below is a numbered list of words. In these words, some appear more often than "
    "others. Memorize the ones that appear most often.\n";
constexpr const char* kCweQuestion =
    "\nQuestion: What are the 10 most common words in the above list?";
constexpr const char* kCwePrefix =
    " Answer: The top 10 words that appear most often in the list are:";

Built cwe(uint32_t n, uint64_t seed, uint32_t length) {
  Rng r(seed);
  const bool short_ctx = length < 4096;
  auto [ex_ctx, ex_ans] = short_ctx ? cwe_example(20, 3, 1, r) : cwe_example(40, 10, 3, r);
  std::string shot = std::string(kCweHead) + ex_ctx + kCweQuestion + kCwePrefix + " ";
  for (size_t i = 0; i < ex_ans.size(); ++i)
    shot += (i ? " " : "") + std::to_string(i + 1) + ". " + ex_ans[i];
  auto [ctx, ans] = short_ctx ? cwe_example(n, 6, 1, r) : cwe_example(n, 30, 3, r);
  return {shot + "\n" + kCweHead + ctx, kCweQuestion, kCwePrefix, ans};
}

// RULER freq_words_extraction.py: coded words of 6 letters with Zipf(alpha = 2) counts over a
// vocabulary of (length - budget) / 50 words, the most frequent one replaced by "...".
Built fwe(uint32_t n, uint64_t seed, uint32_t vocab_size) {
  Rng r(seed);
  std::set<std::string> seen;
  std::vector<std::string> vocab;
  while (vocab.size() < vocab_size) {
    std::string s;
    for (int i = 0; i < 6; ++i) s += char('a' + r.below(26));
    if (seen.insert(s).second) vocab.push_back(s);
  }
  std::sort(vocab.begin(), vocab.end());
  r.shuffle(vocab);
  vocab[0] = "...";
  const double zeta2 = M_PI * M_PI / 6.0;
  std::vector<std::string> words;
  for (size_t k = 0; k < vocab.size(); ++k) {
    const auto cnt = uint64_t(double(n) * std::pow(double(k + 1), -2.0) / zeta2);
    for (uint64_t t = 0; t < cnt; ++t) words.push_back(vocab[k]);
  }
  r.shuffle(words);
  return {
      "Read the following coded text and track the frequency of each coded word. Find the three "
      "most "
      "frequently appeared coded words. " +
          join(words, " "),
      "\nQuestion: Do not provide any explanation. Please ignore the dots '....'. What are the "
      "three most "
      "frequently appeared words in the above coded text?",
      " Answer: According to the coded text above, the three most frequently appeared words are:",
      {vocab[1], vocab[2], vocab[3]}};
}

// RULER qa.py: the question's gold paragraphs, then its article's others, then random ones, up to
// `n` documents, shuffled and numbered.
Built qa(const QaSource& src, uint32_t item, uint32_t n, uint64_t seed) {
  Rng r(seed);
  const QaSource::Item& it = src.items[item % src.items.size()];
  const auto total = uint32_t(src.paragraphs.size());
  std::vector<uint32_t> docs;
  if (n < total) {
    docs = it.gold;
    const uint32_t want = n > docs.size() ? n - uint32_t(docs.size()) : 0;
    if (want > it.related.size()) {
      docs.insert(docs.end(), it.related.begin(), it.related.end());
      std::vector<bool> used(total, false);
      for (uint32_t d : docs) used[d] = true;
      std::vector<uint32_t> others;
      for (uint32_t d = 0; d < total; ++d)
        if (!used[d]) others.push_back(d);
      const uint32_t more = std::min<uint32_t>(n - uint32_t(docs.size()), uint32_t(others.size()));
      for (uint32_t k : r.sample(uint32_t(others.size()), more)) docs.push_back(others[k]);
    } else {
      for (uint32_t k : r.sample(uint32_t(it.related.size()), want)) docs.push_back(it.related[k]);
    }
  } else {
    for (uint32_t d = 0; d < n; ++d) docs.push_back(d % total);
  }
  r.shuffle(docs);
  std::string ctx;
  for (size_t i = 0; i < docs.size(); ++i)
    ctx += (i ? "\n\n" : "") + std::string("Document ") + std::to_string(i + 1) + ":\n" +
           src.paragraphs[docs[i]];
  const std::string instr =
      "Answer the question based on the given documents. Only give me the answer and do "
      "not output any other words.";
  return {instr + "\n\nThe following are given documents.\n\n" + ctx,
          "\n\n" + instr + "\n\nQuestion: " + it.question, " Answer:", it.answers};
}

// The variable-tracking example: the largest noise count whose prompt and answer fit 500 tokens.
Built vt_example(uint64_t seed, const TokenCounter& count) {
  const Rng shot_rng(seed ^ 0x5EEDull);
  auto vt_shot = [&](uint32_t n) {
    Rng r = shot_rng;
    Built b = vt_instance(n, r, 3);
    b.document += b.question + b.answer_prefix + " " + join(b.outputs, " ") + "\n";
    return b;
  };
  uint32_t lo = 1, hi = 64, best = 1;
  while (lo <= hi) {
    const uint32_t mid = (lo + hi) / 2;
    if (count(vt_shot(mid).document) <= 500) best = mid, lo = mid + 1;
    else hi = mid - 1;
  }
  return vt_shot(best);
}

}  // namespace

RulerSample make_ruler_sample(std::string_view task_name, uint32_t length, uint32_t index,
                              const RulerGenOptions& o, const TokenCounter& count) {
  const RulerTask& task = ruler_task(task_name);
  const std::string name = task.name;
  const uint64_t seed = sample_seed(o.seed, name, length, index);
  const QaSource* qa_src = name == "qa_1" ? o.squad : name == "qa_2" ? o.hotpotqa : nullptr;
  if (name.rfind("qa_", 0) == 0 && (!qa_src || qa_src->items.empty() || qa_src->paragraphs.empty()))
    throw Error(Errc::invalid_argument, "ruler: task " + name + " needs its question file (" +
                                            (name == "qa_1" ? "option squad" : "option hotpotqa") +
                                            ")");
  const std::vector<std::string> essay = split_words(o.haystack);
  const int64_t budget =
      int64_t(length) - int64_t(task.tokens_to_generate) - int64_t(o.template_tokens);
  if (budget <= 0)
    throw Error(Errc::invalid_argument,
                "ruler: task " + name + " does not fit " + std::to_string(length) +
                    " tokens (its answer budget and the chat template take " +
                    std::to_string(task.tokens_to_generate + o.template_tokens) + ")");
  const auto fwe_vocab = uint32_t(std::max<int64_t>(16, budget / 50));

  const Built shot = name == "vt" ? vt_example(seed, count) : Built{};

  auto build = [&](uint32_t n) -> Built {
    if (name.rfind("niah", 0) == 0) return niah(name, n, seed, essay);
    if (name == "vt") {
      Rng r(seed);
      Built b = vt_instance(n, r, 5);
      b.document = shot.document + "\n" + b.document;
      return b;
    }
    if (name == "cwe") return cwe(n, seed, length);
    if (name == "fwe") return fwe(n, seed, fwe_vocab);
    return qa(*qa_src, index, n, seed);
  };
  // The question is counted twice: the query-aware setting compresses it with the document and
  // asks it again, and both settings use the same samples.
  auto tokens = [&](const Built& b) {
    return int64_t(count(b.document) + 2 * count(b.question) + count(b.answer_prefix));
  };
  // Haystack units per step of the search's first probe, as RULER's `incremental`.
  const bool niah_essay = name.rfind("niah", 0) == 0 &&
                          std::string(niah_config(name).haystack) == "essay" && !essay.empty();
  const uint32_t unit = niah_essay                       ? 500
                        : name == "cwe" || name == "fwe" ? 100
                        : name.rfind("qa_", 0) == 0      ? 10
                                                         : 25;
  const Built probe = build(unit);
  const int64_t probe_tokens = tokens(probe);
  if (probe_tokens > budget) {  // fewer units until one fits, or the task cannot fit at all
    uint32_t n = unit;
    while (n > 1 && tokens(build(n)) > budget) n = std::max<uint32_t>(1, n / 2);
    if (tokens(build(n)) > budget)
      throw Error(
          Errc::invalid_argument,
          "ruler: task " + name + " does not fit " + std::to_string(length) +
              " tokens (its shortest prompt takes " +
              std::to_string(tokens(build(n)) + task.tokens_to_generate + o.template_tokens) + ")");
  }
  const double per_unit = std::max(1e-3, double(probe_tokens) / unit);
  uint32_t lo = 1, hi = std::max<uint32_t>(2 * unit, uint32_t(3.0 * double(budget) / per_unit)),
           best = 1;
  while (lo <= hi) {
    const uint32_t mid = lo + (hi - lo) / 2;
    if (tokens(build(mid)) <= budget) best = mid, lo = mid + 1;
    else hi = mid - 1;
  }
  Built b = build(best);
  return {name,
          length,
          index,
          std::move(b.document),
          std::move(b.question),
          std::move(b.answer_prefix),
          std::move(b.outputs)};
}

}  // namespace kvzip::eval
