// The `kvzip inspect` dump (format.h describe): a stable, diffable text form — fixed field order,
// fixed number formats, no timings or absolute paths beyond what the caller passes — and a JSON
// form with the same facts for scripts. Document text is shown as its first words with control
// bytes and invalid UTF-8 escaped, so any file prints safely to a terminal.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <ctime>
#include <sstream>

#include "common/enum_names.h"
#include "format/detail/escape.h"
#include "format/detail/layout.h"
#include "format/format.h"

namespace kvzip::format {
namespace {

using detail::escape;

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string shortest(double v) {  // shortest text that reads back to the same double
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string iso_time(int64_t t) {
  std::time_t tt = static_cast<std::time_t>(t);
  std::tm tm{};
  if (!gmtime_r(&tt, &tm)) return std::to_string(t);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string first_words(const std::string& text, size_t max_words, size_t max_bytes) {
  std::string out;
  size_t words = 0, i = 0;
  auto space = [&](size_t k) { return std::isspace(static_cast<unsigned char>(text[k])) != 0; };
  while (words < max_words) {
    while (i < text.size() && space(i)) ++i;
    size_t start = i;
    while (i < text.size() && !space(i)) ++i;
    if (i == start) break;
    if (!out.empty()) out += ' ';
    out.append(text, start, i - start);
    ++words;
  }
  bool cut = false;
  if (out.size() > max_bytes) {  // cut on a UTF-8 boundary
    size_t at = max_bytes;
    while (at > 0 && (static_cast<unsigned char>(out[at]) & 0xC0) == 0x80) --at;
    out.resize(at);
    cut = true;
  }
  while (i < text.size() && space(i)) ++i;
  return cut || i < text.size() ? out + " ..." : out;
}

struct HeadStats {
  uint64_t rows = 0, doc_kept = 0;
};

struct Stats {
  std::vector<std::vector<HeadStats>> heads;  // (L, Hkv)
  uint64_t rows = 0, doc_kept = 0, doc_total = 0;
};

Stats gather(const CacheReader& r) {
  const CacheHeader& h = r.header();
  Stats st;
  st.doc_total = uint64_t{h.n_layers} * h.n_kv_heads * h.document_tokens.size();
  for (uint32_t l = 0; l < h.n_layers; ++l) {
    auto rows = r.head_rows(l);
    auto pos = r.positions(l);
    auto& layer = st.heads.emplace_back(h.n_kv_heads);
    size_t at = 0;
    for (uint32_t hd = 0; hd < h.n_kv_heads; ++hd) {
      layer[hd].rows = rows[hd];
      for (uint32_t i = 0; i < rows[hd]; ++i, ++at)
        layer[hd].doc_kept += pos[at] >= h.prefix_length();
      st.rows += layer[hd].rows;
      st.doc_kept += layer[hd].doc_kept;
    }
  }
  return st;
}

double percent(uint64_t part, uint64_t whole) { return whole ? 100.0 * part / whole : 100.0; }

const char* scaling_name(RopeScalingKind k) {
  static constexpr EnumName<RopeScalingKind> kNames[] = {{RopeScalingKind::None, "none"},
                                                         {RopeScalingKind::Linear, "linear"},
                                                         {RopeScalingKind::Llama3, "llama3"}};
  return enum_name(kNames, k);
}

std::string scaling_text(const RopeScaling& s) {
  std::string out = scaling_name(s.kind);
  if (s.kind == RopeScalingKind::Linear) out += " factor " + shortest(s.factor);
  if (s.kind == RopeScalingKind::Llama3)
    out += " factor " + shortest(s.factor) + " low " + shortest(s.low_freq_factor) + " high " +
           shortest(s.high_freq_factor) + " original context " + std::to_string(s.original_context);
  return out;
}

bool all_checked(const std::vector<SectionInfo>& sections) {
  for (const SectionInfo& s : sections)
    if (s.status != ChecksumStatus::Ok) return false;
  return true;
}

void text_sections(std::ostringstream& o, const std::vector<SectionInfo>& sections) {
  o << "sections\n";
  char line[200];
  std::snprintf(line, sizeof line, "  %3s  %-9s %5s  %-5s %12s %12s %12s  %-18s  %s\n", "#", "kind",
                "layer", "codec", "offset", "stored", "raw", "xxh64", "checksum");
  o << line;
  for (size_t i = 0; i < sections.size(); ++i) {
    const SectionInfo& s = sections[i];
    std::string kind = s.name == "unknown" ? "kind" + std::to_string(s.kind) : s.name;
    std::string layer = s.name == "kv" ? std::to_string(s.layer) : "-";
    std::snprintf(
        line, sizeof line, "  %3zu  %-9s %5s  %-5s %12llu %12llu %12llu  %-18s  %s\n", i,
        kind.c_str(), layer.c_str(), codec_name(s.codec), static_cast<unsigned long long>(s.offset),
        static_cast<unsigned long long>(s.stored_size), static_cast<unsigned long long>(s.raw_size),
        detail::hex64(s.checksum).c_str(), s.status == ChecksumStatus::Ok ? "ok" : "unchecked");
    o << line;
  }
}

void text_retention(std::ostringstream& o, const CacheHeader& h, const Stats& st) {
  static const char kHeat[] = " .:-=+*#%@";  // 0..100% in ten steps
  uint64_t n_c = h.document_tokens.size();
  o << "retention    document rows kept, % of " << n_c
    << " per layer and KV head; heat \" .:-=+*#%@\" = 0..100%\n";
  o << "  layer   all";
  for (uint32_t hd = 0; hd < h.n_kv_heads; ++hd) {
    std::string name = std::to_string(hd);
    name.insert(name.begin(), 'h');
    o << std::string(name.size() < 5 ? 5 - name.size() : 1, ' ') << name;
  }
  o << "  heat\n";
  for (uint32_t l = 0; l < h.n_layers; ++l) {
    uint64_t kept = 0;
    std::string heat, cols;
    for (const HeadStats& hs : st.heads[l]) {
      kept += hs.doc_kept;
      double p = percent(hs.doc_kept, n_c);
      cols += fmt(" %4.0f", p);
      heat += kHeat[std::min(9, static_cast<int>(p / 10.0))];
    }
    o << fmt("  %5.0f", l) << fmt(" %5.0f", percent(kept, n_c * h.n_kv_heads)) << cols << "  "
      << heat << "\n";
  }
}

std::string describe_text(const CacheReader& r, const DescribeOptions& opt) {
  const CacheHeader& h = r.header();
  Stats st = gather(r);
  auto sections = r.sections();
  std::ostringstream o;
  o << "kvzip cache  " << escape(opt.file_name, false) << "\n";
  o << "format       v" << r.version_major() << "." << r.version_minor() << ", " << r.file_size()
    << " bytes, " << sections.size() << " sections\n";
  o << "tool         " << escape(h.tool_version, false) << "\n";
  o << "created      " << iso_time(h.created_unix) << "\n";
  o << "model        " << escape(h.model.arch, false) << " \"" << escape(h.model.name, false)
    << "\"\n";
  o << "fingerprint  tokenizer " << detail::hex64(h.model.tokenizer_hash) << " weights "
    << detail::hex64(h.model.weights_hash) << "\n";
  o << "shape        layers " << h.n_layers << ", kv heads " << h.n_kv_heads << ", head dim "
    << h.head_dim << "\n";
  o << "rope         half-split, base " << shortest(h.rope_base) << ", scaling "
    << scaling_text(h.rope_scaling) << "\n";
  if (!h.local_layers.empty()) {
    std::string list;
    uint32_t n_local = 0;
    for (size_t l = 0; l < h.local_layers.size(); ++l)
      if (h.local_layers[l]) {
        if (n_local++) list += ',';
        list += std::to_string(l);
      }
    o << "attention    hybrid: " << n_local << " sliding-window layers (" << list << "), window "
      << h.sliding_window << ", rope base " << shortest(h.rope_local_base) << "; ratio counts the "
      << h.n_layers - n_local << " global layers\n";
  }
  o << "kv dtype     " << dtype_name(h.kv_dtype);
  if (dtype_quantized(h.kv_dtype)) {
    o << ", groups of " << h.kv_group_size
      << " channels (byte scale code + zero point each), per-head "
      << "channel scales; ";
    if (h.kv_f16_below > 0) o << "rows at positions < " << h.kv_f16_below << " stored as f16";
    else o << "no f16 rows";
    o << "; codes of Hadamard-rotated rows";
  }
  o << "\n";
  o << "tokens       logical " << h.logical_length() << " = prefix " << h.prefix_length()
    << " + document " << h.document_tokens.size() << "; suffix template " << h.suffix_tokens.size()
    << "\n";
  o << "document     " << h.document_text.size() << " bytes: \""
    << escape(first_words(h.document_text, 16, 120), false) << "\"\n";
  o << "method       " << escape(h.method, false);
  for (size_t i = 0; i < h.params.size(); ++i)
    o << (i ? ", " : " (") << escape(h.params[i].first, false) << "="
      << escape(h.params[i].second, false) << (i + 1 == h.params.size() ? ")" : "");
  o << "\n";
  if (h.local_layers.empty()) {
    o << "ratio        requested " << fmt("%.4f", h.requested_ratio) << ", achieved "
      << fmt("%.4f", h.achieved_ratio) << " (" << st.doc_kept << " of " << st.doc_total
      << " document rows kept)\n";
  } else {  // the ratio is over the global layers; every layer's rows beside it
    o << "ratio        requested " << fmt("%.4f", h.requested_ratio) << ", achieved "
      << fmt("%.4f", h.achieved_ratio) << " of the global layers' document rows; all layers "
      << st.doc_kept << " of " << st.doc_total << " ("
      << fmt("%.4f", st.doc_total ? double(st.doc_kept) / double(st.doc_total) : 1.0) << ")\n";
  }
  o << "rows         " << st.rows << " kept in all layers and heads (" << st.rows - st.doc_kept
    << " prefix, always kept)\n";
  o << "scores       " << (r.has_scores() ? "yes (prune without the model is possible)" : "no")
    << "\n";
  o << "checksums    "
    << (all_checked(sections)
            ? "all " + std::to_string(sections.size()) + " sections verified"
            : std::string("metadata verified; K/V data not checked yet (checked by a full verify)"))
    << "\n";
  text_sections(o, sections);
  text_retention(o, h, st);
  return o.str();
}

std::string jstr(const std::string& s) {
  std::string out(1, '"');
  out += escape(s, true);
  out += '"';
  return out;
}

std::string describe_json(const CacheReader& r, const DescribeOptions& opt) {
  const CacheHeader& h = r.header();
  Stats st = gather(r);
  auto sections = r.sections();
  const RopeScaling& rs = h.rope_scaling;
  std::ostringstream o;
  o << "{\n  \"file\": " << jstr(opt.file_name) << ",\n";
  o << "  \"format_version\": \"" << r.version_major() << "." << r.version_minor() << "\",\n";
  o << "  \"file_size\": " << r.file_size() << ",\n";
  o << "  \"tool_version\": " << jstr(h.tool_version) << ",\n";
  o << "  \"created_unix\": " << h.created_unix << ",\n  \"created\": \""
    << iso_time(h.created_unix) << "\",\n";
  o << "  \"model\": {\"arch\": " << jstr(h.model.arch) << ", \"name\": " << jstr(h.model.name)
    << ", \"tokenizer_hash\": \"" << detail::hex64(h.model.tokenizer_hash)
    << "\", \"weights_hash\": \"" << detail::hex64(h.model.weights_hash) << "\"},\n";
  o << "  \"shape\": {\"n_layers\": " << h.n_layers << ", \"n_kv_heads\": " << h.n_kv_heads
    << ", \"head_dim\": " << h.head_dim << "},\n";
  o << "  \"rope\": {\"layout\": \"half-split\", \"base\": " << shortest(h.rope_base)
    << ", \"scaling\": {\"kind\": \"" << scaling_name(rs.kind)
    << "\", \"factor\": " << shortest(rs.factor)
    << ", \"low_freq_factor\": " << shortest(rs.low_freq_factor)
    << ", \"high_freq_factor\": " << shortest(rs.high_freq_factor)
    << ", \"original_context\": " << rs.original_context << "}},\n";
  o << "  \"kv_dtype\": \"" << dtype_name(h.kv_dtype) << "\",\n";
  if (dtype_quantized(h.kv_dtype)) o << "  \"kv_group_size\": " << h.kv_group_size << ",\n";
  if (dtype_quantized(h.kv_dtype)) o << "  \"kv_f16_below\": " << h.kv_f16_below << ",\n";
  o << "  \"tokens\": {\"logical\": " << h.logical_length() << ", \"prefix\": " << h.prefix_length()
    << ", \"document\": " << h.document_tokens.size() << ", \"suffix\": " << h.suffix_tokens.size()
    << "},\n";
  o << "  \"document\": {\"bytes\": " << h.document_text.size()
    << ", \"preview\": " << jstr(first_words(h.document_text, 16, 120)) << "},\n";
  o << "  \"method\": " << jstr(h.method) << ",\n  \"params\": {";
  for (size_t i = 0; i < h.params.size(); ++i)
    o << (i ? ", " : "") << jstr(h.params[i].first) << ": " << jstr(h.params[i].second);
  o << "},\n";
  o << "  \"ratio\": {\"requested\": " << shortest(h.requested_ratio)
    << ", \"achieved\": " << shortest(h.achieved_ratio) << "},\n";
  if (!h.local_layers.empty()) {
    o << "  \"hybrid\": {\"local_layers\": [";
    bool first = true;
    for (size_t l = 0; l < h.local_layers.size(); ++l)
      if (h.local_layers[l]) o << (first ? "" : ", ") << l, first = false;
    o << "], \"sliding_window\": " << h.sliding_window
      << ", \"rope_local_base\": " << shortest(h.rope_local_base)
      << ", \"ratio_counts\": \"global layers\"},\n";
  }
  o << "  \"document_rows\": {\"kept\": " << st.doc_kept << ", \"total\": " << st.doc_total
    << "},\n";
  o << "  \"rows\": " << st.rows << ",\n  \"has_scores\": " << (r.has_scores() ? "true" : "false")
    << ",\n";
  o << "  \"checksums\": \"" << (all_checked(sections) ? "verified" : "metadata_only") << "\",\n";
  o << "  \"sections\": [\n";
  for (size_t i = 0; i < sections.size(); ++i) {
    const SectionInfo& s = sections[i];
    o << "    {\"index\": " << i << ", \"kind\": \"" << s.name << "\", \"kind_id\": " << s.kind
      << ", \"layer\": " << s.layer << ", \"optional\": " << (s.optional ? "true" : "false")
      << ", \"codec\": \"" << codec_name(s.codec) << "\", \"offset\": " << s.offset
      << ", \"stored\": " << s.stored_size << ", \"raw\": " << s.raw_size << ", \"xxh64\": \""
      << detail::hex64(s.checksum) << "\", \"checksum\": \""
      << (s.status == ChecksumStatus::Ok ? "ok" : "unchecked") << "\"}"
      << (i + 1 < sections.size() ? "," : "") << "\n";
  }
  o << "  ],\n  \"retention\": [\n";
  for (uint32_t l = 0; l < h.n_layers; ++l) {
    o << "    {\"layer\": " << l << ", \"heads\": [";
    for (uint32_t hd = 0; hd < h.n_kv_heads; ++hd) {
      const HeadStats& hs = st.heads[l][hd];
      o << (hd ? ", " : "") << "{\"rows\": " << hs.rows << ", \"document_kept\": " << hs.doc_kept
        << "}";
    }
    o << "]}" << (l + 1 < h.n_layers ? "," : "") << "\n";
  }
  o << "  ]\n}\n";
  return o.str();
}

}  // namespace

std::string describe(const CacheReader& reader, const DescribeOptions& options) {
  return options.json ? describe_json(reader, options) : describe_text(reader, options);
}

}  // namespace kvzip::format
