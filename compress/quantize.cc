// set_kv_dtype (compress/quantize.h): per layer and KV head, kernels/kv_quant.h quantizes the rows
// into the layer's stored form (f16 rows aside); format::dequantize_rows (the reader's
// reconstruction) then gives the f32 rows, so what stays in memory equals what the file gives back.
#include "compress/quantize.h"

#include <vector>

#include "common/hadamard.h"
#include "common/half.h"
#include "kernels/kv_quant.h"
#include "kernels/thread_pool.h"

namespace kvzip::compress {
namespace {

// The kernels' view of the file's one q8/q4 layout (spec §12.1): rotated rows, byte parameters.
kernels::KvQuantLayout kv_quant_layout(const format::CacheHeader& h) {
  return {format::dtype_bits(h.kv_dtype), h.head_dim, h.kv_group_size, /*rotated=*/true,
          /*byte_params=*/true};
}

// One block (K or V) of a layer: the f16 rows (positions < kv_f16_below) rounded to f16, the
// others quantized per KV head, the channel scales taken over those others only (the f16 rows are
// the attention sink and template opener, whose large values would otherwise widen every other
// row's steps).
void quantize_block(const format::CacheHeader& h, const format::LayerKv& layer,
                    const std::vector<float>& x, format::QuantRows& q) {
  const uint32_t D = h.head_dim;
  const kernels::KvQuantLayout shape = kv_quant_layout(h);
  const size_t dense = format::f16_row_count(h, layer.positions),
               rows = layer.positions.size() - dense;
  q.channel_scale.assign(size_t(h.n_kv_heads) * D, 1.0f);
  q.dense.clear();
  q.dense.reserve(dense * D);
  q.params.assign(rows * shape.param_words(), 0);
  q.codes.assign(rows * shape.code_bytes(), 0);
  std::vector<float> quant;  // one head's quantized rows, gathered
  size_t r = 0, at = 0;      // layer row; first quantized row of the head
  for (uint32_t hd = 0; hd < h.n_kv_heads; ++hd) {
    quant.clear();
    for (uint32_t i = 0; i < layer.head_rows[hd]; ++i, ++r) {
      const float* row = x.data() + r * D;
      if (layer.positions[r] < h.kv_f16_below)
        for (uint32_t j = 0; j < D; ++j) q.dense.push_back(f32_to_f16(row[j]));
      else quant.insert(quant.end(), row, row + D);
    }
    kernels::KvQuantRowsOut out{shape, quant.size() / D, q.channel_scale.data() + size_t(hd) * D,
                                q.params.data() + at * shape.param_words(),
                                q.codes.data() + at * shape.code_bytes()};
    if (out.rows > 0) kernels::cpu::kv_quantize_rows(quant.data(), out);
    at += out.rows;
  }
}

}  // namespace

void set_kv_dtype(format::CacheContents& c, const KvStorage& st) {
  format::CacheHeader& h = c.header;
  const format::DType dtype = st.dtype;
  const uint32_t group = st.group;
  if (!format::dtype_quantized(dtype)) {
    h.kv_dtype = dtype;
    h.kv_group_size = 0;
    h.kv_f16_below = 0;
    for (format::LayerKv& layer : c.layers) layer.qk = layer.qv = {};
    return;
  }
  const uint32_t g = group ? group : h.head_dim;
  if (g == 0 || h.head_dim % g != 0)
    throw Error(Errc::invalid_argument, "quantization group " + std::to_string(group) +
                                            " does not divide the head dimension " +
                                            std::to_string(h.head_dim));
  if (!hadamard_size(h.head_dim))
    throw Error(Errc::invalid_argument,
                std::string(format::dtype_name(dtype)) +
                    " needs a power-of-two head dimension (its rows are stored "
                    "Hadamard-rotated); this model's is " +
                    std::to_string(h.head_dim) + ": store it as f16 or bf16");
  const uint32_t below = static_cast<uint32_t>(h.prefix_length());
  const bool same = h.kv_dtype == dtype && h.kv_group_size == g && h.kv_f16_below == below;
  h.kv_dtype = dtype;
  h.kv_group_size = g;
  h.kv_f16_below = below;
  // Layers are independent (each writes only its own rows), so they are quantized on all cores;
  // the bytes do not depend on how many (the writer is deterministic per group).
  auto quantize_layer = [&](format::LayerKv& layer) {
    if (same && !layer.qk.empty() && !layer.qv.empty()) return;  // already stored this way
    quantize_block(h, layer, layer.k, layer.qk);
    quantize_block(h, layer, layer.v, layer.qv);
    format::dequantize_rows(h, layer.head_rows, layer.positions, layer.qk, layer.k);
    format::dequantize_rows(h, layer.head_rows, layer.positions, layer.qv, layer.v);
  };
  kernels::ThreadPool pool;  // one thread per core; a task's exception is rethrown by run()
  pool.run(c.layers.size(), [&](size_t l) { quantize_layer(c.layers[l]); });
}

}  // namespace kvzip::compress
