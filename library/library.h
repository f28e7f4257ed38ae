// library/: a folder of .kvz caches as a searchable library. An embedded SQLite FTS5 index
// (DIR/.kvzip-index.sqlite) holds each cache's document text, keyed by cache id and a digest of
// the file's content (its section checksums), with the model fingerprint of every cache; a search
// ranks the caches of one model by BM25 against a question, and select_sources() takes the best
// ones that fit the model's context together with the question and answer, for composition
// (loader/compose.h). refresh() brings the index in line with the folder: new and replaced files
// indexed, deleted ones dropped, corrupt ones skipped with a warning. The index is opened in WAL
// mode: any number of processes may read one folder's index while one writes (busy_timeout).
// A corrupt index file, or one of a newer schema, is rebuilt from the caches with a warning; an
// index on a folder that cannot be written is read as it is (docs/library.md).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/model_config.h"
#include "format/format.h"

namespace kvzip::model {
class Model;
}

namespace kvzip::library {

inline constexpr const char* kIndexName = ".kvzip-index.sqlite";
inline constexpr int kSchemaVersion = 1;

// One cache a search found.
struct Hit {
  std::string id;  // file name stem: DIR/<id>.kvz
  std::string path;
  double score = 0;     // BM25 (higher is better; SQLite's bm25() negated)
  uint64_t tokens = 0;  // the document's tokens
};

struct RefreshStats {
  uint32_t files = 0;    // .kvz files with a valid id in the folder
  uint32_t indexed = 0;  // new or changed, (re)indexed now
  uint32_t unchanged = 0;
  uint32_t removed = 0;  // in the index, no longer in the folder (or now corrupt)
  uint32_t skipped = 0;  // unreadable or corrupt: not in the index
};

// Messages for the user (a corrupt cache skipped, an index rebuilt); nothing is printed here.
using WarnFn = std::function<void(const std::string&)>;
// (files looked at, files in all) while refreshing.
using ProgressFn = std::function<void(uint32_t done, uint32_t total)>;

struct IndexOptions {
  WarnFn warn;
  // Milliseconds a writer (or a reader during a checkpoint) waits for another process's lock.
  int busy_timeout_ms = 10000;
  // Open the index read-only (a folder mounted read-only, replicas that never write): refresh()
  // is Errc::unsupported and search() leaves out every cache whose file changed since indexing.
  bool read_only = false;
};

// Whether DIR's index can be written (the folder, and the index file if there is one): where
// it cannot, open it with IndexOptions::read_only.
bool index_writable(const std::string& dir);

// The FTS5 query for a question: its words (runs of letters and digits, any script; invalid
// UTF-8 bytes separate words) each quoted and ORed, at most 64, so nothing in the question is
// read as query syntax. Empty when the question has no word.
std::string fts_query(std::string_view question);

class Index {
 public:
  // Opens DIR's index, creating it when missing (not in read-only mode: Errc::not_found). The
  // folder must exist (Errc::not_found). A corrupt index file or one of a newer schema is deleted
  // and created afresh (with a warning) unless read-only (then Errc::corrupt /
  // Errc::version_unsupported).
  explicit Index(const std::string& dir, IndexOptions options = {});
  ~Index();
  Index(const Index&) = delete;
  Index& operator=(const Index&) = delete;

  // Indexes new and changed caches of the folder and drops the ones gone, in one transaction.
  RefreshStats refresh(const ProgressFn& progress = {});
  // Indexes or drops one cache (a server's upload, replacement or deletion): `id`'s file is read
  // if it exists, else its entry is removed. True when the cache is in the index afterwards.
  bool update(const std::string& id);

  // The caches of `model` (all models when null) ranked by BM25 against `question`, best first,
  // at most k; a cache whose file is gone or changed since it was indexed is never returned.
  std::vector<Hit> search(std::string_view question, uint32_t k,
                          const ModelFingerprint* model = nullptr) const;
  // Caches in the index (of `model`, or all).
  uint32_t count(const ModelFingerprint* model = nullptr) const;

  const std::string& dir() const { return dir_; }
  std::string path() const;

 private:
  struct Impl;
  std::string dir_;
  IndexOptions opt_;
  std::unique_ptr<Impl> impl_;
};

// The caches to compose for a question: hits taken in order while the composition of the ones
// taken, the question and `answer_tokens` fit the model's context, skipping hits that cannot be
// composed with the first (another query template, shape) or do not fit; at most `max_docs`.
struct Selection {
  std::vector<Hit> sources;
  std::vector<Hit> left_out;  // with the reason in `why`
  std::vector<std::string> why;
  uint32_t length = 0;  // composed length (the first question token's position)
};
Selection select_sources(const model::Model& model, const std::vector<Hit>& hits,
                         std::string_view question, uint32_t answer_tokens, uint32_t max_docs = 16);

// search() for `model`'s caches, then select_sources(): what `kvzip ask`, the server's library
// model and Python's kvzip.ask retrieve. Errc::not_found when the index holds no cache of the
// model (the message counts the other models' caches) or none matches a word of the question;
// Errc::invalid_argument when none of the hits fits the context (the first reason given).
Selection retrieve(const Index& index, const model::Model& model, std::string_view question,
                   uint32_t top_k, uint32_t answer_tokens);

}  // namespace kvzip::library
