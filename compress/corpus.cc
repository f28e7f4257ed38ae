// Corpus mode (see corpus.h): manifest parsing, the stable shard rule, output keys, and the loop
// that compresses a shard with one document's failure kept to itself.
#include "compress/corpus.h"

#include <xxhash.h>

#include <unistd.h>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>

#include "common/enum_names.h"
#include "common/text_file.h"
#include "format/format.h"

namespace kvzip::compress {
namespace {

namespace fs = std::filesystem;

uint64_t xxh64(std::string_view s) { return XXH64(s.data(), s.size(), 0); }

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// One manifest line into an entry; throws Errc::invalid_argument with the reason.
void parse_line(const std::string& line, const std::string& where, const std::string& base_dir,
                CorpusEntry& e) {
  const Json v = parse_json(line, where);
  if (!v.is_object()) throw Error(Errc::invalid_argument, where + ": not a JSON object");
  static const std::set<std::string> known = {"id", "path", "text", "method", "ratio"};
  for (const auto& [key, value] : v.items()) {
    if (!known.count(key))
      throw Error(Errc::invalid_argument,
                  where + ": unknown field \"" + key + "\" (known: id, path, text, method, ratio)");
  }
  auto str = [&](const char* key) -> std::optional<std::string> {
    if (!v.contains(key) || v[key].is_null()) return std::nullopt;
    if (!v[key].is_string())
      throw Error(Errc::invalid_argument,
                  where + ": \"" + key + "\" is " + json_type_name(v[key]) + ", not a string");
    return v[key].get<std::string>();
  };
  const auto id = str("id");
  if (!id) throw Error(Errc::invalid_argument, where + ": no \"id\"");
  e.id = *id;
  if (!valid_cache_id(e.id))
    throw Error(Errc::invalid_argument,
                where + ": id \"" + e.id +
                    "\" is not a cache id (1..128 bytes of [A-Za-z0-9._-], not starting with .)");
  const auto path = str("path");
  const auto text = str("text");
  if (path.has_value() == text.has_value())
    throw Error(Errc::invalid_argument, where + ": give exactly one of \"path\" and \"text\"");
  if (path) {
    if (path->empty()) throw Error(Errc::invalid_argument, where + ": \"path\" is empty");
    const fs::path p(*path);
    e.path = p.is_absolute() || base_dir.empty() ? p.string() : (fs::path(base_dir) / p).string();
  } else {
    e.text = *text;
  }
  e.method = str("method");
  if (v.contains("ratio") && !v["ratio"].is_null()) {
    if (!v["ratio"].is_number())
      throw Error(Errc::invalid_argument,
                  where + ": \"ratio\" is " + json_type_name(v["ratio"]) + ", not a number");
    e.ratio = v["ratio"].get<double>();
  }
}

CorpusOutcome run_entry(const model::Model& model, const CorpusEntry& e, const CorpusOptions& o) {
  CorpusOutcome out;
  out.id = e.id;
  out.line = e.line;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    if (!e.error.empty()) throw Error(Errc::invalid_argument, e.error);
    out.output = (fs::path(o.out_dir) / (e.id + ".kvz")).string();
    CompressFileOptions fo = o.file;
    if (e.method) fo.compress.method = *e.method;
    if (e.ratio) fo.compress.ratio = *e.ratio;
    const std::string text = e.path.empty() ? (check_text(e.text, "document " + e.id), e.text)
                                            : read_text(e.path, "document");
    const std::string key = corpus_key(model.fingerprint(), text, fo);
    std::error_code ec;
    if (fs::exists(out.output, ec)) {
      // Skip an output that is complete, intact and made under the same key; anything else
      // (another key, a damaged or foreign file) is replaced.
      try {
        format::OpenOptions oo;
        oo.verify = format::Verify::Full;
        const format::CacheReader r = format::CacheReader::open(out.output, oo);
        for (const auto& [name, value] : r.header().params) {
          if (name == kCorpusKeyParam && value == key) {
            out.status = CorpusStatus::Skipped;
            out.achieved_ratio = r.header().achieved_ratio;
          }
        }
      } catch (const Error&) {}
    }
    if (out.status != CorpusStatus::Skipped) {
      fo.extra_params.emplace_back(kCorpusKeyParam, key);
      fo.write.force = true;  // the key decides, not the file's presence
      const CompressResult r = compress_to_file(model, text, fo, out.output);
      out.status = CorpusStatus::Done;
      out.achieved_ratio = r.achieved_ratio;
    }
  } catch (const Error& err) {
    out.status = CorpusStatus::Failed;
    out.code = err.code();
    out.error = err.what();
  } catch (const std::bad_alloc&) {
    out.status = CorpusStatus::Failed;
    out.code = Errc::out_of_memory;
    out.error = "out of memory compressing document " + e.id;
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace

bool valid_cache_id(std::string_view id) {
  if (id.empty() || id.size() > 128 || id[0] == '.') return false;  // no "..", no hidden files
  for (const char c : id) {
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::vector<CorpusEntry> parse_manifest(std::string_view text, const std::string& source,
                                        const std::string& base_dir) {
  std::vector<CorpusEntry> out;
  std::set<std::string> seen;
  uint64_t line_no = 0;
  for (size_t start = 0; start <= text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string line(text.substr(start, end - start));
    start = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    CorpusEntry e;
    e.line = line_no;
    const std::string where = source + ":" + std::to_string(line_no);
    try {
      check_text(line, where);
      parse_line(line, where, base_dir, e);
      if (!seen.insert(e.id).second)
        throw Error(Errc::invalid_argument,
                    where + ": id \"" + e.id + "\" appears on an earlier line");
    } catch (const Error& err) {
      e.error = err.what();
      if (!valid_cache_id(e.id)) e.id = "line " + std::to_string(line_no);
    }
    out.push_back(std::move(e));
    if (end == text.size()) break;
  }
  return out;
}

Shard parse_shard(std::string_view text) {
  const size_t slash = text.find('/');
  auto number = [&](std::string_view s, uint32_t& v) {
    if (s.empty() || s.size() > 9) return false;
    v = 0;
    for (const char c : s) {
      if (c < '0' || c > '9') return false;
      v = v * 10 + uint32_t(c - '0');
    }
    return true;
  };
  Shard s;
  if (slash == std::string_view::npos || !number(text.substr(0, slash), s.index) ||
      !number(text.substr(slash + 1), s.count) || s.count == 0 || s.index >= s.count)
    throw Error(Errc::invalid_argument, "shard " + std::string(text) +
                                            ": expected I/N with 0 <= I < N (e.g. "
                                            "$SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT)");
  return s;
}

uint32_t shard_of(std::string_view id, uint32_t count) {
  return static_cast<uint32_t>(xxh64(id) % (count ? count : 1));
}

std::string corpus_key(const ModelFingerprint& model, std::string_view text,
                       const CompressFileOptions& o) {
  const CompressOptions& c = o.compress;
  char ratio[40];
  std::snprintf(ratio, sizeof ratio, "%.17g", c.ratio);
  // One field a line; a field that cannot be named (a bad method) still gives a key: the
  // compression then fails with the method's own error.
  std::string s = "kvzip corpus key v1\nmodel " + model.arch + " " + hex64(model.tokenizer_hash) +
                  " " + hex64(model.weights_hash) + "\ndocument " + hex64(xxh64(text)) +
                  "\nmethod " + c.method + "\nratio " + ratio + "\nlevel " +
                  selection_level_name(c.level) + "\nsystem " + o.system + "\nquery_template " +
                  o.query_template + "\nkv_dtype " + format::dtype_name(o.kv.dtype) + "\n";
  if (format::dtype_quantized(o.kv.dtype))  // the group size too: another one is another file
    s += "kv_layout group " + std::to_string(o.kv.group) + "\n";
  try {
    for (const auto& [k, v] : make_method_scorer(c)->params()) s += "param " + k + " " + v + "\n";
  } catch (const Error&) {}
  if (!c.head.head_scores.empty()) {
    s += "head_window " + std::to_string(c.head.window) + "\nhead_scores " +
         hex64(XXH64(c.head.head_scores.data(), c.head.head_scores.size() * sizeof(float), 0)) +
         "\n";
  }
  return hex64(xxh64(s));
}

const char* corpus_status_name(CorpusStatus s) {
  static constexpr EnumName<CorpusStatus> kNames[] = {{CorpusStatus::Done, "done"},
                                                      {CorpusStatus::Skipped, "skipped"},
                                                      {CorpusStatus::Failed, "failed"}};
  return enum_name(kNames, s);
}

Json CorpusSummary::to_json() const {
  Json j = {{"shard", std::to_string(shard.index) + "/" + std::to_string(shard.count)},
            {"manifest_entries", manifest_entries},
            {"in_shard", in_shard},
            {"done", done},
            {"skipped", skipped},
            {"failed", failed},
            {"seconds", std::round(seconds * 1000) / 1000}};
  Json docs = Json::array();
  for (const CorpusOutcome& o : outcomes) {
    Json d = {{"id", o.id},
              {"line", o.line},
              {"status", corpus_status_name(o.status)},
              {"seconds", std::round(o.seconds * 1000) / 1000}};
    if (!o.output.empty()) d["output"] = o.output;
    if (o.status == CorpusStatus::Failed) {
      d["error"] = o.error;
      d["code"] = errc_name(o.code);
    } else {
      d["achieved_ratio"] = o.achieved_ratio;
    }
    docs.push_back(std::move(d));
  }
  j["documents"] = std::move(docs);
  return j;
}

CorpusSummary compress_corpus(const model::Model& model, const std::vector<CorpusEntry>& entries,
                              const CorpusOptions& o, const CorpusProgress& progress) {
  if (o.shard.count == 0 || o.shard.index >= o.shard.count)
    throw Error(Errc::invalid_argument, "corpus: shard " + std::to_string(o.shard.index) + "/" +
                                            std::to_string(o.shard.count) +
                                            " is not I/N with I < N");
  std::error_code ec;
  if (!fs::is_directory(o.out_dir, ec))
    throw Error(fs::exists(o.out_dir, ec) ? Errc::invalid_argument : Errc::not_found,
                "output folder " + o.out_dir + " is not an existing folder; create it first");
  if (::access(o.out_dir.c_str(), W_OK | X_OK) != 0)
    throw Error(Errc::io, "output folder " + o.out_dir + " is not writable");
  const auto t0 = std::chrono::steady_clock::now();
  CorpusSummary s;
  s.shard = o.shard;
  s.manifest_entries = entries.size();
  std::vector<const CorpusEntry*> mine;
  for (const CorpusEntry& e : entries)
    if (shard_of(e.id, o.shard.count) == o.shard.index) mine.push_back(&e);
  s.in_shard = mine.size();
  for (size_t i = 0; i < mine.size(); ++i) {
    CorpusOutcome r = run_entry(model, *mine[i], o);
    (r.status == CorpusStatus::Done      ? s.done
     : r.status == CorpusStatus::Skipped ? s.skipped
                                         : s.failed)++;
    if (progress) progress(r, i, mine.size());
    s.outcomes.push_back(std::move(r));
  }
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s;
}

}  // namespace kvzip::compress
