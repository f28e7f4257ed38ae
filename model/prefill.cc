// prefill_document, its chunk loop and the context check (see prefill.h). The cache is created with
// room for the whole sequence plus the answer room, so it never re-grows (and copies) while the
// document is read.
#include "model/prefill.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "common/error.h"

namespace kvzip::prefill {

void check_fits_context(const ModelConfig& cfg, uint64_t n_prefix, uint64_t n_doc,
                        uint64_t answer_room) {
  if (n_doc == 0)
    throw Error(Errc::invalid_argument,
                "the document has no tokens; give a non-empty UTF-8 text document");
  const uint64_t need = n_prefix + n_doc + answer_room;
  if (cfg.max_context != 0 && need > cfg.max_context)
    throw Error(Errc::invalid_argument,
                "the document does not fit the model's context: " + std::to_string(n_doc) +
                    " document tokens + " + std::to_string(n_prefix) + " prefix tokens + " +
                    std::to_string(answer_room) + " tokens of room for a question and answer = " +
                    std::to_string(need) + " tokens, but the model's max context is " +
                    std::to_string(cfg.max_context) + " tokens; shorten the document by at least " +
                    std::to_string(need - cfg.max_context) + " tokens");
  if (need > UINT32_MAX)
    throw Error(Errc::invalid_argument,
                "a sequence of " + std::to_string(need) + " tokens exceeds 2^32 positions");
}

double prefill_in_chunks(std::span<const int32_t> prefix, std::span<const int32_t> document,
                         const PrefillOptions& options,
                         const std::function<void(std::span<const int32_t>)>& step) {
  if (options.chunk == 0)
    throw Error(Errc::invalid_argument, "PrefillOptions.chunk is 0, expected >= 1 (default 512)");
  const uint64_t n_p = prefix.size(), total = n_p + document.size();
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  auto report = [&](uint64_t done) {
    if (!options.progress) return;
    PrefillProgress p;
    p.done = done;
    p.total = total;
    p.elapsed_s = std::chrono::duration<double>(Clock::now() - t0).count();
    p.tokens_per_s = p.elapsed_s > 0 && done > 0 ? double(done) / p.elapsed_s : 0.0;
    options.progress(p);
  };
  report(0);
  uint64_t done = 0;
  std::vector<int32_t> buf;
  buf.reserve(std::min<uint64_t>(options.chunk, total));
  while (done < total) {
    const uint64_t n = std::min<uint64_t>(options.chunk, total - done);
    buf.clear();
    for (uint64_t i = done; i < done + n; ++i)
      buf.push_back(i < n_p ? prefix[i] : document[i - n_p]);
    step(buf);
    done += n;
    report(done);
  }
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

PrefillResult prefill_document(model::Forward& forward, std::span<const int32_t> prefix,
                               std::span<const int32_t> document, const PrefillOptions& options) {
  if (options.chunk == 0)
    throw Error(Errc::invalid_argument, "PrefillOptions.chunk is 0, expected >= 1 (default 512)");
  const ModelConfig& cfg = forward.config();
  check_fits_context(cfg, prefix.size(), document.size(), options.answer_room);
  const uint32_t n_p = static_cast<uint32_t>(prefix.size());
  const uint32_t n_c = static_cast<uint32_t>(document.size());
  const uint64_t total = uint64_t(n_p) + n_c;
  PrefillResult r{model::KvCache(cfg), n_p, n_c, 0.0};
  // A hybrid model's local layers hold only their window (and the prefix) while the document goes
  // in: on a long document they would otherwise be most of the cache.
  const bool trim = cfg.hybrid() && cfg.sliding_window > 0;
  if (trim) r.cache.trim_local_layers(true, n_p);
  const uint64_t room = std::max(options.answer_room, options.scoring_room);
  r.cache.reserve(static_cast<uint32_t>(std::min<uint64_t>(total + room, UINT32_MAX)));
  const model::PromptBf16Scope bf16(forward, options.attention_bf16);
  r.seconds = prefill_in_chunks(prefix, document, options, [&](std::span<const int32_t> chunk) {
    forward.prefill(r.cache, chunk, model::LogitsMode::None, options.observer);
  });
  if (trim) r.cache.trim_local_layers(false);
  return r;
}

}  // namespace kvzip::prefill
