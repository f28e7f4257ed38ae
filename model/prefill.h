// The prefill: reads [prefix ; document] into a full dense KvCache in chunks, reporting progress,
// and checks first that the sequence plus the room a question and its answer need fits the model's
// context. An optional AttentionObserver sees every layer of every chunk (the H2O and SnapKV
// scorers observe the prefill this way). The chunk loop itself (prefill_in_chunks) serves any
// forward pass, the GPU one included. A terminal display of the progress is cli/progress.h.
#pragma once
#include <cstdint>
#include <functional>
#include <span>

#include "cache/kv_cache.h"
#include "common/model_config.h"
#include "model/forward.h"

namespace kvzip::prefill {

struct PrefillProgress {
  uint64_t done = 0;          // tokens prefilled so far (prefix included)
  uint64_t total = 0;         // tokens to prefill
  double elapsed_s = 0.0;     // since the prefill started
  double tokens_per_s = 0.0;  // done / elapsed_s (0 before the first chunk)
};
using PrefillProgressFn = std::function<void(const PrefillProgress&)>;

struct PrefillOptions {
  uint32_t chunk = 512;        // tokens per Forward::prefill call: the progress granularity (>= 1)
  uint32_t answer_room = 512;  // tokens a question and its answer need after the document
  // Rows a scorer appends after the document and rolls back (KVzip's reconstruction passes,
  // Scorer::appended_rows): reserved up front with answer_room (the larger of the two), so the
  // cache does not grow, by a copy, while it is scored. Not part of the context check.
  uint32_t scoring_room = 0;
  PrefillProgressFn progress;  // optional; called once before the first chunk and after each
  model::AttentionObserver* observer = nullptr;  // optional; sees every layer of every chunk
  // Attention on bf16 operands for the document's chunks (Forward::set_prompt_bf16; Fast path,
  // AVX-512 BF16 CPUs): twice an fp32 FMA's multiply-adds an instruction, so long documents, where
  // attention is a large part of the prefill, prefill faster, at the cost of the roundings
  // kernels/attention.h bounds.
  bool attention_bf16 = true;
};

struct PrefillResult {
  // (L, Hkv, n_prefix + n_doc, D), rows == positions, except in a hybrid model's local layers:
  // they hold the prefix and the document's last window - 1 rows (KvCache::trim_local_layers).
  model::KvCache cache;
  uint32_t n_prefix = 0;  // rows [0, n_prefix) are the prefix
  uint32_t n_doc = 0;     // rows [n_prefix, n_prefix + n_doc) are the document
  double seconds = 0.0;   // wall time of the forward passes
};

// Throws Errc::invalid_argument, stating both numbers, when n_prefix + n_doc + answer_room exceeds
// cfg.max_context (a max_context of 0 means unknown: no check), or when the document is empty.
void check_fits_context(const ModelConfig& cfg, uint64_t n_prefix, uint64_t n_doc,
                        uint64_t answer_room);

// The chunk loop of a document prefill for any forward pass: calls step(chunk) for consecutive
// chunks of options.chunk tokens of [prefix ; document] (a chunk may straddle the boundary) and
// options.progress once before the first and after each. Returns the wall seconds it took.
// Throws Errc::invalid_argument for options.chunk == 0, and what step throws.
double prefill_in_chunks(std::span<const int32_t> prefix, std::span<const int32_t> document,
                         const PrefillOptions& options,
                         const std::function<void(std::span<const int32_t>)>& step);

// Checks the context (above), then prefills prefix followed by document into a new KvCache with
// room for max(answer_room, scoring_room) more rows. Throws what Forward::prefill throws (bad token
// ids) and Errc::invalid_argument for options.chunk == 0.
PrefillResult prefill_document(model::Forward& forward, std::span<const int32_t> prefix,
                               std::span<const int32_t> document,
                               const PrefillOptions& options = {});

}  // namespace kvzip::prefill
