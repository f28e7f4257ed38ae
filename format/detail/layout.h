// On-disk constants of .kvz v1 (spec/kvzip_format.md): magic, fixed structure sizes, the section
// kind / meta type registries, the reader limits, little-endian field access and overflow-checked
// arithmetic. Shared by the writer and the reader so both agree on every number.
// The code assumes a little-endian host (static_assert below): the file is little-endian and the
// reader hands out zero-copy f32 views of it.
#pragma once
#include <bit>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

namespace kvzip::format::detail {

static_assert(std::endian::native == std::endian::little,
              "kvzip's .kvz code needs a little-endian host");

inline constexpr uint8_t kMagic[8] = {0x89, 'K', 'V', 'Z', 0x0D, 0x0A, 0x1A, 0x0A};
inline constexpr uint64_t kPreambleSize = 64;
inline constexpr uint64_t kEntrySize = 64;  // one section table entry
inline constexpr uint64_t kAlign = 4096;    // data area and every section start

// Preamble field offsets.
inline constexpr size_t kOffMajor = 8, kOffMinor = 10, kOffHeaderFlags = 12, kOffSectionCount = 16,
                        kOffDataOffset = 24, kOffDataSize = 32, kOffTableChecksum = 40,
                        kOffReserved = 48, kOffHeaderChecksum = 56;
// Section entry field offsets.
inline constexpr size_t kEntKind = 0, kEntFlags = 4, kEntCodec = 8, kEntLayer = 12, kEntOffset = 16,
                        kEntStored = 24, kEntRaw = 32, kEntChecksum = 40, kEntReserved = 48;

inline constexpr uint32_t kFlagOptional = 1u;  // Section_Flags bit 0

enum class Kind : uint32_t { Meta = 1, Index = 2, Positions = 3, Kv = 4, Scores = 5 };
enum class MetaType : uint32_t { U64 = 1, I64 = 2, F64 = 3, Str = 4, U32Array = 5 };

// Reader resource limits (spec "Reader limits").
inline constexpr uint64_t kMaxSections = 65536;
inline constexpr uint64_t kMaxLayers = 1024;
inline constexpr uint64_t kMaxKvHeads = 1024;
inline constexpr uint64_t kMaxHeadDim = 4096;
inline constexpr uint64_t kMaxMetaBytes = 256ull << 20;
inline constexpr uint64_t kMaxMetaEntries = 65536;
inline constexpr uint64_t kMaxKeyLength = 255;
inline constexpr uint64_t kMaxLogicalLength = 0xFFFFFFFFull;  // positions are u32

inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint64_t load_u64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline void store_u16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }
inline void store_u32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }
inline void store_u64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }

// Overflow-checked arithmetic: nullopt when the exact result does not fit 64 bits.
inline std::optional<uint64_t> checked_add(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}
inline std::optional<uint64_t> checked_mul(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}
inline std::optional<uint64_t> checked_align(uint64_t v) {
  auto r = checked_add(v, kAlign - 1);
  if (!r) return std::nullopt;
  return *r & ~(kAlign - 1);
}

inline const char* kind_name(uint32_t kind) {
  switch (static_cast<Kind>(kind)) {
    case Kind::Meta: return "meta";
    case Kind::Index: return "index";
    case Kind::Positions: return "positions";
    case Kind::Kv: return "kv";
    case Kind::Scores: return "scores";
  }
  return "unknown";
}

// "section 3 (kv layer 1)" — how messages name a section.
inline std::string section_label(uint64_t index, uint32_t kind, uint32_t layer) {
  std::string s = "section " + std::to_string(index) + " (" + kind_name(kind);
  if (kind == static_cast<uint32_t>(Kind::Kv)) s += " layer " + std::to_string(layer);
  if (std::string(kind_name(kind)) == "unknown") s += " kind " + std::to_string(kind);
  return s + ")";
}

std::string hex64(uint64_t v);  // "0x0123456789abcdef"

}  // namespace kvzip::format::detail
