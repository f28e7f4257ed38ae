// [cuda] .kvz -> GPU memory: gpu_cache_from_reader (decode into pinned staging, async copies per
// layer) puts exactly the rows of the host loader (cache_from_reader) into the device layout, for
// raw f32 sections, zstd-compressed bf16 ones and, dequantized on the device (KvForm::F32), every
// q8/q4 layout; appending and rolling back then behave as on the host. Kept as stored (the
// default), a q8/q4 file's device cache holds exactly the host QuantBase's bytes: the f16 rows in
// f32, the channel scales, parameters and codes of the quantized rows.
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <random>

#include "tests/cuda/support.h"

#if KVZIP_HAVE_CUDA
#include "cache/gpu_cache.h"
#include "cache/quant_base.h"
#include "compress/quantize.h"
#include "format/format.h"
#include "loader/loader.h"

using namespace kvzip;
using test::gpu_ready;

namespace {

format::CacheContents ragged_contents(format::DType dtype) {
  format::CacheContents c;
  format::CacheHeader& h = c.header;
  h.tool_version = "kvzip test";
  h.model.arch = "llama";
  h.model.name = "test";
  h.n_layers = 3;
  h.n_kv_heads = 3;
  h.head_dim = 64;
  h.kv_dtype = dtype;
  h.prefix_tokens = {1, 2};
  h.document_tokens.assign(200, 5);
  h.method = "kvzip";
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (uint32_t l = 0; l < 3; ++l) {
    format::LayerKv lk;
    for (uint32_t head = 0; head < 3; ++head) {
      const uint32_t n = 1 + (l * 3 + head) * 23 % 190;  // ragged: 1 .. 190 rows
      lk.head_rows.push_back(n);
      for (uint32_t r = 0; r < n; ++r) lk.positions.push_back(r * 202 / n);
    }
    lk.k.resize(lk.positions.size() * 64);
    lk.v.resize(lk.k.size());
    for (float& x : lk.k) x = u(rng);
    for (float& x : lk.v) x = u(rng);
    c.layers.push_back(std::move(lk));
  }
  return c;
}

void check_same(const model::GpuCache& g, const model::RaggedKvCache& host) {
  const model::CacheShape s = host.shape();
  REQUIRE(g.logical_length() == host.logical_length());
  for (uint32_t l = 0; l < s.n_layers; ++l)
    for (uint32_t h = 0; h < s.n_kv_heads; ++h) {
      const uint32_t n = host.kept(l, h);
      REQUIRE(g.len(l, h) == n);
      std::vector<float> k(size_t(n) * s.head_dim), v(k.size());
      kernels::gpu::copy_to_host(k.data(), g.k(l, h), k.size() * sizeof(float));
      kernels::gpu::copy_to_host(v.data(), g.v(l, h), v.size() * sizeof(float));
      CHECK(std::equal(k.begin(), k.end(), host.k_rows(l, h)));
      CHECK(std::equal(v.begin(), v.end(), host.v_rows(l, h)));
    }
}

template <class T>
std::vector<T> from_device(const T* p, size_t n) {
  std::vector<T> h(n);
  if (n) kernels::gpu::copy_to_host(h.data(), p, n * sizeof(T));
  return h;
}

template <class T>
bool same_bytes(const std::vector<T>& got, const T* want) {
  return std::equal(got.begin(), got.end(), want);
}

// A device cache with a quantized base against the host QuantBase of the same file, per head:
// the f32 rows are the f16 rows, the segment has the quantized rows' bytes.
void check_same_quant(const model::GpuCache& g, const model::QuantBase& host) {
  const model::CacheShape s = host.shape();
  const kernels::KvQuantLayout L = host.layout();
  const size_t D = s.head_dim;
  REQUIRE(g.logical_length() == host.base_length());
  for (uint32_t l = 0; l < s.n_layers; ++l)
    for (uint32_t h = 0; h < s.n_kv_heads; ++h) {
      INFO("layer " << l << " head " << h);
      const uint32_t nd = host.dense(l, h), nq = host.kept(l, h) - nd;
      REQUIRE(g.len(l, h) == nd);
      CHECK(same_bytes(from_device(g.k(l, h), nd * D), host.dense_k(l, h)));
      CHECK(same_bytes(from_device(g.v(l, h), nd * D), host.dense_v(l, h)));
      const kernels::KvQuantSegment* dq = g.quant(l, h);
      const kernels::KvQuantSegment* hq = host.quant(l, h);
      REQUIRE((dq == nullptr) == (nq == 0));
      REQUIRE((hq == nullptr) == (nq == 0));
      if (!nq) continue;
      REQUIRE(dq->rows() == nq);
      for (auto [d, w] : {std::pair{&dq->k, &hq->k}, std::pair{&dq->v, &hq->v}}) {
        CHECK(d->layout.bits == L.bits);
        CHECK(d->layout.rotated == L.rotated);
        CHECK(d->layout.byte_params == L.byte_params);
        CHECK(same_bytes(from_device(d->channel_scale, D), w->channel_scale));
        CHECK(same_bytes(from_device(d->params, nq * L.param_words()), w->params));
        CHECK(same_bytes(from_device(d->codes, nq * L.code_bytes()), w->codes));
      }
    }
}

}  // namespace

