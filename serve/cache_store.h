// serve/ cache store: the .kvz files of one folder as named resources, and the loaded ones in an
// LRU bounded by bytes. A cache id is a file name stem in [A-Za-z0-9._-] (1-128 characters, not
// starting with '.'), so DIR/<id>.kvz can never leave DIR. A cache is loaded on first use into a
// KvBase that every request on it shares read-only (cache/branch_cache.h); requests hold a
// shared_ptr, so an entry in use is never evicted (an entry is in use while anyone but the store
// holds it), and a deleted or replaced file leaves the LRU at once but its copy is counted against
// the budget until its last request ends (loaded_bytes() is what is held, never less).
// Several servers may share one folder (replicas behind a proxy, docs/scale-out.md): the store
// keeps no state another one cannot rebuild from the folder, and a loaded copy is used only while
// the file is still the one it was loaded from (acquire() compares a FileStamp), so a cache
// replaced or removed through another replica is reloaded or reported missing here.
// A q8/q4 file stays quantized in memory (KvBase holding a QuantBase, attended in place by every
// request's BranchCache), so the byte budget counts its stored size, not an f32 copy.
// Thread-safe: every method may be called from any thread.
#pragma once
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cache/kv_base.h"
#include "common/atomic_file.h"
#include "format/format.h"
#include "model/model.h"

namespace kvzip::serve {

// Which file a loaded cache came from (device, inode, size, modification time).
struct FileStamp {
  uint64_t dev = 0, ino = 0, size = 0;
  int64_t mtime_ns = 0;
  bool operator==(const FileStamp&) const = default;
};

struct LoadedCache {
  std::string id;
  format::CacheHeader header;
  model::KvBase cache;  // the compressed state (f32 or q8/q4 as stored), never appended to
  uint64_t bytes = 0;   // K/V bytes held (KvBase::bytes_kept)
  FileStamp stamp;      // the file as it was when loaded
};

struct CacheInfo {
  std::string id;
  uint64_t file_bytes = 0;
  bool loaded = false;
  format::CacheHeader header;  // no document text (may be large), the rest as stored
};

class CacheStore {
 public:
  // key_tiles: f32 caches also keep their keys transposed (loader::base_from_reader), counted in
  // their bytes.
  CacheStore(const model::Model& model, std::string dir, uint64_t max_loaded_bytes,
             bool key_tiles = true);

  // True for ids of the charset above; path_of() throws Errc::invalid_argument for any other.
  static bool valid_id(std::string_view id);
  std::string path_of(std::string_view id) const;
  const std::string& dir() const { return dir_; }

  // The loaded cache `id`, loading it on first use (the file's checksums are checked as it is
  // read; Errc::model_mismatch with both fingerprints for another model's cache; Errc::not_found).
  // Evicts least recently used entries nobody holds to stay within max_loaded_bytes; when that is
  // not enough, Errc::out_of_memory (every loaded cache busy): the caller reports it as "retry
  // later". A cache larger than the whole budget can never load: Errc::invalid_argument (the
  // id was checked before, so that is the only invalid_argument acquire throws).
  std::shared_ptr<const LoadedCache> acquire(const std::string& id);

  // Every DIR/<valid id>.kvz whose header reads (others are skipped), sorted by id.
  std::vector<CacheInfo> list() const;
  // One cache's info; Errc::not_found.
  CacheInfo info(const std::string& id) const;
  // Verifies `bytes` as a whole .kvz (every checksum, every K/V section decoded, the model and
  // shape) and then writes DIR/<id>.kvz atomically; replaces an existing file only with replace.
  // Errc::invalid_argument (exists), the reader's codes for a bad file, Errc::model_mismatch.
  void put(const std::string& id, std::span<const uint8_t> bytes, bool replace);
  // The same for a file written to `file`'s temporary (an upload streamed to disk): verified
  // there, then committed onto DIR/<id>.kvz.
  void put_file(const std::string& id, AtomicFile& file);
  // Removes DIR/<id>.kvz and forgets the loaded copy (requests using it finish on their copy).
  void remove(const std::string& id);
  // Forgets the loaded copy of `id` (its file was replaced); the next acquire loads it afresh.
  void invalidate(const std::string& id);

  // What loaded caches hold in memory now: the LRU's entries and the copies forgotten (replaced,
  // removed, stale) while requests still use them, until their last request ends.
  uint64_t loaded_bytes() const;
  // Entries of the LRU (copies forgotten but still in use are not among them).
  size_t loaded_count() const;

 private:
  struct Entry {
    std::shared_ptr<const LoadedCache> cache;
    std::list<std::string>::iterator lru;  // position in lru_ (front: most recent)
  };
  // Opens and checks the file (model, shape) without reading its K/V rows.
  format::CacheReader open_checked(const std::string& path) const;
  // Evicts least recently used entries nobody holds until `need` more bytes fit the budget;
  // Errc::out_of_memory when they cannot. Holds mu_.
  void make_room_locked(const std::string& id, uint64_t need);
  // The entry for `id` if the file still has the stamp it was loaded with (`now`: its stamp
  // now); otherwise forgets the entry and returns null. Holds mu_.
  std::shared_ptr<const LoadedCache> find_current_locked(const std::string& id,
                                                         const std::optional<FileStamp>& now);
  void forget_locked(const std::string& id);
  // Bytes of forgotten copies still in use (drops the ones nobody holds any more). Holds mu_.
  uint64_t retired_bytes_locked() const;

  const model::Model& model_;
  std::string dir_;
  uint64_t max_bytes_;
  bool key_tiles_;
  mutable std::mutex mu_;
  std::mutex load_mu_;  // one load at a time (loads are I/O bound; this keeps memory predictable)
  std::map<std::string, Entry> entries_;
  std::list<std::string> lru_;
  uint64_t bytes_ = 0;
  // The bound (loader::base_bytes_bound) of the load in progress: counted against the budget
  // before the load allocates anything, so loads never take memory past it.
  uint64_t reserved_ = 0;
  // Forgotten while in use: still memory until the last holder lets go, so still counted.
  struct Retired {
    std::weak_ptr<const LoadedCache> cache;
    uint64_t bytes = 0;
  };
  mutable std::vector<Retired> retired_;
};

}  // namespace kvzip::serve
