// The .kvz cache file (spec/kvzip_format.md, version 1): the in-memory content of a file
// (CacheContents), the one writer path (write_cache to a Sink), the mmap reader (CacheReader),
// re-pruning with stored scores, HDF5 export/import and the `inspect` dump. Depends only on
// common/, zstd, xxhash and HDF5. Every failure throws kvzip::Error; nothing here exits.
// Invariant kept by writer and reader alike: per layer the K and V rows are head-major and, within
// a head, in strictly increasing original position order — the layout of the runtime ragged cache.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/model_config.h"

namespace kvzip::format {

inline constexpr uint16_t kVersionMajor = 1;  // this build reads every v1.x
// The newest minor version this build writes (1: hybrid-attention models, min_minor). Readers
// decide nothing on it (the registry ids do), so a file of a later minor version that uses only
// known ids stays readable (spec "Compatibility").
inline constexpr uint16_t kVersionMinor = 1;

// Storage type of K/V rows; the value is the file's registry id (spec "Dtype registry"), never
// renumbered or reused. Ids 4 … 9 are reserved and refused. Q8 and Q4 are group-wise quantized
// in the one layout of spec §12.1 (f16 prefix rows, Hadamard-rotated rows, byte group parameters;
// kernels/kv_quant.h).
enum class DType : uint32_t { F32 = 1, F16 = 2, BF16 = 3, Q8 = 10, Q4 = 11 };
// Per-section encoding. Registry ids are never renumbered or reused.
enum class Codec : uint32_t { None = 0, Zstd = 1 };
// Head-dim order of the stored keys. HalfSplit: RoPE rotates the pairs (i, i + D/2).
enum class RopeLayout : uint32_t { HalfSplit = 1 };

const char* dtype_name(DType t);  // "f32", "f16", "bf16", "q8", "q4"
uint32_t dtype_size(DType t);     // bytes per element; q8/q4 have none (internal)
bool dtype_quantized(DType t);    // q8, q4
uint32_t dtype_bits(DType t);     // bits per stored K/V value (codes for q8/q4)
std::optional<DType> parse_dtype(std::string_view name);
struct CacheHeader;
// The minor version a file with this header records: 1 with local (sliding-window) layers (the
// model.local_layers keys), else 0.
uint16_t min_minor(const CacheHeader& h);
const char* codec_name(Codec c);  // "none", "zstd"

// The method parameter "query_template" says how a question follows the document at query time
// ("{question}" is replaced by its text); a file without it is read with this one.
inline constexpr const char* kDefaultQueryTemplate = "\n\nQuestion: {question}";

// Everything in the file except the K/V rows. prefix_length() and logical_length() are derived
// from the token lists so they can never disagree with them in memory.
struct CacheHeader {
  std::string tool_version;  // e.g. "kvzip 0.1.0"
  int64_t created_unix = 0;  // seconds since 1970-01-01T00:00:00Z
  ModelFingerprint model;    // arch, name, tokenizer hash, weights hash
  uint32_t n_layers = 0;     // L
  uint32_t n_kv_heads = 0;   // Hkv
  uint32_t head_dim = 0;     // D (even)
  RopeLayout rope_layout = RopeLayout::HalfSplit;
  float rope_base = 10000.0f;  // theta
  RopeScaling rope_scaling;
  // Hybrid attention (v1.1; Gemma 3): local_layers (L) marks the sliding-window layers, which see
  // only their last `sliding_window` positions and rotate with rope_local_base (unscaled); their
  // kept rows are the document's last window - 1 and the ratio counts the other layers' rows.
  // Empty: every layer global (sliding_window and rope_local_base 0).
  std::vector<uint8_t> local_layers;
  uint32_t sliding_window = 0;
  float rope_local_base = 0.0f;
  DType kv_dtype = DType::F32;  // how K/V rows are stored (LayerKv::k/v are f32 in memory)
  uint32_t kv_group_size = 0;   // q8/q4: channels per quantization group (divides D); else 0
  // q8/q4: rows at positions < kv_f16_below are stored as f16 instead of being quantized (kvzip
  // writes the prefix length: the attention sink and template opener, few rows that carry most of
  // the quantization's effect on answers; docs/quantized-kv.md); 0 = none. Else 0.
  uint32_t kv_f16_below = 0;
  std::vector<uint32_t> prefix_tokens;    // (n_p) system prompt + template opener + instruction
  std::vector<uint32_t> suffix_tokens;    // template tokens that follow the document at query time
  std::vector<uint32_t> document_tokens;  // (n_c)
  std::string document_text;              // bytes of the document (no NUL), for `inspect`
  std::string method;                     // scorer name, e.g. "kvzip"
  std::vector<std::pair<std::string, std::string>> params;  // method parameters, in order
  double requested_ratio = 1.0;  // fraction of the L*Hkv*n_c document rows asked to keep
  double achieved_ratio = 1.0;   // fraction actually kept