TEST_CASE("a .kvz goes to GPU memory with the host loader's rows, raw and compressed", "[cuda]") {
  if (!gpu_ready()) return;
  const auto path =
      (std::filesystem::temp_directory_path() / "kvzip_cuda_loader_test.kvz").string();
  for (auto [dtype, zstd] : {std::pair{format::DType::F32, 0}, std::pair{format::DType::BF16, 3}}) {
    format::WriteOptions wo;
    wo.zstd_level = zstd;
    wo.force = true;
    format::write_cache_file(ragged_contents(dtype), path, wo);
    const format::CacheReader reader = format::CacheReader::open(path);
    const model::RaggedKvCache host = loader::cache_from_reader(reader, 8);
    model::GpuCache dev = loader::gpu_cache_from_reader(reader, 8);
    INFO("dtype " << format::dtype_name(dtype) << ", zstd " << zstd);
    check_same(dev, host);
    // Both forget the same rows when rolled back below the compressed length.
    model::RaggedKvCache h2 = loader::cache_from_reader(reader, 8);
    h2.rollback(150);
    dev.rollback(150);
    for (uint32_t l = 0; l < 3; ++l)
      for (uint32_t h = 0; h < 3; ++h) CHECK(dev.len(l, h) == h2.kept(l, h));
  }
  std::filesystem::remove(path);
}

TEST_CASE(
    "a q8/q4 .kvz goes to the device as stored, or dequantized to the host loader's rows, raw and "
    "zstd",
    "[cuda]") {
  if (!gpu_ready()) return;
  const auto path =
      (std::filesystem::temp_directory_path() / "kvzip_cuda_loader_quant.kvz").string();
  struct Case {
    format::DType dtype;
    int zstd;
  };
  // q8 and q4, raw and zstd; every head's first rows (positions below the 2 prefix tokens) are
  // f16 rows.
  for (const Case c : {Case{format::DType::Q8, 0}, Case{format::DType::Q4, 3},
                       Case{format::DType::Q4, 0}, Case{format::DType::Q8, 3}}) {
    format::CacheContents contents = ragged_contents(format::DType::F32);
    compress::KvStorage storage;
    storage.dtype = c.dtype;
    compress::set_kv_dtype(contents, storage);
    format::WriteOptions wo;
    wo.zstd_level = c.zstd;
    wo.force = true;
    format::write_cache_file(contents, path, wo);
    const format::CacheReader reader = format::CacheReader::open(path);
    REQUIRE(reader.header().kv_f16_below == 2);
    INFO(format::dtype_name(c.dtype) << " zstd " << c.zstd);
    check_same(loader::gpu_cache_from_reader(reader, 8, nullptr, loader::KvForm::F32),
               loader::cache_from_reader(reader, 8));
    // Kept as stored: the host QuantBase's bytes, on the device.
    const model::GpuCache dev = loader::gpu_cache_from_reader(reader, 8);
    const model::QuantBase host = loader::quant_base_from_reader(reader);
    REQUIRE(dev.quantized());
    check_same_quant(dev, host);
  }
  std::filesystem::remove(path);
}

#else

TEST_CASE("gpu loader tests are skipped in a CPU-only build", "[cuda]") {
  CHECK_FALSE(kvzip::test::gpu_ready());
}

#endif
