// CacheStore: id checks, folder listing, verified atomic uploads, and the byte-bounded LRU of
// loaded caches (see cache_store.h for the invariants).
#include "serve/cache_store.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "common/atomic_file.h"
#include "common/error.h"
#include "compress/corpus.h"
#include "loader/loader.h"

namespace kvzip::serve {
namespace fs = std::filesystem;

CacheStore::CacheStore(const model::Model& model, std::string dir, uint64_t max_loaded_bytes,
                       bool key_tiles)
    : model_(model), dir_(std::move(dir)), max_bytes_(max_loaded_bytes), key_tiles_(key_tiles) {
  std::error_code ec;
  if (!fs::is_directory(dir_, ec))
    throw Error(Errc::not_found, "caches folder " + dir_ + " does not exist or is not a folder");
}

namespace {

// The file's identity now; nullopt when there is none. Files are replaced by rename (atomic
// writes, here and in every other replica sharing the folder), which gives a new inode.
std::optional<FileStamp> stamp_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  return FileStamp{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino),
                   static_cast<uint64_t>(st.st_size),
                   static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
}

std::string mib(uint64_t bytes) {
  char s[32];
  std::snprintf(s, sizeof s, "%.2f MiB", double(bytes) / double(1 << 20));
  return s;
}

}  // namespace

bool CacheStore::valid_id(std::string_view id) { return compress::valid_cache_id(id); }

std::string CacheStore::path_of(std::string_view id) const {
  if (!valid_id(id))
    throw Error(
        Errc::invalid_argument,
        "cache id \"" + std::string(id.substr(0, 64)) +
            "\" is not valid: use 1-128 characters of A-Z a-z 0-9 . _ - , not starting with '.'");
  return dir_ + "/" + std::string(id) + ".kvz";
}

format::CacheReader CacheStore::open_checked(const std::string& path) const {
  format::CacheReader reader = format::CacheReader::open(path);
  reader.check_model(model_.fingerprint(), /*force=*/false);
  format::check_shape(reader.header(), model_.config());
  return reader;
}

void CacheStore::make_room_locked(const std::string& id, uint64_t need) {
  // From the least recently used end; use_count() == 1 under mu_ means only the store holds it,
  // and nobody can take a new reference without mu_.
  for (auto it = lru_.end();
       bytes_ + retired_bytes_locked() + reserved_ + need > max_bytes_ && it != lru_.begin();) {
    --it;
    auto e = entries_.find(*it);
    if (e->second.cache.use_count() == 1) {
      const std::string victim = *it++;
      forget_locked(victim);
    }
  }
  const uint64_t held = bytes_ + retired_bytes_locked() + reserved_;
  if (held + need > max_bytes_)
    throw Error(Errc::out_of_memory,
                "cache \"" + id + "\" needs up to " + mib(need) + " but " +
                    mib(max_bytes_ - std::min(max_bytes_, held)) +
                    " of the server's loaded-cache budget are free (the loaded caches in use "
                    "cannot be evicted); retry later or raise the budget");
}

std::shared_ptr<const LoadedCache> CacheStore::find_current_locked(
    const std::string& id, const std::optional<FileStamp>& now) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return nullptr;
  if (!now || !(*now == it->second.cache->stamp)) {  // removed or replaced behind our back
    forget_locked(id);
    return nullptr;
  }
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  return it->second.cache;
}

std::shared_ptr<const LoadedCache> CacheStore::acquire(const std::string& id) {
  const std::string path = path_of(id);  // the id check, before any lock
  // One stat a request: the folder may be shared with other replicas, which can replace or
  // remove a file this one has loaded; the loaded copy is used only while it is still the file.
  {
    const std::optional<FileStamp> now = stamp_of(path);
    std::lock_guard<std::mutex> lock(mu_);
    if (auto hit = find_current_locked(id, now)) return hit;
  }
  std::lock_guard<std::mutex> loading(load_mu_);
  {
    const std::optional<FileStamp> now = stamp_of(path);
    std::lock_guard<std::mutex> lock(mu_);  // another thread may have loaded it meanwhile
    if (auto hit = find_current_locked(id, now)) return hit;
  }
  // Stamped before reading: a file replaced meanwhile only costs one more load later.
  const std::optional<FileStamp> stamp = stamp_of(path);
  if (!stamp) throw Error(Errc::not_found, "no cache \"" + id + "\" (" + path + ")");
  format::CacheReader reader = open_checked(path);
  const uint64_t need =
      loader::base_bytes_bound(reader, /*room=*/1, loader::KvForm::Auto, key_tiles_);
  if (need > max_bytes_)
    throw Error(Errc::invalid_argument,
                "cache \"" + id + "\" needs up to " + mib(need) +
                    ", more than the server's whole loaded-cache budget of " + mib(max_bytes_) +
                    ": this server can never load it (retrying does not help); raise "
                    "the budget or compress the document further");
  {
    std::lock_guard<std::mutex> lock(mu_);
    make_room_locked(id, need);
    reserved_ = need;
  }
  struct Unreserve {  // on every way out, the load's bytes stop being reserved
    CacheStore& s;
    ~Unreserve() {
      std::lock_guard<std::mutex> lock(s.mu_);
      s.reserved_ = 0;
    }
  } unreserve{*this};
  auto fresh = std::make_shared<LoadedCache>(LoadedCache{
      id, reader.header(),
      loader::base_from_reader(reader, /*room=*/1, loader::KvForm::Auto, key_tiles_), 0, *stamp});
  fresh->header.document_text.clear();  // requests never read it; it may be large
  fresh->bytes = fresh->cache.bytes_in_memory();
  std::lock_guard<std::mutex> lock(mu_);
  lru_.push_front(id);
  entries_[id] = Entry{fresh, lru_.begin()};
  bytes_ += fresh->bytes;
  return fresh;
}

