// `kvzip inspect` for head-scores (.kvh) files: the header facts, score statistics and the full
// (L, Hkv) table with each head's rank (rank 1 = kept first by `compress --level head`, ties to
// the lower (layer, head) index as compress/head_level.h selects). Text and JSON carry the same
// facts.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <sstream>

#include "format/detail/escape.h"
#include "format/head_scores.h"

namespace kvzip::format {
namespace {

std::string num(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string hex64(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// rank[i] of head i = l·Hkv + h: 1 + number of heads ordered before it.
std::vector<uint32_t> ranks(const std::vector<float>& v) {
  std::vector<uint32_t> order(v.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return v[a] > v[b]; });
  std::vector<uint32_t> rank(v.size());
  for (uint32_t r = 0; r < order.size(); ++r) rank[order[r]] = r + 1;
  return rank;
}

double quantile(std::vector<float> v, double q) {  // nearest rank on the sorted values
  std::sort(v.begin(), v.end());
  const size_t i = static_cast<size_t>(q * (v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

}  // namespace

bool looks_like_head_scores(std::span<const uint8_t> first_bytes) {
  static constexpr uint8_t kMagic[8] = {0x89, 'K', 'V', 'H', 0x0D, 0x0A, 0x1A, 0x0A};
  return first_bytes.size() >= 8 && std::memcmp(first_bytes.data(), kMagic, 8) == 0;
}

std::string describe_head_scores(const HeadScores& h, const std::string& file_name, bool json) {
  using detail::escape;
  const std::vector<uint32_t> rank = ranks(h.values);
  const double lo = quantile(h.values, 0.0), med = quantile(h.values, 0.5),
               hi = quantile(h.values, 1.0);
  std::ostringstream o;
  if (json) {
    o << "{\"file\":\"" << escape(file_name, true) << "\",\"kind\":\"head_scores\",\"version\":\""
      << kHeadScoresVersionMajor << "." << kHeadScoresVersionMinor << "\",\"model\":{\"arch\":\""
      << escape(h.model.arch, true) << "\",\"name\":\"" << escape(h.model.name, true)
      << "\",\"tokenizer_hash\":\"" << hex64(h.model.tokenizer_hash) << "\",\"weights_hash\":\""
      << hex64(h.model.weights_hash) << "\"},\"n_layers\":" << h.n_layers
      << ",\"n_kv_heads\":" << h.n_kv_heads << ",\"calibration_source\":\""
      << escape(h.source, true) << "\",\"calibration_tokens\":" << h.calibration_tokens
      << ",\"chunk\":" << h.chunk << ",\"checksum\":\"" << hex64(h.checksum)
      << "\",\"min\":" << num("%.9g", lo) << ",\"median\":" << num("%.9g", med)
      << ",\"max\":" << num("%.9g", hi) << ",\"scores\":[";
    for (uint32_t l = 0; l < h.n_layers; ++l) {
      o << (l ? ",[" : "[");
      for (uint32_t k = 0; k < h.n_kv_heads; ++k) o << (k ? "," : "") << num("%.9g", h.at(l, k));
      o << "]";
    }
    o << "]}\n";
    return o.str();
  }
  o << "kvzip head scores  " << escape(file_name, false) << "\n";
  o << "version      " << kHeadScoresVersionMajor << "." << kHeadScoresVersionMinor << "\n";
  o << "model        " << escape(h.model.arch, false) << " \"" << escape(h.model.name, false)
    << "\" tokenizer " << hex64(h.model.tokenizer_hash) << " weights "
    << hex64(h.model.weights_hash) << "\n";
  o << "shape        L=" << h.n_layers << " Hkv=" << h.n_kv_heads << " ("
    << size_t(h.n_layers) * h.n_kv_heads << " KV heads)\n";
  o << "calibration  " << escape(h.source, false) << ", " << h.calibration_tokens
    << " tokens, chunk " << h.chunk << "\n";
  o << "checksum     " << hex64(h.checksum) << " (xxh64, verified on read)\n";
  o << "scores       min " << num("%.4f", lo) << "  median " << num("%.4f", med) << "  max "
    << num("%.4f", hi) << "\n";
  o << "layer  score (rank) per KV head; rank 1 is kept first by head-level KVzip\n";
  for (uint32_t l = 0; l < h.n_layers; ++l) {
    o << num("%5.0f", l) << " ";
    for (uint32_t k = 0; k < h.n_kv_heads; ++k)
      o << "  " << num("%.4f", h.at(l, k)) << " (" << rank[size_t(l) * h.n_kv_heads + k] << ")";
    o << "\n";
  }
  return o.str();
}

}  // namespace kvzip::format
