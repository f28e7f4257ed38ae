// gguf::File: metadata of every value type, the tensor table, mmap open and moves, and one
// handcrafted corrupt file per failure class, each checking the error code and that the message
// names the field. Files are built with tests/support/tiny_gguf.h.
#include <catch2/catch.hpp>

#include <unistd.h>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>

#include "checkpoint/gguf.h"
#include "common/error.h"
#include "tests/support/tiny_gguf.h"

using namespace kvzip;
using namespace kvzip::test;
using kernels::quant::GgmlType;

namespace {

GgufTensor f32_tensor(const std::string& name, std::vector<uint64_t> ne) {
  uint64_t n = 1;
  for (uint64_t d : ne) n *= d;
  std::vector<float> v(n);
  for (uint64_t i = 0; i < n; ++i) v[i] = float(i) * 0.5f - 3.0f;
  return {name, uint32_t(GgmlType::F32), std::move(ne),
          quantize_row(GgmlType::F32, v.data(), int64_t(n)), std::nullopt};
}

// A small valid file: a few KVs and three tensors.
GgufWriter small_writer() {
  GgufWriter w;
  w.kvs = {kv_string("general.architecture", "llama"), kv_string("general.name", "small"),
           kv_u32("llama.block_count", 2)};
  w.tensors = {f32_tensor("a.weight", {8, 3}), f32_tensor("b.weight", {5}),
               f32_tensor("c.weight", {4, 2, 2})};
  return w;
}

// Parses bytes expecting an Error with `code` whose message contains every needle.
void expect_error(const std::vector<uint8_t>& bytes, Errc code, std::vector<std::string> needles) {
  try {
    model::gguf::File::from_bytes(bytes, "bad.gguf");
    FAIL("the file was accepted");
  } catch (const Error& e) {
    INFO("message: " << e.what());
    CHECK(errc_name(e.code()) == std::string(errc_name(code)));
    CHECK_THAT(e.what(), Catch::Contains("bad.gguf"));
    for (const std::string& n : needles) CHECK_THAT(e.what(), Catch::Contains(n));
  }
}

template <class T>
void poke(std::vector<uint8_t>& b, uint64_t at, T v) {
  REQUIRE(at + sizeof(T) <= b.size());
  std::memcpy(b.data() + at, &v, sizeof(T));
}

uint64_t kv_value_at(const GgufImage& img, const GgufWriter& w, size_t i) {
  return img.kv_offsets[i] + 8 + w.kvs[i].key.size() + 4;  // after key and type
}

}  // namespace

TEST_CASE("metadata of every value type reads back through the typed getters",
          "[checkpoint][gguf]") {
  GgufWriter w;
  w.kvs = {kv_u8("t.u8", 200),
           kv_i8("t.i8", -5),
           kv_u16("t.u16", 60000),
           kv_i16("t.i16", -300),
           kv_u32("t.u32", 4000000000u),
           kv_i32("t.i32", -7),
           kv_u64("t.u64", 1ull << 40),
           kv_i64("t.i64", -(1ll << 40)),
           kv_f32("t.f32", 0.25f),
           kv_f64("t.f64", 1e-5),
           kv_bool("t.bool", true),
           kv_string("t.str", "héllo"),
           kv_string("t.empty", ""),
           kv_string_array("t.strs", {"a", "", "Ġt he"}),
           kv_i32_array("t.i32s", {1, -2, 3}),
           kv_u32_array("t.u32s", {7, 8}),
           kv_f32_array("t.f32s", {0.5f, -1.5f}),
           kv_string_array("t.none", {})};
  const model::gguf::File f = model::gguf::File::from_bytes(w.build().bytes);
  CHECK(f.version() == 3);
  CHECK(f.alignment() == 32);
  CHECK(f.keys().size() == w.kvs.size());
  CHECK(f.keys()[2] == "t.u16");
  CHECK(f.get_u64("t.u8") == 200);
  CHECK(f.get_i64("t.i8") == -5);
  CHECK(f.get_u32("t.u16") == 60000);
  CHECK(f.get_i64("t.i16") == -300);
  CHECK(f.get_u32("t.u32") == 4000000000u);
  CHECK(f.get_i64("t.i32") == -7);
  CHECK(f.get_u64("t.u64") == (1ull << 40));
  CHECK(f.get_i64("t.i64") == -(1ll << 40));
  CHECK(f.get_f32("t.f32") == 0.25f);
  CHECK(f.get_f32("t.f64") == float(1e-5));
  CHECK(f.get_bool("t.bool"));
  CHECK(f.get_string("t.str") == "héllo");
  CHECK(f.get_string("t.empty").empty());
  CHECK(f.get_string_array("t.strs") == std::vector<std::string>{"a", "", "Ġt he"});
  CHECK(f.get_i32_array("t.i32s") == std::vector<int32_t>{1, -2, 3});
  CHECK(f.get_i32_array("t.u32s") == std::vector<int32_t>{7, 8});
  CHECK(f.get_f32_array("t.f32s") == std::vector<float>{0.5f, -1.5f});
  CHECK(f.get_string_array("t.none").empty());
  CHECK(f.array_size("t.strs") == 3);
  CHECK(f.array_type("t.i32s") == model::gguf::ValueType::I32);
  CHECK(*f.type_of("t.bool") == model::gguf::ValueType::Bool);
  CHECK_FALSE(f.type_of("nope").has_value());
  CHECK(f.get_u32_or("nope", 9) == 9);
  CHECK(f.get_string_or("nope", "x") == "x");
  CHECK(f.get_f32_or("t.f32", 9.0f) == 0.25f);
  CHECK(f.tensors().empty());
}

