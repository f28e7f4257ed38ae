// `kvzip inspect | prune | export | import`: the cache-file subcommands. Thin: each parses its
// options and calls format/ (describe, prune, export_hdf5, import_hdf5, write_cache_file);
// errors propagate as kvzip::Error and main.cc maps them to exit statuses.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "common/atomic_file.h"
#include "compress/quantize.h"
#include "format/format.h"
#include "format/head_scores.h"
#include "format/scorer_file.h"

namespace kvzip::cli {
namespace {

namespace fmt = kvzip::format;

struct InspectArgs {
  std::string file;
  bool json = false;
  bool verify = false;
};

struct PruneArgs {
  std::string file, out;
  std::string kv_dtype;  // "": as the input (a q8/q4 input keeps its stored rows as they are)
  uint32_t kv_group = 0;
  RemovedKvLayoutOptions removed;  // --kv-rotate, --kv-params: refused with a message
  double ratio = 0;
  bool force = false;
  int zstd = -1;  // -1: compress like the input
};

struct ExportArgs {
  std::string file, out;
  bool force = false;
};

struct ImportArgs {
  std::string file, out;
  std::string kv_dtype;  // "": as the HDF5 file says
  uint32_t kv_group = 0;
  RemovedKvLayoutOptions removed;  // --kv-rotate, --kv-params: refused with a message
  bool force = false;
  int zstd = 0;
};

// --kv-dtype of prune/import: nothing given keeps the cache's dtype (and a q8/q4 cache's stored
// rows); a dtype converts (q8/q4: quantized from the f32 rows the file gives).
void apply_kv_dtype(fmt::CacheContents& c, const std::string& dtype, uint32_t group,
                    const RemovedKvLayoutOptions& removed, const char* command) {
  reject_removed_kv_layout_options(removed, command);
  if (dtype.empty()) {
    if (group && group != c.header.kv_group_size)
      throw Error(Errc::invalid_argument,
                  std::string(command) + ": --kv-group needs --kv-dtype q8 or q4");
    return;
  }
  const fmt::DType t = parse_kv_dtype(dtype, command);
  // The same q8/q4 and group as stored: the stored rows stay.
  if (t == c.header.kv_dtype && fmt::dtype_quantized(t) &&
      (!group || group == c.header.kv_group_size))
    return;
  compress::set_kv_dtype(
      c, {t, group ? group : (t == c.header.kv_dtype ? c.header.kv_group_size : 0)});
}

// The first bytes of a file (fewer when it is shorter), to tell a .kvh from a .kvz; errors are
// left to the real reader, which names them.
std::vector<uint8_t> first_bytes(const std::string& path) {
  std::vector<uint8_t> b(8);
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(b.data()), static_cast<std::streamsize>(b.size()));
  b.resize(in ? b.size() : static_cast<size_t>(std::max<std::streamsize>(in.gcount(), 0)));
  return b;
}

void run_inspect(const InspectArgs& a) {
  if (fmt::looks_like_head_scores(first_bytes(a.file))) {          // a `kvzip calibrate` file
    const fmt::HeadScores h = fmt::read_head_scores_file(a.file);  // checksum always verified
    const std::string text =
        fmt::describe_head_scores(h, std::filesystem::path(a.file).filename().string(), a.json);
    std::fwrite(text.data(), 1, text.size(), stdout);
    return;
  }
  if (fmt::looks_like_scorer_file(first_bytes(a.file))) {     // a `kvzip calibrate --scorer` file
    const fmt::ScorerFile s = fmt::read_scorer_file(a.file);  // checksum always verified
    const std::string text =
        fmt::describe_scorer_file(s, std::filesystem::path(a.file).filename().string(), a.json);
    std::fwrite(text.data(), 1, text.size(), stdout);
    return;
  }
  fmt::OpenOptions o;
  o.verify = a.verify ? fmt::Verify::Full : fmt::Verify::OnAccess;
  fmt::CacheReader r = fmt::CacheReader::open(a.file, o);
  const std::string text = fmt::describe(r, {a.json, a.file});
  std::fwrite(text.data(), 1, text.size(), stdout);
}

// Write options that keep the input's choice: zstd (level 3) where its sections were compressed.
fmt::WriteOptions like_input(const fmt::CacheReader& r, int zstd, bool force) {
  fmt::WriteOptions w;
  w.force = force;
  if (zstd >= 0) {
    w.zstd_level = zstd;
    return w;
  }
  bool meta_z = false, kv_z = false;
  for (const fmt::SectionInfo& s : r.sections()) {
    if (s.codec != fmt::Codec::Zstd) continue;
    (s.name == "kv" ? kv_z : meta_z) = true;
  }
  w.zstd_level = meta_z || kv_z ? 3 : 0;
  w.compress_kv = kv_z;
  return w;
}

void run_prune(const PruneArgs& a) {
  reject_removed_kv_layout_options(a.removed, "prune");  // before any work
  check_writable(a.out, a.force);
  fmt::CacheReader r = fmt::CacheReader::open(a.file, {fmt::Verify::Full});
  fmt::CacheContents pruned = fmt::prune(r.load(), a.ratio);
  apply_kv_dtype(pruned, a.kv_dtype, a.kv_group, a.removed, "prune");
  fmt::write_cache_file(pruned, a.out, like_input(r, a.zstd, a.force));
  std::printf("%s: ratio %.4f -> %.4f, written to %s\n", a.file.c_str(), r.header().achieved_ratio,
              pruned.header.achieved_ratio, a.out.c_str());
}

void run_export(const ExportArgs& a) {
  check_writable(a.out, a.force);
  fmt::CacheReader r = fmt::CacheReader::open(a.file, {fmt::Verify::Full});
  fmt::export_hdf5(r.load(), a.out, a.force);
  std::printf("%s: exported to %s\n", a.file.c_str(), a.out.c_str());
}

void run_import(const ImportArgs& a) {
  reject_removed_kv_layout_options(a.removed, "import");  // before any work
  check_writable(a.out, a.force);
  fmt::CacheContents c = fmt::import_hdf5(a.file);
  apply_kv_dtype(c, a.kv_dtype, a.kv_group, a.removed, "import");
  fmt::WriteOptions w;
  w.force = a.force;
  w.zstd_level = a.zstd;
  fmt::write_cache_file(c, a.out, w);
  std::printf("%s: imported to %s\n", a.file.c_str(), a.out.c_str());
}

}  // namespace

