// RaggedLayout: the bookkeeping of a ragged KV cache, kept once for the host cache (RaggedKvCache)
// and the device cache (GpuCache) so both lay out, grow, append, roll back and compact alike.
// Storage per layer is one K and one V array of rows, head-major: head (l, h) owns rows
// [offset, offset + kept + room) and uses the first len; the kept rows (the compressed state)
// come first, appended rows after, all in increasing original position. The positions live here,
// on the host (rollback and retain read them). The layout never touches K/V itself: it drives the
// cache's RaggedStorage, and it grows in two phases (allocate everything, then copy and swap) so a
// failed allocation at any layer leaves the cache exactly as it was.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "cache/kv_cache.h"

namespace kvzip::model {

// What a cache stores per layer (K and V rows of D floats), as RaggedLayout drives it. A grow is:
// stage_layer for every layer (new arrays kept aside), copy_rows from the live arrays into the
// staged ones, finish_copies, then commit_staged; on any error drop_staged and nothing changed.
class RaggedStorage {
 public:
  // Allocates layer `layer`'s new K and V arrays of `rows` rows each beside the live ones.
  // Throws Errc::out_of_memory when it cannot.
  virtual void stage_layer(uint32_t layer, uint64_t rows) = 0;
  // Copies n rows of layer `layer`: live rows [from, from + n) to staged rows [to, to + n).
  virtual void copy_rows(uint32_t layer, uint64_t from, uint64_t to, uint64_t n) = 0;
  // Every copy_rows has landed (a device cache waits for its stream here).
  virtual void finish_copies() {}
  // The staged arrays replace the live ones (which are freed).
  virtual void commit_staged() noexcept = 0;
  // The staged arrays are freed; the live ones stay as they were.
  virtual void drop_staged() noexcept = 0;

 protected:
  ~RaggedStorage() = default;
};

class RaggedLayout {
 public:
  RaggedLayout() = default;
  // Head (l, h) keeps kept[l · Hkv + h] rows of a sequence of `logical_length` positions. Not laid
  // out yet (lay_out comes next). Throws Errc::invalid_argument for a zero dimension, a wrong count
  // of heads or a head keeping more rows than the sequence has; `who` names the cache in errors.
  RaggedLayout(const char* who, CacheShape shape, uint32_t logical_length,
               std::vector<uint32_t> kept);

  CacheShape shape() const { return shape_; }
  uint32_t logical_length() const { return length_; }  // committed
  uint32_t base_length() const { return base_length_; }
  uint32_t room() const { return room_; }
  uint32_t kept(uint32_t layer, uint32_t kv_head) const { return kept_[idx(layer, kv_head)]; }
  uint32_t len(uint32_t layer, uint32_t kv_head) const { return len_[idx(layer, kv_head)]; }
  uint64_t offset(uint32_t layer, uint32_t kv_head) const { return offset_[idx(layer, kv_head)]; }
  uint64_t layer_rows(uint32_t layer) const { return pos_[layer].size(); }
  // Original position of each row of head (l, h): (len) in use, (kept + room) writable.
  uint32_t* positions(uint32_t layer, uint32_t kv_head) {
    return pos_[layer].data() + offset(layer, kv_head);
  }
  const uint32_t* positions(uint32_t layer, uint32_t kv_head) const {
    return pos_[layer].data() + offset(layer, kv_head);
  }
  uint64_t kept_total() const;  // Σ kept over (l, h)
  uint64_t used_total() const;  // Σ len over (l, h)

  // First layout: `room` append rows per head; storage allocated, nothing copied (the caller fills
  // the kept rows and their positions). Errc::out_of_memory leaves the layout unlaid.
  void lay_out(uint32_t room, RaggedStorage& storage);
  // Room for T more rows in every head: when some head lacks it, grows the room to at least the
  // need and 1.5× the old room, copying every used row. Throws Errc::invalid_argument past 2^32
  // positions, Errc::out_of_memory (or the storage's copy error) with nothing changed.
  void reserve_append(uint32_t T, RaggedStorage& storage);
  // Bookkeeping of appending T tokens to every head of `layer` (after reserve_append): their
  // positions logical_length() ... are written, dst_rows[h] (unless null) receives the row within
  // the layer's arrays where head h's first new token goes, and each head's len grows by T.
  void append(uint32_t layer, uint32_t T, uint64_t* dst_rows);
  void commit_append(uint32_t T) { length_ += T; }
  // Forgets every position >= length (and any uncommitted append): per head a binary search of the
  // positions; lengths move, no row does. Throws Errc::invalid_argument past logical_length().
  void rollback(uint32_t length);
  // Checks a retain list for head (l, h): strictly increasing rows < len. Errc::invalid_argument.
  void check_retain(uint32_t layer, uint32_t kv_head, std::span<const uint32_t> rows) const;
  // Bookkeeping of keeping only `rows` of head (l, h) (checked; the caller moved its K/V rows the
  // same way, row rows[x] to row x): positions move down, kept becomes the number of listed base
  // rows, len the number of listed rows.
  void retain(uint32_t layer, uint32_t kv_head, std::span<const uint32_t> rows);

  // The compressed state as a new layout (base length, kept counts; not laid out), for copying a
  // cache to another device. Requires each head to hold exactly its kept rows: appended rows, even
  // uncommitted ones, would not be copied, so Errc::invalid_argument names the first head that
  // holds more (reset() first).
  RaggedLayout compressed_state(const char* who) const;

 private:
  size_t idx(uint32_t l, uint32_t h) const { return size_t(l) * shape_.n_kv_heads + h; }
  void relayout(uint32_t room, RaggedStorage& storage, bool copy);

  CacheShape shape_;
  uint32_t length_ = 0;                     // logical length (committed)
  uint32_t base_length_ = 0;                // logical length of the compressed state
  uint32_t room_ = 0;                       // append rows per head
  std::vector<uint32_t> kept_;              // (L, Hkv) rows of the compressed state
  std::vector<uint32_t> len_;               // (L, Hkv) rows in use incl. uncommitted appends
  std::vector<uint64_t> offset_;            // (L, Hkv) first row of each head in its layer
  std::vector<std::vector<uint32_t>> pos_;  // L × (Σ_h kept_h + room) original positions
};

namespace testing {
// Test seam for the failure path of growth: the n-th next layer allocation that any RaggedLayout
// on this thread asks of its storage (n = 0: the very next) throws Errc::out_of_memory instead,
// as a device running out of memory at that layer would; n < 0 disarms it. Used by the tests.
void fail_layer_allocation(int n);
}  // namespace testing

}  // namespace kvzip::model