TEST_CASE("typed getters reject missing keys, wrong types and out-of-range values",
          "[checkpoint][gguf]") {
  GgufWriter w;
  w.kvs = {kv_i32("neg", -1),        kv_u64("big", 1ull << 33),
           kv_string("s", "x"),      kv_u32("n", 3),
           kv_i32_array("arr", {1}), kv_array_raw("wide", 10, 1, {0, 0, 0, 0, 1, 0, 0, 0})};
  const model::gguf::File f = model::gguf::File::from_bytes(w.build().bytes);
  auto expect = [](auto fn, const std::string& needle) {
    try {
      fn();
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(e.code() == Errc::corrupt);
      CHECK_THAT(e.what(), Catch::Contains(needle));
    }
  };
  expect([&] { f.get_u32("missing.key"); }, "missing key 'missing.key'");
  expect([&] { f.get_u64("neg"); }, "key 'neg' = -1");
  expect([&] { f.get_u32("big"); }, "does not fit in 32 bits");
  expect([&] { f.get_u32("s"); }, "key 's' has type string, expected an unsigned integer");
  expect([&] { f.get_string("n"); }, "key 'n' has type u32, expected string");
  expect([&] { f.get_f32("n"); }, "expected f32 or f64");
  expect([&] { f.get_bool("n"); }, "expected bool");
  expect([&] { f.get_string_array("arr"); }, "array of i32, expected array of string");
  expect([&] { f.get_i32_array("wide"); }, "does not fit in int32");
  expect([&] { f.array_size("n"); }, "expected an array");
  expect([&] { f.tensor("x.weight"); }, "missing tensor 'x.weight'");
}

TEST_CASE("the tensor table gives shapes, sizes and data pointers in the file",
          "[checkpoint][gguf]") {
  const GgufWriter w = small_writer();
  const GgufImage img = w.build();
  const model::gguf::File f = model::gguf::File::from_bytes(img.bytes);
  REQUIRE(f.tensors().size() == 3);
  CHECK(f.data_offset() == img.data_offset);
  CHECK(f.data_offset() % 32 == 0);
  const model::gguf::TensorInfo& a = f.tensor("a.weight");
  CHECK(a.n_dims == 2);
  CHECK(a.ne[0] == 8);
  CHECK(a.ne[1] == 3);
  CHECK(a.ne[2] == 1);
  CHECK(a.nbytes == 8 * 3 * 4);
  CHECK(a.n_rows() == 3);
  CHECK(a.shape_string() == "[8, 3]");
  CHECK(a.type == GgmlType::F32);
  CHECK(std::memcmp(a.data, w.tensors[0].data.data(), a.nbytes) == 0);
  const model::gguf::TensorInfo& c = *f.find_tensor("c.weight");
  CHECK(c.n_elements() == 16);
  CHECK(f.tensor("b.weight").offset == 96);  // a: 96 bytes, already aligned
  CHECK(c.offset == 128);                    // b: 20 bytes at 96, padded to 128
  CHECK(uint64_t(c.data - f.bytes()) == img.tensor_data_offsets[2]);
  CHECK(f.find_tensor("zzz") == nullptr);
}

TEST_CASE("general.alignment changes where tensor data starts", "[checkpoint][gguf]") {
  GgufWriter w = small_writer();
  w.set(kv_u32("general.alignment", 64));
  const GgufImage img = w.build();
  const model::gguf::File f = model::gguf::File::from_bytes(img.bytes);
  CHECK(f.alignment() == 64);
  CHECK(f.data_offset() % 64 == 0);
  CHECK(f.tensor("b.weight").offset == 128);  // a is 96 bytes, padded to 128
  CHECK(f.tensor("c.weight").offset == 192);  // b is 20 bytes, padded to 64
}

