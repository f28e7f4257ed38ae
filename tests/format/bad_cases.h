// The catalogue of damaged .kvz files in tests/golden/bad/: one per failure class, each derived
// from a committed golden (tiny_v1_f32.kvz, tiny_v1_q4.kvz) by a byte edit, with the error code
// and message fragment the reader must give. The committed files are regenerated from this list by
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

// Damage specific to the quantized dtypes, derived from the golden tiny_v1_q4.kvz (D = 4, groups
// of 2, f16 rows below position 3): NaN and zero channel scales, NaN and infinite f16 values, a
// section of the wrong size, bad or missing group sizes and kv.quant.f16_below, a head dimension
// that is not a power of two, a reserved dtype id. Every byte parameter and code is valid, so
// none of them can be damaged.
std::vector<BadCase> bad_quant_cases(const std::vector<uint8_t>& golden_q4);

// Every case above, from the committed goldens (what tests/golden/bad/ holds).
std::vector<BadCase> all_bad_cases();

// future_minor_unknown_optional.kvz: the golden f32 file as a later minor version (1) would write
// it, its scores section turned into a kind this reader does not know, marked Optional: it must
// be skipped and the rest read.
std::vector<uint8_t> future_minor_file(const std::vector<uint8_t>& golden_f32);

}  // namespace kvzip::format::testing
