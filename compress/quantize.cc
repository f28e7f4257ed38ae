// set_kv_dtype (compress/quantize.h): per layer and KV head, kernels/kv_quant.h quantizes the rows
// into the layer's stored form; format::dequantize_rows (the reader's reconstruction) then gives
// the f32 rows, so what stays in memory equals what the file will give back.
#include "compress/quantize.h"

#include "kernels/kv_quant.h"

namespace kvzip {
namespace {

void quantize_block(const format::CacheHeader& h, const format::LayerKv& layer,
                    const std::vector<float>& x, format::QuantRows& q) {
  const uint32_t D = h.head_dim;
  KvQuantLayout shape{format::dtype_bits(h.kv_dtype), D, h.kv_group_size};
  const size_t rows = layer.positions.size();
  q.channel_scale.assign(size_t(h.n_kv_heads) * D, 1.0f);
  q.params.assign(rows * shape.param_halves(), 0);
  q.codes.assign(rows * shape.code_bytes(), 0);
  size_t r = 0;
  for (uint32_t hd = 0; hd < h.n_kv_heads; ++hd) {
    KvQuantRowsOut out{shape, layer.head_rows[hd], q.channel_scale.data() + size_t(hd) * D,
                       q.params.data() + r * shape.param_halves(), q.codes.data() + r * shape.code_bytes()};
    if (out.rows > 0) cpu::kv_quantize_rows(x.data() + r * D, out);
    r += layer.head_rows[hd];
  }
}

}  // namespace

void set_kv_dtype(format::CacheContents& c, format::DType dtype, uint32_t group) {
  format::CacheHeader& h = c.header;
  if (!format::dtype_quantized(dtype)) {
    h.kv_dtype = dtype;
    h.kv_group_size = 0;
    for (format::LayerKv& layer : c.layers) layer.qk = layer.qv = {};
    return;
  }
  const uint32_t g = group ? group : h.head_dim;
  if (g == 0 || h.head_dim % g != 0)
    throw Error(Errc::invalid_argument, "quantization group " + std::to_string(group) +
                                            " does not divide the head dimension " + std::to_string(h.head_dim));
  const bool same = h.kv_dtype == dtype && h.kv_group_size == g;
  h.kv_dtype = dtype;
  h.kv_group_size = g;
  for (format::LayerKv& layer : c.layers) {
    if (same && !layer.qk.empty() && !layer.qv.empty()) continue;  // already stored this way
    quantize_block(h, layer, layer.k, layer.qk);
    quantize_block(h, layer, layer.v, layer.qv);
    format::dequantize_rows(h, layer.head_rows, layer.qk, layer.k);
    format::dequantize_rows(h, layer.head_rows, layer.qv, layer.v);
  }
}

}  // namespace kvzip