void add_format_commands(CLI::App& app) {
  auto inspect = std::make_shared<InspectArgs>();
  CLI::App* c = app.add_subcommand("inspect",
                                   "Show what a .kvz cache file (or a .kvh head-scores file of "
                                   "`kvzip calibrate`) holds and check it");
  c->add_option("FILE", inspect->file, "cache file (.kvz) or head-scores file (.kvh)")->required();
  c->add_flag("--json", inspect->json, "machine-readable JSON instead of text");
  c->add_flag("--verify", inspect->verify,
              "check every checksum and decode every K/V section (zstd frames, finite values)");
  c->callback([inspect] { run_inspect(*inspect); });

  auto prune = std::make_shared<PruneArgs>();
  c = app.add_subcommand(
      "prune", "Keep a smaller fraction of a cache using its stored scores (no model needed)");
  c->add_option("FILE", prune->file, "cache file with scores")->required();
  c->add_option("--ratio", prune->ratio,
                "fraction of the document's KV pairs to keep, in (0, achieved]")
      ->required();
  c->add_option("-o,--output", prune->out, "output .kvz file")->required();
  add_force_option(c, prune->force);
  c->add_option("--zstd", prune->zstd, "zstd level 0 (off) .. 19; default: as the input");
  c->add_option(
      "--kv-dtype,--dtype", prune->kv_dtype,
      std::string(kKvDtypeHelp) + "; default: as the input (q8/q4 rows are not re-quantized)");
  c->add_option("--kv-group", prune->kv_group, kKvGroupHelp);
  add_removed_kv_layout_options(c, prune->removed);
  c->callback([prune] { run_prune(*prune); });

  auto exp = std::make_shared<ExportArgs>();
  c = app.add_subcommand("export",
                         "Write a cache's content as an HDF5 file (spec/kvzip_format.md)");
  c->add_option("FILE", exp->file, "cache file")->required();
  c->add_option("--hdf5", exp->out, "output .h5 file")->required();
  add_force_option(c, exp->force);
  c->callback([exp] { run_export(*exp); });

  auto imp = std::make_shared<ImportArgs>();
  c = app.add_subcommand("import", "Turn an HDF5 export back into a .kvz cache file");
  c->add_option("FILE", imp->file, "HDF5 file written by kvzip export")->required();
  c->add_option("-o,--output", imp->out, "output .kvz file")->required();
  add_force_option(c, imp->force);
  c->add_option("--zstd", imp->zstd, "zstd level 0 (off) .. 19");
  c->add_option("--kv-dtype,--dtype", imp->kv_dtype,
                std::string(kKvDtypeHelp) + "; default: as exported");
  c->add_option("--kv-group", imp->kv_group, kKvGroupHelp);
  add_removed_kv_layout_options(c, imp->removed);
  c->callback([imp] { run_import(*imp); });
}

}  // namespace kvzip::cli
