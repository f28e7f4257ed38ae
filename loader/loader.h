// loader/: from a .kvz file to answers (the read side; the write side is compress/pipeline.h).
// Builds the runtime cache (model/) from a file's content (format/): an f32 RaggedKvCache, or for
// q8/q4 files on the CPU a QuantBase that keeps the stored rows (KvBase holds either). Checks that
// the cache belongs to the loaded model, and runs query sessions: append the question's tokens,
// decode an answer, roll back to the compressed state in O(L·Hkv) so the next question sees
// exactly the cache the file holds. On a quantized base the question and answer rows go to an f32
// tail (BranchCache) that is rolled back the same way; the base is never written. The query
// prompt is [prefix ; kept document rows ; tail(question) ; suffix template] where the tail text
// comes from the file's "query_template" parameter (default format::kDefaultQueryTemplate).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cache/branch_cache.h"
#include "cache/kv_base.h"
#include "cache/quant_base.h"
#include "cache/ragged_cache.h"
#include "format/format.h"
#include "kernels/device.h"
#include "loader/compose.h"
#include "model/gpu_forward.h"
#include "model/model.h"

namespace kvzip::loader {

// The ragged cache a file describes in f32, with `room` rows of append room per head: f16/bf16
// are widened and q8/q4 dequantized one layer at a time (format::CacheReader::read_kv; never the
// whole file at once). For what needs f32 rows of a q8/q4 file on the host (R-KV, eval's
// reference); query sessions and the server keep q8/q4 quantized (base_from_reader).
model::RaggedKvCache cache_from_reader(const format::CacheReader& reader, uint32_t room = 512);
model::RaggedKvCache cache_from_contents(const format::CacheContents& contents,
                                         uint32_t room = 512);

// A q8/q4 file's rows as stored (format::CacheReader::read_quant_layer, one layer at a time):
// codes, group parameters and channel scales are moved in without widening; only the f16 rows
// (positions below kv_f16_below, a few per head) are widened to f32. Attention reads it in place
// (kernels/attention.h, KvSpan::quant). Errc::invalid_argument for a file of another dtype.
model::QuantBase quant_base_from_reader(const format::CacheReader& reader);

// Which form a q8/q4 file takes in memory. Auto: quantized (QuantBase); F32: dequantized into a
// RaggedKvCache. Other dtypes are always f32. An f32 base also keeps its keys transposed for the
// CPU attention (RaggedKvCache::make_key_tiles: every decode step over it then skips that copy)
// unless key_tiles is false (a base only uploaded to the GPU).
// A file with sliding-window layers (CacheHeader::local_layers) is always dequantized on the CPU.
enum class KvForm { Auto, F32 };
model::KvBase base_from_reader(const format::CacheReader& reader, uint32_t room = 512,
                               KvForm form = KvForm::Auto, bool key_tiles = true);
// An upper bound, from the header and row counts alone (no K/V read), on the bytes
// base_from_reader with the same arguments will hold, room rows included: what a server reserves
// against its memory budget before it loads, so that a load never takes it past the budget.
// Never below the base's bytes_in_memory().
uint64_t base_bytes_bound(const format::CacheReader& reader, uint32_t room = 512,
                          KvForm form = KvForm::Auto, bool key_tiles = true);

// The cache a file describes, straight into device memory with `room` rows of append room per
// head (no host cache is built): per layer the K/V are decoded (zstd, f16/bf16/q8/q4 -> f32) or
// copied from the mapping into one of two pinned staging buffers while the previous layer's
// asynchronous copies drain the other, so decoding overlaps the transfers. A q8/q4 file's rows
// stay as the file stores them (KvForm::Auto): the cache holds each head's f16 rows in f32 and a
// GpuQuantBase (cache/gpu_quant_base.h) the quantized rows' channel scales, parameters and codes,
// which the CUDA attention reads in place (kernels/attention.h); no quantized row is widened to
// f32 anywhere. KvForm::F32 dequantizes them on the device instead, a layer at a time
// (kernels::kv_dequantize_rows; the same bits as the host's reconstruction). Errc::unsupported
// without a CUDA build or device.
model::GpuCache gpu_cache_from_reader(const format::CacheReader& reader, uint32_t room = 512,
                                      void* stream = nullptr, KvForm form = KvForm::Auto);

// The query template stored in the header (parameter "query_template"), or the default.
std::string query_template(const format::CacheHeader& header);
// Token ids that follow the document for `question`: tail text (no special tokens parsed) then
// the header's suffix template tokens.
std::vector<int32_t> question_tokens(const model::Tokenizer& tokenizer,
                                     const format::CacheHeader& header, std::string_view question);
// A conversation over the cache's document (multi-turn chat): question_tokens() of the first user
// message, then each later answer and user message as the model's chat template continues it
// (ChatTemplate::next_turn). `history`: (user message, answer) pairs before `question`, oldest
// first; empty gives question_tokens(question).
std::vector<int32_t> conversation_tokens(
    const model::Model& model, const format::CacheHeader& header,
    std::span<const std::pair<std::string, std::string>> history, std::string_view question);
// The same from a template and the suffix tokens directly (eval builds prompts without a file).
// Errc::corrupt when the template has no {question} or a suffix id is outside the vocabulary.
std::vector<int32_t> question_tokens(const model::Tokenizer& tokenizer,
                                     std::string_view query_template,
                                     std::span<const uint32_t> suffix, std::string_view question);

struct SessionOptions {
  uint32_t threads = 0;  // 0 = all cores
  bool force = false;    // accept a cache written by another model (fingerprint mismatch)
  format::Verify verify = format::Verify::OnAccess;
  uint32_t room = 512;  // append rows per head reserved up front
  // Device::Cuda: the file's rows go to device memory once (gpu_cache_from_reader: q8/q4 rows as
  // stored, attended in place by the CUDA kernels) and answers are decoded by GpuForward (bf16
  // weights); Errc::unsupported without a CUDA build or device. The host keeps the base as the
  // CPU path would (a q8/q4 file quantized), so no whole-cache f32 copy is made anywhere.
  kernels::Device device = kernels::Device::Cpu;
  // q8/q4 files: attended in place by default, on the CPU and on the GPU; F32 dequantizes them
  // at load (R-KV needs that on the CPU: it evicts rows of a RaggedKvCache).
  KvForm kv_form = KvForm::Auto;
  kernels::MatmulPath matmul =
      kernels::MatmulPath::Fast;  // ForwardOptions::matmul of the CPU forward pass
  // An f32 base on the CPU also keeps its keys transposed (RaggedKvCache::make_key_tiles): every
  // decode step skips that copy, for about the K bytes again in memory. false: K once.
  bool key_tiles = true;
  // Several caches (QuerySession over paths): how they are composed (loader/compose.h).
  ComposeOptions compose;
};

struct Answer {
  std::string question;
  std::string text;
  std::vector<int32_t> tokens;
  bool stopped = false;             // ended on a stop token (not cut by max_tokens)
  double ms = 0.0;                  // question prefill + decode
  double first_token_ms = 0.0;      // question prefill + first token
  std::vector<float> first_logits;  // (V) distribution that chose the first answer token
  uint64_t evicted = 0;             // with R-KV: rows evicted while answering, over (l, h)
};

class QuerySession {
 public:
  // Opens and validates the file, checks the model (Errc::model_mismatch unless force) and shape,
  // and builds the cache (base_from_reader). load_ms() says how long that took.
  QuerySession(const model::Model& model, const std::string& path,
               const SessionOptions& options = {});
  // Several files composed into one context in this order (loader/compose.h): every question sees
  // all of the documents. One path is the constructor above. The files must come from one model
  // (Errc::model_mismatch unless force) with one query template; CPU only (Errc::unsupported for
  // Device::Cuda), no R-KV. compose_stats() says what the composition cost.
  QuerySession(const model::Model& model, const std::vector<std::string>& paths,
               const SessionOptions& options = {});
  // From a cache already in memory (used by eval, which compresses without writing a file).
  QuerySession(const model::Model& model, model::RaggedKvCache cache, format::CacheHeader header,
               const SessionOptions& options = {});
  QuerySession(const QuerySession&) = delete;  // branch_ points into base_
  QuerySession& operator=(const QuerySession&) = delete;