TEST_CASE("a version 2 file reads like version 3", "[checkpoint][gguf]") {
  GgufWriter w = small_writer();
  w.version = 2;
  const model::gguf::File f = model::gguf::File::from_bytes(w.build().bytes);
  CHECK(f.version() == 2);
  CHECK(f.get_u32("llama.block_count") == 2);
}

TEST_CASE("File::open maps a file on disk and stays valid when moved", "[checkpoint][gguf]") {
  const std::string path = "/tmp/kvzip_test_gguf_open_" + std::to_string(::getpid()) + ".gguf";
  write_file(path, small_writer().build().bytes);
  model::gguf::File f = model::gguf::File::open(path);
  const uint8_t* data = f.tensor("a.weight").data;
  model::gguf::File g = std::move(f);
  CHECK(g.source() == path);
  CHECK(g.tensor("a.weight").data == data);
  float first;
  std::memcpy(&first, data, 4);
  CHECK(first == -3.0f);
  model::gguf::File h = model::gguf::File::from_bytes(small_writer().build().bytes);
  h = std::move(g);
  CHECK(h.get_string("general.name") == "small");
  std::remove(path.c_str());
  try {
    model::gguf::File::open(path);
    FAIL("opened a deleted file");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::not_found);
    CHECK_THAT(e.what(), Catch::Contains(path));
  }
}

TEST_CASE("File::open read into memory holds the file's bytes, 2 MiB-aligned and read-only",
          "[checkpoint][gguf]") {
  const std::string path = "/tmp/kvzip_test_gguf_read_" + std::to_string(::getpid()) + ".gguf";
  const std::vector<uint8_t> bytes = small_writer().build().bytes;
  write_file(path, bytes);
  model::gguf::File mapped = model::gguf::File::open(path);
  model::gguf::File read = model::gguf::File::open(path, /*in_memory=*/true);
  const model::gguf::TensorInfo& a = mapped.tensor("a.weight");
  const model::gguf::TensorInfo& b = read.tensor("a.weight");
  REQUIRE(a.nbytes == b.nbytes);
  CHECK(std::memcmp(a.data, b.data, a.nbytes) == 0);
  CHECK(a.data != b.data);  // a copy, not the mapping
  // The image starts on a 2 MiB boundary (so the kernel can back it with huge pages): the first
  // tensor's data sits at its file offset from there.
  CHECK((reinterpret_cast<uintptr_t>(b.data) - b.offset - read.data_offset()) %
            (uintptr_t(2) << 20) ==
        0);
  model::gguf::File moved = std::move(read);
  CHECK(moved.tensor("a.weight").data == b.data);
  CHECK(moved.get_string("general.name") == "small");
  std::remove(path.c_str());
  try {
    model::gguf::File::open(path, true);
    FAIL("read a deleted file");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::not_found);
  }
}

// ---- one corrupt file per failure class ----

TEST_CASE("a file with a bad magic is rejected as bad_magic", "[checkpoint][gguf]") {
  auto b = small_writer().build().bytes;
  b[0] = 'X';
  expect_error(b, Errc::bad_magic, {"magic"});
  expect_error({'G', 'G'}, Errc::truncated, {"magic"});
  expect_error({}, Errc::truncated, {"magic"});
}

TEST_CASE("GGUF v1 and v4 files are rejected as version_unsupported", "[checkpoint][gguf]") {
  GgufWriter w = small_writer();
  w.version = 1;
  expect_error(w.build().bytes, Errc::version_unsupported, {"version 1", "byte 4"});
  w.version = 4;
  expect_error(w.build().bytes, Errc::version_unsupported, {"version 4", "byte 4"});
  w.version = 0x03000000;  // a big-endian v3 file
  expect_error(w.build().bytes, Errc::unsupported, {"big-endian"});
}

TEST_CASE("a file truncated in the header is rejected as truncated", "[checkpoint][gguf]") {
  auto b = small_writer().build().bytes;
  b.resize(12);
  expect_error(b, Errc::truncated, {"tensor_count", "byte 8"});
  b.resize(20);
  expect_error(b, Errc::truncated, {"metadata_kv_count"});
}

TEST_CASE("a file truncated inside a KV names the key", "[checkpoint][gguf]") {
  const GgufWriter w = small_writer();
  const GgufImage img = w.build();
  auto b = img.bytes;
  b.resize(kv_value_at(img, w, 1) + 10);  // inside general.name's string bytes
  expect_error(b, Errc::truncated, {"key 'general.name'"});
}

