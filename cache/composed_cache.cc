// ComposedCache: documents as shifted blocks plus a private store (see composed_cache.h).
#include "cache/composed_cache.h"

#include <algorithm>
#include <string>

#include "common/error.h"
#include "kernels/rope.h"

namespace kvzip::model {
namespace {

// Rows of one document's head as stored: f32 rows (all of them, or the f16-stored ones of a q8/q4
// base) then quantized rows, with the positions of all, increasing.
struct DocHead {
  const float* k = nullptr;
  const float* v = nullptr;
  uint32_t n_f32 = 0;
  const kernels::KvQuantSegment* quant = nullptr;
  uint32_t n_quant = 0;
  const uint32_t* positions = nullptr;  // (n_f32 + n_quant)
  const float* kt = nullptr;
  uint32_t kt_rows = 0;
};

DocHead doc_head(const KvBase& base, uint32_t l, uint32_t h) {
  DocHead d;
  if (base.quantized()) {
    const QuantBase& q = base.quant();
    d.k = q.dense_k(l, h);
    d.v = q.dense_v(l, h);
    d.n_f32 = q.dense(l, h);
    d.quant = q.quant(l, h);
    d.n_quant = q.kept(l, h) - d.n_f32;
    d.positions = q.positions(l, h);
    return d;
  }
  const RaggedKvCache& c = base.f32("ComposedCache");
  const KvHeadView view = c.view(l, h);
  d.k = view.k;
  d.v = view.v;
  d.n_f32 = c.kept(l, h);
  d.positions = view.positions;
  d.kt = view.kt;
  d.kt_rows = std::min(view.kt_rows, d.n_f32);
  return d;
}

void set_bit(std::vector<uint64_t>& bits, uint32_t j) { bits[j >> 6] |= uint64_t(1) << (j & 63); }

CacheShape first_shape(const std::vector<ComposedDoc>& docs) {
  if (docs.empty()) throw Error(Errc::invalid_argument, "ComposedCache: no documents");
  for (const ComposedDoc& d : docs) KVZIP_ASSERT(d.base != nullptr);
  return docs[0].base->shape();
}

// (n_docs, 2, D/2): each document's query rotation by -shift, cos(Δθ) then -sin(Δθ).
std::vector<float> shift_rotations(const std::vector<ComposedDoc>& docs,
                                   const std::vector<float>& inv_freq) {
  const size_t half = inv_freq.size();
  std::vector<float> rot(docs.size() * 2 * half);
  for (size_t d = 0; d < docs.size(); ++d) {
    kernels::RopeTable tab;
    kernels::build_rope_table(inv_freq, &docs[d].shift, 1, &tab);
    for (size_t i = 0; i < half; ++i) {
      rot[d * 2 * half + i] = tab.cos[i];
      rot[d * 2 * half + half + i] = -tab.sin[i];
    }
  }
  return rot;
}

// Index of the first of `n` increasing positions at or above `lo`.
uint32_t first_at(const uint32_t* positions, uint32_t n, uint32_t lo) {
  return uint32_t(std::lower_bound(positions, positions + n, lo) - positions);
}

}  // namespace

ComposedWindow composed_window(const ModelConfig& config) {
  ComposedWindow w;
  if (!config.hybrid()) return w;
  w.local_layers = config.local_layers;
  w.window = config.sliding_window;
  w.inv_freq = kernels::rope_inv_freq(config.head_dim, config.rope_local_base, RopeScaling{});
  return w;
}

ComposedCache::ComposedCache(std::vector<ComposedDoc> docs, const std::vector<float>& inv_freq,
                             uint32_t length, ComposedWindow local)
    : shape_(first_shape(docs)),
      docs_(std::move(docs)),
      local_(std::move(local)),
      length_(length),
      own_(shape_, 0) {
  for (size_t i = 1; i < docs_.size(); ++i)
    if (!(docs_[i].base->shape() == shape_))
      throw Error(Errc::invalid_argument, "ComposedCache: document " + std::to_string(i + 1) +
                                              " has another cache shape than the first");
  const uint32_t half = shape_.head_dim / 2;
  KVZIP_ASSERT(inv_freq.size() == half);
  rot_ = shift_rotations(docs_, inv_freq);
  if (hybrid()) {
    KVZIP_ASSERT(local_.local_layers.size() == shape_.n_layers && local_.window > 0 &&
                 local_.inv_freq.size() == half);
    for (size_t i = 0; i < docs_.size(); ++i)
      if (docs_[i].base->quantized())
        throw Error(Errc::unsupported,
                    "ComposedCache: document " + std::to_string(i + 1) +
                        " holds q8/q4 rows; a model with sliding-window layers composes f32 rows");
    rot_local_ = shift_rotations(docs_, local_.inv_freq);
  }
  // Skip bitmaps: each document's rows below skip_below (its own prefix, when left out).
  masks_.resize(docs_.size() * shape_.n_layers * shape_.n_kv_heads);
  for (uint32_t d = 0; d < n_docs(); ++d)
    for (uint32_t l = 0; l < shape_.n_layers; ++l)
      for (uint32_t h = 0; h < shape_.n_kv_heads; ++h) {
        const DocHead dh = doc_head(*docs_[d].base, l, h);
        HeadMask& m = masks_[hidx(d, l, h)];
        m.f32.assign((dh.n_f32 + 63) / 64 + 1, 0);
        m.quant.assign((dh.n_quant + 63) / 64 + 1, 0);
        for (uint32_t j = 0; j < dh.n_f32 + dh.n_quant && dh.positions[j] < docs_[d].skip_below;
             ++j)
          j < dh.n_f32 ? set_bit(m.f32, j) : set_bit(m.quant, j - dh.n_f32);
      }
  rows(0, -1, {});
}

uint32_t ComposedCache::logical_length() const {
  return sealed_ ? length_ + (rows_ - built_) : length_;
}

void ComposedCache::rows(uint32_t visible, int limited, std::vector<uint32_t> positions) {
  KVZIP_ASSERT(!sealed_ && visible <= n_docs());
  KVZIP_ASSERT(limited < 0 || (uint32_t(limited) >= visible && uint32_t(limited) < n_docs()));
  visible_ = visible;
  limited_ = limited;
  staged_ = std::move(positions);
  cursor_ = 0;
  const uint32_t n_limited = limited < 0 ? 0 : uint32_t(limited) + 1 - visible;
  limits_.resize(size_t(n_limited) * shape_.n_layers * shape_.n_kv_heads);
  for (auto& lim : limits_) lim.assign(2 * staged_.size(), 0);
  refresh_parts();
}

void ComposedCache::skip(uint32_t d, std::span<const uint32_t> stored_positions) {
  KVZIP_ASSERT(!sealed_ && d < n_docs());
  for (uint32_t l = 0; l < shape_.n_layers; ++l)
    for (uint32_t h = 0; h < shape_.n_kv_heads; ++h) {
      const DocHead dh = doc_head(*docs_[d].base, l, h);
      HeadMask& m = masks_[hidx(d, l, h)];
      const uint32_t* p = dh.positions;
      for (uint32_t pos : stored_positions) {
        const uint32_t* at = std::lower_bound(p, p + dh.n_f32, pos);
        if (at != p + dh.n_f32 && *at == pos) set_bit(m.f32, uint32_t(at - p));
        const uint32_t* q = p + dh.n_f32;
        at = std::lower_bound(q, q + dh.n_quant, pos);
        if (at != q + dh.n_quant && *at == pos) set_bit(m.quant, uint32_t(at - q));
      }
    }
  refresh_parts();
}

void ComposedCache::seal() {
  KVZIP_ASSERT(cursor_ == staged_.size());
  sealed_ = true;
  built_ = rows_;
  visible_ = n_docs();
  limited_ = -1;
  staged_.clear();
  limits_.clear();
  refresh_parts();
}

void ComposedCache::refresh_parts() {
  const uint32_t L = shape_.n_layers, H = shape_.n_kv_heads;
  n_parts_ = limited_ >= 0 ? uint32_t(limited_) + 1 : visible_;  // part p is document p
  spans_.assign(size_t(L) * n_parts_ * H, kernels::KvSpan{});
  const size_t D = shape_.head_dim;
  part_rot_.assign(rot_.begin(), rot_.begin() + n_parts_ * D);
  if (hybrid()) part_rot_local_.assign(rot_local_.begin(), rot_local_.begin() + n_parts_ * D);
  part_from_.assign(hybrid() ? size_t(n_parts_) * L * H : 0, {});
  for (uint32_t l = 0; l < L; ++l)
    for (uint32_t p = 0; p < n_parts_; ++p) {
      const uint32_t d = p;
      for (uint32_t h = 0; h < H; ++h) {
        const DocHead dh = doc_head(*docs_[d].base, l, h);
        const HeadMask& m = masks_[hidx(d, l, h)];
        kernels::KvSpan& s = spans_[(size_t(l) * n_parts_ + p) * H + h];
        s.k = dh.k;
        s.v = dh.v;
        s.len = dh.n_f32;
        s.quant = dh.n_quant ? dh.quant : nullptr;
        s.kt = dh.kt;
        s.kt_rows = dh.kt_rows;
        s.skip = m.f32.data();
        s.quant_skip = s.quant ? m.quant.data() : nullptr;
        if (p >= visible_) {  // a limited document: limits filled per append (reserve_append)
          std::vector<uint32_t>& lim = limits_[(size_t(p - visible_) * L + l) * H + h];
          s.limit = lim.data();
          s.quant_limit = s.quant ? lim.data() + staged_.size() : nullptr;
        }
      }
    }
}

CacheParts ComposedCache::parts(uint32_t layer) const {
  if (n_parts_ == 0) return {};
  const float* rot = local_.is_local(layer) ? part_rot_local_.data() : part_rot_.data();
  return CacheParts{spans_.data() + size_t(layer) * n_parts_ * shape_.n_kv_heads, rot, n_parts_};
}

void ComposedCache::next_positions(uint32_t T, uint32_t* out) const {
  if (sealed_) return AttentionCache::next_positions(T, out);
  KVZIP_ASSERT(cursor_ + T <= staged_.size());
  std::copy_n(staged_.data() + cursor_, T, out);
}

void ComposedCache::reserve_append(uint32_t T) {
  if (!sealed_ && cursor_ + T > staged_.size())
    throw Error(Errc::invalid_argument,
                "ComposedCache: " + std::to_string(T) +
                    " tokens appended while building, past the staged positions");
  if (sealed_ && uint64_t(logical_length()) + T > UINT32_MAX)
    throw Error(Errc::invalid_argument,
                "ComposedCache: appending " + std::to_string(T) + " tokens exceeds 2^32 positions");
  own_.reserve_append(T);
  if (own_pos_.size() < own_.capacity()) own_pos_.resize(own_.capacity());
  pending_ = T;
  uint32_t* pos = own_pos_.data() + rows_;
  next_positions(T, pos);
  if (hybrid()) window_rows(pos, T);
  if (limited_ < 0) return;
  // Each pending token sees a limited document's stored rows before its own position, none
  // before the document's first token. Limits index the call's tokens: cursor_ is where the
  // staged positions of this append start.
  const uint32_t L = shape_.n_layers, H = shape_.n_kv_heads;
  for (uint32_t d = visible_; d <= uint32_t(limited_); ++d) {
    const ComposedDoc& doc = docs_[d];
    for (uint32_t l = 0; l < L; ++l)
      for (uint32_t h = 0; h < H; ++h) {
        const DocHead dh = doc_head(*doc.base, l, h);
        uint32_t* lim = limits_[(size_t(d - visible_) * L + l) * H + h].data();
        for (uint32_t t = 0; t < T; ++t) {
          if (pos[t] < doc.first || pos[t] < doc.shift) {
            lim[t] = lim[staged_.size() + t] = 0;
            continue;
          }
          const uint32_t stored =
              pos[t] - doc.shift;  // the token's position in the document's frame
          lim[t] = uint32_t(std::lower_bound(dh.positions, dh.positions + dh.n_f32, stored) -
                            dh.positions);
          const uint32_t* q = dh.positions + dh.n_f32;
          lim[staged_.size() + t] = uint32_t(std::lower_bound(q, q + dh.n_quant, stored) - q);
        }
      }
  }
}

void ComposedCache::window_rows(const uint32_t* pos, uint32_t T) {
  const uint32_t L = shape_.n_layers, H = shape_.n_kv_heads, W = local_.window;
  // Token t sees positions (pos[t] - W, pos[t]]: of its own store's rows (the committed ones and
  // the pending tokens before it, all in increasing position) the first at pos[t] - W + 1 or above.
  own_from_.resize(T);
  for (uint32_t t = 0; t < T; ++t) {
    const uint32_t lo = pos[t] + 1 > W ? pos[t] + 1 - W : 0;
    own_from_[t] = first_at(own_pos_.data(), rows_ + t, lo);
  }
  for (uint32_t p = 0; p < n_parts_; ++p) {
    const uint32_t shift = docs_[p].shift;
    for (uint32_t l = 0; l < L; ++l) {
      if (!local_.is_local(l)) continue;
      for (uint32_t h = 0; h < H; ++h) {
        const DocHead dh = doc_head(*docs_[p].base, l, h);
        std::vector<uint32_t>& from = part_from_[(size_t(p) * L + l) * H + h];
        from.resize(T);
        for (uint32_t t = 0; t < T; ++t) {  // stored position >= pos[t] - W + 1 - shift
          const uint64_t lo =
              uint64_t(pos[t]) + 1 > uint64_t(W) + shift ? uint64_t(pos[t]) + 1 - W - shift : 0;
          from[t] = first_at(dh.positions, dh.n_f32, uint32_t(lo));
        }
        spans_[(size_t(l) * n_parts_ + p) * H + h].from = from.data();
      }
    }
  }
}

void ComposedCache::append(uint32_t layer, const float* k_new, const float* v_new, uint32_t T) {
  own_.append(layer, k_new, v_new, T);
}

void ComposedCache::commit_append(uint32_t T) {
  own_.commit_append(T);
  rows_ += T;
  if (!sealed_) cursor_ += T;
  pending_ = 0;
}

KvHeadView ComposedCache::view(uint32_t layer, uint32_t kv_head) const {
  const KvHeadView o = own_.view(layer, kv_head);
  KvHeadView v{o.k, o.v, own_pos_.data(), o.len};
  if (local_.is_local(layer)) v.from = own_from_.data();
  return v;
}

void ComposedCache::rollback(uint32_t length) {
  if (!sealed_) {  // a failed building step: forget its uncommitted rows only
    own_.rollback(rows_);
    pending_ = 0;
    return;
  }
  if (length < length_)
    throw Error(Errc::invalid_argument,
                "ComposedCache: cannot roll back to length " + std::to_string(length) +
                    ", below the composed documents' " + std::to_string(length_));
  KVZIP_ASSERT(length <= logical_length());
  rows_ = built_ + (length - length_);
  own_.rollback(rows_);
  pending_ = 0;
}

uint64_t ComposedCache::rows_seen() const {
  const uint32_t L = shape_.n_layers, H = shape_.n_kv_heads;
  // In a local layer the next token sees only the positions (next - W, next).
  const uint32_t next = logical_length();
  const uint32_t lo = hybrid() && next + 1 > local_.window ? next + 1 - local_.window : 0;
  uint64_t n = 0;
  for (uint32_t l = 0; l < L; ++l) {
    const bool windowed = local_.is_local(l);
    for (uint32_t h = 0; h < H; ++h) {
      n += windowed ? rows_ - first_at(own_pos_.data(), rows_, lo) : rows_;
      for (uint32_t d = 0; d < n_docs(); ++d) {
        const DocHead dh = doc_head(*docs_[d].base, l, h);
        const HeadMask& m = masks_[hidx(d, l, h)];
        for (uint32_t j = 0; j < dh.n_f32 + dh.n_quant; ++j) {
          const bool skipped = j < dh.n_f32 ? kernels::skip_bit(m.f32.data(), j)
                                            : kernels::skip_bit(m.quant.data(), j - dh.n_f32);
          n += !skipped && (!windowed || uint64_t(dh.positions[j]) + docs_[d].shift >= lo);
        }
      }
    }
  }
  return n;
}

uint64_t ComposedCache::bytes_owned() const {
  uint64_t b = own_.bytes_used() + own_pos_.size() * sizeof(uint32_t) +
               (rot_.size() + part_rot_.size()) * sizeof(float) +
               spans_.size() * sizeof(kernels::KvSpan);
  for (const HeadMask& m : masks_) b += (m.f32.size() + m.quant.size()) * sizeof(uint64_t);
  for (const auto& lim : limits_) b += lim.size() * sizeof(uint32_t);
  for (const auto& from : part_from_) b += from.size() * sizeof(uint32_t);
  b += (own_from_.size() + rot_local_.size() + part_rot_local_.size()) * sizeof(float);
  return b;
}

}  // namespace kvzip::model
