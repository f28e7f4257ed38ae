// Recovery of RoPE scaling from llama.cpp's rope_freqs.weight divisors
// (checkpoint/detail/rope_freqs.h): the released Llama 3.1 / 3.2 settings come back exactly, other
// low_freq_factor values come back as an equivalent set that gives the same frequencies, and
// divisors no scaling explains are refused. The divisors are computed here from the Llama 3.1 rule
// as llama.cpp's converter applies it.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <numbers>
#include <vector>

#include "checkpoint/detail/rope_freqs.h"
#include "checkpoint/gguf_weights.h"
#include "common/error.h"
#include "kernels/rope.h"
#include "tests/support/tiny_gguf.h"

using namespace kvzip;

namespace {

std::vector<float> divisors(const RopeScaling& s, float base, uint32_t D) {
  std::vector<float> out;
  for (uint32_t i = 0; i < D; i += 2) {
    const double wavelen = 2 * std::numbers::pi * std::pow(double(base), double(i) / D);
    const double old = s.original_context;
    if (wavelen < old / s.high_freq_factor) out.push_back(1.0f);
    else if (wavelen > old / s.low_freq_factor) out.push_back(s.factor);
    else {
      const double smooth =
          (old / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      out.push_back(float(1.0 / ((1 - smooth) / s.factor + smooth)));
    }
  }
  return out;
}

void check_same_freqs(const RopeScaling& a, const RopeScaling& b, float base, uint32_t D) {
  const std::vector<float> x = kernels::rope_inv_freq(D, base, a),
                           y = kernels::rope_inv_freq(D, base, b);
  for (size_t i = 0; i < x.size(); ++i) CHECK(std::abs(x[i] - y[i]) <= 1e-6f * x[i]);
}

}  // namespace

TEST_CASE("rope_freqs: released Llama 3.x scalings are recovered exactly", "[checkpoint][gguf]") {
  struct Case {
    float base;
    uint32_t D;
    RopeScaling s;
  };
  const Case cases[] = {
      {500000.0f,
       128,
       {RopeScalingKind::Llama3, 8.0f, 1.0f, 4.0f, 8192}},  // Llama 3.1 8B / 70B / 3.3
      {500000.0f, 64, {RopeScalingKind::Llama3, 32.0f, 1.0f, 4.0f, 8192}},   // Llama 3.2 1B
      {500000.0f, 128, {RopeScalingKind::Llama3, 32.0f, 1.0f, 4.0f, 8192}},  // Llama 3.2 3B
      {10000.0f, 16, {RopeScalingKind::Llama3, 4.0f, 1.0f, 8.0f, 100}},  // tests/golden/hf/llama3
  };
  for (const Case& c : cases) {
    INFO("D " << c.D << " factor " << c.s.factor);
    const auto got =
        model::detail::scaling_from_rope_freqs(divisors(c.s, c.base, c.D), c.base, c.D);
    REQUIRE(got);
    CHECK(got->kind == RopeScalingKind::Llama3);
    CHECK(got->factor == c.s.factor);
    CHECK(got->low_freq_factor == 1.0f);
    CHECK(got->high_freq_factor == c.s.high_freq_factor);
    CHECK(got->original_context == c.s.original_context);
    check_same_freqs(*got, c.s, c.base, c.D);
  }
}

TEST_CASE("rope_freqs: other parameterisations come back as an equivalent scaling",
          "[checkpoint][gguf]") {
  const RopeScaling s{RopeScalingKind::Llama3, 8.0f, 2.0f, 8.0f, 8192};
  const auto got =
      model::detail::scaling_from_rope_freqs(divisors(s, 500000.0f, 128), 500000.0f, 128);
  REQUIRE(got);
  CHECK(got->original_context == 4096);  // 8192 / low_freq_factor, with low normalised to 1
  CHECK(got->high_freq_factor == 4.0f);
  check_same_freqs(*got, s, 500000.0f, 128);
}

TEST_CASE("rope_freqs: no scaling, linear scaling and impossible divisors", "[checkpoint][gguf]") {
  const auto none =
      model::detail::scaling_from_rope_freqs(std::vector<float>(64, 1.0f), 500000.0f, 128);
  REQUIRE(none);
  CHECK(none->kind == RopeScalingKind::None);
  const auto linear =
      model::detail::scaling_from_rope_freqs(std::vector<float>(64, 2.5f), 500000.0f, 128);
  REQUIRE(linear);
  CHECK(linear->kind == RopeScalingKind::Linear);
  CHECK(linear->factor == 2.5f);
  std::vector<float> d =
      divisors({RopeScalingKind::Llama3, 8.0f, 1.0f, 4.0f, 8192}, 500000.0f, 128);
  std::vector<float> bumped = d;
  bumped[31] *= 1.01f;  // a band pair off the line
  CHECK_FALSE(model::detail::scaling_from_rope_freqs(bumped, 500000.0f, 128));
  std::vector<float> rising(64);
  for (size_t i = 0; i < rising.size(); ++i) rising[i] = 1.0f + float(i % 3);  // not monotone
  CHECK_FALSE(model::detail::scaling_from_rope_freqs(rising, 500000.0f, 128));
  CHECK_FALSE(model::detail::scaling_from_rope_freqs(std::vector<float>(63, 1.0f), 500000.0f,
                                                     128));  // wrong count
  CHECK_FALSE(
      model::detail::scaling_from_rope_freqs(std::vector<float>(64, -1.0f), 500000.0f, 128));
}

TEST_CASE(
    "rope_freqs: a GGUF with only rope_freqs.weight reads as llama3; other divisors apply as they "
    "are; bad tensors are refused",
    "[checkpoint][gguf]") {
  test::TinyModelSpec spec;
  spec.config = test::tiny_gguf_llama_config();                             // D 16, base 100000
  const RopeScaling want{RopeScalingKind::Llama3, 4.0f, 1.0f, 16.0f, 500};  // two pairs in the band
  auto with_freqs = [&](std::vector<float> d, uint32_t type = 0) {
    test::TinyModel m = test::make_tiny_model(spec);
    std::vector<uint8_t> bytes(d.size() * 4);
    std::memcpy(bytes.data(), d.data(), bytes.size());
    m.writer.tensors.push_back({"rope_freqs.weight", type, {d.size()}, bytes, std::nullopt});
    return m.writer.build().bytes;
  };
  const std::vector<float> good = divisors(want, spec.config.rope_base, spec.config.head_dim);
  const ModelConfig c = model::config_from_gguf(test::open_bytes(with_freqs(good)));
  CHECK(c.rope_scaling.kind == RopeScalingKind::Llama3);
  CHECK(c.rope_scaling.factor == 4.0f);
  CHECK(c.rope_scaling.high_freq_factor == 16.0f);
  CHECK(c.rope_scaling.original_context == 500);
  auto error = [&](const std::vector<uint8_t>& bytes) -> std::pair<Errc, std::string> {
    try {
      model::config_from_gguf(test::open_bytes(bytes));
    } catch (const Error& e) {
      return {e.code(), e.what()};
    }
    FAIL("accepted");
    return {};
  };
  std::vector<float> bad = good;
  bad[2] *= 1.05f;  // no llama3 rule gives this: the divisors are kept and applied as they are
  const ModelConfig raw = model::config_from_gguf(test::open_bytes(with_freqs(bad)));
  CHECK(raw.rope_scaling.kind == RopeScalingKind::None);
  CHECK(raw.rope_scaling.freq_factors == bad);
  std::vector<float> negative = good;
  negative[3] = -1.0f;
  auto [code, msg] = error(with_freqs(negative));
  CHECK(code == Errc::corrupt);
  CHECK_THAT(msg, Catch::Contains("rope_freqs.weight"));
  std::vector<float> short_one(good.begin(), good.end() - 1);
  CHECK(error(with_freqs(short_one)).first == Errc::corrupt);
}