TEST_CASE("a file truncated inside a tensor info names the tensor", "[checkpoint][gguf]") {
  const GgufImage img = small_writer().build();
  auto b = img.bytes;
  b.resize(img.tensor_info_offsets[1] + 8 + 8 + 4 + 3);  // inside b.weight's ne[0]
  expect_error(b, Errc::truncated, {"tensor 'b.weight'", "ne[0]"});
}

TEST_CASE("a file truncated in the tensor data names the tensor", "[checkpoint][gguf]") {
  const GgufImage img = small_writer().build();
  auto b = img.bytes;
  b.resize(img.tensor_data_offsets[2] + 10);  // c.weight has 64 bytes
  expect_error(b, Errc::truncated, {"tensor 'c.weight'", "truncated"});
  b.resize(img.tensor_infos_end + 1);  // before the (padded) data section
  expect_error(b, Errc::truncated, {"data section"});
}

TEST_CASE("a huge string length is corrupt, not an allocation", "[checkpoint][gguf]") {
  const GgufWriter w = small_writer();
  const GgufImage img = w.build();
  auto b = img.bytes;
  poke<uint64_t>(b, kv_value_at(img, w, 1), 1ull << 62);
  expect_error(b, Errc::corrupt, {"key 'general.name'", "string length 4611686018427387904"});
  b = img.bytes;
  poke<uint64_t>(b, img.kv_offsets[2], ~0ull);  // the key length of KV #2
  expect_error(b, Errc::corrupt, {"metadata KV #2 key"});
}

TEST_CASE("a huge array count is corrupt, not an allocation", "[checkpoint][gguf]") {
  GgufWriter w = small_writer();
  w.set(kv_array_raw("x.arr", uint32_t(model::gguf::ValueType::U32), 1ull << 61, {1, 2, 3, 4}));
  expect_error(w.build().bytes, Errc::corrupt, {"key 'x.arr'", "array count"});
  w.set(kv_array_raw("x.arr", uint32_t(model::gguf::ValueType::String), 1ull << 40, {}));
  expect_error(w.build().bytes, Errc::corrupt, {"key 'x.arr'", "array count"});
  auto b = small_writer().build().bytes;
  poke<uint64_t>(b, 16, 1ull << 59);  // metadata_kv_count
  expect_error(b, Errc::corrupt, {"metadata_kv_count"});
  b = small_writer().build().bytes;
  poke<uint64_t>(b, 8, 1ull << 59);  // tensor_count
  expect_error(b, Errc::corrupt, {"tensor_count"});
}

TEST_CASE("a duplicate key is corrupt", "[checkpoint][gguf]") {
  GgufWriter w = small_writer();
  w.kvs.push_back(kv_u32("llama.block_count", 3));
  expect_error(w.build().bytes, Errc::corrupt, {"duplicate key 'llama.block_count'"});
}

TEST_CASE("an empty key is corrupt", "[checkpoint][gguf]") {
  GgufWriter w = small_writer();
  w.kvs.push_back(kv_u32("", 3));
  expect_error(w.build().bytes, Errc::corrupt, {"KV #3", "empty key"});
}

TEST_CASE("unknown value types and nested arrays are rejected", "[checkpoint][gguf]") {
  GgufWriter w = small_writer();
  w.kvs.push_back({"x.odd", 13, {0, 0, 0, 0}});
  expect_error(w.build().bytes, Errc::corrupt, {"key 'x.odd'", "unknown value type 13"});
  w.kvs.back() = kv_array_raw("x.nested", uint32_t(model::gguf::ValueType::Array), 0, {});
  expect_error(w.build().bytes, Errc::unsupported, {"key 'x.nested'", "nested"});
}

TEST_CASE("a duplicate tensor name is corrupt", "[checkpoint][gguf]") {
  GgufWriter w = small_writer();
  w.tensors.push_back(f32_tensor("b.weight", {5}));
  expect_error(w.build().bytes, Errc::corrupt, {"duplicate tensor 'b.weight'"});
}

TEST_CASE("a tensor with 5 dimensions is corrupt", "[checkpoint][gguf]") {
  GgufWriter w = small_writer();
  w.tensors.push_back(f32_tensor("five.weight", {2, 1, 1, 1, 2}));
  expect_error(w.build().bytes, Errc::corrupt, {"tensor 'five.weight'", "n_dims = 5"});
}