void CacheStore::forget_locked(const std::string& id) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  bytes_ -= it->second.cache->bytes;
  if (it->second.cache.use_count() > 1)
    retired_.push_back(Retired{it->second.cache, it->second.cache->bytes});
  lru_.erase(it->second.lru);
  entries_.erase(it);
}

CacheInfo CacheStore::info(const std::string& id) const {
  const std::string path = path_of(id);
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) throw Error(Errc::not_found, "no cache \"" + id + "\"");
  CacheInfo ci;
  ci.id = id;
  ci.file_bytes = fs::file_size(path, ec);
  ci.header = format::CacheReader::open(path).header();
  ci.header.document_text.clear();
  std::lock_guard<std::mutex> lock(mu_);
  ci.loaded = entries_.count(id) > 0;
  return ci;
}

std::vector<CacheInfo> CacheStore::list() const {
  std::vector<std::string> ids;
  std::error_code ec;
  for (const auto& de : fs::directory_iterator(dir_, ec)) {
    const fs::path p = de.path();
    if (p.extension() != ".kvz" || !de.is_regular_file(ec)) continue;
    const std::string stem = p.stem().string();
    if (valid_id(stem)) ids.push_back(stem);
  }
  std::sort(ids.begin(), ids.end());
  std::vector<CacheInfo> out;
  for (const auto& id : ids) {
    try {
      out.push_back(info(id));
    } catch (const Error&) {  // unreadable or being replaced: not listed
    }
  }
  return out;
}

void CacheStore::put(const std::string& id, std::span<const uint8_t> bytes, bool replace) {
  const std::string path = path_of(id);
  format::OpenOptions oo;
  oo.verify = format::Verify::Full;
  oo.max_section_bytes = max_bytes_;  // untrusted bytes: no section may expand past the budget
  format::CacheReader reader = format::CacheReader::open_memory(bytes, oo);
  reader.check_model(model_.fingerprint(), /*force=*/false);
  format::check_shape(reader.header(), model_.config());
  write_file_atomically(
      path, replace, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  std::lock_guard<std::mutex> lock(mu_);
  forget_locked(id);  // a replaced file is loaded afresh on next use
}

void CacheStore::put_file(const std::string& id, AtomicFile& file) {
  path_of(id);
  format::OpenOptions oo;
  oo.verify = format::Verify::Full;
  oo.max_section_bytes = max_bytes_;  // untrusted bytes: no section may expand past the budget
  {
    format::CacheReader reader = format::CacheReader::open(file.temp_path(), oo);
    reader.check_model(model_.fingerprint(), /*force=*/false);
    format::check_shape(reader.header(), model_.config());
  }
  file.commit();
  std::lock_guard<std::mutex> lock(mu_);
  forget_locked(id);  // a replaced file is loaded afresh on next use
}

void CacheStore::remove(const std::string& id) {
  const std::string path = path_of(id);
  std::error_code ec;
  if (!fs::remove(path, ec)) {
    if (ec) throw Error(Errc::io, "cannot remove " + path + ": " + ec.message());
    throw Error(Errc::not_found, "no cache \"" + id + "\"");
  }
  std::lock_guard<std::mutex> lock(mu_);
  forget_locked(id);
}

void CacheStore::invalidate(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  forget_locked(id);
}

uint64_t CacheStore::retired_bytes_locked() const {
  retired_.erase(std::remove_if(retired_.begin(), retired_.end(),
                                [](const Retired& r) { return r.cache.expired(); }),
                 retired_.end());
  uint64_t n = 0;
  for (const Retired& r : retired_) n += r.bytes;
  return n;
}

uint64_t CacheStore::loaded_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_ + retired_bytes_locked();
}

size_t CacheStore::loaded_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

}  // namespace kvzip::serve
