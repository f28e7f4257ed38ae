// compress/ scorers: every document KV pair of a prefilled [prefix ; document] cache gets an
// importance score (higher = keep) through one Scorer interface (kvzip, full, random, streaming,
// snapkv, h2o, rest-kv, rkv; spec/methods.md §1-4). Scores have the layout (L, Hkv, n_c) over the
// document rows n_p .. n_p+n_c-1 of the dense cache; the n_p prefix rows are never scored and
// never evicted. Selection and eviction are compress/selection.h; the whole pipeline (prefill,
// score, select, evict, write) is compress/pipeline.h.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cache/kv_cache.h"
#include "format/scorer_file.h"
#include "model/forward.h"
#include "tokenizer/chat_template.h"

namespace kvzip::compress {

using MethodParams = std::vector<std::pair<std::string, std::string>>;  // key/value, in order

// Importance of every document row of every (layer, KV head).
struct DocumentScores {
  model::CacheShape shape;
  uint32_t n_prefix = 0;      // n_p: rows before the document (not scored)
  uint32_t n_doc = 0;         // n_c
  std::vector<float> values;  // (L, Hkv, n_c); +inf marks rows a method always keeps
  // Hybrid attention (Gemma 3): the model's sliding-window layers and window. Selection keeps a
  // local layer's reachable rows (the document's last window - 1) whatever its scores, and the
  // ratio counts the global layers' rows only (compress/selection.h). Empty: every layer global.
  std::vector<uint8_t> local_layers;  // (L) or empty
  uint32_t window = 0;
  bool is_local(uint32_t layer) const { return layer < local_layers.size() && local_layers[layer]; }