  uint64_t prefix_length() const { return prefix_tokens.size(); }
  uint64_t logical_length() const { return prefix_tokens.size() + document_tokens.size(); }
};

// Copies the ModelConfig subset the loader needs (L, Hkv, D, rope base and scaling) and the
// fingerprint into a header.
void set_model(CacheHeader& header, const ModelConfig& config, const ModelFingerprint& fp);

// The stored form of one layer's K (or V) rows under q8/q4 (spec "Quantized K/V"): per KV head a
// channel scale vector; the f16 rows (positions < kv_f16_below) as f16 values; per other row, the
// codes of its Hadamard-rotated values and one parameter word per group (scale code | zero point
// << 8; common/kv_params.h). Kept next to the f32 rows so that prune, export and import move rows
// without re-quantizing them. Rows are in layer order (head-major) within each array: the layer's
// f16 rows in `dense`, its quantized rows in params/codes.
struct QuantRows {
  std::vector<float> channel_scale;  // (Hkv, D)
  std::vector<uint16_t> dense;       // (R_f16, D) f16 bits of the f16 rows
  std::vector<uint16_t> params;      // (R - R_f16, D/Gs) common/kv_params.h byte-parameter words
  std::vector<uint8_t> codes;        // (R - R_f16, D·bits/8); q4: channel 2i in the low nibble
  bool empty() const {
    return channel_scale.empty() && dense.empty() && params.empty() && codes.empty();
  }
};

// One layer of a pruned cache. R = sum of head_rows.
struct LayerKv {
  std::vector<uint32_t> head_rows;  // (Hkv) kept rows per KV head
  std::vector<uint32_t> positions;  // (R) original positions, head-major, increasing in a head
  std::vector<float> k;             // (R, D) post-RoPE keys, rows in the order of positions
  std::vector<float> v;             // (R, D) values
  std::vector<float> scores;        // (R) importance of each kept row; empty without scores
  // q8/q4 only: the stored rows; k and v are then exactly their dequantization (the reader and
  // compress::quantize_kv keep it so). The writer of a q8/q4 file writes these bytes as they are
  // and refuses a layer without them (quantizing needs kernels/, which format/ does not link).
  QuantRows qk, qv;
};

// Dequantizes a layer's stored rows (heads as in head_rows, positions deciding which rows are
// f16) into x (R, D): the reader's reconstruction, y = c[h][j] * fma(s, q, m) in binary32 (s, m
// decoded by common/kv_params.h) and x = H·y (common/hadamard.h) for a quantized row, the f16
// value widened for an f16 row.
void dequantize_rows(const CacheHeader& header, std::span<const uint32_t> head_rows,
                     std::span<const uint32_t> positions, const QuantRows& q, std::span<float> x);
// How many of a layer's rows are f16 rows (positions < header.kv_f16_below).
uint64_t f16_row_count(const CacheHeader& header, std::span<const uint32_t> positions);

struct CacheContents {
  CacheHeader header;
  std::vector<LayerKv> layers;  // (L)
  bool has_scores = false;      // every layer carries scores (R_l each), or none does
};

// Throws Errc::invalid_argument naming the first field that the file could not represent
// (shape mismatch, unsorted positions, NUL in a string, ...). The writer calls it first.
void validate(const CacheContents& contents);

// ---- Writing ------------------------------------------------------------------------------

class Sink {
 public:
  virtual ~Sink() = default;
  virtual void write(const void* data, size_t size) = 0;  // throws on failure
};

// Counts bytes: write_cache into a CountingSink gives the exact file size.
class CountingSink final : public Sink {
 public:
  void write(const void*, size_t size) override { size_ += size; }
  uint64_t size() const { return size_; }

