// Opening a .kvz file: every check of spec "Corruption conditions", in the spec's order —
// magic, version, preamble checksum and reserved fields, section table (checksum, reserved bits,
// overflow, range, alignment, tiling), file length, required sections, meta, index, positions,
// scores. Nothing is used before it is validated; every message names the field and the value.
#include <cmath>
#include <cstring>

#include "format/detail/codec.h"
#include "format/detail/dtype.h"
#include "format/detail/meta.h"
#include "format/detail/quant.h"
#include "format/detail/reader_impl.h"

namespace kvzip::format {
namespace {

using namespace detail;

std::string hex_bytes(const uint8_t* p, size_t n) {
  static const char* digits = "0123456789ABCDEF";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    if (i) s += ' ';
    s += digits[p[i] >> 4];
    s += digits[p[i] & 15];
  }
  return s;
}

struct Ctx {
  CacheReader::Impl& r;
  [[noreturn]] void fail(Errc code, const std::string& what) const {
    throw Error(code, r.name + ": " + what);
  }
};

void check_preamble(Ctx c) {
  auto& r = c.r;
  const uint8_t* b = r.base;
  if (r.size < 8) {
    if (r.size == 0 || std::memcmp(b, kMagic, r.size) == 0)
      c.fail(Errc::truncated, "file is " + std::to_string(r.size) +
                                  " bytes long and ends inside the 8-byte magic; it was cut short");
    c.fail(Errc::bad_magic, "first bytes are " + hex_bytes(b, r.size) + ", expected " +
                                hex_bytes(kMagic, 8) + "; this is not a .kvz cache file");
  }
  if (std::memcmp(b, kMagic, 8) != 0)
    c.fail(Errc::bad_magic, "first 8 bytes are " + hex_bytes(b, 8) + ", expected " +
                                hex_bytes(kMagic, 8) + "; this is not a .kvz cache file");
  if (r.size < 12)
    c.fail(Errc::truncated,
           "file is " + std::to_string(r.size) + " bytes long and ends inside the version");
  r.major = load_u16(b + kOffMajor);
  r.minor = load_u16(b + kOffMinor);
  if (r.major != kVersionMajor)
    c.fail(Errc::version_unsupported, "cache was written with format v" + std::to_string(r.major) +
                                          "." + std::to_string(r.minor) +
                                          "; this build reads v1.x only" +
                                          (r.major > 1 ? " (update kvzip)" : ""));
  if (r.size < kPreambleSize)
    c.fail(Errc::truncated, "file is " + std::to_string(r.size) +
                                " bytes long and ends inside the 64-byte preamble");
  uint64_t want = load_u64(b + kOffHeaderChecksum), got = xxh64(b, kOffHeaderChecksum);
  if (want != got)
    c.fail(Errc::checksum_mismatch, "preamble Header_Checksum is " + hex64(want) +
                                        " but bytes 0..55 hash to " + hex64(got) +
                                        "; the file header is damaged");
  uint32_t flags = load_u32(b + kOffHeaderFlags);
  if (flags != 0)
    c.fail(Errc::corrupt,
           "Header_Flags (byte 12) is " + std::to_string(flags) + "; reserved, MUST be 0 in v1");
  if (load_u64(b + kOffReserved) != 0)
    c.fail(Errc::corrupt, "preamble Reserved field (byte 48) is not 0");
}

void check_table_bounds(Ctx c) {
  auto& r = c.r;
  const uint8_t* b = r.base;
  uint64_t count = load_u64(b + kOffSectionCount);
  if (count == 0 || count > kMaxSections)
    c.fail(Errc::corrupt, "Section_Count " + std::to_string(count) + " outside [1, " +
                              std::to_string(kMaxSections) + "] (reader limit)");
  uint64_t table_end = kPreambleSize + count * kEntrySize;
  r.data_offset = load_u64(b + kOffDataOffset);
  r.data_size = load_u64(b + kOffDataSize);
  uint64_t want_offset = *checked_align(table_end);
  if (r.data_offset != want_offset)
    c.fail(Errc::corrupt, "Data_Offset " + std::to_string(r.data_offset) + ", expected " +
                              std::to_string(want_offset) +
                              " (end of the section table rounded up to 4096)");
  if (r.data_size % kAlign != 0)
    c.fail(Errc::corrupt,
           "Data_Size " + std::to_string(r.data_size) + " is not a multiple of 4096");
  if (!checked_add(r.data_offset, r.data_size))
    c.fail(Errc::corrupt, "count overflow: Data_Offset " + std::to_string(r.data_offset) +
                              " + Data_Size " + std::to_string(r.data_size) +
                              " does not fit 64 bits");
  if (r.size < table_end)
    c.fail(Errc::truncated,
           "file is " + std::to_string(r.size) + " bytes long and ends inside the section table (" +
               std::to_string(count) + " entries end at byte " + std::to_string(table_end) + ")");
  uint64_t want = load_u64(b + kOffTableChecksum),
           got = xxh64(b + kPreambleSize, count * kEntrySize);
  if (want != got)
    c.fail(Errc::checksum_mismatch, "Table_Checksum is " + hex64(want) +
                                        " but the section table hashes to " + hex64(got) +
                                        "; the section table is damaged");
  r.entries.resize(count);
}

void parse_entry(Ctx c, size_t i, uint64_t& expected_offset) {
  auto& r = c.r;
  const uint8_t* e = r.base + kPreambleSize + i * kEntrySize;
  Entry& s = r.entries[i];
  s = Entry{load_u32(e + kEntKind),  load_u32(e + kEntFlags),   load_u32(e + kEntCodec),
            load_u32(e + kEntLayer), load_u64(e + kEntOffset),  load_u64(e + kEntStored),
            load_u64(e + kEntRaw),   load_u64(e + kEntChecksum)};
  std::string at = section_label(i, s.kind, s.layer);
  if (s.kind == 0) c.fail(Errc::corrupt, at + ": Section_Kind 0 is reserved");
  if (load_u64(e + kEntReserved) != 0 || load_u64(e + kEntReserved + 8) != 0)
    c.fail(Errc::corrupt, at + ": entry Reserved bytes 48..63 are not 0");
  if (s.flags & ~kFlagOptional)
    c.fail(Errc::corrupt, at + ": Section_Flags " + std::to_string(s.flags) +
                              " has reserved bits set (only bit 0 is defined)");
  auto padded = checked_align(s.stored);
  auto end = padded ? checked_add(s.offset, *padded) : std::nullopt;
  if (!end)
    c.fail(Errc::corrupt, at + ": count overflow: Offset " + std::to_string(s.offset) +
                              " + Stored_Size " + std::to_string(s.stored) +
                              " (rounded up to 4096) does not fit 64 bits");
  if (*end > r.data_size)
    c.fail(Errc::corrupt, at + ": offset out of range: occupies [" + std::to_string(s.offset) +
                              ", " + std::to_string(*end) + ") of a data area of " +
                              std::to_string(r.data_size) + " bytes");
  if (s.offset % kAlign != 0)
    c.fail(Errc::corrupt, at + ": bad alignment: Offset " + std::to_string(s.offset) +
                              " is not a multiple of 4096");
  if (s.offset < expected_offset)
    c.fail(Errc::corrupt, at + ": overlapping sections: starts at " + std::to_string(s.offset) +
                              " but the previous section ends at " +
                              std::to_string(expected_offset));
  if (s.offset > expected_offset)
    c.fail(Errc::corrupt, at + ": hole in the data area: starts at " + std::to_string(s.offset) +
                              " but the previous section ends at " +
                              std::to_string(expected_offset));
  expected_offset = *end;
  bool known = std::string(kind_name(s.kind)) != "unknown";
  if (!known) return;  // codec and sizes of unknown sections are not ours to judge
  if (s.codec != static_cast<uint32_t>(Codec::None) &&
      s.codec != static_cast<uint32_t>(Codec::Zstd))
    c.fail(Errc::unsupported, at + ": Codec " + std::to_string(s.codec) +
                                  " is not in this reader's registry (0 none, 1 zstd)");
  if (s.codec == static_cast<uint32_t>(Codec::None) && s.raw != s.stored)
    c.fail(Errc::corrupt, at + ": Raw_Size " + std::to_string(s.raw) +
                              " differs from Stored_Size " + std::to_string(s.stored) +
                              " with Codec none");
  if (r.options.max_section_bytes && s.raw > r.options.max_section_bytes)
    c.fail(Errc::unsupported, at + ": Raw_Size " + std::to_string(s.raw) +
                                  " exceeds the caller's limit of " +
                                  std::to_string(r.options.max_section_bytes) + " bytes");
}

void check_file_length(Ctx c) {
  auto& r = c.r;
  uint64_t want = r.data_offset + r.data_size;
  if (r.size > want)
    c.fail(Errc::corrupt, std::to_string(r.size - want) +
                              " trailing bytes after the data area (file should be " +
                              std::to_string(want) + " bytes)");
  if (r.size == want) return;
  if (r.size < r.data_offset)
    c.fail(Errc::truncated,
           "file ends at byte " + std::to_string(r.size) +
               " inside the padding before the data area (byte " + std::to_string(r.data_offset) +
               "); the file was cut short (expected " + std::to_string(want) + " bytes)");
  uint64_t end_in_data = r.size - r.data_offset;
  for (size_t i = 0; i < r.entries.size(); ++i) {
    const Entry& s = r.entries[i];
    uint64_t end = s.offset + *checked_align(s.stored);
    if (end > end_in_data)
      c.fail(Errc::truncated, "truncated in " + section_label(i, s.kind, s.layer) +
                                  ": the file ends at byte " + std::to_string(r.size) +
                                  " but the section occupies bytes [" +
                                  std::to_string(r.data_offset + s.offset) + ", " +
                                  std::to_string(r.data_offset + end) + "); expected " +
                                  std::to_string(want) + " bytes — the file was cut short");
  }
}

void assign_sections(Ctx c) {
  auto& r = c.r;
  for (size_t i = 0; i < r.entries.size(); ++i) {
    const Entry& s = r.entries[i];
    std::string at = section_label(i, s.kind, s.layer);
    bool optional = s.flags & kFlagOptional;
    size_t* slot = nullptr;
    bool must_be_optional = false;
    switch (static_cast<Kind>(s.kind)) {
      case Kind::Meta: slot = &r.meta; break;
      case Kind::Index: slot = &r.index; break;
      case Kind::Positions: slot = &r.positions_entry; break;
      case Kind::Scores:
        slot = &r.scores_entry;
        must_be_optional = true;
        break;
      case Kind::Kv: break;
      default:
        if (!optional)
          c.fail(Errc::unsupported, at + ": Section_Kind " + std::to_string(s.kind) +
                                        " is unknown to this reader and not marked optional; the "
                                        "file needs a newer kvzip");
        continue;  // unknown optional section: skipped
    }
    if (optional != must_be_optional)
      c.fail(Errc::corrupt, at + ": Optional flag is " + std::to_string(optional) +
                                ", the spec requires " + std::to_string(must_be_optional) +
                                " for this kind");
    if (!slot) continue;
    if (s.layer != 0)
      c.fail(Errc::corrupt,
             at + ": Section_Layer " + std::to_string(s.layer) + " must be 0 for this kind");
    if (*slot != CacheReader::Impl::kNone)
      c.fail(Errc::corrupt,
             at + ": duplicate section: " + section_label(*slot, s.kind, 0) + " has the same kind");
    *slot = i;
  }
  if (r.meta == CacheReader::Impl::kNone)
    c.fail(Errc::corrupt, "required section 'meta' is missing");
  if (r.index == CacheReader::Impl::kNone)
    c.fail(Errc::corrupt, "required section 'index' is missing");
  if (r.positions_entry == CacheReader::Impl::kNone)
    c.fail(Errc::corrupt, "required section 'positions' is missing");
}

void assign_kv(Ctx c) {
  auto& r = c.r;
  uint32_t n_layers = r.header.n_layers;
  r.kv.assign(n_layers, CacheReader::Impl::kNone);
  for (size_t i = 0; i < r.entries.size(); ++i) {
    const Entry& s = r.entries[i];
    if (s.kind != static_cast<uint32_t>(Kind::Kv)) continue;
    std::string at = section_label(i, s.kind, s.layer);
    if (s.layer >= n_layers)
      c.fail(Errc::corrupt, at + ": Section_Layer " + std::to_string(s.layer) +
                                " but model.n_layers is " + std::to_string(n_layers));
    if (r.kv[s.layer] != CacheReader::Impl::kNone)
      c.fail(Errc::corrupt,
             at + ": duplicate section: layer " + std::to_string(s.layer) + " appears twice");
    r.kv[s.layer] = i;
  }
  for (uint32_t l = 0; l < n_layers; ++l)
    if (r.kv[l] == CacheReader::Impl::kNone)
      c.fail(Errc::corrupt, "required section 'kv' of layer " + std::to_string(l) + " is missing");
}

void expect_raw(Ctx c, size_t i, uint64_t want, const std::string& why) {
  if (c.r.entries[i].raw != want)
    c.fail(Errc::corrupt, section_label(i, c.r.entries[i].kind, c.r.entries[i].layer) +
                              ": Raw_Size " + std::to_string(c.r.entries[i].raw) + ", expected " +
                              std::to_string(want) + " (" + why + ")");
}

void parse_index(Ctx c) {
  auto& r = c.r;
  const CacheHeader& h = r.header;
  uint64_t cells = uint64_t{h.n_layers} * h.n_kv_heads;
  expect_raw(c, r.index, cells * 16, "n_layers * n_kv_heads * 16");
  std::vector<uint8_t> bytes = r.decode_small(r.index);
  r.head_rows.resize(cells);
  r.layer_start.assign(h.n_layers + 1, 0);
  const bool quant = dtype_quantized(h.kv_dtype);
  const uint64_t esize = quant ? 0 : dtype_size(h.kv_dtype);
  for (uint32_t l = 0; l < h.n_layers; ++l) {
    uint64_t start = 0;
    for (uint32_t hd = 0; hd < h.n_kv_heads; ++hd) {
      const uint8_t* p = bytes.data() + (uint64_t{l} * h.n_kv_heads + hd) * 16;
      uint64_t rows = load_u64(p), row_start = load_u64(p + 8);
      auto at = [&] {
        return r.name + ": index layer " + std::to_string(l) + " head " + std::to_string(hd);
      };
      if (rows > h.logical_length())
        throw Error(Errc::corrupt, at() + ": Row_Count " + std::to_string(rows) +
                                       " exceeds the logical length " +
                                       std::to_string(h.logical_length()));
      if (row_start != start)
        throw Error(Errc::corrupt, at() + ": Row_Start " + std::to_string(row_start) +
                                       ", expected " + std::to_string(start) +
                                       " (sum of the previous heads' rows)");
      r.head_rows[uint64_t{l} * h.n_kv_heads + hd] = static_cast<uint32_t>(rows);
      start += rows;
    }
    r.layer_start[l + 1] = r.layer_start[l] + start;  // <= 2^10 * 2^10 * 2^32: no overflow
    // q8/q4: the size of a section depends on which rows are f16 rows; checked after the positions.
    if (quant) continue;
    auto kv_bytes = checked_mul(start, h.head_dim * 2 * esize);
    if (!kv_bytes)
      throw Error(Errc::corrupt, r.name + ": count overflow: layer " + std::to_string(l) +
                                     " rows " + std::to_string(start) +
                                     " * K/V row bytes does not fit 64 bits");
    expect_raw(c, r.kv[l], *kv_bytes, "2 * rows * head_dim * dtype size");
  }
  uint64_t total = r.layer_start[h.n_layers];
  expect_raw(c, r.positions_entry, total * 4, "4 bytes per kept row");
  if (r.scores_entry != CacheReader::Impl::kNone)
    expect_raw(c, r.scores_entry, total * 4, "4 bytes per kept row");
}

void parse_positions(Ctx c) {
  auto& r = c.r;
  const CacheHeader& h = r.header;
  std::vector<uint8_t> bytes = r.decode_small(r.positions_entry);
  r.positions.resize(bytes.size() / 4);
  if (!bytes.empty()) std::memcpy(r.positions.data(), bytes.data(), bytes.size());
  uint64_t row = 0;
  for (uint32_t l = 0; l < h.n_layers; ++l)
    for (uint32_t hd = 0; hd < h.n_kv_heads; ++hd) {
      uint32_t n = r.head_rows[uint64_t{l} * h.n_kv_heads + hd];
      for (uint32_t i = 0; i < n; ++i, ++row) {
        uint32_t p = r.positions[row];
        bool bad_range = p >= h.logical_length(), bad_order = i > 0 && p <= r.positions[row - 1];
        if (!bad_range && !bad_order) continue;
        std::string at = r.name + ": positions layer " + std::to_string(l) + " head " +
                         std::to_string(hd) + " row " + std::to_string(i) + ": position " +
                         std::to_string(p);
        if (bad_range)
          throw Error(Errc::corrupt,
                      at + " >= logical length " + std::to_string(h.logical_length()));
        throw Error(Errc::corrupt, at + " does not increase (previous " +
                                       std::to_string(r.positions[row - 1]) + ")");
      }
    }
}

// q8/q4: each KV section's Raw_Size, now that the positions say which rows are f16 rows
// (rows <= 2^42 and D <= 4096: the size cannot overflow 64 bits).
void check_quant_sections(Ctx c) {
  auto& r = c.r;
  const CacheHeader& h = r.header;
  if (!dtype_quantized(h.kv_dtype)) return;
  for (uint32_t l = 0; l < h.n_layers; ++l) {
    const uint64_t first = r.layer_start[l], rows = r.layer_start[l + 1] - first;
    std::span<const uint32_t> pos(r.positions.data() + first, rows);
    auto kv_bytes = quant_section_bytes(h, rows, f16_row_count(h, pos));
    if (!kv_bytes)  // cannot happen within the limits of §16; kept as a check, not an assumption
      throw Error(Errc::corrupt,
                  r.name + ": count overflow: layer " + std::to_string(l) + " K/V bytes");
    expect_raw(
        c, r.kv[l], *kv_bytes,
        "2 * (Hkv * D * 4 + f16_rows * D * 2 + other_rows * (2 * D / group + D * bits / 8)), "
        "the q8/q4 layout");
  }
}

void parse_scores(Ctx c) {
  auto& r = c.r;
  if (r.scores_entry == CacheReader::Impl::kNone) return;
  std::vector<uint8_t> bytes = r.decode_small(r.scores_entry);
  r.scores.resize(bytes.size() / 4);
  if (!bytes.empty()) std::memcpy(r.scores.data(), bytes.data(), bytes.size());
  for (size_t i = 0; i < r.scores.size(); ++i)
    if (std::isnan(r.scores[i]))
      c.fail(Errc::corrupt, "scores row " + std::to_string(i) + " is NaN");
}

}  // namespace

