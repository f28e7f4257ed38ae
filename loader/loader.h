// loader/: from a .kvz file to answers (the read side; the write side is compress/pipeline.h).
// Builds the runtime RaggedKvCache (model/) from a file's content (format/), checks that the cache
// belongs to the loaded model, and runs query sessions: append the question's tokens, decode an
// answer, roll back to the compressed state in O(L·Hkv) so the next question sees exactly the
// cache the file holds. The query prompt is [prefix ; kept document rows ; tail(question) ;
// suffix template] where the tail text comes from the file's "query_template" parameter
// (default format::kDefaultQueryTemplate).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "format/format.h"
#include "kernels/device.h"
#include "model/gpu_forward.h"
#include "model/model.h"
#include "model/ragged_cache.h"

namespace kvzip::loader {

// The ragged cache a file describes, with `room` rows of append room per head. K/V are f32 in
// memory whatever the file stores: f16/bf16 are widened and q8/q4 dequantized one layer at a time
// (format::CacheReader::read_kv; never the whole file at once). Attending to q8/q4 rows in place
// (kernels/kv_quant.h, which returns log-sum-exp for merging with the f32 question/answer rows)
// is the next step, once the attention view has a base and a tail segment.
RaggedKvCache cache_from_reader(const format::CacheReader& reader, uint32_t room = 512);
RaggedKvCache cache_from_contents(const format::CacheContents& contents, uint32_t room = 512);

// The cache a file describes, straight into device memory with `room` rows of append room per
// head (no host cache is built): per layer the K/V are decoded (zstd, f16/bf16/q8/q4 -> f32) or copied
// from the mapping into one of two pinned staging buffers while the previous layer's
// asynchronous copies drain the other, so decoding overlaps the transfers. Errc::unsupported
// without a CUDA build or device.
GpuCache gpu_cache_from_reader(const format::CacheReader& reader, uint32_t room = 512,
                               void* stream = nullptr);

// The query template stored in the header (parameter "query_template"), or the default.
std::string query_template(const format::CacheHeader& header);
// Token ids that follow the document for `question`: tail text (no special tokens parsed) then
// the header's suffix template tokens.
std::vector<int32_t> question_tokens(const Tokenizer& tokenizer, const format::CacheHeader& header,
                                     std::string_view question);
// A conversation over the cache's document (multi-turn chat): question_tokens() of the first user
// message, then each later answer and user message as the model's chat template continues it
// (ChatTemplate::next_turn). `history`: (user message, answer) pairs before `question`, oldest
// first; empty gives question_tokens(question).
std::vector<int32_t> conversation_tokens(const Model& model, const format::CacheHeader& header,
                                         std::span<const std::pair<std::string, std::string>> history,
                                         std::string_view question);
// The same from a template and the suffix tokens directly (eval builds prompts without a file).
// Errc::corrupt when the template has no {question} or a suffix id is outside the vocabulary.
std::vector<int32_t> question_tokens(const Tokenizer& tokenizer, std::string_view query_template,
                                     std::span<const uint32_t> suffix, std::string_view question);

struct SessionOptions {
  uint32_t threads = 0;  // 0 = all cores
  bool force = false;    // accept a cache written by another model (fingerprint mismatch)
  format::Verify verify = format::Verify::OnAccess;
  uint32_t room = 512;   // append rows per head reserved up front
  // Device::Cuda: the cache is copied to device memory once (GpuCache::from_ragged) and answers
  // are decoded by GpuForward (bf16 weights); Errc::unsupported without a CUDA build or device.
  Device device = Device::Cpu;
};

struct Answer {
  std::string question;
  std::string text;
  std::vector<int32_t> tokens;
  bool stopped = false;            // ended on a stop token (not cut by max_tokens)
  double ms = 0.0;                 // question prefill + decode
  double first_token_ms = 0.0;     // question prefill + first token
  std::vector<float> first_logits; // (V) distribution that chose the first answer token
  uint64_t evicted = 0;            // with R-KV: rows evicted while answering, over (l, h)
};

class QuerySession {
 public:
  // Opens and validates the file, checks the model (Errc::model_mismatch unless force) and shape,
  // and builds the ragged cache. load_ms() says how long that took.
  QuerySession(const Model& model, const std::string& path, const SessionOptions& options = {});
  // From a cache already in memory (used by eval, which compresses without writing a file).
  QuerySession(const Model& model, RaggedKvCache cache, format::CacheHeader header,
               const SessionOptions& options = {});

  // Answers one question from the compressed state; `on_text` receives UTF-8 text as it is
  // generated. The cache is back in the compressed state afterwards, also when this throws.
  // With params.rkv the cache is bounded while answering; doc candidates make every row after
  // the stored prefix evictable (pinned is set here) and cost one copy of the cache per answer.
  Answer ask(std::string_view question, const GenerateParams& params,
             const std::function<void(const std::string&)>& on_text = {});

  const format::CacheHeader& header() const { return header_; }
  const RaggedKvCache& cache() const { return cache_; }
  double load_ms() const { return load_ms_; }
  Device device() const { return gpu_cache_ ? Device::Cuda : Device::Cpu; }

 private:
  struct Loaded;
  static Loaded open_file(const Model& model, const std::string& path, const SessionOptions& o);
  QuerySession(const Model& model, Loaded loaded, const SessionOptions& options);
  void to_device(const SessionOptions& options);  // builds gpu_forward_ and gpu_cache_

  const Model& model_;
  format::CacheHeader header_;
  RaggedKvCache cache_;
  Forward forward_;
  std::unique_ptr<GpuForward> gpu_forward_;  // set for Device::Cuda
  std::unique_ptr<GpuCache> gpu_cache_;      // the compressed state in device memory
  double load_ms_ = 0.0;
};

}  // namespace kvzip::loader
