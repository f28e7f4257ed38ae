// Byte edits that turn the golden file into one damaged file per failure class (bad_cases.h).
// Each edit re-seals the checksums that guard the edited bytes unless the checksum itself is the
// target, so every file fails at exactly the check its name says. Section indices of the goldens:
// 0 meta, 1 index, 2 positions, 3 scores, 4 kv layer 0, 5 kv layer 1.
#include "tests/format/bad_cases.h"

#include <cstring>
#include <functional>
#include <tuple>

#include "tests/format/fixtures.h"
#include "tests/format/patch.h"

namespace kvzip::format::testing {
namespace {

using Edit = std::function<void(Image&)>;

std::vector<uint8_t> edited(const std::vector<uint8_t>& golden, const Edit& edit) {
  Image im(golden);
  edit(im);
  return std::move(im.bytes);
}

Edit truncate_in(size_t section) {
  return
      [section](Image& im) { im.bytes.resize(im.section_start(section) + im.stored(section) / 2); };
}

// f edits the image, then section `section`, the table and the header are resealed.
Edit resealed(size_t section, const std::function<void(Image&)>& f) {
  return [section, f](Image& im) {
    f(im);
    im.reseal_section(section);
    im.reseal();
  };
}

Edit meta_edit(const std::function<void(Image&)>& f) { return resealed(0, f); }

// f edits layer 0's KV section (section 4), given the offset where it starts; then it is resealed.
Edit kv0_edit(const std::function<void(Image&, uint64_t)>& f) {
  return resealed(4, [f](Image& im) { f(im, im.section_start(4)); });
}

// Files that fail on open: (name, code, message fragment, edit of the golden).
using OpenSpec = std::tuple<const char*, Errc, const char*, Edit>;

std::vector<BadCase> open_cases(const std::vector<uint8_t>& g, const std::vector<OpenSpec>& specs) {
  std::vector<BadCase> out;
  for (const auto& [name, code, message, edit] : specs)
    out.push_back({name, code, message, BadMode::Open, edited(g, edit)});
  return out;
}

}  // namespace

std::vector<BadCase> bad_cases(const std::vector<uint8_t>& g) {
  struct Spec {
    const char* name;
    Errc code;
    const char* message;
    Edit edit;
    BadMode mode = BadMode::Open;
  };
  const std::vector<Spec> specs = {
      {"bad_magic.kvz", Errc::bad_magic, "this is not a .kvz cache file",
       [](Image& im) { im.bytes[1] = 'X'; }},
      {"truncated_magic.kvz", Errc::truncated, "inside the 8-byte magic",
       [](Image& im) { im.bytes.resize(5); }},
      {"future_major_v2.kvz", Errc::version_unsupported, "format v2.0; this build reads v1.x",
       [](Image& im) {
         im.set_u16(8, 2);
         im.reseal();
       }},
      {"truncated_preamble.kvz", Errc::truncated, "inside the 64-byte preamble",
       [](Image& im) { im.bytes.resize(40); }},
      {"header_checksum.kvz", Errc::checksum_mismatch, "Header_Checksum",
       [](Image& im) { im.bytes[33] ^= 0x10; }},
      {"reserved_header_flags.kvz", Errc::corrupt, "Header_Flags",
       [](Image& im) {
         im.set_u32(12, 4);
         im.reseal();
       }},
      {"section_count_limit.kvz", Errc::corrupt, "Section_Count 1099511627776 outside",
       [](Image& im) {
         im.set_u64(16, 1ull << 40);
         im.reseal_header();
       }},
      {"truncated_table.kvz", Errc::truncated, "inside the section table",
       [](Image& im) { im.bytes.resize(200); }},
      {"table_checksum.kvz", Errc::checksum_mismatch, "Table_Checksum",
       [](Image& im) { im.bytes[im.entry(2) + 50] ^= 1; }},
      {"count_overflow.kvz", Errc::corrupt, "count overflow",
       [](Image& im) {
         im.set_u64(im.entry(2) + 24, 0xFFFFFFFFFFFFF001ull);
         im.reseal();
       }},
      {"offset_out_of_range.kvz", Errc::corrupt, "offset out of range",
       [](Image& im) {
         im.set_u64(im.entry(5) + 16, im.u64(32));
         im.reseal();
       }},
      {"bad_alignment.kvz", Errc::corrupt, "bad alignment",
       [](Image& im) {
         im.set_u64(im.entry(1) + 16, 4096 + 8);
         im.reseal();
       }},
      {"overlapping_sections.kvz", Errc::corrupt, "overlapping sections",
       [](Image& im) {
         im.set_u64(im.entry(1) + 16, 0);
         im.reseal();
       }},
      {"hole_in_data.kvz", Errc::corrupt, "hole in the data area",
       [](Image& im) {
         im.set_u64(im.entry(5) + 16, im.u64(im.entry(5) + 16) + 4096);
         im.set_u64(32, im.u64(32) + 4096);
         im.bytes.resize(im.bytes.size() + 4096, 0);
         im.reseal();
       }},
      {"truncated_meta.kvz", Errc::truncated, "truncated in section 0 (meta)", truncate_in(0)},
      {"truncated_index.kvz", Errc::truncated, "truncated in section 1 (index)", truncate_in(1)},
      {"truncated_positions.kvz", Errc::truncated, "truncated in section 2 (positions)",
       truncate_in(2)},
      {"truncated_scores.kvz", Errc::truncated, "truncated in section 3 (scores)", truncate_in(3)},
      {"truncated_kv_layer0.kvz", Errc::truncated, "truncated in section 4 (kv layer 0)",
       truncate_in(4)},
      {"truncated_kv_layer1.kvz", Errc::truncated, "truncated in section 5 (kv layer 1)",
       truncate_in(5)},
      {"nonzero_padding.kvz", Errc::corrupt, "section 2 (positions): non-zero padding",
       [](Image& im) { im.bytes[im.section_start(2) + im.stored(2) + 100] = 0x5a; }},
      {"trailing_bytes.kvz", Errc::corrupt, "trailing bytes",
       [](Image& im) { im.bytes.push_back(0); }},
      {"unknown_required_section.kvz", Errc::unsupported, "Section_Kind 9 is unknown",
       [](Image& im) {
         im.set_u32(im.entry(3), 9);
         im.set_u32(im.entry(3) + 4, 0);
         im.reseal();
       }},
      {"duplicate_section.kvz", Errc::corrupt, "duplicate section",
       [](Image& im) {
         im.set_u32(im.entry(1), 1);
         im.reseal();
       }},
      {"meta_checksum.kvz", Errc::checksum_mismatch, "section 0 (meta): checksum mismatch",
       [](Image& im) { im.bytes[im.meta_value("text.document")] ^= 0x20; }},
      {"kv_checksum.kvz", Errc::checksum_mismatch, "section 5 (kv layer 1): checksum mismatch",
       [](Image& im) { im.bytes[im.section_start(5) + 7] ^= 0x01; }},
      {"meta_value_overflow.kvz", Errc::corrupt, "Value needs 18446744073709551615 bytes",
       meta_edit([](Image& im) { im.set_u64(im.meta_value_size_field("model.name"), ~0ull); })},
      {"duplicate_key.kvz", Errc::corrupt, "duplicate key 'model.arch'", meta_edit([](Image& im) {
         std::memcpy(&im.bytes[im.meta_key("model.name")], "model.arch", 10);
       })},
      {"missing_key.kvz", Errc::corrupt, "required meta key 'kv.dtype' is missing",
       meta_edit([](Image& im) { im.bytes[im.meta_key("kv.dtype") + 7] = 'X'; })},
      {"unknown_dtype.kvz", Errc::unsupported,
       "meta key 'kv.dtype': id 12 is not in this reader's dtype registry",
       meta_edit([](Image& im) { im.set_u64(im.meta_value("kv.dtype"), 12); })},
      {"index_row_start.kvz", Errc::corrupt, "Row_Start 99, expected 5",
       resealed(1, [](Image& im) { im.set_u64(im.section_start(1) + 16 + 8, 99); })},
      {"position_order.kvz", Errc::corrupt, "does not increase",
       resealed(2, [](Image& im) { im.set_u32(im.section_start(2) + 4, 0); })},
      {"wrong_model.kvz", Errc::model_mismatch, "load it anyway (option force)",
       meta_edit([](Image& im) {
         im.set_u64(im.meta_value("model.weights_hash"), 0x0123456789abcdefull);
       }),
       BadMode::CheckModel},
  };
  std::vector<BadCase> out;
  for (const Spec& s : specs) out.push_back({s.name, s.code, s.message, s.mode, edited(g, s.edit)});
  return out;
}

std::vector<BadCase> bad_quant_cases(const std::vector<uint8_t>& g) {
  // Layer 0 of the q4 golden: 6 f16 rows (positions 0 … 2 of both heads) and 5 quantized rows;
  // K channel scales at 0, V at 32, K f16 rows at 64, V at 112, K params at 160.
  return open_cases(
      g,
      {
          {"q4_nan_channel_scale.kvz", Errc::corrupt, "K channel scale of head 0 channel 1 is NaN",
           kv0_edit([](Image& im, uint64_t kv) { im.set_u32(kv + 4, 0x7fc00000u); })},
          {"q4_zero_channel_scale.kvz", Errc::corrupt, "V channel scale of head 1 channel 0 is 0",
           kv0_edit([](Image& im, uint64_t kv) { im.set_u32(kv + 32 + 16, 0); })},
          {"q4_nan_f16_value.kvz", Errc::corrupt, "K head 0 row 1: f16 value of channel 2 is NaN",
           kv0_edit([](Image& im, uint64_t kv) { im.set_u16(kv + 64 + (1 * 4 + 2) * 2, 0x7e00); })},
          {"q4_inf_f16_value.kvz", Errc::corrupt,
           "V head 1 row 0: f16 value of channel 0 is infinite",
           kv0_edit([](Image& im, uint64_t kv) { im.set_u16(kv + 112 + 3 * 8, 0x7c00); })},
          {"q4_kv_raw_size.kvz", Errc::corrupt, "the q8/q4 layout",
           resealed(
               4,
               [](Image&
                      im) {  // the section lost its last 2 code bytes: sizes no longer fit the layout
                 im.set_u64(im.entry(4) + 24, im.stored(4) - 2);
                 im.set_u64(im.entry(4) + 32, im.stored(4));
               })},
          {"q4_truncated_kv.kvz", Errc::truncated, "truncated in section 4 (kv layer 0)",
           truncate_in(4)},
          {"q4_bad_group_size.kvz", Errc::corrupt,
           "kv.quant.group_size': value 3 does not divide head_dim 4",
           meta_edit([](Image& im) { im.set_u64(im.meta_value("kv.quant.group_size"), 3); })},
          {"q4_group_size_zero.kvz", Errc::corrupt, "kv.quant.group_size",
           meta_edit([](Image& im) { im.set_u64(im.meta_value("kv.quant.group_size"), 0); })},
          {"q4_missing_group_size.kvz", Errc::corrupt,
           "required meta key 'kv.quant.group_size' is missing",
           meta_edit([](Image& im) { im.bytes[im.meta_key("kv.quant.group_size") + 3] = 'X'; })},
          // Position 3 (head 0) becomes an f16 row: the section no longer has the size of that
          // layout.
          {"q4_f16_below_changed.kvz", Errc::corrupt, "the q8/q4 layout",
           meta_edit([](Image& im) { im.set_u64(im.meta_value("kv.quant.f16_below"), 4); })},
          {"q4_f16_below_beyond.kvz", Errc::corrupt, "kv.quant.f16_below': value 9 outside [0, 8]",
           meta_edit([](Image& im) { im.set_u64(im.meta_value("kv.quant.f16_below"), 9); })},
          {"q4_missing_f16_below.kvz", Errc::corrupt,
           "required meta key 'kv.quant.f16_below' is missing",
           meta_edit([](Image& im) { im.bytes[im.meta_key("kv.quant.f16_below") + 3] = 'X'; })},
          {"q4_head_dim_not_pow2.kvz", Errc::corrupt,
           "model.head_dim': value 6 is not a power of two",
           meta_edit([](Image& im) { im.set_u64(im.meta_value("model.head_dim"), 6); })},
          {"q4_reserved_dtype.kvz", Errc::unsupported, "kv.dtype': id 9 is reserved",
           meta_edit([](Image& im) { im.set_u64(im.meta_value("kv.dtype"), 9); })},
      });
}

std::vector<BadCase> all_bad_cases() {
  std::vector<BadCase> all = bad_cases(read_bytes(source_path("tests/golden/kvz/tiny_v1_f32.kvz")));
  for (BadCase& c : bad_quant_cases(read_bytes(source_path("tests/golden/kvz/tiny_v1_q4.kvz"))))
    all.push_back(std::move(c));
  return all;
}

std::vector<uint8_t> future_minor_file(const std::vector<uint8_t>& g) {
  return edited(g, [](Image& im) {
    im.set_u16(10, 1);           // Version_Minor 1
    im.set_u32(im.entry(3), 9);  // scores -> an unknown kind, still Optional
    im.reseal();
  });
}

}  // namespace kvzip::format::testing