  // Answers one question from the compressed state; `on_text` receives UTF-8 text as it is
  // generated. The cache is back in the compressed state afterwards, also when this throws.
  // With params.rkv the cache is bounded while answering; doc candidates make every row after
  // the stored prefix evictable (pinned is set here) and cost one copy of the cache per answer.
  // R-KV on a quantized base is Errc::unsupported (open with SessionOptions::kv_form = F32).
  Answer ask(std::string_view question, const model::GenerateParams& params,
             const std::function<void(const std::string&)>& on_text = {});

  const format::CacheHeader& header() const { return header_; }
  const model::KvBase& base() const { return base_; }
  bool quantized() const { return base_.quantized(); }
  // The f32 cache; Errc::unsupported when the base is quantized.
  const model::RaggedKvCache& cache() const { return base_.f32("QuerySession::cache"); }
  double load_ms() const { return load_ms_; }
  // Composed sessions: the caches after the first (their headers), and the composition's figures.
  bool composed() const { return composed_ != nullptr; }
  const std::vector<format::CacheHeader>& more_headers() const { return more_headers_; }
  const ComposeStats& compose_stats() const { return compose_stats_; }
  const model::ComposedCache* composed_cache() const { return composed_.get(); }
  // Bytes of K/V held by every cache of the session (each once) plus a composition's own rows.
  uint64_t bytes_in_memory() const;
  kernels::Device device() const {
    return gpu_cache_ ? kernels::Device::Cuda : kernels::Device::Cpu;
  }

 private:
  struct Loaded;
  static Loaded open_file(const model::Model& model, const std::string& path,
                          const SessionOptions& o);
  QuerySession(const model::Model& model, Loaded loaded, const SessionOptions& options);
  // Builds gpu_forward_ and gpu_cache_: from the file when `reader` is given
  // (gpu_cache_from_reader), else from the f32 base.
  void to_device(const SessionOptions& options, const format::CacheReader* reader);

  const model::Model& model_;
  format::CacheHeader header_;
  model::KvBase base_;
  std::unique_ptr<model::BranchCache> branch_;  // over a quantized base: the question/answer rows
  model::Forward forward_;
  std::unique_ptr<model::GpuForward> gpu_forward_;  // set for Device::Cuda
  std::unique_ptr<model::GpuCache> gpu_cache_;      // the compressed state in device memory
  // A composition: the other caches (read-only, never copied) and the view over all of them.
  std::vector<format::CacheHeader> more_headers_;
  std::vector<std::unique_ptr<model::KvBase>> more_bases_;
  std::unique_ptr<model::ComposedCache> composed_;
  ComposeStats compose_stats_;
  double load_ms_ = 0.0;
};

}  // namespace kvzip::loader