 private:
  uint64_t size_ = 0;
};

class VectorSink final : public Sink {
 public:
  void write(const void* data, size_t size) override;
  std::vector<uint8_t> bytes;
};

struct WriteOptions {
  int zstd_level = 0;       // 0: every section raw; 1..19: zstd at that level
  bool compress_kv = true;  // with zstd: K/V sections too (raw K/V allow zero-copy mmap reads)
  bool force = false;       // write_cache_file: replace an existing file
};

// Errc::invalid_argument unless zstd_level is in 0 (off) .. 19; write_cache calls it, and writers
// that do long work first call it before.
void check_write_options(const WriteOptions& options);

// The one serialisation path. Throws invalid_argument (validate) or whatever the sink throws.
void write_cache(const CacheContents& contents, Sink& sink, const WriteOptions& options = {});

// write_cache into `path` through write_file_atomically.
void write_cache_file(const CacheContents& contents, const std::string& path,
                      const WriteOptions& options = {});

// Creates `path` atomically through common/atomic_file.h: `body` writes into a temporary
// `path.tmp.<pid>.<hex>` in the same directory, which is fsynced and renamed onto `path`. Refuses
// an existing `path` unless force (Errc::invalid_argument). If anything throws, the temporary file
// is removed and `path` is untouched.
void write_file_atomically(const std::string& path, bool force,
                           const std::function<void(Sink&)>& body);

// ---- Reading ------------------------------------------------------------------------------

enum class Verify {
  Metadata,  // checksums of the small sections at open; K/V data is trusted (fastest)
  OnAccess,  // also, the first time a layer is read, its K/V checksum and that every K/V value
             // is finite (a NaN or infinity is Errc::corrupt naming layer, head and row) (default)
  Full,      // at open: every checksum, all padding, and every K/V section decoded (zstd to its
             // Raw_Size) and checked as OnAccess does (`kvzip inspect --verify`): a file that
             // opens with Full loads with every command
};

struct OpenOptions {
  Verify verify = Verify::OnAccess;
  // 0: no limit. Else a section whose Raw_Size exceeds it is refused (Errc::unsupported) before
  // anything is decoded; for untrusted input (the fuzz target sets it), since a small zstd
  // section can legitimately expand a thousandfold.
  uint64_t max_section_bytes = 0;
};

enum class ChecksumStatus { Unchecked, Ok };  // a mismatch throws Errc::checksum_mismatch

struct SectionInfo {
  uint32_t kind = 0;      // section kind id (spec "Section kinds"), unknown ids included
  std::string name;       // "meta", "index", "positions", "scores", "kv", "unknown"
  uint32_t layer = 0;     // for "kv": the layer; else 0
  bool optional = false;  // Optional flag of the section
  Codec codec = Codec::None;
  uint64_t offset = 0;       // relative to the data area
  uint64_t stored_size = 0;  // bytes in the file
  uint64_t raw_size = 0;     // bytes after decoding
  uint64_t checksum = 0;     // xxh64 of the stored bytes
  ChecksumStatus status = ChecksumStatus::Unchecked;
};

// Zero-copy K and V of one layer, pointing into the mapped file.
struct KvView {
  std::span<const float> k;  // (R, D)
  std::span<const float> v;  // (R, D)
};

// A validated, memory-mapped .kvz file. Opening checks every structure (counts, offsets, sizes
// with overflow checks, tiling, the small sections' checksums); errors name the field, the value
// and the expectation. Accessors are safe to call from several threads.
class CacheReader {
 public:
  static CacheReader open(const std::string& path, const OpenOptions& options = {});
  // Reads a file image held in memory; `bytes` must outlive the reader. Used by tests and fuzz.
  static CacheReader open_memory(std::span<const uint8_t> bytes, const OpenOptions& options = {});

