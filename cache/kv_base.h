// KvBase: the read-only compressed state that query sessions and served requests answer from, in
// the form its file suggests: f32 rows (RaggedKvCache: f32/f16/bf16 files, every file on the GPU
// path, or a q8/q4 file asked for in f32) or the stored q8/q4 rows themselves (QuantBase). Both
// are read through a BranchCache (cache/branch_cache.h), which keeps the appended rows apart.
// Code that needs the f32 rows of the base (R-KV eviction, retain, the GPU upload) asks f32() and
// gets Errc::unsupported for a quantized base, naming what needed them.
#pragma once
#include <string>
#include <utility>
#include <variant>

#include "cache/quant_base.h"
#include "cache/ragged_cache.h"
#include "common/error.h"

namespace kvzip::model {

class KvBase {
 public:
  explicit KvBase(RaggedKvCache cache) : v_(std::move(cache)) {}
  explicit KvBase(QuantBase cache) : v_(std::move(cache)) {}

  bool quantized() const { return std::holds_alternative<QuantBase>(v_); }
  CacheShape shape() const {
    return quantized() ? quant().shape() : std::get<RaggedKvCache>(v_).shape();
  }
  // Logical length of the compressed state (the uncompressed document length).
  uint32_t base_length() const {
    return quantized() ? quant().base_length() : std::get<RaggedKvCache>(v_).base_length();
  }
  uint64_t kept_total() const {
    return quantized() ? quant().kept_total() : std::get<RaggedKvCache>(v_).kept_total();
  }
  // Bytes of K and V held (QuantBase::bytes_kept, RaggedKvCache::bytes_kept).
  uint64_t bytes_kept() const {
    return quantized() ? quant().bytes_kept() : std::get<RaggedKvCache>(v_).bytes_kept();
  }
  // What the base holds in memory: bytes_kept() plus an f32 base's key tiles
  // (RaggedKvCache::make_key_tiles). The server's LRU budget counts this.
  uint64_t bytes_in_memory() const {
    return bytes_kept() + (quantized() ? 0 : std::get<RaggedKvCache>(v_).bytes_key_tiles());
  }

  // The f32 rows; Errc::unsupported for a quantized base, the message starting with `who`.
  const RaggedKvCache& f32(const char* who) const {
    if (quantized()) refuse(who);
    return std::get<RaggedKvCache>(v_);
  }
  RaggedKvCache& f32(const char* who) {
    if (quantized()) refuse(who);
    return std::get<RaggedKvCache>(v_);
  }
  const QuantBase& quant() const {
    KVZIP_ASSERT(quantized());
    return std::get<QuantBase>(v_);
  }

 private:
  [[noreturn]] static void refuse(const char* who) {
    throw Error(Errc::unsupported, std::string(who) +
                                       " needs the cache's rows in f32, but this cache holds its "
                                       "q8/q4 rows as stored (attended in place); load it in f32 "
                                       "(loader::KvForm::F32) for this");
  }

  std::variant<RaggedKvCache, QuantBase> v_;
};

}  // namespace kvzip::model