TEST_CASE("a tensor whose dims overflow int64 is corrupt", "[checkpoint][gguf]") {
  GgufWriter w = small_writer();
  w.tensors.push_back({"huge.weight", 0, {1ull << 40, 1ull << 40}, {}, 0});
  expect_error(w.build().bytes, Errc::corrupt, {"tensor 'huge.weight'", "ne[1]", "overflow"});
}

TEST_CASE("a tensor of an unknown ggml type is corrupt", "[checkpoint][gguf]") {
  GgufWriter w = small_writer();
  w.tensors[1].type = 200;
  expect_error(w.build().bytes, Errc::corrupt, {"tensor 'b.weight'", "unknown ggml type 200"});
  w.tensors[1].type = 41;  // an id newer ggml builds use
  expect_error(w.build().bytes, Errc::unsupported, {"tensor 'b.weight'", "type 41"});
}

TEST_CASE("a quantized tensor with ne[0] not a multiple of the block is corrupt",
          "[checkpoint][gguf]") {
  GgufWriter w = small_writer();
  w.tensors.push_back(
      {"q.weight", uint32_t(GgmlType::Q4_0), {48, 2}, std::vector<uint8_t>(54), std::nullopt});
  expect_error(w.build().bytes, Errc::corrupt, {"tensor 'q.weight'", "ne[0] = 48", "Q4_0", "32"});
}

TEST_CASE("a misaligned tensor data offset is corrupt", "[checkpoint][gguf]") {
  GgufWriter w = small_writer();
  w.tensors[1].offset = 100;
  expect_error(w.build().bytes, Errc::corrupt,
               {"tensor 'b.weight'", "offset 100", "not a multiple of the alignment 32"});
}

TEST_CASE("a tensor data offset outside the file is corrupt", "[checkpoint][gguf]") {
  GgufWriter w = small_writer();
  w.tensors[1].offset = 1ull << 40;
  expect_error(w.build().bytes, Errc::corrupt, {"tensor 'b.weight'", "out of the file"});
}

TEST_CASE("a bad general.alignment is corrupt", "[checkpoint][gguf]") {
  GgufWriter w = small_writer();
  w.set(kv_u32("general.alignment", 48));
  expect_error(w.build().bytes, Errc::corrupt, {"general.alignment", "48", "power of two"});
  w.set(kv_u32("general.alignment", 0));
  expect_error(w.build().bytes, Errc::corrupt, {"general.alignment", "power of two"});
  w.set(kv_u64("general.alignment", 32));
  expect_error(w.build().bytes, Errc::corrupt, {"general.alignment", "type u64", "expected u32"});
}

TEST_CASE("every truncation and random byte damage of a model gives kvzip::Error or a file",
          "[checkpoint][gguf]") {
  TinyModelSpec spec;
  spec.config = tiny_gguf_llama_config();
  spec.config.n_layers = 1;
  spec.dtype = GgmlType::Q8_0;
  const TinyModel model = make_tiny_model(spec);
  const GgufImage img = model.writer.build();
  const std::vector<uint8_t>& bytes = img.bytes;
  const model::gguf::File good = model::gguf::File::from_bytes(bytes);
  const uint64_t header_end = good.data_offset();
  // Cuts just inside every KV and tensor-info record, every 37th byte of the header and metadata,
  // and a few across the tensor data.
  std::vector<uint64_t> cuts;
  for (uint64_t at : img.kv_offsets)
    for (uint64_t d : {1, 9, 14}) cuts.push_back(at + d);
  for (uint64_t at : img.tensor_info_offsets)
    for (uint64_t d : {1, 9, 21}) cuts.push_back(at + d);
  for (uint64_t cut = 0; cut < bytes.size(); cut += cut < header_end ? 37 : 2999)
    cuts.push_back(cut);
  int errors = 0;
  for (uint64_t cut : cuts) {
    std::vector<uint8_t> b(bytes.begin(), bytes.begin() + int64_t(cut));
    try {
      model::gguf::File::from_bytes(std::move(b));
    } catch (const Error& e) {
      ++errors;
      CHECK((e.code() == Errc::truncated || e.code() == Errc::bad_magic));
    }
  }
  CHECK(errors > 100);
  // Byte flips in the header: any outcome but a crash or a foreign exception is acceptable.
  uint64_t state = 12345;
  for (int i = 0; i < 100; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    std::vector<uint8_t> b = bytes;
    b[size_t((state >> 33) % header_end)] ^= uint8_t(1u << ((state >> 20) % 8));
    try {
      model::gguf::File f = model::gguf::File::from_bytes(std::move(b));
      for (const auto& t : f.tensors()) CHECK(uint64_t(t.data - f.bytes()) + t.nbytes <= f.size());
    } catch (const Error&) {}
  }
}
