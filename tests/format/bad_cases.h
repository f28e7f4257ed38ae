// The catalogue of damaged .kvz files in tests/golden/bad/: one per failure class, each derived
// from the committed golden tiny_v1_f32.kvz by a byte edit, with the error code and message
// fragment the reader must give. The committed files are regenerated from this list by
// `kvzip_tests "[.generate-bad]"` and tests check that they still match it byte for byte.
#pragma once
#include <string>
#include <vector>

#include "common/error.h"

namespace kvzip::format::testing {

enum class BadMode {
  Open,        // CacheReader::open with Verify::Full fails
  CheckModel,  // opens; check_model against the golden fingerprint fails
};

struct BadCase {
  std::string name;  // file name in tests/golden/bad/
  Errc code;
  std::string message;  // fragment the error message contains
  BadMode mode = BadMode::Open;
  std::vector<uint8_t> bytes;
};

std::vector<BadCase> bad_cases(const std::vector<uint8_t>& golden_f32);

// Damage specific to the quantized dtypes, derived from the golden tiny_v1_1_q4.kvz (D = 4,
// groups of 2; section 4 is layer 0's KV: K channel scales at 0, V channel scales at 32, K params
// at 64): NaN and infinite scales, a truncated parameter block, bad or missing group sizes.
std::vector<BadCase> bad_quant_cases(const std::vector<uint8_t>& golden_q4);

// Damage specific to the f16 rows of v1.2, derived from the golden tiny_v1_2_q4.kvz (layer 0: 6
// f16 rows, the prefix positions 0 … 2 of both heads, and 5 quantized rows; K f16 rows at 64, V f16
// rows at 112, K params at 160): NaN and infinite f16 values, a group scale of a quantized row
// after them, a bad, missing or changed kv.quant.f16_below.
std::vector<BadCase> bad_f16_rows_cases(const std::vector<uint8_t>& golden_v1_2_q4);

// Damage specific to the rotated codes of v1.3, derived from the golden tiny_v1_3_q4.kvz (the
// v1.2 layout, dtype id 9): a head_dim that is not a power of two, a missing kv.quant.f16_below,
// an infinite group scale of a quantized row.
std::vector<BadCase> bad_rotated_cases(const std::vector<uint8_t>& golden_v1_3_q4);

// Damage specific to the byte group parameters of v1.4, derived from the golden tiny_v1_4_q4.kvz.
// Every byte is a valid parameter, so what can be wrong is the layout around them.
std::vector<BadCase> bad_byte_params_cases(const std::vector<uint8_t>& golden_v1_4_q4);

// tiny_v1_1_unknown_optional.kvz: a v1.1 file whose scores section became an unknown optional
// kind — a v1.0 reader must skip it and read the rest.
std::vector<uint8_t> future_minor_file(const std::vector<uint8_t>& golden_f32);

}  // namespace kvzip::format::testing
