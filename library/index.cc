// The library index (library/library.h): the SQLite schema, opening with recovery from a corrupt
// or newer index file, refresh and per-cache updates, and the BM25 search with its escaped query.
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>

#include "common/error.h"
#include "common/utf8.h"
#include "compress/corpus.h"
#include "library/detail/sqlite.h"
#include "library/library.h"

namespace kvzip::library {

namespace fs = std::filesystem;
using detail::Db;
using detail::Stmt;

namespace {

constexpr const char* kSchema =
    "CREATE TABLE IF NOT EXISTS caches("
    " n INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, stamp TEXT NOT NULL, digest TEXT NOT NULL,"
    " arch TEXT NOT NULL, tokenizer_hash TEXT NOT NULL, weights_hash TEXT NOT NULL,"
    " tokens INTEGER NOT NULL);"
    "CREATE VIRTUAL TABLE IF NOT EXISTS docs USING fts5(text, tokenize='unicode61 "
    "remove_diacritics 2');";

std::string hex64(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

// Which file an entry was read from (device, inode, size, modification time): a file replaced
// by rename or rewritten in place gets another stamp, and is then read again.
std::optional<std::string> stamp_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  const int64_t ns = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) + ":" +
         std::to_string(st.st_size) + ":" + std::to_string(ns);
}

// The content's identity without reading the K/V rows: every section's kind, layer, size and
// stored checksum (the checksums cover every byte of the data area).
std::string digest_of(const format::CacheReader& r) {
  std::vector<uint64_t> words{r.version_major(), r.version_minor(), r.file_size()};
  for (const format::SectionInfo& s : r.sections()) {
    words.push_back(s.kind);
    words.push_back(s.layer);
    words.push_back(s.stored_size);
    words.push_back(s.checksum);
  }
  return hex64(XXH64(words.data(), words.size() * sizeof(uint64_t), 0));
}

// SQLite URI for a file path (percent-encoding what a URI path cannot hold).
std::string uri_of(const std::string& path, const char* query) {
  std::string out = "file:";
  for (unsigned char c : path) {
    if (c == '?' || c == '#' || c == '%' || c < 0x20) {
      char b[4];
      std::snprintf(b, sizeof b, "%%%02X", c);
      out += b;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "?" + query;
}

bool word_byte(unsigned char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

}  // namespace

std::string fts_query(std::string_view q) {
  std::vector<std::string> words;
  std::string cur;
  size_t i = 0;
  auto flush = [&] {
    if (!cur.empty() && words.size() < 64) words.push_back(cur);
    cur.clear();
  };
  while (i < q.size()) {
    const unsigned char c = static_cast<unsigned char>(q[i]);
    if (c < 0x80) {
      if (word_byte(c)) cur += static_cast<char>(c);
      else flush();
      ++i;
      continue;
    }
    // A whole valid UTF-8 sequence joins the word (letters of any script); FTS5's tokenizer
    // splits it again where Unicode says it is not a letter or digit. Invalid bytes separate.
    const size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
    if (n && i + n <= q.size() && is_valid_utf8(q.substr(i, n))) {
      cur.append(q.substr(i, n));
      i += n;
    } else {
      flush();
      ++i;
    }
  }
  flush();
  std::string out;
  for (const std::string& w : words) {
    if (!out.empty()) out.append(" OR ");
    out.append(1, '"').append(w).append(1, '"');
  }
  return out;
}

struct Index::Impl {
  std::unique_ptr<Db> db;
};

std::string Index::path() const { return dir_ + "/" + kIndexName; }

bool index_writable(const std::string& dir) {
  const std::string p = dir + "/" + kIndexName;
  if (::access(dir.c_str(), W_OK) != 0) return false;
  return ::access(p.c_str(), F_OK) != 0 || ::access(p.c_str(), W_OK) == 0;
}

namespace {

// Opens an existing or new index and checks it; throws Errc::corrupt or
// Errc::version_unsupported for a file to rebuild.
std::unique_ptr<Db> open_db(const std::string& path, const IndexOptions& o) {
  std::unique_ptr<Db> db;
  if (o.read_only) {
    std::error_code ec;
    if (!fs::exists(path, ec))
      throw Error(Errc::not_found, "no index " + path + " (run `kvzip index` on the folder)");
    try {
      db = std::make_unique<Db>(uri_of(path, "mode=ro"), SQLITE_OPEN_READONLY);
      db->exec("PRAGMA busy_timeout=" + std::to_string(o.busy_timeout_ms) +
               "; SELECT count(*) FROM sqlite_schema;");
    } catch (const Error& e) {
      if (e.code() != Errc::io) throw;
      // A read-only folder where the WAL's shared-memory file cannot be made: nobody writes
      // there, so the file is read as immutable.
      db = std::make_unique<Db>(uri_of(path, "immutable=1"), SQLITE_OPEN_READONLY);
    }
  } else {
    db = std::make_unique<Db>(path,
                              SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX);
    db->exec("PRAGMA busy_timeout=" + std::to_string(o.busy_timeout_ms));
  }
  int64_t version = 0;
  {
    Stmt v(*db, "PRAGMA user_version");
    v.step();
    version = v.int64(0);
  }  // finished: the journal mode cannot change while a statement reads
  if (version > kSchemaVersion)
    throw Error(Errc::version_unsupported,
                "index " + path + " has schema version " + std::to_string(version) +
                    "; this build reads up to " + std::to_string(kSchemaVersion));
  if (!o.read_only) {
    db->exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL");
    if (version < kSchemaVersion) {
      db->exec("BEGIN IMMEDIATE");
      try {
        db->exec(kSchema);
        db->exec("PRAGMA user_version=" + std::to_string(kSchemaVersion));
        db->exec("COMMIT");
      } catch (...) {
        sqlite3_exec(db->raw(), "ROLLBACK", nullptr, nullptr, nullptr);
        throw;
      }
    }
  }
  {
    Stmt check(*db, "PRAGMA quick_check");
    if (!check.step() || check.text(0) != "ok")
      throw Error(Errc::corrupt, "index " + path + ": " + check.text(0));
  }
  try {
    Stmt(*db, "SELECT count(*) FROM caches JOIN docs ON docs.rowid = caches.n").step();
  } catch (const Error& e) {  // tables missing or of another shape under this schema version
    throw Error(Errc::corrupt, std::string(e.what()));
  }
  return db;
}

void remove_index_files(const std::string& path) {
  std::error_code ec;
  for (const char* tail : {"", "-wal", "-shm"}) fs::remove(path + tail, ec);
}

}  // namespace

Index::Index(const std::string& dir, IndexOptions options) : dir_(dir), opt_(std::move(options)) {
  std::error_code ec;
  if (!fs::is_directory(dir_, ec)) throw Error(Errc::not_found, "no folder " + dir_);
  if (sqlite3_compileoption_used("ENABLE_FTS5") == 0)
    throw Error(Errc::unsupported, "this SQLite library has no FTS5 (full-text search)");
  impl_ = std::make_unique<Impl>();
  try {
    impl_->db = open_db(path(), opt_);
  } catch (const Error& e) {
    const bool rebuild = e.code() == Errc::corrupt || e.code() == Errc::version_unsupported;
    if (!rebuild || opt_.read_only) throw;
    if (opt_.warn) opt_.warn(std::string(e.what()) + "; rebuilding the index from the caches");
    impl_->db.reset();
    remove_index_files(path());
    impl_->db = open_db(path(), opt_);
  }
}

Index::~Index() = default;

namespace {

struct Entry {
  int64_t n = 0;
  std::string stamp, digest;
};

std::map<std::string, Entry> entries(const Db& db) {
  std::map<std::string, Entry> out;
  Stmt s(db, "SELECT id, n, stamp, digest FROM caches");
  while (s.step()) out[s.text(0)] = Entry{s.int64(1), s.text(2), s.text(3)};
  return out;
}

void drop(const Db& db, int64_t n) {
  Stmt(db, "DELETE FROM docs WHERE rowid = ?1").bind(1, n).step();
  Stmt(db, "DELETE FROM caches WHERE n = ?1").bind(1, n).step();
}

// Runs `body` in one write transaction (BEGIN IMMEDIATE: waits busy_timeout for another writer).
template <class F>
void write_txn(Db& db, F&& body) {
  db.exec("BEGIN IMMEDIATE");
  try {
    body();
    db.exec("COMMIT");
  } catch (...) {
    sqlite3_exec(db.raw(), "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
}

enum class Outcome { Indexed, Unchanged, Skipped };

// Brings one cache's entry in line with its file (present, `stamp` given). A file that cannot be
// read is skipped (its old entry dropped) with a warning.
Outcome sync_one(Db& db, const std::string& id, const std::string& path, const std::string& stamp,
                 const Entry* old, const WarnFn& warn) {
  if (old && old->stamp == stamp) return Outcome::Unchanged;
  std::string digest, text;
  ModelFingerprint fp;
  uint64_t tokens = 0;
  try {
    const format::CacheReader r = format::CacheReader::open(path);
    digest = digest_of(r);
    if (old && old->digest == digest) {
      Stmt(db, "UPDATE caches SET stamp = ?1 WHERE n = ?2").bind(1, stamp).bind(2, old->n).step();
      return Outcome::Unchanged;
    }
    fp = r.header().model;
    tokens = r.header().document_tokens.size();
    text = r.header().document_text;
  } catch (const Error& e) {
    if (warn) warn("skipping cache \"" + id + "\" (" + path + "): " + e.what());
    if (old) drop(db, old->n);
    return Outcome::Skipped;
  }
  if (old) drop(db, old->n);
  Stmt ins(db,
           "INSERT INTO caches(id, stamp, digest, arch, tokenizer_hash, weights_hash, tokens) "
           "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)");
  ins.bind(1, id).bind(2, stamp).bind(3, digest).bind(4, fp.arch).bind(5, hex64(fp.tokenizer_hash));
  ins.bind(6, hex64(fp.weights_hash)).bind(7, static_cast<int64_t>(tokens)).step();
  const int64_t n = sqlite3_last_insert_rowid(db.raw());
  Stmt(db, "INSERT INTO docs(rowid, text) VALUES (?1, ?2)").bind(1, n).bind(2, text).step();
  return Outcome::Indexed;
}

// The valid cache ids of the folder's .kvz files, sorted.
std::vector<std::string> cache_ids(const std::string& dir) {
  std::vector<std::string> ids;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const fs::path& p = e.path();
    if (p.extension() != ".kvz") continue;
    const std::string stem = p.stem().string();
    if (compress::valid_cache_id(stem)) ids.push_back(stem);
  }
  if (ec) throw Error(Errc::io, "cannot list " + dir + ": " + ec.message());
  std::sort(ids.begin(), ids.end());
  return ids;
}

void check_writable(const IndexOptions& o, const std::string& path) {
  if (o.read_only) throw Error(Errc::unsupported, "index " + path + " is open read-only");
}

}  // namespace

RefreshStats Index::refresh(const ProgressFn& progress) {
  check_writable(opt_, path());
  RefreshStats st;
  const std::vector<std::string> ids = cache_ids(dir_);
  st.files = static_cast<uint32_t>(ids.size());
  Db& db = *impl_->db;
  write_txn(db, [&] {
    std::map<std::string, Entry> old = entries(db);
    uint32_t done = 0;
    for (const std::string& id : ids) {
      const std::string p = dir_ + "/" + id + ".kvz";
      const std::optional<std::string> stamp = stamp_of(p);
      auto it = old.find(id);
      const Entry* prev = it == old.end() ? nullptr : &it->second;
      if (!stamp) {
        ++st.skipped;  // vanished while listing, or not a regular file
        if (prev) drop(db, prev->n);
      } else {
        switch (sync_one(db, id, p, *stamp, prev, opt_.warn)) {
          case Outcome::Indexed: ++st.indexed; break;
          case Outcome::Unchanged: ++st.unchanged; break;
          case Outcome::Skipped: ++st.skipped; break;
        }
      }
      if (prev && !stamp) ++st.removed;
      if (it != old.end()) old.erase(it);
      if (progress) progress(++done, st.files);
    }
    for (const auto& [id, e] : old) {
      drop(db, e.n);
      ++st.removed;
    }
  });
  return st;
}

bool Index::update(const std::string& id) {
  check_writable(opt_, path());
  if (!compress::valid_cache_id(id))
    throw Error(Errc::invalid_argument, "\"" + id + "\" is not a cache id");
  const std::string p = dir_ + "/" + id + ".kvz";
  Db& db = *impl_->db;
  bool present = false;
  write_txn(db, [&] {
    std::optional<Entry> prev;
    {
      Stmt s(db, "SELECT n, stamp, digest FROM caches WHERE id = ?1");
      s.bind(1, id);
      if (s.step()) prev = Entry{s.int64(0), s.text(1), s.text(2)};
    }
    const std::optional<std::string> stamp = stamp_of(p);
    if (!stamp) {
      if (prev) drop(db, prev->n);
      return;
    }
    present = sync_one(db, id, p, *stamp, prev ? &*prev : nullptr, opt_.warn) != Outcome::Skipped;
  });
  return present;
}

namespace {

std::string model_filter(const ModelFingerprint* m) {
  return m ? " AND c.arch = ?2 AND c.tokenizer_hash = ?3 AND c.weights_hash = ?4" : "";
}

void bind_model(Stmt& s, const ModelFingerprint* m) {
  if (!m) return;
  s.bind(2, m->arch).bind(3, hex64(m->tokenizer_hash)).bind(4, hex64(m->weights_hash));
}

}  // namespace

std::vector<Hit> Index::search(std::string_view question, uint32_t k,
                               const ModelFingerprint* model) const {
  std::vector<Hit> out;
  const std::string q = fts_query(question);
  if (q.empty() || k == 0) return out;
  // A few more than k, for the entries whose file changed or went since the last refresh.
  Stmt s(*impl_->db,
         "SELECT c.id, -bm25(docs), c.tokens, c.stamp FROM docs JOIN caches c ON c.n = docs.rowid "
         "WHERE docs MATCH ?1" +
             model_filter(model) + " ORDER BY bm25(docs), c.id LIMIT ?5");
  s.bind(1, q);
  bind_model(s, model);
  s.bind(5, static_cast<int64_t>(k) + 32);
  while (out.size() < k && s.step()) {
    Hit h;
    h.id = s.text(0);
    h.path = dir_ + "/" + h.id + ".kvz";
    h.score = s.real(1);
    h.tokens = static_cast<uint64_t>(s.int64(2));
    if (stamp_of(h.path) != s.text(3)) continue;
    out.push_back(std::move(h));
  }
  return out;
}

uint32_t Index::count(const ModelFingerprint* model) const {
  Stmt s(*impl_->db, std::string("SELECT count(*) FROM caches c WHERE 1") + model_filter(model));
  bind_model(s, model);
  s.step();
  return static_cast<uint32_t>(s.int64(0));
}

}  // namespace kvzip::library