void CacheReader::Impl::parse() {
  Ctx c{*this};
  check_preamble(c);
  check_table_bounds(c);
  uint64_t expected_offset = 0;
  for (size_t i = 0; i < entries.size(); ++i) parse_entry(c, i, expected_offset);
  if (expected_offset != data_size)
    c.fail(Errc::corrupt, "hole in the data area: sections end at " +
                              std::to_string(expected_offset) + " but Data_Size is " +
                              std::to_string(data_size));
  check_file_length(c);
  checked = std::make_unique<std::atomic<uint8_t>[]>(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) checked[i] = 0;
  assign_sections(c);
  if (entries[meta].raw > kMaxMetaBytes)
    c.fail(Errc::unsupported, section_label(meta, entries[meta].kind, 0) + ": Raw_Size " +
                                  std::to_string(entries[meta].raw) +
                                  " exceeds the reader limit of 256 MiB");
  std::vector<uint8_t> meta_bytes = decode_small(meta);
  header = decode_meta(meta_bytes.data(), meta_bytes.size(), label(meta));
  assign_kv(c);
  finite = std::make_unique<std::atomic<uint8_t>[]>(header.n_layers);
  for (uint32_t l = 0; l < header.n_layers; ++l) finite[l] = 0;
  parse_index(c);
  parse_positions(c);
  check_quant_sections(c);
  parse_scores(c);
  if (options.verify == Verify::Full) verify_all();
}

}  // namespace kvzip::format