  CacheReader(CacheReader&&) noexcept;
  CacheReader& operator=(CacheReader&&) noexcept;
  ~CacheReader();

  uint16_t version_major() const;
  uint16_t version_minor() const;
  uint64_t file_size() const;
  const CacheHeader& header() const;
  bool has_scores() const;

  std::span<const uint32_t> head_rows(uint32_t layer) const;  // (Hkv)
  uint64_t layer_rows(uint32_t layer) const;                  // R_l
  std::span<const uint32_t> positions(uint32_t layer) const;  // (R_l)
  std::span<const float> scores(uint32_t layer) const;        // (R_l), empty without scores

  // K/V stored raw as f32: views into the mapping (checksum checked per OpenOptions). Else empty.
  std::optional<KvView> kv_view(uint32_t layer) const;
  // Decodes K and V of a layer (any dtype, any codec) into caller buffers of R_l * D floats.
  void read_kv(uint32_t layer, std::span<float> k, std::span<float> v) const;
  // q8/q4: the layer's rows in their stored form, not widened (head_rows, positions, qk and qv;
  // k, v and scores empty): for attending to them in place (loader::quant_base_from_reader).
  // Checked as read_kv checks per OpenOptions: the checksum, the parameter and f16 values, and
  // that every value the rows reconstruct to is finite (from a bound on c·(s·q + m) per group;
  // only a layer whose bound is not finite is dequantized to check it exactly).
  // Errc::invalid_argument for a file of another dtype.
  LayerKv read_quant_layer(uint32_t layer) const;
  LayerKv load_layer(uint32_t layer) const;
  CacheContents load() const;

  void verify() const;  // the checks of Verify::Full, now
  std::vector<SectionInfo> sections() const;

  // Errc::model_mismatch with both fingerprints unless they match; with force returns false
  // instead of throwing. Returns true when they match.
  bool check_model(const ModelFingerprint& loaded, bool force) const;

  struct Impl;  // opaque (format/detail/reader_impl.h)

 private:
  explicit CacheReader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Errc::model_mismatch when the cache's L, Hkv, D or RoPE settings differ from the model's.
// Unlike check_model there is no force: a cache of another shape cannot be attended to.
void check_shape(const CacheHeader& header, const ModelConfig& config);

// ---- Re-pruning ---------------------------------------------------------------------------

// Keeps a smaller fraction `ratio` of the document rows using the stored scores: one global
// threshold over all kept document rows (positions >= prefix length) of every layer and head.
// Exactly k = round(ratio * L * Hkv * n_c) document rows stay: those scoring above the k-th best,
// then, among rows equal to it, the earliest in file order (layer, head, position) until k are
// kept; the same rule as compress::select_rows at the global level, so pruning at the ratio a
// cache was compressed at keeps it whole. Prefix rows always stay.
// invalid_argument when the cache has no scores, or ratio is outside (0, achieved_ratio].
CacheContents prune(const CacheContents& contents, double ratio);

// ---- HDF5 (spec "HDF5 layout") ------------------------------------------------------------

bool hdf5_available();  // false when built without HDF5 (then both calls throw unsupported)
void export_hdf5(const CacheContents& contents, const std::string& path, bool force);
CacheContents import_hdf5(const std::string& path);

// ---- inspect ------------------------------------------------------------------------------

struct DescribeOptions {
  bool json = false;
  std::string file_name;  // shown in the first line
};

// The stable, diffable text (or JSON) dump of `kvzip inspect`.
std::string describe(const CacheReader& reader, const DescribeOptions& options);

}  // namespace kvzip::format
