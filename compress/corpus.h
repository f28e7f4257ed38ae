// Corpus mode: many documents into one folder of .kvz files, one model load per process, in a form
// any batch scheduler can split and rerun (docs/scale-out.md).
//  - The manifest is JSON lines: {"id": "...", "path": "..." | "text": "...", "method"?, "ratio"?}.
//    A relative path is relative to the manifest's folder. A bad line fails alone.
//  - Document `id` is written to OUT_DIR/<id>.kvz (so `kvzip serve --caches OUT_DIR` names the
//    cache by it); ids are cache ids: 1..128 bytes of [A-Za-z0-9._-], not starting with '.',
//    unique.
//  - Each output records a key (model fingerprint, document hash, method, ratio and every option
//    that changes the file) in its header; an existing output with the same key is skipped, so a
//    rerun after a crash, a kill -9 or a preemption resumes where it stopped. Outputs are written
//    atomically (compress_to_file), so a killed run leaves no partial file under a final name.
//  - --shard I/N keeps the entries whose id hashes (xxh64) to I mod N: a stable partition that
//    does not depend on the manifest's order, so N array tasks split a corpus with no coordination.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/json.h"
#include "compress/pipeline.h"
#include "model/model.h"

namespace kvzip::compress {

struct CorpusEntry {
  uint64_t line = 0;                  // 1-based line of the manifest, for messages
  std::string id;                     // the cache id (output OUT_DIR/<id>.kvz)
  std::string path;                   // document file (resolved against the manifest's folder), or
  std::string text;                   // the document inline; exactly one of path / text
  std::optional<std::string> method;  // overrides the run's --method
  std::optional<double> ratio;        // overrides the run's --ratio
  std::string error;                  // not empty: the line is unusable and fails alone
};

// True for a valid cache id (corpus outputs, `kvzip serve`'s caches): 1..128 bytes of
// [A-Za-z0-9._-], not starting with '.' (so never "..", never a hidden file).
bool valid_cache_id(std::string_view id);

// Parses a manifest (JSON lines; blank lines skipped). `base_dir` resolves relative paths.
// Never throws for a bad line: the entry gets `error` (and id "line N" when it has none); a
// duplicated id makes every later entry with it an error.
std::vector<CorpusEntry> parse_manifest(std::string_view text, const std::string& source,
                                        const std::string& base_dir);

struct Shard {
  uint32_t index = 0;  // I
  uint32_t count = 1;  // N
};
// "I/N" with 0 <= I < N, N >= 1; Errc::invalid_argument otherwise.
Shard parse_shard(std::string_view text);
// The shard an id belongs to among `count`: xxh64(id, seed 0) mod count.
uint32_t shard_of(std::string_view id, uint32_t count);

// The key an output is recorded under: xxh64 (hex) over the model fingerprint, the document's
// xxh64, and every option of `o` that changes the file (method, ratio, level, chunk and the
// scorer's parameters, head-level options, system prompt, query template, K/V dtype).
std::string corpus_key(const ModelFingerprint& model, std::string_view text,
                       const CompressFileOptions& o);
// The header parameter that holds it.
inline constexpr const char* kCorpusKeyParam = "corpus_key";

struct CorpusOptions {
  CompressFileOptions file;  // the run's options; entries may override method and ratio
  std::string out_dir;       // must exist and be writable
  Shard shard;
};

enum class CorpusStatus : uint8_t { Done, Skipped, Failed };
const char* corpus_status_name(CorpusStatus s);  // "done", "skipped", "failed"

struct CorpusOutcome {
  std::string id;
  uint64_t line = 0;
  CorpusStatus status = CorpusStatus::Failed;
  std::string output;          // OUT_DIR/<id>.kvz (empty for a line without a usable id)
  Errc code = Errc::internal;  // Failed: the error's code
  std::string error;           // Failed: the message
  double seconds = 0.0;
  double achieved_ratio = 0.0;  // Done / Skipped
};

struct CorpusSummary {
  Shard shard;
  uint64_t manifest_entries = 0;  // lines with content
  uint64_t in_shard = 0;
  uint64_t done = 0, skipped = 0, failed = 0;
  double seconds = 0.0;
  std::vector<CorpusOutcome> outcomes;  // the shard's entries, in manifest order
  Json to_json() const;
};

// Called after each entry of the shard (index among the shard's entries, their count).
using CorpusProgress = std::function<void(const CorpusOutcome&, size_t index, size_t count)>;

// Compresses the shard's entries of `entries` one after another with `model`. Errors of one
// document (bad text, too long for the context, bad method or ratio, a full disk) fail that
// document alone; only an unusable out_dir (Errc::not_found / invalid_argument / io) or a bad
// shard throws before any work.
CorpusSummary compress_corpus(const model::Model& model, const std::vector<CorpusEntry>& entries,
                              const CorpusOptions& options, const CorpusProgress& progress = {});

}  // namespace kvzip::compress
