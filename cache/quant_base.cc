// QuantBase: shape checks on construction and the per-head views (see quant_base.h).
#include "cache/quant_base.h"

#include <string>

#include "common/error.h"

namespace kvzip::model {
namespace {

void require(bool ok, uint32_t layer, const std::string& what) {
  if (!ok)
    throw Error(Errc::invalid_argument, "QuantBase layer " + std::to_string(layer) + ": " + what);
}

}  // namespace

QuantBase::QuantBase(CacheShape shape, uint32_t logical_length, kernels::KvQuantLayout layout,
                     std::vector<QuantBaseLayer> layers)
    : shape_(shape), length_(logical_length), layout_(layout), layers_(std::move(layers)) {
  const uint32_t H = shape.n_kv_heads, D = shape.head_dim;
  if (!((layout.bits == 8 || layout.bits == 4) && layout.D == D && D % 2 == 0 && layout.group > 0 &&
        D % layout.group == 0))
    throw Error(Errc::invalid_argument, "QuantBase: layout (bits " + std::to_string(layout.bits) +
                                            ", D " + std::to_string(layout.D) + ", group " +
                                            std::to_string(layout.group) +
                                            ") does not fit head_dim " + std::to_string(D));
  if (layers_.size() != shape.n_layers)
    throw Error(Errc::invalid_argument, "QuantBase: " + std::to_string(layers_.size()) +
                                            " layers given for a shape of " +
                                            std::to_string(shape.n_layers));
  heads_.resize(size_t(shape.n_layers) * H);
  segs_.resize(heads_.size());
  for (uint32_t l = 0; l < shape.n_layers; ++l) {
    const QuantBaseLayer& L = layers_[l];
    require(L.head_rows.size() == H && L.head_dense.size() == H, l, "head counts");
    uint64_t R = 0, F = 0;
    for (uint32_t h = 0; h < H; ++h) {
      require(L.head_dense[h] <= L.head_rows[h], l, "more f32 rows than rows in a head");
      Head& hd = heads_[size_t(l) * H + h];
      hd = Head{L.head_rows[h], L.head_dense[h], R, F};
      R += L.head_rows[h];
      F += L.head_dense[h];
    }
    const uint64_t Q = R - F;
    require(L.positions.size() == R, l, "positions");
    require(L.dense_k.size() == F * D && L.dense_v.size() == F * D, l, "f32 rows");
    require(L.scale_k.size() == size_t(H) * D && L.scale_v.size() == size_t(H) * D, l,
            "channel scales");
    require(L.params_k.size() == Q * layout.param_words() &&
                L.params_v.size() == Q * layout.param_words(),
            l, "group parameters");
    require(
        L.codes_k.size() == Q * layout.code_bytes() && L.codes_v.size() == Q * layout.code_bytes(),
        l, "codes");
    for (uint32_t h = 0; h < H; ++h) {
      const Head& hd = heads_[size_t(l) * H + h];
      const uint64_t q0 = hd.row0 - hd.dense0;  // quantized rows before this head's
      const size_t n = hd.kept - hd.dense;
      segs_[size_t(l) * H + h] = kernels::KvQuantSegment{
          kernels::KvQuantRows{layout, n, L.scale_k.data() + size_t(h) * D,
                               L.params_k.data() + q0 * layout.param_words(),
                               L.codes_k.data() + q0 * layout.code_bytes()},
          kernels::KvQuantRows{layout, n, L.scale_v.data() + size_t(h) * D,
                               L.params_v.data() + q0 * layout.param_words(),
                               L.codes_v.data() + q0 * layout.code_bytes()}};
    }
  }
}

size_t QuantBase::at(uint32_t layer, uint32_t kv_head) const {
  KVZIP_ASSERT(layer < shape_.n_layers && kv_head < shape_.n_kv_heads);
  return size_t(layer) * shape_.n_kv_heads + kv_head;
}

uint64_t QuantBase::kept_total() const {
  uint64_t n = 0;
  for (const Head& h : heads_) n += h.kept;
  return n;
}

const float* QuantBase::dense_k(uint32_t layer, uint32_t kv_head) const {
  return layers_[layer].dense_k.data() + heads_[at(layer, kv_head)].dense0 * shape_.head_dim;
}

const float* QuantBase::dense_v(uint32_t layer, uint32_t kv_head) const {
  return layers_[layer].dense_v.data() + heads_[at(layer, kv_head)].dense0 * shape_.head_dim;
}

const uint32_t* QuantBase::positions(uint32_t layer, uint32_t kv_head) const {
  return layers_[layer].positions.data() + heads_[at(layer, kv_head)].row0;
}

const kernels::KvQuantSegment* QuantBase::quant(uint32_t layer, uint32_t kv_head) const {
  const size_t i = at(layer, kv_head);
  return segs_[i].k.rows ? &segs_[i] : nullptr;
}

uint64_t QuantBase::bytes_kept() const {
  uint64_t n = 0;
  for (const QuantBaseLayer& L : layers_)
    n += (L.dense_k.size() + L.dense_v.size() + L.scale_k.size() + L.scale_v.size()) *
             sizeof(float) +
         (L.params_k.size() + L.params_v.size()) * sizeof(uint16_t) + L.codes_k.size() +
         L.codes_v.size();
  return n;
}

}  // namespace kvzip::model
