// The safetensors reader (checkpoint/safetensors.h) on hand-built images: a valid file reads back
// with the right dtype, shape and bytes, and every kind of damage is refused with its own Errc and
// a message naming the tensor: truncated data or header, malformed or duplicate JSON, unknown
// dtype, a byte count that disagrees with the shape, overlapping tensors, negative dims.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"
#include "common/error.h"
#include "tests/support/hf_fixture.h"

using namespace kvzip;
using kvzip::test::build_safetensors;
using kvzip::test::StTensor;

namespace {

std::vector<uint8_t> floats(std::initializer_list<float> v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.begin(), b.size());
  return b;
}

std::vector<uint8_t> with_header(const std::string& json, size_t data_bytes = 0) {
  std::vector<uint8_t> out(8);
  for (int i = 0; i < 8; ++i) out[i] = uint8_t(uint64_t(json.size()) >> (8 * i));
  out.insert(out.end(), json.begin(), json.end());
  out.resize(out.size() + data_bytes, 0);
  return out;
}

// The Errc and message of parsing `bytes`; fails the test when it parses.
std::pair<Errc, std::string> error_of(std::vector<uint8_t> bytes) {
  try {
    model::safetensors::File::from_bytes(std::move(bytes), "t.safetensors");
  } catch (const Error& e) {
    return {e.code(), e.what()};
  }
  FAIL("the image was accepted");
  return {};
}

}  // namespace

TEST_CASE("safetensors: a valid image reads back in name order with its bytes",
          "[checkpoint][hf]") {
  std::vector<uint8_t> bf16 = {0x80, 0x3f, 0x00, 0x40};  // 1.0, 2.0
  auto f = model::safetensors::File::from_bytes(
      build_safetensors({{"w", "F32", {2, 2}, floats({1, 2, 3, 4})},
                         {"b", "BF16", {2}, bf16},
                         {"empty", "F16", {0, 3}, {}}}));
  REQUIRE(f.tensors().size() == 3);
  CHECK(f.tensors()[0].name == "b");  // sorted by name
  const model::safetensors::TensorInfo* w = f.find("w");
  REQUIRE(w);
  CHECK(w->dtype == model::safetensors::Dtype::F32);
  CHECK(w->shape == std::vector<uint64_t>{2, 2});
  CHECK(w->shape_string() == "[2, 2]");
  float got[4];
  std::memcpy(got, w->data, 16);
  CHECK(got[3] == 4.0f);
  CHECK(w->offset % 8 == 0);
  CHECK(model::safetensors::ggml_type(f.find("b")->dtype) == kernels::quant::GgmlType::BF16);
  CHECK(f.find("empty")->nbytes == 0);
  CHECK(f.find("nope") == nullptr);
  REQUIRE(f.metadata().size() == 1);
  CHECK(f.metadata()[0].first == "format");
  CHECK_FALSE(model::safetensors::ggml_type(model::safetensors::Dtype::I64).has_value());
}

TEST_CASE("safetensors: truncated files are Errc::truncated", "[checkpoint][hf]") {
  std::vector<uint8_t> good = build_safetensors({{"w", "F32", {2, 2}, floats({1, 2, 3, 4})}});
  SECTION("data cut short") {
    good.resize(good.size() - 3);
    auto [code, msg] = error_of(good);
    CHECK(code == Errc::truncated);
    CHECK_THAT(msg, Catch::Contains("tensor 'w'") && Catch::Contains("truncated"));
  }
  SECTION("header cut short") {
    good.resize(20);
    auto [code, msg] = error_of(good);
    CHECK(code == Errc::truncated);
    CHECK_THAT(msg, Catch::Contains("header length"));
  }
  SECTION("less than the length field") { CHECK(error_of({1, 2, 3}).first == Errc::truncated); }
}

TEST_CASE("safetensors: corrupt headers are refused naming what is wrong", "[checkpoint][hf]") {
  auto check = [](const std::string& json, size_t data, Errc want, const std::string& needle) {
    auto [code, msg] = error_of(with_header(json, data));
    CHECK(code == want);
    CHECK_THAT(msg, Catch::Contains(needle) && Catch::Contains("t.safetensors"));
  };
  check(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]})", 8, Errc::corrupt,
        "malformed");
  check(R"([1, 2])", 0, Errc::corrupt, "start with '{'");
  check(
      R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
      8, Errc::corrupt, "names 'w' twice");
  check(R"({"w": {"dtype": "F4", "shape": [2], "data_offsets": [0, 1]}})", 1, Errc::unsupported,
        "dtype 'F4'");
  check(R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 8, Errc::corrupt,
        "needs 12 bytes");
  check(R"({"w": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", 8, Errc::corrupt,
        "unsigned");
  check(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}})", 8, Errc::corrupt,
        "end before begin");
  check(R"({"w": {"dtype": "F32", "shape": [2]}})", 8, Errc::corrupt, "data_offsets");
  check(
      R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
      12, Errc::corrupt, "overlap");
  check(R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 8]}})", 8,
        Errc::corrupt, "overflows");
  check(R"({"__metadata__": {"k": 1}})", 0, Errc::corrupt, "__metadata__");
  // A header length beyond the format's 100 MB cap is not a safetensors file.
  std::vector<uint8_t> huge(16, 0);
  huge[4] = 1;  // 2^32
  CHECK(error_of(huge).first == Errc::corrupt);
}

TEST_CASE("safetensors: a missing file is Errc::not_found", "[checkpoint][hf]") {
  try {
    model::safetensors::File::open("/nonexistent/x.safetensors");
    FAIL("opened");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::not_found);
    CHECK_THAT(e.what(), Catch::Contains("/nonexistent/x.safetensors"));
  }
}