  float at(uint32_t layer, uint32_t kv_head, uint32_t j) const {
    return values[(size_t(layer) * shape.n_kv_heads + kv_head) * n_doc + j];
  }
};

// ---- KVzip reconstruction inputs (spec/methods.md §1 step 3) ------------------------------------

inline constexpr const char* kRepeatFirstPrompt = "\n\nRepeat the previous context exactly.";
inline constexpr const char* kRepeatNextPrompt =
    "\n\nRepeat the part of the previous context exactly, starting with ";

// Token pieces of the reconstruction inputs, tokenized once per model.
struct ReconstructionPrompts {
  std::vector<int32_t> first;     // tokens of kRepeatFirstPrompt
  std::vector<int32_t> next;      // tokens of kRepeatNextPrompt
  std::vector<int32_t> turn_end;  // end of the user turn + assistant opener S: chat.suffix("")
};

// first = chat.encode_document(kRepeatFirstPrompt), next = chat.encode_document(kRepeatNextPrompt),
// turn_end = chat.suffix(""). For every supported template chat.suffix(p) == encode(p) + turn_end,
// because a control token (end of turn) follows the user text.
ReconstructionPrompts reconstruction_prompts(const model::ChatTemplate& chat);

// R_t for the document chunk [begin, end): as the authors' code builds it,
//   t = 1:  first ; turn_end ; document[begin, end)
//   t > 1:  next ; document[begin - hint, begin) ; turn_end ; document[begin, end)
// i.e. the hint (the last `hint` tokens of the previous chunk, tokenized separately) ends the user
// turn's text, right before the end-of-turn token; the chunk is teacher-forced as the reply.
std::vector<int32_t> reconstruction_input(const ReconstructionPrompts& prompts,
                                          std::span<const int32_t> document, uint32_t begin,
                                          uint32_t end, uint32_t hint);

// ---- Scorers ----------------------------------------------------------------------------------

struct ScorerOptions {
  // kvzip
  ReconstructionPrompts prompts;  // required for kvzip (reconstruction_prompts(model.chat()))
  uint32_t kvzip_chunk = 2000;    // m: document tokens reconstructed per pass
  uint32_t kvzip_hint = 8;        // tokens of the previous chunk quoted in prompt_t, t > 1
  // Query-aware KVzip (empty: query-agnostic, the method of spec/methods.md §1). Each entry is a
  // question as it will be asked (its prompt tokens); after every chunk's R_t, each question runs
  // through the model the same way, teacher-forced over the full cache, and its local statistics
  // (prefix ⊕ chunk ⊕ its own keys) are max-combined into the chunk's scores: a row is kept when
  // the reconstruction OR one of the known questions attends to it.
  std::vector<std::vector<int32_t>> kvzip_queries;
  // The reconstruction (and question) passes' attention on bf16 operands (Forward::
  // set_prompt_bf16; Fast path, AVX-512 BF16 CPUs): only their scores are kept, and the kept set
  // stays the fp32 passes' (Jaccard against the exact path 0.976 either way on the article).
  bool kvzip_bf16 = true;
  // random
  uint64_t seed = 0;
  // streaming
  uint32_t sink = 4;  // first document tokens always kept; the rest by recency
  // snapkv
  uint32_t snapkv_window = 32;  // W: the document's last W tokens are the observation queries
  uint32_t snapkv_kernel = 7;   // 1-D max-pool kernel (odd)
  // h2o
  uint32_t h2o_recent = 32;  // the document's last tokens always kept (H2O's recent window)
  // rest-kv
  uint32_t restkv_window = 32;  // W: the document's last W tokens are the probe queries
  float restkv_alpha = 0.3f;    // EMA weight of each later probe query, in (0, 1]
  uint32_t restkv_kmin = 5;     // smallest spatial smoothing window (odd)
  // rkv (offline R-KV)
  uint32_t rkv_window = 8;     // α: the document's last α tokens are the probe queries
  float rkv_lambda = 0.1f;     // Z = λ·importance − (1−λ)·redundancy, λ in [0, 1]
  float rkv_threshold = 0.5f;  // cosine above which the most recent similar key is spared
  uint32_t rkv_kernel = 7;     // importance max-pool kernel (odd)
  // kvzap (compress/learned_scorer.h): the scorer file's predictor and its recorded source
  // (learned_scorer_source); the method is refused without one.
  std::shared_ptr<const format::ScorerFile> learned;
  MethodParams learned_source;
  // The document's last rows kvzap always keeps (KVzap protects 128: a prediction from one token's
  // hidden state cannot see that the question will follow these rows). 256: the lowest first-token
  // KL at ratio 0.3 on the Normans article among 32-1024 (docs/learned-scorer.md).
  uint32_t kvzap_window = 256;
};

// Sets one ScorerOptions field by name, for `--scorer-option KEY=VALUE` on compress and eval.
// Keys: chunk, hint, seed, sink, snapkv-window, snapkv-kernel, h2o-recent, restkv-window,
// restkv-alpha, restkv-kmin, rkv-window, rkv-lambda, rkv-threshold, rkv-kernel, kvzap-window.
// Throws Errc::invalid_argument for an unknown key (listing the known ones) or a value that is not
// a whole number / finite number as the field needs; ranges are checked by make_scorer.
void set_scorer_option(ScorerOptions& options, std::string_view key, std::string_view value);
// "KEY=VALUE" form of the above; throws Errc::invalid_argument when there is no '='.
void set_scorer_option(ScorerOptions& options, std::string_view key_equals_value);
// The options `kvzip compress`, `kvzip eval` and `kvzip calibrate` build: the chat template's
// reconstruction prompts, the KVzip chunk, the random seed, then every "KEY=VALUE" of `overrides`
// in order (so -O chunk=... wins over the chunk argument).
ScorerOptions make_scorer_options(const model::ChatTemplate& chat, uint32_t kvzip_chunk,
                                  uint64_t seed, std::span<const std::string> overrides = {});

// Input of Scorer::score: the dense cache after prefilling [prefix ; document].
struct ScoreInput {
  model::Forward* forward = nullptr;  // the model (kvzip runs its reconstruction passes on it)
  model::KvCache* cache = nullptr;    // logical_length() == n_prefix + document.size(); a scorer
                                      // may append to it but leaves it as it found it
  uint32_t n_prefix = 0;
  std::span<const int32_t> document;  // (n_c) the document's tokens
};

class Scorer {
 public:
  virtual ~Scorer() = default;
  virtual std::string name() const = 0;
  // The method's parameters as they will be recorded in a cache file.
  virtual MethodParams params() const = 0;
  // An observer to attach to the document's prefill (PrefillOptions::observer), or nullptr when
  // the method needs none. A method that returns one requires the prefill to run with it: call
  // this before the prefill, then score().
  // The observer uses the forward's thread pool; it is valid until the next call or the scorer's
  // destruction.
  virtual model::AttentionObserver* prefill_observer(model::Forward& forward, uint32_t n_prefix,
                                                     uint32_t n_doc) {
    return nullptr;
  }
  // Scores the document rows. Throws Errc::invalid_argument when the input is inconsistent.
  virtual DocumentScores score(const ScoreInput& input) = 0;
  // Rows score() appends to the cache at most (and rolls back) for a document of n_doc tokens:
  // the prefill reserves them (prefill::PrefillOptions::scoring_room). Default: none.
  virtual uint32_t appended_rows(uint32_t n_doc) const { return 0; }
};

// "kvzip", "full", "random", "streaming", "snapkv", "h2o", "rest-kv", "rkv"; make_scorer also
// takes "kvzap" (the learned scorer of ScorerOptions::learned, compress/learned_scorer.h), which
// is not listed because it needs a file. What each scores
// (higher = keep):
//   kvzip      max over the GQA group and all R_t positions of the local softmax (methods §1);
//              with kvzip_queries, also over every question's positions (query-aware)
//   full       1 everywhere (never evicts)
//   random     uniform [0, 1) from mt19937_64(seed), in (layer, head, position) order
//   streaming  +inf for the first `sink` document tokens, else the position (recency)
//   snapkv     window W's probabilities summed over queries and the GQA group, max-pooled over
//              the keys before the window (prefix included); the window itself +inf
//   h2o        probabilities summed over every prefill query (prefix included, each key's own
//              query too) and the GQA group; the last `h2o_recent` document tokens +inf
//   rest-kv    per query head: the norm of the head's projected output change when the key is
//              removed, ā_j/(1−ā_j)·‖W_o,h(ō − v_j)‖, ā = EMA (alpha) of the last W queries'
//              probabilities over all keys, smoothed over the keys before the window by a drift-
//              adaptive window (≥ kmin); max over the GQA group; the window itself +inf
//   rkv        offline R-KV (model/rkv.h rkv_scores), the document's rows as candidates and its
//              last α tokens as the probe: λ·importance of the rows before the probe (the α
//              queries, max-logit over the group, softmax, mean, max-pool `kernel`) − (1−λ)·
//              redundancy over all document rows (softmax of mean cosine similarity, the most
//              recent similar key spared); the last α tokens +inf
std::vector<std::string> scorer_names();
// Throws Errc::invalid_argument listing the known names for any other method, or naming the
// option for a bad one (kvzip without prompts, a chunk or window of 0, an even pooling kernel or
// k_min, an EMA alpha outside (0, 1], a lambda outside [0, 1], a threshold outside [-1, 1]).
std::unique_ptr<Scorer> make_scorer(std::string_view method, const ScorerOptions& options);

// Calls several observers in turn (e.g. to score one prefill with several methods).
class ObserverFanout final : public model::AttentionObserver {
 public:
  void add(model::AttentionObserver* observer) {
    if (observer) observers_.push_back(observer);
  }
  bool empty() const { return observers_.empty(); }
  // The first observer that asks gets the statistics (only one may ask per call).
  bool request_local_stats(uint32_t layer, uint32_t T, kernels::LocalMaxProb* request) override {
    for (model::AttentionObserver* o : observers_)
      if (o->request_local_stats(layer, T, request)) return true;
    return false;
  }
  void on_attention(const model::AttentionObservation& obs) override {
    for (model::AttentionObserver* o : observers_) o->on_attention(obs);
  }

 private:
  std::vector<model::AttentionObserver*> observers_;
};

}  // namespace kvzip::compress
