// The q8/q4 KV section (format/detail/quant.h): size, serialisation, parse with value checks, and
// the format's reconstruction of f32 rows (the f16 rows included). The quantizer itself is
// kernels/kv_quant.h (format/ links only common/); compress::set_kv_dtype connects the two.
#include "format/detail/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/hadamard.h"
#include "common/kv_params.h"
#include "format/detail/dtype.h"
#include "format/detail/layout.h"

namespace kvzip::format {
namespace {

using namespace detail;

struct Shape {
  uint64_t D, Gs, groups, code_bytes;  // per row: D/Gs groups, D·bits/8 code bytes
  uint64_t words;                      // per row: 16-bit parameter words (one per group)
  uint32_t bits;
  KvGroupParams params(const uint16_t* row, uint64_t g) const {
    return kv_byte_group_params(row[g], bits);
  }
};

Shape shape_of(const CacheHeader& h) {
  const uint64_t D = h.head_dim, Gs = h.kv_group_size;
  KVZIP_ASSERT(dtype_quantized(h.kv_dtype) && Gs > 0 && D % Gs == 0);
  const uint32_t bits = dtype_bits(h.kv_dtype);
  return {D, Gs, D / Gs, D * bits / 8, quant_param_words(h), bits};
}

bool half_finite(uint16_t b) { return (b & 0x7c00) != 0x7c00; }

std::string check_channel(float c) {
  if (std::isnan(c)) return "is NaN";
  if (std::isinf(c)) return "is infinite";
  if (!(c > 0.0f)) return "is " + std::to_string(c) + ", not > 0";
  return {};
}

std::string check_dense(const uint16_t* x, uint64_t D) {
  for (uint64_t j = 0; j < D; ++j)
    if (!half_finite(x[j]))
      return std::string("f16 value of channel ") + std::to_string(j) + " is " +
             (x[j] & 0x3ff ? "NaN" : "infinite");
  return {};
}

// Calls row(head, row within the head, f16 row?, index in dense or in params/codes) for every row
// of a layer, in layer order: the one walk that maps rows to the two arrays of §12.1.
template <class Row>
void for_rows(const CacheHeader& h, std::span<const uint32_t> head_rows,
              std::span<const uint32_t> positions, Row row) {
  uint64_t r = 0, d = 0, q = 0;
  for (uint32_t hd = 0; hd < head_rows.size(); ++hd)
    for (uint32_t i = 0; i < head_rows[hd]; ++i, ++r) {
      const bool f16 = positions[r] < h.kv_f16_below;
      row(hd, i, f16, f16 ? d++ : q++);
    }
}

// Checks both blocks; `fail(msg)` throws with the caller's class and prefix.
template <class Fail>
void check_values(const CacheHeader& h, const LayerKv& layer, Fail fail) {
  const Shape s = shape_of(h);
  for (int b = 0; b < 2; ++b) {
    const QuantRows& q = b ? layer.qv : layer.qk;
    const char* name = b ? "V" : "K";
    for (uint64_t i = 0; i < q.channel_scale.size(); ++i) {
      std::string e = check_channel(q.channel_scale[i]);
      if (!e.empty())
        fail(std::string(name) + " channel scale of head " + std::to_string(i / s.D) + " channel " +
             std::to_string(i % s.D) + " " + e);
    }
    for_rows(h, layer.head_rows, layer.positions,
             [&](uint32_t hd, uint32_t i, bool f16, uint64_t at) {
               if (!f16) return;  // every byte parameter and every code is valid
               const std::string e = check_dense(q.dense.data() + at * s.D, s.D);
               if (!e.empty())
                 fail(std::string(name) + " head " + std::to_string(hd) + " row " +
                      std::to_string(i) + ": " + e);
             });
  }
}

}  // namespace

uint64_t f16_row_count(const CacheHeader& h, std::span<const uint32_t> positions) {
  if (!dtype_quantized(h.kv_dtype)) return 0;
  uint64_t n = 0;
  for (uint32_t p : positions) n += p < h.kv_f16_below;
  return n;
}

void dequantize_rows(const CacheHeader& h, std::span<const uint32_t> head_rows,
                     std::span<const uint32_t> positions, const QuantRows& q, std::span<float> x) {
  const Shape s = shape_of(h);
  const uint32_t bits = s.bits;
  uint64_t r = 0;
  for_rows(h, head_rows, positions, [&](uint32_t hd, uint32_t, bool f16, uint64_t at) {
    float* out = x.data() + r++ * s.D;
    if (f16) {
      for (uint64_t j = 0; j < s.D; ++j) out[j] = f16_to_f32(q.dense[at * s.D + j]);
      return;
    }
    const float* c = q.channel_scale.data() + uint64_t{hd} * s.D;
    const uint16_t* p = q.params.data() + at * s.words;
    const uint8_t* codes = q.codes.data() + at * s.code_bytes;
    for (uint64_t g = 0; g < s.groups; ++g) {
      const KvGroupParams gp = s.params(p, g);
      for (uint64_t j = g * s.Gs; j < (g + 1) * s.Gs; ++j) {
        const uint32_t code = bits == 8 ? codes[j]
                              : (j & 1) ? codes[j >> 1] >> 4
                                        : codes[j >> 1] & 0x0f;
        out[j] = c[j] * std::fma(gp.s, static_cast<float>(code), gp.m);
      }
    }
    hadamard_rotate(out, static_cast<uint32_t>(s.D));  // x = H·y
  });
}

namespace detail {

std::optional<uint64_t> quant_section_bytes(const CacheHeader& h, uint64_t rows,
                                            uint64_t f16_rows) {
  const Shape s = shape_of(h);
  KVZIP_ASSERT(f16_rows <= rows);
  const uint64_t channels = 4ull * h.n_kv_heads * s.D;  // one block's channel scales
  auto per_row = checked_add(2 * s.words, s.code_bytes);
  if (!per_row) return std::nullopt;
  auto body = checked_mul(rows - f16_rows, *per_row);
  auto dense = checked_mul(f16_rows, 2 * s.D);  // D <= 4096: no overflow in 2 * D
  if (!body || !dense) return std::nullopt;
  body = checked_add(*body, *dense);
  if (!body) return std::nullopt;
  auto block = checked_add(*body, channels);
  if (!block) return std::nullopt;
  return checked_mul(*block, 2);
}

void emit_quant_section(const CacheHeader& h, const LayerKv& layer, Sink& sink) {
  auto put = [&](const auto& v) {
    if (!v.empty()) sink.write(v.data(), v.size() * sizeof(v[0]));
  };
  put(layer.qk.channel_scale);
  put(layer.qv.channel_scale);
  put(layer.qk.dense);
  put(layer.qv.dense);
  put(layer.qk.params);
  put(layer.qv.params);
  put(layer.qk.codes);
  put(layer.qv.codes);
}

void parse_quant_section(const CacheHeader& h, const uint8_t* raw, uint64_t size, LayerKv& layer,
                         const std::string& where) {
  const Shape s = shape_of(h);
  uint64_t rows = 0;
  for (uint32_t n : layer.head_rows) rows += n;
  KVZIP_ASSERT(layer.positions.size() == rows);
  const uint64_t dense = f16_row_count(h, layer.positions);
  KVZIP_ASSERT(quant_section_bytes(h, rows, dense) == size);  // Raw_Size was checked at open
  rows -= dense;                                              // the quantized rows
  const uint8_t* p = raw;
  auto take = [&](auto& v, uint64_t n) {
    v.resize(n);
    if (n) std::memcpy(v.data(), p, n * sizeof(v[0]));
    p += n * sizeof(v[0]);
  };
  take(layer.qk.channel_scale, uint64_t{h.n_kv_heads} * s.D);
  take(layer.qv.channel_scale, uint64_t{h.n_kv_heads} * s.D);
  take(layer.qk.dense, dense * s.D);
  take(layer.qv.dense, dense * s.D);
  take(layer.qk.params, rows * s.words);
  take(layer.qv.params, rows * s.words);
  take(layer.qk.codes, rows * s.code_bytes);
  take(layer.qv.codes, rows * s.code_bytes);
  check_values(h, layer,
               [&](const std::string& e) { throw Error(Errc::corrupt, where + ": " + e); });
}

bool quant_values_bounded(const CacheHeader& h, const LayerKv& layer) {
  const Shape s = shape_of(h);
  const double levels = double((1u << dtype_bits(h.kv_dtype)) - 1);
  // fma and product round; the rotation's butterflies add up to D values before the last scaling
  const double limit = 0.999 * double(std::numeric_limits<float>::max()) / double(s.D);
  for (int b = 0; b < 2; ++b) {
    const QuantRows& q = b ? layer.qv : layer.qk;
    std::vector<double> cmax(uint64_t{h.n_kv_heads} * s.groups, 0.0);  // (Hkv, groups) max c
    for (uint64_t i = 0; i < q.channel_scale.size(); ++i) {
      double& m = cmax[(i / s.D) * s.groups + (i % s.D) / s.Gs];
      m = std::max(m, double(q.channel_scale[i]));
    }
    bool ok = true;
    for_rows(h, layer.head_rows, layer.positions,
             [&](uint32_t hd, uint32_t, bool f16, uint64_t at) {
               if (f16 || !ok) return;
               const uint16_t* p = q.params.data() + at * s.words;
               for (uint64_t g = 0; g < s.groups; ++g) {
                 const KvGroupParams gp = s.params(p, g);
                 const double x = cmax[hd * s.groups + g] *
                                  (std::fabs(double(gp.s)) * levels + std::fabs(double(gp.m)));
                 if (!(x < limit)) ok = false;
               }
             });
    if (!ok) return false;
  }
  return true;
}

void validate_quant(const CacheHeader& h, const LayerKv& layer, const std::string& at) {
  auto invalid = [&](const std::string& e) {
    throw Error(Errc::invalid_argument, "cannot write cache: " + at + ": " + e);
  };
  if (!(h.kv_group_size > 0 && h.head_dim % h.kv_group_size == 0))
    invalid("kv_group_size " + std::to_string(h.kv_group_size) + " does not divide head_dim " +
            std::to_string(h.head_dim));
  const Shape s = shape_of(h);
  const uint64_t dense = f16_row_count(h, layer.positions), rows = layer.positions.size() - dense;
  for (int b = 0; b < 2; ++b) {
    const QuantRows& q = b ? layer.qv : layer.qk;
    if (q.empty() && rows + dense > 0)
      invalid(std::string(b ? "V" : "K") + " rows are not quantized; a " + dtype_name(h.kv_dtype) +
              " cache is written from quantized rows (compress::quantize_kv)");
    if (q.channel_scale.size() != uint64_t{h.n_kv_heads} * s.D ||
        q.params.size() != rows * s.words || q.codes.size() != rows * s.code_bytes ||
        q.dense.size() != dense * s.D)
      invalid(std::string(b ? "V" : "K") + " quantized rows have the wrong shape (channel scales " +
              std::to_string(q.channel_scale.size()) + ", f16 values " +
              std::to_string(q.dense.size()) + ", params " + std::to_string(q.params.size()) +
              ", code bytes " + std::to_string(q.codes.size()) + " for " + std::to_string(dense) +
              " f16 and " + std::to_string(rows) + " quantized rows)");
  }
  check_values(h, layer, invalid);
}

}  // namespace detail
}  // namespace kvzip::format
